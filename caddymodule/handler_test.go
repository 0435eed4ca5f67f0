package caddymodule

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

const testSecret = "an-example-secret-of-at-least-32-bytes"

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now().Truncate(time.Second)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// provision provisions h (the memory store unless set) for a fresh event
// and releases it when the test ends.
func provision(t testing.TB, h *Handler) *Handler {
	t.Helper()
	if h.Event == 0 {
		h.Event = testenv.EventID()
	}
	if h.Keys == nil {
		h.Keys = []Key{{ID: "k1", Secret: testSecret}}
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	require.NoError(t, h.Provision(ctx))
	require.NoError(t, h.Validate())
	t.Cleanup(func() { require.NoError(t, h.Cleanup()) })
	<-h.room.ready
	return h
}

// update changes the handler's event state as the admin API would.
func update(t *testing.T, h *Handler, c waitroom.Change) waitroom.State {
	t.Helper()
	s, err := h.room.room.Update(context.Background(), c)
	require.NoError(t, err)
	return s
}

func ptr[T any](v T) *T { return &v }

// count reads a counter.
func count(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// result is what one request through the handler did.
type result struct {
	rec  *httptest.ResponseRecorder
	next *http.Request // the request the next handler saw; nil if not called
	repl *caddy.Replacer
}

func (res result) status() string { return res.rec.Header().Get(HeaderStatus) }

func (res result) cookie(t *testing.T, name string) *http.Cookie {
	t.Helper()
	for _, c := range res.rec.Result().Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (res result) waiting(t *testing.T) waitingBody {
	t.Helper()
	require.Equal(t, StatusWaiting, res.status(), res.rec.Body.String())
	var b waitingBody
	require.NoError(t, json.Unmarshal(res.rec.Body.Bytes(), &b))
	return b
}

func serve(t *testing.T, h *Handler, r *http.Request) result {
	t.Helper()
	repl := caddy.NewReplacer()
	r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
	res := result{rec: httptest.NewRecorder(), repl: repl}
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		res.next = r
		_, err := w.Write([]byte("origin"))
		return err
	})
	require.NoError(t, h.ServeHTTP(res.rec, r, next))
	return res
}

// get is a JSON request carrying token (if any) in the event's cookie.
func get(h *Handler, token string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://tickets.test/buy", nil)
	r.Header.Set("Accept", "application/json")
	if token != "" {
		r.AddCookie(&http.Cookie{Name: h.cookieName, Value: token})
	}
	return r
}

// join makes a new arrival and returns its token and position.
func join(t *testing.T, h *Handler) (string, int64) {
	t.Helper()
	res := serve(t, h, get(h, ""))
	c := res.cookie(t, h.cookieName)
	require.NotNil(t, c, "a new arrival gets the cookie")
	tk, err := h.keys.Verify(c.Value, h.Event)
	require.NoError(t, err)
	return c.Value, tk.Position
}

func TestArrivalWaitsThenIsAdmitted(t *testing.T) {
	h := provision(t, &Handler{})

	res := serve(t, h, get(h, ""))
	body := res.waiting(t)
	assert.Equal(t, DefaultWaitingStatus, res.rec.Code)
	assert.Equal(t, waitingBody{Status: "waiting", Event: h.Event, Position: 1, AdmittedThrough: 0, Ahead: 0, Token: body.Token}, body)
	assert.Nil(t, res.next, "a waiting visitor never reaches the site")
	assert.Equal(t, "no-store", res.rec.Header().Get("Cache-Control"))
	assert.NotEmpty(t, res.rec.Header().Get("Retry-After"))
	assert.Equal(t, body.Token, res.rec.Header().Get(HeaderToken))
	assert.Equal(t, "application/json", res.rec.Header().Get("Content-Type"))

	// The exact keys of docs/api.md §3.
	var raw map[string]any
	require.NoError(t, json.Unmarshal(res.rec.Body.Bytes(), &raw))
	for _, k := range []string{"status", "event", "position", "admitted_through", "ahead", "estimated_wait_seconds", "token"} {
		assert.Contains(t, raw, k)
	}

	c := res.cookie(t, h.cookieName)
	require.NotNil(t, c)
	assert.Equal(t, body.Token, c.Value)
	assert.True(t, c.HttpOnly)
	assert.Equal(t, http.SameSiteLaxMode, c.SameSite)
	assert.Equal(t, "/", c.Path)
	assert.Equal(t, int(DefaultTokenTTL/time.Second), c.MaxAge)
	assert.False(t, c.Secure, "plain HTTP: no Secure flag")

	// Polling again keeps the place.
	again := serve(t, h, get(h, body.Token)).waiting(t)
	assert.Equal(t, int64(1), again.Position)

	// Two more arrive behind.
	_, p2 := join(t, h)
	_, p3 := join(t, h)
	assert.Equal(t, []int64{2, 3}, []int64{p2, p3})

	update(t, h, waitroom.Change{SetWatermark: ptr[int64](1)})
	res = serve(t, h, get(h, body.Token))
	require.NotNil(t, res.next, "position 1 is admitted")
	assert.Equal(t, StatusAdmitted, res.status())
	assert.Equal(t, "origin", res.rec.Body.String())
	assert.Equal(t, "1", res.next.Header.Get(HeaderPosition))
	assert.Equal(t, body.Token, res.next.Header.Get(HeaderToken))
	tk, err := h.keys.Verify(body.Token, h.Event)
	require.NoError(t, err)
	assert.Equal(t, tk.Subject, res.next.Header.Get(HeaderUser))
	assert.True(t, strings.HasPrefix(tk.Subject, "v_"), "an anonymous visitor id")

	// Position 3 now has one position (2) ahead of it.
	tok3, _ := tokenAt(t, h, 3)
	w3 := serve(t, h, get(h, tok3)).waiting(t)
	assert.Equal(t, int64(1), w3.AdmittedThrough)
	assert.Equal(t, int64(1), w3.Ahead)
}

// TestRestartedGatewayHandsOutNoPositionATokenProves: a gateway on the
// memory store that restarted remembers nothing of the queue; a token from
// before (position 10) still waits at its place, and the next arrival
// comes after it, not at position 1 again (docs/api.md §3, lost store
// state).
func TestRestartedGatewayHandsOutNoPositionATokenProves(t *testing.T) {
	h := provision(t, &Handler{})
	tok, _ := tokenAt(t, h, 10)
	assert.Equal(t, int64(10), serve(t, h, get(h, tok)).waiting(t).Position)
	_, pos := join(t, h)
	assert.Equal(t, int64(11), pos)
}

// tokenAt signs a token for position pos with the handler's keys.
func tokenAt(t *testing.T, h *Handler, pos int64) (string, waitroom.Ticket) {
	t.Helper()
	tk, err := h.keys.Issue("user-"+strconv.FormatInt(pos, 10), h.Event, pos, h.ttl)
	require.NoError(t, err)
	return tk.Raw, tk
}

func TestTokenFromHeaderAndIdentityHeadersReplaced(t *testing.T) {
	h := provision(t, &Handler{Watermark: 10})
	tok, tk := tokenAt(t, h, 5)

	r := httptest.NewRequest(http.MethodGet, "http://tickets.test/", nil)
	r.Header.Set(HeaderToken, tok)
	r.Header.Set(HeaderUser, "mallory")
	r.Header.Set(HeaderPosition, "1")
	res := serve(t, h, r)
	require.NotNil(t, res.next)
	assert.Equal(t, tk.Subject, res.next.Header.Get(HeaderUser))
	assert.Equal(t, []string{"5"}, res.next.Header.Values(HeaderPosition))
	assert.Equal(t, []string{tok}, res.next.Header.Values(HeaderToken))
	assert.Equal(t, "admitted", res.repl.ReplaceAll("{http.waitroom.status}", ""))
	assert.Equal(t, "5", res.repl.ReplaceAll("{http.waitroom.position}", ""))
	assert.Equal(t, strconv.FormatInt(h.Event, 10), res.repl.ReplaceAll("{http.waitroom.event}", ""))

	// A new arrival let straight through never carries the client's copies
	// either, and gets its token in the response header too.
	r = httptest.NewRequest(http.MethodGet, "http://tickets.test/", nil)
	r.Header.Set(HeaderUser, "mallory")
	r.Header.Set(HeaderPosition, "1")
	res = serve(t, h, r)
	require.NotNil(t, res.next, "the watermark is above the next position")
	assert.NotEqual(t, "mallory", res.next.Header.Get(HeaderUser))
	assert.Equal(t, res.rec.Header().Get(HeaderToken), res.next.Header.Get(HeaderToken))
	assert.NotNil(t, res.cookie(t, h.cookieName))
	assert.Equal(t, StatusAdmitted, res.status())
}

// TestClientCopiesOfGatewayHeadersAreStripped sends the gateway's headers
// under the spellings a backend may fold into them (any case, _ for -):
// none reaches the next handler, only the gateway's own values do.
func TestClientCopiesOfGatewayHeadersAreStripped(t *testing.T) {
	h := provision(t, &Handler{Watermark: 10})
	tok, tk := tokenAt(t, h, 5)
	for _, name := range []string{
		"X_Waitroom_User", "x_waitroom_user", "X_WAITROOM_USER", "X-Waitroom_User", "x-waitroom-user",
		"X_Waitroom_Position", "x_waitroom-position", "X_waitroom_position",
		"X_Waitroom_Token", "x_waitroom_token",
		"X-Waitroom-Status", "X_Waitroom_Status", "x-waitroom-status",
	} {
		t.Run(name, func(t *testing.T) {
			r := get(h, tok)
			// Set the raw key: a server hands such names on as sent.
			r.Header[name] = []string{"mallory"}
			r.Header["X-Site-Header"] = []string{"kept"}
			r.Header["X_Waitroom_Other"] = []string{"kept"}
			res := serve(t, h, r)
			require.NotNil(t, res.next)
			for k, v := range res.next.Header {
				assert.NotContains(t, v, "mallory", "header %s reached the next handler", k)
			}
			assert.Equal(t, []string{tk.Subject}, res.next.Header.Values(HeaderUser))
			assert.Equal(t, []string{"5"}, res.next.Header.Values(HeaderPosition))
			assert.Equal(t, []string{tok}, res.next.Header.Values(HeaderToken))
			assert.Empty(t, res.next.Header.Values(HeaderStatus))
			assert.Equal(t, []string{"kept"}, res.next.Header["X-Site-Header"])
			assert.Equal(t, []string{"kept"}, res.next.Header["X_Waitroom_Other"], "a header the gateway never sets is the site's business")
		})
	}
}

func TestSecureCookie(t *testing.T) {
	auto := provision(t, &Handler{})
	explicitAuto := provision(t, &Handler{CookieSecure: "auto"})
	always := provision(t, &Handler{CookieSecure: "always"})
	for _, c := range []struct {
		name    string
		h       *Handler
		tls     bool
		trusted any // the server's trusted-proxy verdict; nil when unset
		proto   []string
		want    bool
	}{
		{name: "plain http", h: auto},
		{name: "tls terminated by caddy", h: auto, tls: true, want: true},
		{name: "trusted proxy says https", h: auto, trusted: true, proto: []string{"https"}, want: true},
		{name: "explicit auto, trusted proxy says https", h: explicitAuto, trusted: true, proto: []string{"https"}, want: true},
		{name: "trusted proxy, any case", h: auto, trusted: true, proto: []string{"HTTPS"}, want: true},
		{name: "chain of proxies, client came over https", h: auto, trusted: true, proto: []string{"https, http"}, want: true},
		{name: "chain of proxies, client came over http", h: auto, trusted: true, proto: []string{"http, https"}},
		{name: "trusted proxy says http", h: auto, trusted: true, proto: []string{"http"}},
		{name: "trusted proxy says nothing", h: auto, trusted: true},
		{name: "untrusted peer says https", h: auto, trusted: false, proto: []string{"https"}},
		{name: "no verdict, peer says https", h: auto, proto: []string{"https"}},
		{name: "always, plain http", h: always, want: true},
		{name: "always, untrusted peer says http", h: always, trusted: false, proto: []string{"http"}, want: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := get(c.h, "")
			if c.tls {
				r.TLS = &tls.ConnectionState{}
			}
			if c.trusted != nil {
				r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey,
					map[string]any{caddyhttp.TrustedProxyVarKey: c.trusted}))
			}
			for _, p := range c.proto {
				r.Header.Add("X-Forwarded-Proto", p)
			}
			cookie := serve(t, c.h, r).cookie(t, c.h.cookieName)
			require.NotNil(t, cookie)
			assert.Equal(t, c.want, cookie.Secure)
		})
	}
}

