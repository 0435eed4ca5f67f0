package caddymodule

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/waitroom/waitroom/waitroom"
)

// What an admitted request carries to the site, and what the site's answer
// may tell the gateway (docs/api.md §3).

// admit passes the request on with the identity headers.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *placeholders, t waitroom.Ticket) error {
	r.Header.Set(HeaderUser, t.Subject)
	r.Header.Set(HeaderPosition, strconv.FormatInt(t.Position, 10))
	r.Header.Set(HeaderToken, t.Raw)
	w.Header().Set(HeaderStatus, StatusAdmitted)
	setPlaceholders(repl, StatusAdmitted, t.Position)
	h.m.admitted.Inc()
	return next.ServeHTTP(&commandWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, h: h, r: r, t: t}, r)
}

// revokeLeeway is added to a token's life for the time a revocation lasts:
// the verifier's leeway, and a renewal just before the revocation.
const revokeLeeway = time.Minute

// commandWriter takes the site's X-Waitroom-Command off its answer to an
// admitted request, and carries it out, before anything is written.
type commandWriter struct {
	*caddyhttp.ResponseWriterWrapper
	h    *Handler
	r    *http.Request
	t    waitroom.Ticket
	done bool
	// spent: the request's admission is over already (a completed
	// visitor), so a revoke has nothing left to end.
	spent bool
}

func (cw *commandWriter) command() {
	if cw.done {
		return
	}
	cw.done = true
	hdr := cw.Header()
	keepTokenPrivate(hdr)
	var revoke bool
	for name, vals := range hdr {
		if !sameHeaderName(name, HeaderCommand) {
			continue
		}
		for _, v := range vals {
			for _, c := range strings.Split(v, ",") {
				revoke = revoke || strings.EqualFold(strings.TrimSpace(c), CommandRevoke)
			}
		}
		delete(hdr, name)
	}
	if !revoke || cw.spent {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(cw.r.Context()), joinTimeout)
	defer cancel()
	if err := cw.h.room.room.Revoke(ctx, cw.t.Subject, cw.t.Position, cw.h.ttl+revokeLeeway); err != nil {
		// This node stopped admitting the token already; the others
		// will not know until the store answers again.
		cw.h.logger.Warn("revoking a token in the store", zap.Int64("event", cw.h.Event), zap.Error(err))
	}
	cw.h.m.revoked.Inc()
}

func (cw *commandWriter) WriteHeader(status int) {
	if status >= 200 {
		cw.command()
	}
	cw.ResponseWriterWrapper.WriteHeader(status)
}

func (cw *commandWriter) Write(b []byte) (int, error) {
	cw.command()
	return cw.ResponseWriterWrapper.Write(b)
}

func (cw *commandWriter) ReadFrom(src io.Reader) (int64, error) {
	cw.command()
	return cw.ResponseWriterWrapper.ReadFrom(src)
}

// gatewayHeaders are the headers the handler sets: on admitted requests
// (the identity headers) and on its answers.
var gatewayHeaders = [...]string{HeaderUser, HeaderPosition, HeaderToken, HeaderStatus}

// stripGatewayHeaders removes every copy of the gateway's headers a client
// sent, under any spelling a backend might read as one of them: any case,
// and with _ for - (CGI-style servers, and proxies such as nginx with
// underscores_in_headers, fold X_Waitroom_User into X-Waitroom-User).
func stripGatewayHeaders(hdr http.Header) {
	for name := range hdr {
		for _, g := range gatewayHeaders {
			if sameHeaderName(name, g) {
				delete(hdr, name)
				break
			}
		}
	}
}

// sameHeaderName compares header names case-insensitively with _ and -
// taken as one.
func sameHeaderName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
