package caddymodule

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/waitroom/waitroom/waitroom"
)

// How a queue token travels: the X-Waitroom-Token header or the event's
// cookie, read on the way in and set on the way out (docs/api.md §3).

// verify looks for a valid token of the event in the X-Waitroom-Token header
// and the event's cookie: a token with a position first, else a pre-queue
// one. presented tells whether any token was offered.
func (h *Handler) verify(r *http.Request, headerToken string) (t waitroom.Ticket, presented, ok bool) {
	var pre waitroom.Ticket
	try := func(raw string) bool {
		presented = true
		got, err := h.keys.VerifyAny(raw, h.Event)
		switch {
		case err != nil:
			return false
		case got.PreQueue:
			if pre.Raw == "" {
				pre = got
			}
			return false
		}
		t = got
		return true
	}
	if headerToken != "" && try(headerToken) {
		return t, true, true
	}
	for _, c := range r.CookiesNamed(h.cookieName) {
		if c.Value != "" && try(c.Value) {
			return t, true, true
		}
	}
	if pre.Raw != "" {
		return pre, true, true
	}
	return waitroom.Ticket{}, presented, false
}

// renew re-issues t (same user and position, fresh expiry) once less than
// half of its life is left, so whoever keeps polling keeps the place.
func (h *Handler) renew(w http.ResponseWriter, r *http.Request, t waitroom.Ticket) waitroom.Ticket {
	if t.ExpiresAt.Sub(h.now()) >= h.ttl/2 {
		return t
	}
	account := h.isAccount(t)
	if account {
		// The account's position lives as long as its token does.
		ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
		err := h.room.room.KeepAccount(ctx, t.Subject, t.Position, h.ttl)
		cancel()
		if err != nil {
			h.logger.Debug("keeping an account's position", zap.Int64("event", h.Event), zap.Error(err))
		}
	}
	fresh, err := h.issue(t.Subject, account, t.Position)
	if err != nil {
		h.logger.Error("renewing a queue token", zap.Error(err))
		return t
	}
	h.giveToken(w, r, fresh)
	return fresh
}

// giveToken hands t to the client: the cookie for browsers, the response
// header for API clients. Every new arrival gets one, so the two header
// values share one allocation.
func (h *Handler) giveToken(w http.ResponseWriter, r *http.Request, t waitroom.Ticket) {
	hdr := w.Header()
	secure := 0
	if h.secure(r) {
		secure = 1
	}
	vals := []string{h.cookieName + "=" + t.Raw + h.cookieSuffix[secure], t.Raw}
	if prev := hdr["Set-Cookie"]; len(prev) > 0 {
		hdr["Set-Cookie"] = append(prev, vals[0])
	} else {
		hdr["Set-Cookie"] = vals[:1:1]
	}
	hdr[HeaderToken] = vals[1:]
}

// cookieSuffix is what follows "<name>=<token>" in the Set-Cookie value of
// a token, as http.Cookie.String writes it (tested): a token is base64url
// and dots, so nothing in it needs the sanitising http.SetCookie does byte
// by byte, and the rest is the same for every token of a handler.
func cookieSuffix(ttl time.Duration, secure bool) string {
	maxAge := "; Max-Age=" + strconv.Itoa(int(ttl/time.Second))
	if ttl < time.Second {
		// http.Cookie leaves out a zero MaxAge: the cookie lasts the session.
		maxAge = ""
	}
	flag := ""
	if secure {
		flag = "; Secure"
	}
	return "; Path=/" + maxAge + "; HttpOnly" + flag + "; SameSite=Lax"
}

// secure tells whether the cookie is marked Secure (cookie_secure). Only a
// proxy the server trusts is believed about the client's scheme, so a
// client cannot take the flag off (or put it on) by sending the header
// itself.
func (h *Handler) secure(r *http.Request) bool {
	if h.CookieSecure == CookieSecureAlways || r.TLS != nil {
		return true
	}
	if trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool); !trusted {
		return false
	}
	// A chain of proxies lists one scheme per hop; the first is the
	// client's.
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}