func TestUserIDFromPlaceholder(t *testing.T) {
	h := provision(t, &Handler{UserID: "{test.user}", Watermark: 100})
	r := get(h, "")
	repl := caddy.NewReplacer()
	repl.Set("test.user", "alice")
	r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
	rec := httptest.NewRecorder()
	var seen *http.Request
	require.NoError(t, h.ServeHTTP(rec, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		seen = r
		return nil
	})))
	require.NotNil(t, seen)
	assert.Equal(t, "alice", seen.Header.Get(HeaderUser))

	// Nothing in the placeholder: an anonymous id.
	res := serve(t, h, get(h, ""))
	require.NotNil(t, res.next)
	assert.True(t, strings.HasPrefix(res.next.Header.Get(HeaderUser), "v_"))
}

func TestBadTokensAreNewArrivals(t *testing.T) {
	h := provision(t, &Handler{Watermark: 1})
	_, first := join(t, h) // takes position 1, the only admitted one
	require.Equal(t, int64(1), first)
	now := time.Now()
	valid, _ := tokenAt(t, h, 50)

	sign := func(method jwt.SigningMethod, key any, kid string, c waitroom.Claims) string {
		tok := jwt.NewWithClaims(method, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		require.NoError(t, err)
		return s
	}
	claims := func(evt, pos int64, iat, exp time.Time) waitroom.Claims {
		return waitroom.Claims{Event: evt, Position: pos, RegisteredClaims: jwt.RegisteredClaims{
			Issuer: waitroom.Issuer, Subject: "someone",
			IssuedAt: jwt.NewNumericDate(iat), ExpiresAt: jwt.NewNumericDate(exp),
		}}
	}
	good := claims(h.Event, 1, now, now.Add(time.Hour))
	secret := []byte(testSecret)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	noIssuer := good
	noIssuer.Issuer = "someone-else"
	noExp := good
	noExp.ExpiresAt = nil
	noneTok, err := jwt.NewWithClaims(jwt.SigningMethodNone, good).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	withKid := jwt.NewWithClaims(jwt.SigningMethodNone, good)
	withKid.Header["kid"] = "k1"
	noneWithKid, err := withKid.SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)

	cases := map[string]string{
		"forged (other secret)": sign(jwt.SigningMethodHS256, []byte("another-secret-that-is-32-bytes-long!!"), "k1", good),
		"tampered pos":          tamper(t, valid, func(m map[string]any) { m["pos"] = 1 }),
		"tampered evt":          tamper(t, sign(jwt.SigningMethodHS256, secret, "k1", claims(h.Event+1, 1, now, now.Add(time.Hour))), func(m map[string]any) { m["evt"] = h.Event }),
		"tampered sub":          tamper(t, sign(jwt.SigningMethodHS256, secret, "k1", good), func(m map[string]any) { m["sub"] = "admin" }),
		"expired":               sign(jwt.SigningMethodHS256, secret, "k1", claims(h.Event, 1, now.Add(-2*time.Hour), now.Add(-time.Hour))),
		"alg none":              noneTok,
		"alg none with kid":     noneWithKid,
		"HS384":                 sign(jwt.SigningMethodHS384, secret, "k1", good),
		"HS512":                 sign(jwt.SigningMethodHS512, secret, "k1", good),
		"RS256":                 sign(jwt.SigningMethodRS256, rsaKey, "k1", good),
		"ES256":                 sign(jwt.SigningMethodES256, ecKey, "k1", good),
		"unknown kid":           sign(jwt.SigningMethodHS256, secret, "k9", good),
		"no kid":                sign(jwt.SigningMethodHS256, secret, "", good),
		"wrong event":           sign(jwt.SigningMethodHS256, secret, "k1", claims(h.Event+1, 1, now, now.Add(time.Hour))),
		"wrong issuer":          sign(jwt.SigningMethodHS256, secret, "k1", noIssuer),
		"no expiry":             sign(jwt.SigningMethodHS256, secret, "k1", noExp),
		"garbage":               "garbage",
		"three garbage parts":   "a.b.c",
		"truncated":             valid[:len(valid)-5],
	}
	// Sanity: the untampered token with position 1 would be admitted.
	res := serve(t, h, get(h, sign(jwt.SigningMethodHS256, secret, "k1", good)))
	require.Equal(t, StatusAdmitted, res.status(), "the control token must pass, or this test proves nothing")

	for name, tok := range cases {
		for _, via := range []string{"cookie", "header"} {
			t.Run(name+"/"+via, func(t *testing.T) {
				before := count(metrics.invalidTokens.WithLabelValues(h.eventID))
				arrivals := count(metrics.arrivals.WithLabelValues(h.eventID))
				r := get(h, "")
				if via == "cookie" {
					r.AddCookie(&http.Cookie{Name: h.cookieName, Value: tok})
				} else {
					r.Header.Set(HeaderToken, tok)
				}
				res := serve(t, h, r)
				assert.Nil(t, res.next, "never admitted")
				body := res.waiting(t)
				assert.Greater(t, body.Position, int64(1), "joins at the back with a new position")
				assert.NotEqual(t, tok, body.Token)
				assert.NotNil(t, res.cookie(t, h.cookieName), "and gets a new cookie")
				assert.Equal(t, before+1, count(metrics.invalidTokens.WithLabelValues(h.eventID)))
				assert.Equal(t, arrivals+1, count(metrics.arrivals.WithLabelValues(h.eventID)))
			})
		}
	}

	t.Run("no token is not an invalid one", func(t *testing.T) {
		before := count(metrics.invalidTokens.WithLabelValues(h.eventID))
		serve(t, h, get(h, "")).waiting(t)
		assert.Equal(t, before, count(metrics.invalidTokens.WithLabelValues(h.eventID)))
	})
}

