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
	var buf [maxTokenCandidates]string
	for _, raw := range h.tokenCandidates(buf[:0], r, headerToken) {
		if try(raw) {
			return t, true, true
		}
	}
	if pre.Raw != "" {
		return pre, true, true
	}
	return waitroom.Ticket{}, presented, false
}

// maxTokenCandidates bounds the tokens verified for one request: each is an
// HMAC and a JSON parse, and a request may carry thousands of cookies named
// for the event. A browser sends one, two while an older cookie of another
// path or domain lingers.
const maxTokenCandidates = 4

// maxTokenLen is the longest value taken for a token; one of ours is a few
// hundred bytes, a long account id included.
const maxTokenLen = 4096

// tokenCandidates are the tokens verify checks, in order, at most
// maxTokenCandidates: the header's, then the cookies signed with the current
// key, then the others (an older key's, or forged), each group in the order
// sent. Past the bound a token is not looked at, so a client that floods
// its own request may lose its place, never the gateway its time.
//
// They are appended to out, which the caller may keep on its stack: every
// request is looked at, and most carry one token or none.
func (h *Handler) tokenCandidates(out []string, r *http.Request, headerToken string) []string {
	if headerToken != "" {
		out = append(out, headerToken)
	}
	var others []string
	// Read the header as net/http's Request.CookiesNamed would, without a
	// Cookie allocated per pair: a flood costs a scan, not thousands of
	// allocations.
	for _, line := range r.Header["Cookie"] {
		for part := range strings.SplitSeq(line, ";") {
			if len(out) == maxTokenCandidates {
				return out
			}
			name, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || name != h.cookieName {
				continue
			}
			if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			switch {
			case v == "" || len(v) > maxTokenLen:
			case h.keys.SignedNow(v):
				out = append(out, v)
			case len(others) < maxTokenCandidates:
				others = append(others, v)
			}
		}
	}
	for _, v := range others {
		if len(out) == maxTokenCandidates {
			break
		}
		out = append(out, v)
	}
	return out
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
		err := h.room.room.KeepAccountAt(ctx, t.Subject, t.Position, t.HandedOut, h.ttl)
		cancel()
		if err != nil {
			h.logger.Debug("keeping an account's position", zap.Int64("event", h.Event), zap.Error(err))
		}
	}
	fresh, err := h.issue(t.Subject, account, t.Position, t.HandedOut, h.room.room.State())
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
	suffix := h.cookieSuffix[secure]
	if t.PreQueue {
		// A pre-queue token lasts until a token's life after the opening:
		// its cookie as long, or an entrant who comes back after the
		// opening comes without it, a new arrival behind the draw.
		suffix = cookieSuffix(t.ExpiresAt.Sub(h.now()), secure == 1)
	}
	vals := []string{h.cookieName + "=" + t.Raw + suffix, t.Raw}
	if prev := hdr["Set-Cookie"]; len(prev) > 0 {
		hdr["Set-Cookie"] = append(prev, vals[0])
	} else {
		hdr["Set-Cookie"] = vals[:1:1]
	}
	hdr[HeaderToken] = vals[1:]
}

// keepTokenPrivate makes an answer that hands out a token (a renewal on an
// admitted answer, whose caching the site decides) private: a shared cache
// must never give one visitor's token to another. The site's other
// directives stay; public and s-maxage go, private is added unless the
// answer is private or no-store already.
func keepTokenPrivate(hdr http.Header) {
	if len(hdr[HeaderToken]) == 0 {
		return
	}
	var kept []string
	private := false
	for _, v := range hdr.Values("Cache-Control") {
		for d := range strings.SplitSeq(v, ",") {
			d = strings.TrimSpace(d)
			name, _, _ := strings.Cut(d, "=")
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "":
				continue
			case "public", "s-maxage":
				continue
			case "private", "no-store":
				private = true
			}
			kept = append(kept, d)
		}
	}
	if !private {
		kept = append([]string{"private"}, kept...)
	}
	hdr.Set("Cache-Control", strings.Join(kept, ", "))
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
