package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/waitroom"
)

// The token's cookie is written as http.Cookie would write it.
func TestTokenCookieMatchesHTTPCookie(t *testing.T) {
	tests := []struct {
		name   string
		ttl    time.Duration
		secure bool
	}{
		{"plain HTTP", 30 * time.Minute, false},
		{"secure", 30 * time.Minute, true},
		{"odd lifetime", 90*time.Second + 500*time.Millisecond, false},
		{"under a second", 500 * time.Millisecond, true},
	}
	token := "eyJhbGciOiJIUzI1NiJ9.eyJldnQiOjQyfQ.c2lnbmF0dXJlLV8"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := (&http.Cookie{
				Name: "waitroom_42", Value: token, Path: "/", MaxAge: int(tc.ttl / time.Second),
				HttpOnly: true, Secure: tc.secure, SameSite: http.SameSiteLaxMode,
			}).String()
			assert.Equal(t, want, "waitroom_42="+token+cookieSuffix(tc.ttl, tc.secure))
		})
	}
}

// flood is a request carrying n forged tokens in the event's cookie, then
// the real one (if any).
func flood(t testing.TB, h *Handler, n int, real string) *http.Request {
	t.Helper()
	r := get(h, "")
	forged := tamperSig(t, h)
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(h.cookieName + "=" + forged)
	}
	if real != "" {
		b.WriteString("; " + h.cookieName + "=" + real)
	}
	r.Header.Set("Cookie", b.String())
	return r
}

// tamperSig is a token of the event's current key with a wrong signature:
// as costly to check as a real one.
func tamperSig(t testing.TB, h *Handler) string {
	t.Helper()
	tk, err := h.keys.Issue("v_forged", h.Event, 1, time.Hour)
	require.NoError(t, err)
	return tk.Raw[:len(tk.Raw)-4] + "AAAA"
}

// TestCookieFloodIsBounded: a request carrying thousands of cookies named
// for the event has a few of them verified (each is an HMAC and a JSON
// parse), the header token first, the real token found among the newest
// key's.
func TestCookieFloodIsBounded(t *testing.T) {
	h := provision(t, &Handler{})
	real, pos := join(t, h)
	old := waitroom.Key{ID: "k0", Secret: []byte(testSecret + "-old")}
	oldKeys, err := waitroom.NewKeySet(h.now, old)
	require.NoError(t, err)
	oldTok, err := oldKeys.Issue("v_old", h.Event, 1, time.Hour)
	require.NoError(t, err)

	tests := []struct {
		name   string
		req    func() *http.Request
		header string
		found  bool
	}{
		// Past the bound the real token is not looked for: a client that
		// floods itself loses its place, not the gateway its time.
		{"forged then real", func() *http.Request { return flood(t, h, 2500, real) }, "", false},
		{"a few forged then real", func() *http.Request { return flood(t, h, maxTokenCandidates-1, real) }, "", true},
		{"tokens of an unknown key first", func() *http.Request {
			r := flood(t, h, 0, real)
			var b strings.Builder
			for range 2500 {
				b.WriteString(h.cookieName + "=" + oldTok.Raw + "; ")
			}
			r.Header.Set("Cookie", b.String()+r.Header.Get("Cookie"))
			return r
		}, "", true},
		{"header and flood", func() *http.Request { return flood(t, h, 2500, "") }, real, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.req()
			got := h.tokenCandidates(nil, r, tc.header)
			assert.LessOrEqual(t, len(got), maxTokenCandidates, "tokens verified for one request")
			if !tc.found {
				return
			}
			assert.Contains(t, got, real)
			if tc.header != "" {
				r.Header.Set(HeaderToken, tc.header)
			}
			res := serve(t, h, r)
			assert.Equal(t, pos, res.waiting(t).Position, "the real token keeps its place")
		})
	}
}

// BenchmarkCookieFlood: the cost of a request carrying 2,500 forged tokens
// in the event's cookie and the real one last.
func BenchmarkCookieFlood(b *testing.B) {
	h := provision(b, &Handler{})
	tk, err := h.keys.Issue("v_bench", h.Event, 1, time.Hour)
	require.NoError(b, err)
	r := flood(b, h, 2500, tk.Raw)
	b.ResetTimer()
	for range b.N {
		h.verify(r, "")
	}
}

// TestRenewedTokenIsKeptOutOfSharedCaches: an admitted answer that carries
// a renewed token (cookie and header) is private, whatever the site said
// about caching it; one without a token keeps the site's word.
func TestRenewedTokenIsKeptOutOfSharedCaches(t *testing.T) {
	clk := newClock()
	h := &Handler{Watermark: 10, TokenTTL: caddy.Duration(30 * time.Minute)}
	h.now = clk.Now
	provision(t, h)
	tok, _ := join(t, h)

	for _, c := range []struct {
		name, site, want string
		renewed          bool
	}{
		{"fresh token, site says public", "public, max-age=60", "public, max-age=60", false},
		{"renewed, site says public", "public, max-age=60, s-maxage=300", "private, max-age=60", true},
		{"renewed, site says nothing", "", "private", true},
		{"renewed, site says no-store", "no-store", "no-store", true},
		{"renewed, site says private", "private, max-age=5", "private, max-age=5", true},
		{"renewed, site says max-age", "max-age=60, must-revalidate", "private, max-age=60, must-revalidate", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := tok
			if c.renewed {
				tk, err := h.keys.Issue("v_renew", h.Event, 1, 10*time.Minute) // under half its life left
				require.NoError(t, err)
				raw = tk.Raw
			}
			r := get(h, raw)
			repl := caddy.NewReplacer()
			r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
			rec := httptest.NewRecorder()
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
				if c.site != "" {
					w.Header().Set("Cache-Control", c.site)
				}
				_, err := w.Write([]byte("origin"))
				return err
			})
			require.NoError(t, h.ServeHTTP(rec, r, next))
			require.Equal(t, StatusAdmitted, rec.Header().Get(HeaderStatus))
			assert.Equal(t, c.renewed, rec.Header().Get("Set-Cookie") != "", "renewed")
			assert.Equal(t, []string{c.want}, rec.Header().Values("Cache-Control"))
		})
	}
}