// tamper rewrites a token's claims without signing it again.
func tamper(t *testing.T, raw string, edit func(map[string]any)) string {
	t.Helper()
	parts := strings.Split(raw, ".")
	require.Len(t, parts, 3)
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(payload, &m))
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

func TestRotatedKeyStillVerifies(t *testing.T) {
	old := provision(t, &Handler{Watermark: 5})
	tok, _ := tokenAt(t, old, 3)

	rotated := provision(t, &Handler{Event: old.Event, Watermark: 5, Keys: []Key{
		{ID: "k2", Secret: testSecret + "-new"},
		{ID: "k1", Secret: testSecret},
	}})
	res := serve(t, rotated, get(rotated, tok))
	require.NotNil(t, res.next, "a token signed with the old key still passes")
	assert.Equal(t, "3", res.next.Header.Get(HeaderPosition))
}

func TestWaitingTokenIsRenewed(t *testing.T) {
	clk := newClock()
	h := &Handler{TokenTTL: caddy.Duration(30 * time.Minute)}
	h.now = clk.Now
	provision(t, h)

	tok, pos := join(t, h)
	clk.Advance(10 * time.Minute) // 20 minutes left: more than half
	res := serve(t, h, get(h, tok))
	assert.Equal(t, tok, res.waiting(t).Token)
	assert.Nil(t, res.cookie(t, h.cookieName), "nothing to renew yet")

	clk.Advance(10 * time.Minute) // 10 minutes left: renew
	res = serve(t, h, get(h, tok))
	body := res.waiting(t)
	require.NotEqual(t, tok, body.Token)
	c := res.cookie(t, h.cookieName)
	require.NotNil(t, c)
	assert.Equal(t, body.Token, c.Value)
	oldTk, err := h.keys.Verify(tok, h.Event)
	require.NoError(t, err)
	newTk, err := h.keys.Verify(body.Token, h.Event)
	require.NoError(t, err)
	assert.Equal(t, oldTk.Subject, newTk.Subject)
	assert.Equal(t, pos, newTk.Position)
	assert.WithinDuration(t, clk.Now().Add(30*time.Minute), newTk.ExpiresAt, 0)

	// Without renewal the old token would now have expired; the renewed
	// one carries the place on.
	clk.Advance(25 * time.Minute)
	_, err = h.keys.Verify(tok, h.Event)
	require.Error(t, err)
	assert.Equal(t, pos, serve(t, h, get(h, body.Token)).waiting(t).Position)
}

