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
	return h.passOn(w, r, next, t, false)
}

// passOn hands the request to next with the site's command taken off its
// answer, and carried out for t unless spent.
func (h *Handler) passOn(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, t waitroom.Ticket, spent bool) error {
	cw := &commandWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, h: h, r: r, t: t, spent: spent}
	err := next.ServeHTTP(cw, r)
	cw.finish()
	return err
}

// revokeLeeway is added to a token's life for the time a revocation lasts:
// the verifier's leeway, and a renewal just before the revocation.
const revokeLeeway = time.Minute

// commandWriter takes the site's X-Waitroom-Command off its answer to an
// admitted request, and carries it out, before anything is written; a
// command in an informational answer (103 Early Hints) or in a trailer is
// taken off too, and carried out with the final answer or after it.
type commandWriter struct {
	*caddyhttp.ResponseWriterWrapper
	h    *Handler
	r    *http.Request
	t    waitroom.Ticket
	done bool
	// early: an informational answer carried a revoke.
	early bool
	// spent: the request's admission is over already (a completed
	// visitor), so a revoke has nothing left to end.
	spent bool
}

// take removes every copy of the command from hdr, under any spelling, also
// from the names a Trailer field announces, and reports whether one of them
// was a revoke.
func take(hdr http.Header) (revoke bool) {
	for name, vals := range hdr {
		switch {
		case sameHeaderName(name, "Trailer"):
			kept := vals[:0]
			for _, v := range vals {
				var names []string
				for n := range strings.SplitSeq(v, ",") {
					if n = strings.TrimSpace(n); n != "" && !sameHeaderName(n, HeaderCommand) {
						names = append(names, n)
					}
				}
				if len(names) > 0 {
					kept = append(kept, strings.Join(names, ", "))
				}
			}
			if len(kept) == 0 {
				delete(hdr, name)
			} else {
				hdr[name] = kept
			}
			continue
		case sameHeaderName(strings.TrimPrefix(name, http.TrailerPrefix), HeaderCommand):
		default:
			continue
		}
		for _, v := range vals {
			for c := range strings.SplitSeq(v, ",") {
				revoke = revoke || strings.EqualFold(strings.TrimSpace(c), CommandRevoke)
			}
		}
		delete(hdr, name)
	}
	return revoke
}

func (cw *commandWriter) command() {
	if cw.done {
		return
	}
	cw.done = true
	hdr := cw.Header()
	keepTokenPrivate(hdr)
	if cw.carryOut(take(hdr) || cw.early) {
		// The answer is not written yet: the buyer takes the revoked token
		// along as its receipt.
		cw.h.giveReceipt(cw, cw.r, cw.t)
	}
}

// finish takes the command off an answer the next handler left to be
// written after it returned, and off the trailers, which are set once the
// body is written.
func (cw *commandWriter) finish() {
	cw.command()
	cw.carryOut(take(cw.Header()))
}

// carryOut revokes the request's token when revoke says so, once, and
// reports whether it did now.
func (cw *commandWriter) carryOut(revoke bool) bool {
	if !revoke || cw.spent {
		return false
	}
	cw.spent = true // once is enough, however many copies there were
	ctx, cancel := context.WithTimeout(context.WithoutCancel(cw.r.Context()), joinTimeout)
	defer cancel()
	if err := cw.h.room.room.Revoke(ctx, cw.t.Subject, cw.t.Position, cw.h.ttl+revokeLeeway); err != nil {
		// This node stopped admitting the token already; the room sends
		// the revocation again at each refresh until the store takes it.
		cw.h.logger.Warn("revoking a token in the store", zap.Int64("event", cw.h.Event), zap.Error(err))
	}
	cw.h.m.revoked.Inc()
	return true
}

func (cw *commandWriter) WriteHeader(status int) {
	if status >= 200 {
		cw.command()
	} else if !cw.done {
		cw.early = take(cw.Header()) || cw.early
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

// FlushError is here because a flush before the status sends the header
// with an implicit 200: without it, a ResponseController would unwrap to
// the writer underneath and send the command with it.
func (cw *commandWriter) FlushError() error {
	cw.command()
	return http.NewResponseController(cw.ResponseWriterWrapper).Flush()
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