func TestPausedSoldOutAndHardCap(t *testing.T) {
	h := provision(t, &Handler{Watermark: 2, HardCap: 4, SoldOutMaxAge: caddy.Duration(30 * time.Second)})
	var toks []string
	for range 4 {
		tok, _ := join(t, h)
		toks = append(toks, tok)
	}

	// Beyond the hard cap: sold out at once, no cookie, no token.
	res := serve(t, h, get(h, ""))
	assert.Equal(t, http.StatusGone, res.rec.Code)
	assert.Equal(t, StatusSoldOut, res.status())
	assert.Nil(t, res.cookie(t, h.cookieName))
	assert.Empty(t, res.rec.Header().Get(HeaderToken))
	assert.Equal(t, "public, max-age=30", res.rec.Header().Get("Cache-Control"))
	assert.JSONEq(t, `{"status":"sold_out","event":`+h.eventID+`}`, res.rec.Body.String())

	// Paused: everyone waits, the admitted too.
	update(t, h, waitroom.Change{Paused: ptr(true)})
	for i, tok := range toks {
		b := serve(t, h, get(h, tok)).waiting(t)
		assert.True(t, b.Paused)
		assert.Equal(t, int64(i+1), b.Position)
	}

	// Paused and sold out: admitted positions wait for entry to resume,
	// the others are turned away.
	update(t, h, waitroom.Change{SoldOut: ptr(true)})
	serve(t, h, get(h, toks[1])).waiting(t)
	assert.Equal(t, http.StatusGone, serve(t, h, get(h, toks[2])).rec.Code)

	// Sold out: the admitted still pass, everyone else gets 410, and a new
	// arrival takes no position.
	update(t, h, waitroom.Change{Paused: ptr(false)})
	before := h.room.room.State().LastPosition
	assert.NotNil(t, serve(t, h, get(h, toks[0])).next)
	assert.NotNil(t, serve(t, h, get(h, toks[1])).next)
	assert.Equal(t, http.StatusGone, serve(t, h, get(h, toks[2])).rec.Code)
	res = serve(t, h, get(h, ""))
	assert.Equal(t, http.StatusGone, res.rec.Code)
	assert.Nil(t, res.cookie(t, h.cookieName))
	assert.Equal(t, before, h.room.room.State().LastPosition)
	assert.Equal(t, "sold_out", res.repl.ReplaceAll("{http.waitroom.status}", ""))

	// Seats released: the queue moves again.
	update(t, h, waitroom.Change{SoldOut: ptr(false)})
	serve(t, h, get(h, toks[2])).waiting(t)
}

func TestHTMLPages(t *testing.T) {
	h := provision(t, &Handler{WaitingStatus: http.StatusTooManyRequests})
	r := httptest.NewRequest(http.MethodGet, "http://tickets.test/", nil)
	r.Header.Set("Accept", "text/html,application/xhtml+xml")
	res := serve(t, h, r)
	assert.Equal(t, http.StatusTooManyRequests, res.rec.Code)
	assert.Equal(t, StatusWaiting, res.status())
	assert.Equal(t, "text/html; charset=utf-8", res.rec.Header().Get("Content-Type"))
	page := res.rec.Body.String()
	for _, want := range []string{
		"You’re in the queue",
		`<meta name="viewport"`,
		`<noscript><meta http-equiv="refresh" content="`,
		`Accept: "application/json"`,
		`credentials: "same-origin"`,
		"location.reload()",
		`aria-live="polite"`,
	} {
		assert.Contains(t, page, want)
	}

	update(t, h, waitroom.Change{SoldOut: ptr(true)})
	res = serve(t, h, httptest.NewRequest(http.MethodGet, "http://tickets.test/", nil))
	assert.Equal(t, http.StatusGone, res.rec.Code)
	assert.Contains(t, res.rec.Body.String(), "<h1>Sold out</h1>")
	assert.Equal(t, "public, max-age=10", res.rec.Header().Get("Cache-Control"))
}

func TestCustomTemplates(t *testing.T) {
	dir := t.TempDir()
	waiting := filepath.Join(dir, "waiting.html")
	soldOut := filepath.Join(dir, "sold_out.html")
	require.NoError(t, os.WriteFile(waiting, []byte(`<p>event {{.Event}} at {{.Position}}, {{.Ahead}} ahead, {{.EstimatedWait}}</p>`), 0o600))
	require.NoError(t, os.WriteFile(soldOut, []byte(`<p>gone {{.Event}}</p>`), 0o600))
	h := provision(t, &Handler{WaitingTemplate: waiting, SoldOutTemplate: soldOut, HardCap: 1})

	res := serve(t, h, httptest.NewRequest(http.MethodGet, "http://tickets.test/", nil))
	assert.Equal(t, "<p>event "+h.eventID+" at 1, 0 ahead, </p>", res.rec.Body.String())
	res = serve(t, h, httptest.NewRequest(http.MethodGet, "http://tickets.test/", nil))
	assert.Equal(t, "<p>gone "+h.eventID+"</p>", res.rec.Body.String())
}

func TestProvisionRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	badField := filepath.Join(dir, "bad.html")
	require.NoError(t, os.WriteFile(badField, []byte(`{{.NoSuchField}}`), 0o600))
	badSyntax := filepath.Join(dir, "syntax.html")
	require.NoError(t, os.WriteFile(badSyntax, []byte(`{{if}}`), 0o600))
	keys := []Key{{ID: "k1", Secret: testSecret}}

	for name, c := range map[string]struct {
		h    Handler
		want string
	}{
		"missing event":         {Handler{Keys: keys}, "event"},
		"negative event":        {Handler{Event: -1, Keys: keys}, "event"},
		"no key":                {Handler{Event: 1}, "signing key"},
		"key without id":        {Handler{Event: 1, Keys: []Key{{Secret: testSecret}}}, "no id"},
		"key without secret":    {Handler{Event: 1, Keys: []Key{{ID: "k1"}}}, `key "k1" has no secret`},
		"short secret":          {Handler{Event: 1, Keys: []Key{{ID: "k1", Secret: "short"}}}, "at least 32"},
		"secret from empty env": {Handler{Event: 1, Keys: []Key{{ID: "k1", Secret: "{env.WAITROOM_TEST_UNSET_SECRET}"}}}, `secret "{env.WAITROOM_TEST_UNSET_SECRET}" is empty`},
		// The origin and the edge Worker take the key set as
		// kid:secret[,kid:secret…]: such a kid could not be given to them.
		"kid with a colon":        {Handler{Event: 1, Keys: []Key{{ID: "2026:01", Secret: testSecret}}}, `keys: key id "2026:01" cannot be written in WAITROOM_KEYS`},
		"kid with a comma":        {Handler{Event: 1, Keys: []Key{{ID: "a,b", Secret: testSecret}}}, `keys: key id "a,b" cannot be written in WAITROOM_KEYS`},
		"kid with a space":        {Handler{Event: 1, Keys: []Key{{ID: " k1", Secret: testSecret}}}, `keys: key id " k1" cannot be written in WAITROOM_KEYS`},
		"duplicate kid":           {Handler{Event: 1, Keys: append(keys, keys[0])}, "duplicate"},
		"negative watermark":      {Handler{Event: 1, Keys: keys, Watermark: -1}, "watermark"},
		"negative hard cap":       {Handler{Event: 1, Keys: keys, HardCap: -1}, "hard_cap"},
		"negative lease":          {Handler{Event: 1, Keys: keys, Lease: -1}, "lease"},
		"tiny token ttl":          {Handler{Event: 1, Keys: keys, TokenTTL: caddy.Duration(time.Millisecond)}, "token_ttl"},
		"negative max age":        {Handler{Event: 1, Keys: keys, SoldOutMaxAge: -1}, "sold_out_max_age"},
		"bad waiting status":      {Handler{Event: 1, Keys: keys, WaitingStatus: 404}, "waiting_status"},
		"half an autopilot":       {Handler{Event: 1, Keys: keys, Autopilot: &Autopilot{Step: 5}}, "autopilot"},
		"both hard caps":          {Handler{Event: 1, Keys: keys, HardCap: 9, HardCapPerRemaining: 2}, "not both"},
		"closed loop with a step": {Handler{Event: 1, Keys: keys, Autopilot: &Autopilot{ClosedLoop: true, Step: 5}}, "takes no step"},
		"closed loop conversion":  {Handler{Event: 1, Keys: keys, Autopilot: &Autopilot{ClosedLoop: true, Conversion: 2}}, "conversion 2 is not a share"},
		// Each named by its JSON field, as the operator wrote it.
		"fixed rate interval":        {Handler{Event: 1, Keys: keys, Autopilot: &Autopilot{Step: 1, Interval: caddy.Duration(time.Nanosecond)}}, "autopilot: interval must be at least 10ms (got 1ns)"},
		"closed loop short interval": {Handler{Event: 1, Keys: keys, Autopilot: &Autopilot{ClosedLoop: true, Interval: caddy.Duration(time.Millisecond)}}, "autopilot: interval must be at least 10ms (got 1ms)"},
		"closed loop interval":       {Handler{Event: 1, Keys: keys, Autopilot: &Autopilot{ClosedLoop: true, Interval: caddy.Duration(-time.Second)}}, "autopilot: interval must not be negative (got -1s)"},
		"closed loop decision_time":  {Handler{Event: 1, Keys: keys, Autopilot: &Autopilot{ClosedLoop: true, DecisionTime: caddy.Duration(-time.Second)}}, "autopilot: decision_time must not be negative (got -1s)"},
		"closed loop max_undecided":  {Handler{Event: 1, Keys: keys, Autopilot: &Autopilot{ClosedLoop: true, MaxUndecided: -5}}, "autopilot: max_undecided must not be negative (got -5)"},
		"closed loop expiring_share": {Handler{Event: 1, Keys: keys, Autopilot: &Autopilot{ClosedLoop: true, ExpiringShare: 2}}, "autopilot: expiring_share 2 is not a share"},
		"closed loop max_error_rate": {Handler{Event: 1, Keys: keys, Autopilot: &Autopilot{ClosedLoop: true, MaxErrorRate: -0.1}}, "autopilot: max_error_rate -0.1 is not a share"},
		"fixed rate, loop figures": {Handler{Event: 1, Keys: keys, Autopilot: &Autopilot{Step: 5, Interval: caddy.Duration(time.Second), MaxUndecided: 9}},
			"belong to the closed loop"},
		// A header's name where its placeholder belongs: every visitor
		// would be the one account "X-User-ID", one place shared by all.
		"user_id without a placeholder": {Handler{Event: 1, Keys: keys, UserID: "X-User-ID"}, `user_id: "X-User-ID" has no placeholder`},
		"bad cookie_secure":             {Handler{Event: 1, Keys: keys, CookieSecure: "never"}, `cookie_secure: must be "always" or "auto" (got "never")`},
		"bad store":                     {Handler{Event: 1, Keys: keys, Store: "postgres://x"}, `store: want "memory" or a redis://, rediss:// or unix:// URL`},
		"bad redis url":                 {Handler{Event: 1, Keys: keys, Store: "redis://host:notaport/0"}, "store"},
		"bad cluster addr":              {Handler{Event: 1, Keys: keys, Store: "redis://127.0.0.1:7000?addr=7001"}, "store"},
		"store from empty env":          {Handler{Event: 1, Keys: keys, Store: "{env.WAITROOM_TEST_UNSET_STORE}"}, "store"},
		"missing template":              {Handler{Event: 1, Keys: keys, WaitingTemplate: filepath.Join(dir, "nope.html")}, "waiting_template"},
		"template bad field":            {Handler{Event: 1, Keys: keys, WaitingTemplate: badField}, "waiting_template"},
		"template bad syntax":           {Handler{Event: 1, Keys: keys, SoldOutTemplate: badSyntax}, "sold_out_template"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			h := c.h
			err := h.Provision(ctx)
			if err == nil {
				err = h.Validate()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.NoError(t, h.Cleanup())
			assert.Nil(t, h.room, "a refused config holds no room")
		})
	}
}

// TestOneEventTwiceInAConfig: the handlers of one config that guard one
// event share its queue, so they must agree on what the queue is.
func TestOneEventTwiceInAConfig(t *testing.T) {
	event := testenv.EventID()
	keys := []Key{{ID: "k1", Secret: testSecret}}
	config := func() caddy.Context {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		t.Cleanup(cancel)
		return ctx
	}
	provisionIn := func(ctx caddy.Context, h *Handler) error {
		if h.Event == 0 {
			h.Event = event
		}
		h.Keys = keys
		err := h.Provision(ctx)
		t.Cleanup(func() { assert.NoError(t, h.Cleanup()) })
		return err
	}

	first := config()
	require.NoError(t, provisionIn(first, &Handler{Watermark: 10}))
	require.NoError(t, provisionIn(first, &Handler{Watermark: 10, WaitingStatus: 503, TokenTTL: caddy.Duration(time.Hour)}),
		"two sites may guard one event with the queue's settings the same, each answering its own way")
	require.NoError(t, provisionIn(first, &Handler{Event: event + 1, Watermark: 500}), "another event")

	err := provisionIn(first, &Handler{Watermark: 500, HardCap: 7, SoldOutAtZero: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "event "+strconv.FormatInt(event, 10)+" is guarded twice in this config")
	assert.Contains(t, err.Error(), "watermark 10 and 500, hard_cap 0 and 7, sold_out_at_zero false and true")

	err = provisionIn(first, &Handler{Watermark: 10, LotterySeed: strings.Repeat("ab", 32), OpensAt: "2030-01-31T10:00:00Z"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "opens_at none and 2030-01-31T10:00:00Z, lottery_seed)")
	assert.NotContains(t, err.Error(), "abab", "the seed is secret until the draw")

	require.NoError(t, provisionIn(first, &Handler{Watermark: 10, Store: "redis://127.0.0.1:1/0", Lease: 50}),
		"another store: another gateway of the fleet")

	// A reload's config is provisioned while the old one still runs.
	require.NoError(t, provisionIn(config(), &Handler{Watermark: 500}), "another config")
}

func TestPoolsAreReleased(t *testing.T) {
	event := testenv.EventID()
	key := roomKey{Store: memoryStore, Event: event, AbandonAfter: DefaultAbandonAfter, AdmissionWindow: DefaultAdmissionWindow}
	a := provision(t, &Handler{Event: event})
	b := provision(t, &Handler{Event: event})
	require.Same(t, a.room, b.room, "one room per event, shared")
	refs, ok := rooms.References(key)
	require.True(t, ok)
	assert.Equal(t, 2, refs)

	entry := a.room
	require.NoError(t, a.Cleanup())
	refs, _ = rooms.References(key)
	assert.Equal(t, 1, refs)
	select {
	case <-entry.done:
		t.Fatal("the room stopped while a config still uses it")
	default:
	}
	require.NoError(t, b.Cleanup())
	_, ok = rooms.References(key)
	assert.False(t, ok, "the last Cleanup releases the room")
	select {
	case <-entry.done:
	default:
		t.Fatal("the room's goroutine is still running after its release")
	}
}

// TestSoldOutCaching follows docs/api.md §3 "Sold out": only the answer
// to a request without a queue token may be kept by a shared cache, and
// every 410 says what it varies on, so a CDN never hands a token holder the
// copy made for a stranger.
func TestSoldOutCaching(t *testing.T) {
	clk := newClock()
	h := &Handler{Watermark: 1, HardCap: 3, SoldOutMaxAge: caddy.Duration(20 * time.Second)}
	h.now = clk.Now
	provision(t, h)
	expired, err := h.keys.Issue("someone", h.Event, 2, time.Second)
	require.NoError(t, err)
	clk.Advance(time.Minute)
	var waiting string
	for range 3 {
		waiting, _ = join(t, h)
	}
	beyondCap, _ := tokenAt(t, h, 4)
	inHeader := func(tok string) func() *http.Request {
		return func() *http.Request {
			r := get(h, "")
			r.Header.Set(HeaderToken, tok)
			return r
		}
	}
	inCookie := func(tok string) func() *http.Request { return func() *http.Request { return get(h, tok) } }

	for _, c := range []struct {
		name    string
		soldOut bool
		req     func() *http.Request
		cache   string
	}{
		{"stranger, beyond the hard cap", false, inCookie(""), "public, max-age=20"},
		{"stranger, sold out", true, inCookie(""), "public, max-age=20"},
		{"stranger, html", true, func() *http.Request {
			return httptest.NewRequest(http.MethodGet, "http://tickets.test/", nil)
		}, "public, max-age=20"},
		{"expired token in the cookie", true, inCookie(expired.Raw), "private, max-age=20"},
		{"garbage in the token header", true, inHeader("garbage"), "private, max-age=20"},
		{"waiting token, sold out", true, inCookie(waiting), "private, max-age=20"},
		{"waiting token in the header, sold out", true, inHeader(waiting), "private, max-age=20"},
		{"token beyond the hard cap", false, inCookie(beyondCap), "private, max-age=20"},
		{"token beyond the hard cap in the header", false, inHeader(beyondCap), "private, max-age=20"},
	} {
		t.Run(c.name, func(t *testing.T) {
			update(t, h, waitroom.Change{SoldOut: ptr(c.soldOut)})
			res := serve(t, h, c.req())
			require.Equal(t, http.StatusGone, res.rec.Code, res.rec.Body.String())
			assert.Equal(t, StatusSoldOut, res.status())
			assert.Equal(t, c.cache, res.rec.Header().Get("Cache-Control"))
			var vary []string
			for _, v := range res.rec.Header().Values("Vary") {
				for _, f := range strings.Split(v, ",") {
					vary = append(vary, strings.TrimSpace(f))
				}
			}
			want := []string{"Accept", "Cookie", "X-Waitroom-Token"}
			if res.rec.Header().Get("Content-Type") != "application/json" {
				// The page is in the visitor's language.
				want = append(want, "Accept-Language")
			}
			assert.ElementsMatch(t, want, vary)
			assert.Empty(t, res.rec.Header().Values("Set-Cookie"), "a 410 never sets a cookie")
		})
	}
}

// TestPlaceholders: the waiting room's placeholders are answered by the
// request's replacer as set values were: the event from the start, a
// status and a position once decided (the position empty when the answer
// has none), and nothing else of the replacer's shadowed.
func TestPlaceholders(t *testing.T) {
	repl := caddy.NewReplacer()
	repl.Set("other", "kept")
	d := (&eventMetrics{}).startDecision(repl, "42", nil)
	assert.Equal(t, "42", repl.ReplaceAll("{http.waitroom.event}", "-"))
	assert.Equal(t, "-", repl.ReplaceAll("{http.waitroom.status}", "-"), "nothing decided yet")
	_, decided := repl.Get("http.waitroom.position")
	assert.False(t, decided)
	assert.Equal(t, "kept", repl.ReplaceAll("{other}", "-"))
	assert.Equal(t, "-", repl.ReplaceAll("{http.waitroom.other}", "-"))

	setPlaceholders(&d.repl, StatusSoldOut, 0)
	assert.Equal(t, "sold_out", repl.ReplaceAll("{http.waitroom.status}", "-"))
	pos, known := repl.GetString("http.waitroom.position")
	assert.True(t, known)
	assert.Empty(t, pos)
	setPlaceholders(&d.repl, StatusWaiting, 12400)
	assert.Equal(t, "waiting 12400", repl.ReplaceAll("{http.waitroom.status} {http.waitroom.position}", "-"))
}

// TestPlaceholdersOfTwoHandlers: of two waitroom handlers on one request,
// the later one's placeholders are the request's; one alone keeps its own
// after passing the request on.
func TestPlaceholdersOfTwoHandlers(t *testing.T) {
	repl := caddy.NewReplacer()
	m := &eventMetrics{decisions: make([]prometheus.Observer, len(outcomes))}
	for i := range m.decisions {
		m.decisions[i] = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "unused"})
	}
	inner := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		d := m.startDecision(repl, "2", nil)
		setPlaceholders(&d.repl, StatusWaiting, 9)
		d.Done()
		return nil
	})
	outer := m.startDecision(repl, "1", inner)
	setPlaceholders(&outer.repl, StatusAdmitted, 5)
	require.NoError(t, outer.ServeHTTP(nil, nil))
	assert.Equal(t, "2 waiting 9", repl.ReplaceAll("{http.waitroom.event} {http.waitroom.status} {http.waitroom.position}", "-"))

	repl = caddy.NewReplacer()
	alone := m.startDecision(repl, "1", caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil }))
	setPlaceholders(&alone.repl, StatusAdmitted, 5)
	require.NoError(t, alone.ServeHTTP(nil, nil))
	assert.Equal(t, "1 admitted 5", repl.ReplaceAll("{http.waitroom.event} {http.waitroom.status} {http.waitroom.position}", "-"))
}
