package caddymodule

// In-process Caddy runs (caddytest). Caddy is one instance per process, so
// these tests never run in parallel; each loads its own config, on its own
// ports, for its own event.

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

// adminPort is the admin endpoint of the in-process Caddy, fixed for the
// life of the test binary: caddytest starts Caddy once, on the first use.
var adminPort int

func TestMain(m *testing.M) {
	flag.Parse()
	// Caddy keeps its autosaved config and data under these; keep them out
	// of the user's home.
	dir, err := os.MkdirTemp("", "caddymodule-test")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	os.Setenv("XDG_DATA_HOME", dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	adminPort = l.Addr().(*net.TCPAddr).Port
	l.Close()
	caddytest.Default.AdminPort = adminPort
	caddytest.Default.LoadRequestTimeout = 15 * time.Second
	goleak.VerifyTestMain(stopCaddyAfter{m},
		// What caddytest starts once per process and keeps to its end:
		// Caddy's main (blocked in cmdRun), its signal handlers and its
		// admin endpoint. Everything of a config is stopped before the
		// check.
		goleak.IgnoreTopFunction("github.com/caddyserver/caddy/v2/cmd.cmdRun"),
		goleak.IgnoreTopFunction("github.com/caddyserver/caddy/v2.trapSignalsPosix.func1"),
		goleak.IgnoreTopFunction("github.com/caddyserver/caddy/v2.trapSignalsCrossPlatform.func1"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/caddy/v2.replaceLocalAdminServer.func2"),
		// certmagic notices a released storage lock only at its next
		// freshness tick, seconds later.
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh"),
		goleak.Cleanup(func(code int) {
			os.RemoveAll(dir)
			os.Exit(code)
		}))
}

// stopCaddyAfter runs the tests, then unloads the in-process Caddy's last
// config, so every room, store and server the tests started must be gone
// when goleak looks.
type stopCaddyAfter struct{ m *testing.M }

func (s stopCaddyAfter) Run() int {
	code := s.m.Run()
	if err := caddy.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping caddy:", err)
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	return code
}

// site is a Caddy config served by the in-process Caddy.
type site struct {
	t    *testing.T
	tc   *caddytest.Tester
	port int
	ev   int64
}

func (s *site) url(path string) string { return fmt.Sprintf("http://localhost:%d%s", s.port, path) }

// siteCaddyfile wraps a site block's body into a whole Caddyfile for port.
func siteCaddyfile(port int, body string) string {
	return fmt.Sprintf(`{
	skip_install_trust
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1ns
}

http://localhost:%d {
%s
}
`, adminPort, port, port+1, port, body)
}

// load starts a site; body is the site block's content.
func load(t *testing.T, port int, body string) *site {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Caddy")
	}
	tc := caddytest.NewTester(t)
	tc.InitServer(siteCaddyfile(port, body), "caddyfile")
	if t.Failed() {
		t.FailNow()
	}
	return &site{t: t, tc: tc, port: port}
}

// reload loads a new config into the running Caddy and returns the admin
// endpoint's status and answer.
func reload(t *testing.T, text, adapter string) (int, string) {
	t.Helper()
	contentType := "text/" + adapter
	if adapter == "json" {
		contentType = "application/json"
	}
	res := adminDo(t, 30*time.Second, func() *http.Request {
		req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://localhost:%d/load", adminPort), strings.NewReader(text))
		require.NoError(t, err)
		req.Header.Set("Content-Type", contentType)
		return req
	})
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// adminDo sends a request to an admin endpoint, again when it got no answer
// at all. A load that fails to provision has already replaced Caddy's
// admin endpoint, and the old one, shut down in the background, drops
// connections it accepted but had not read from yet (EOF, or a reset): the
// request never reached Caddy, so sending it again is safe; a POST is not
// sent again by the transport itself.
func adminDo(t *testing.T, timeout time.Duration, req func() *http.Request) *http.Response {
	t.Helper()
	client := &http.Client{Timeout: timeout}
	var err error
	for range 5 {
		var res *http.Response
		if res, err = client.Do(req()); err == nil {
			return res
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err)
	return nil
}

// visitor is a browser: its own cookie jar.
type visitor struct {
	t      *testing.T
	client *http.Client
}

func newVisitor(t *testing.T) *visitor {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &visitor{t: t, client: &http.Client{Jar: jar, Timeout: 10 * time.Second}}
}

// response is an answer, read.
type response struct {
	*http.Response
	body string
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.body), &m), r.body)
	return m
}

func (v *visitor) get(url string, headers ...string) response {
	v.t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(v.t, err)
	req.Header.Set("Accept", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := v.client.Do(req)
	require.NoError(v.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(v.t, err)
	return response{Response: res, body: string(b)}
}

// adminCall calls the waitroom admin API of the Caddy whose admin endpoint
// is on port.
func adminCall(t *testing.T, port int, method, path, body string) (int, map[string]any, string) {
	t.Helper()
	res := adminDo(t, 10*time.Second, func() *http.Request {
		req, err := http.NewRequest(method, fmt.Sprintf("http://localhost:%d%s", port, path), strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		return req
	})
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return res.StatusCode, m, string(b)
}

// metric reads one caddy_waitroom_* counter of event from the admin
// endpoint's /metrics.
func metric(t *testing.T, name string, event int64) float64 {
	t.Helper()
	res, err := http.Get(fmt.Sprintf("http://localhost:%d/metrics", adminPort))
	require.NoError(t, err)
	defer res.Body.Close()
	prefix := fmt.Sprintf(`%s{event="%d"} `, name, event)
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	require.NoError(t, sc.Err())
	return 0
}

// upstream is the site behind the gateway: it answers with the identity
// headers it was given.
func upstream(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"origin":   true,
			"user":     r.Header.Values(HeaderUser),
			"position": r.Header.Values(HeaderPosition),
			"token":    r.Header.Values(HeaderToken),
		})
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func TestWalkThroughMemory(t *testing.T) { walkThrough(t, "memory") }

func TestWalkThroughRedis(t *testing.T) { walkThrough(t, testenv.RedisURL(t)) }

// walkThrough takes visitors through join, wait, admission, and sold out, as
// docs/api.md §3 says, with the admin API of §4 moving the event.
func walkThrough(t *testing.T, store string) {
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	header >X-Debug-Waitroom "{http.waitroom.status} {http.waitroom.position} {http.waitroom.event}"
	waitroom {
		event %d
		key k1 %s
		store %s
		user_id {http.request.header.X-User-ID}
	}
	reverse_proxy %s`, ev, testSecret, store, upstream(t)))
	cookieName := "waitroom_" + evs

	// Join: the first visitor gets position 1 and the cookie.
	alice := newVisitor(t)
	res := alice.get(s.url("/buy"), "X-User-ID", "alice")
	require.Equal(t, http.StatusOK, res.StatusCode, res.body)
	assert.Equal(t, "waiting", res.Header.Get(HeaderStatus))
	assert.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	assert.NotEmpty(t, res.Header.Get("Retry-After"))
	assert.Equal(t, "waiting 1 "+evs, res.Header.Get("X-Debug-Waitroom"))
	body := res.json(t)
	token := body["token"].(string)
	assert.Equal(t, map[string]any{
		"status": "waiting", "event": float64(ev), "position": 1.0, "admitted_through": 0.0,
		"ahead": 0.0, "estimated_wait_seconds": nil, "token": token, "paused": false, "all_held": false,
	}, body)
	setCookie := res.Header.Get("Set-Cookie")
	assert.True(t, strings.HasPrefix(setCookie, cookieName+"="+token+";"), setCookie)
	for _, attr := range []string{"Path=/", "Max-Age=1800", "HttpOnly", "SameSite=Lax"} {
		assert.Contains(t, setCookie, attr)
	}
	assert.NotContains(t, setCookie, "Secure", "plain HTTP")

	// Wait: polling keeps the place; the browser form is the HTML page.
	res = alice.get(s.url("/buy"))
	assert.Equal(t, 1.0, res.json(t)["position"])
	html := alice.get(s.url("/buy"), "Accept", "text/html")
	assert.Equal(t, "text/html; charset=utf-8", html.Header.Get("Content-Type"))
	assert.Contains(t, html.body, "You’re in the queue")

	// The admin API lets position 1 in.
	code, state, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"set": 1}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, map[string]any{
		"event": float64(ev), "watermark": 1.0, "last_position": 1.0, "hard_cap": 0.0, "sold_out": false, "paused": false,
	}, state)

	// Admitted: the upstream sees the verified identity, not the client's.
	res = alice.get(s.url("/buy"), HeaderUser, "mallory", HeaderPosition, "0", HeaderToken, "forged")
	require.Equal(t, http.StatusOK, res.StatusCode, res.body)
	assert.Equal(t, "admitted", res.Header.Get(HeaderStatus))
	assert.Equal(t, "admitted 1 "+evs, res.Header.Get("X-Debug-Waitroom"))
	assert.Equal(t, map[string]any{
		"origin": true, "user": []any{"alice"}, "position": []any{"1"}, "token": []any{token},
	}, res.json(t))

	// More arrive behind: positions 2 and 3; position 3 has one ahead.
	bob, carol := newVisitor(t), newVisitor(t)
	assert.Equal(t, 2.0, bob.get(s.url("/")).json(t)["position"])
	body = carol.get(s.url("/")).json(t)
	assert.Equal(t, 3.0, body["position"])
	assert.Equal(t, 1.0, body["admitted_through"])
	assert.Equal(t, 1.0, body["ahead"])

	// A bad token is a new arrival, counted as invalid.
	dave := newVisitor(t)
	res = dave.get(s.url("/"), HeaderToken, token+"x")
	assert.Equal(t, "waiting", res.Header.Get(HeaderStatus))
	assert.Equal(t, 4.0, res.json(t)["position"])

	// Sold out: newcomers and waiting visitors get 410, cacheable, with no
	// cookie; the admitted buyer still passes.
	code, state, raw = adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/sold_out", `{"sold_out": true}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, true, state["sold_out"])
	res = newVisitor(t).get(s.url("/"))
	assert.Equal(t, http.StatusGone, res.StatusCode)
	assert.Equal(t, "sold_out", res.Header.Get(HeaderStatus))
	assert.Equal(t, "public, max-age=10", res.Header.Get("Cache-Control"))
	assert.Empty(t, res.Header.Get("Set-Cookie"))
	assert.JSONEq(t, `{"status":"sold_out","event":`+evs+`}`, res.body)
	assert.Equal(t, "sold_out  "+evs, res.Header.Get("X-Debug-Waitroom"))
	assert.Equal(t, http.StatusGone, bob.get(s.url("/")).StatusCode)
	res = alice.get(s.url("/buy"))
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "admitted", res.Header.Get(HeaderStatus))
	res = newVisitor(t).get(s.url("/"), "Accept", "text/html")
	assert.Equal(t, http.StatusGone, res.StatusCode)
	assert.Contains(t, res.body, "Sold out")

	// The event as the admin API lists it.
	code, _, raw = adminCall(t, adminPort, http.MethodGet, "/waitroom/events", "")
	require.Equal(t, http.StatusOK, code)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &list))
	assert.Contains(t, list, map[string]any{
		"event": float64(ev), "watermark": 1.0, "last_position": 4.0, "hard_cap": 0.0, "sold_out": true, "paused": false,
	})

	// Metrics, by event.
	for name, want := range map[string]float64{
		"caddy_waitroom_arrivals_total":       4,
		"caddy_waitroom_admitted_total":       2,
		"caddy_waitroom_waiting_total":        6,
		"caddy_waitroom_sold_out_total":       3,
		"caddy_waitroom_invalid_tokens_total": 1,
	} {
		assert.Equal(t, want, metric(t, name, ev), name)
	}
}

func TestHonestEstimateMemory(t *testing.T) { honestEstimate(t, "memory") }

func TestHonestEstimateRedis(t *testing.T) { honestEstimate(t, testenv.RedisURL(t)) }

// honestEstimate: estimated_wait_seconds is null until the watermark has
// been seen to advance, then comes from the pace observed, and is null
// again while the event is paused (docs/api.md §3).
func honestEstimate(t *testing.T, store string) {
	clk := useClock(t)
	ev := testenv.EventID()
	if store != "memory" {
		setUpEvent(t, store, ev)
	}
	evs := strconv.FormatInt(ev, 10)
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
		autopilot 50 10s
	}
	respond "the site"`, ev, testSecret, store))
	var last *visitor
	for range 3 {
		last = newVisitor(t)
		res := last.get(s.url("/"))
		require.Equal(t, http.StatusOK, res.StatusCode, res.body)
		assert.Nil(t, res.json(t)["estimated_wait_seconds"], "nothing admitted yet, whatever the autopilot's rate")
	}
	raise := func() {
		code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"raise_by": 1}`)
		require.Equal(t, http.StatusOK, code, raw)
	}
	raise()
	clk.Advance(10 * time.Second)
	raise()
	body := last.get(s.url("/")).json(t)
	assert.Equal(t, 3.0, body["position"])
	assert.Equal(t, 5.0, body["estimated_wait_seconds"], "one ahead at 2 positions in 10 s")

	code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/pause", `{"paused": true}`)
	require.Equal(t, http.StatusOK, code, raw)
	body = last.get(s.url("/")).json(t)
	assert.Nil(t, body["estimated_wait_seconds"], "paused")
}

func TestAdminChangeLogMemory(t *testing.T) { adminChangeLog(t, "memory") }

func TestAdminChangeLogRedis(t *testing.T) { adminChangeLog(t, testenv.RedisURL(t)) }

// adminChangeLog: staff's changes and the autopilot's are in
// GET /waitroom/events/{id}/log, newest first, with actor and reason.
func adminChangeLog(t *testing.T, store string) {
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
		autopilot 1 100ms
	}
	respond "the site"`, ev, testSecret, store))
	events := "/waitroom/events/" + evs
	code, _, raw := adminCall(t, adminPort, http.MethodPost, events+"/pause", `{"paused": true, "reason": "payment provider down"}`)
	require.Equal(t, http.StatusOK, code, raw)
	for range 3 {
		require.Equal(t, http.StatusOK, newVisitor(t).get(s.url("/")).StatusCode)
	}
	code, _, raw = adminCall(t, adminPort, http.MethodPost, events+"/pause", `{"paused": false}`)
	require.Equal(t, http.StatusOK, code, raw)

	var log []map[string]any
	require.Eventually(t, func() bool {
		res := adminDo(t, 10*time.Second, func() *http.Request {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://localhost:%d%s/log", adminPort, events), nil)
			return req
		})
		defer res.Body.Close()
		log = nil
		require.NoError(t, json.NewDecoder(res.Body).Decode(&log))
		return len(log) >= 3 && log[0]["actor"] == "autopilot"
	}, 10*time.Second, 50*time.Millisecond, "the autopilot's raise is logged")

	first := log[0]
	assert.Equal(t, "watermark", first["field"])
	assert.Equal(t, first["from"].(float64)+1, first["to"])
	assert.NotEmpty(t, first["reason"])
	var pauses []map[string]any
	for _, e := range log {
		if e["field"] == "paused" {
			pauses = append(pauses, e)
		}
	}
	require.Len(t, pauses, 2)
	assert.Equal(t, map[string]any{"actor": "admin", "field": "paused", "from": true, "to": false}, pick(pauses[0], "actor", "field", "from", "to"))
	assert.Contains(t, pauses[0]["reason"], "admin API from ")
	assert.Equal(t, map[string]any{"actor": "admin", "field": "paused", "from": false, "to": true, "reason": "payment provider down"},
		pick(pauses[1], "actor", "field", "from", "to", "reason"))
	for i := 1; i < len(log); i++ {
		newer, err := time.Parse(time.RFC3339Nano, log[i-1]["time"].(string))
		require.NoError(t, err)
		older, err := time.Parse(time.RFC3339Nano, log[i]["time"].(string))
		require.NoError(t, err)
		assert.False(t, newer.Before(older), "newest first")
	}

	code, body, raw := adminCall(t, adminPort, http.MethodPost, events+"/pause", `{"paused": true, "reason": "`+strings.Repeat("x", 501)+`"}`)
	assert.Equal(t, http.StatusBadRequest, code, raw)
	assert.Equal(t, "invalid_request", body["error"])
}

// pick is m with only keys.
func pick(m map[string]any, keys ...string) map[string]any {
	out := make(map[string]any, len(keys))
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

func TestOnePositionPerAccountMemory(t *testing.T) { onePositionPerAccount(t, "memory") }

func TestOnePositionPerAccountRedis(t *testing.T) { onePositionPerAccount(t, testenv.RedisURL(t)) }

// onePositionPerAccount: with user_id, an account that joins again without
// its token (another device) gets the position it holds (docs/api.md §3).
func onePositionPerAccount(t *testing.T, store string) {
	ev := testenv.EventID()
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
		user_id {http.request.header.X-User-ID}
	}
	respond "the site"`, ev, testSecret, store))
	join := func(user string) map[string]any {
		t.Helper()
		var headers []string
		if user != "" {
			headers = []string{"X-User-ID", user}
		}
		res := newVisitor(t).get(s.url("/"), headers...)
		require.Equal(t, http.StatusOK, res.StatusCode, res.body)
		return res.json(t)
	}
	assert.Equal(t, 1.0, join("alice")["position"])
	assert.Equal(t, 2.0, join("bob")["position"])
	again := join("alice")
	assert.Equal(t, 1.0, again["position"], "a new device of alice")
	tk, err := waitroomKeys(t).Verify(again["token"].(string), ev)
	require.NoError(t, err)
	assert.Equal(t, "alice", tk.Subject)
	assert.Equal(t, 3.0, join("")["position"], "anonymous visitors each get a place")
	assert.Equal(t, 4.0, join("")["position"])
	assert.Equal(t, 2.0, join("bob")["position"])
}

// An id user_id yields that no token can carry (a control character, here
// from a query string) names no account: the visitor arrives anonymous,
// never a 500 nor an admitted request the proxy cannot pass on.
func TestAccountIDWithAControlCharacter(t *testing.T) {
	ev := testenv.EventID()
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		watermark 10
		user_id {http.request.uri.query.u}
	}
	respond "user {http.request.header.X-Waitroom-User}"`, ev, testSecret))
	v := newVisitor(t)
	res := v.get(s.url("/?u=al%01ice"))
	require.Equal(t, http.StatusOK, res.StatusCode, res.body)
	assert.Equal(t, "admitted", res.Header.Get(HeaderStatus))
	assert.NotContains(t, res.body, "al\x01ice")
	assert.NotEqual(t, "user ", res.body, "an anonymous visitor id is passed on")
	res = v.get(s.url("/?u=al%01ice"))
	assert.Equal(t, "admitted", res.Header.Get(HeaderStatus), "with the anonymous token it was given")
	res = newVisitor(t).get(s.url("/?u=alice"))
	assert.Equal(t, "user alice", res.body)
}

// waitroomKeys is the key set of the tests' configs.
func waitroomKeys(t *testing.T) *waitroom.KeySet {
	ks, err := waitroom.NewKeySet(nil, waitroom.Key{ID: "k1", Secret: []byte(testSecret)})
	require.NoError(t, err)
	return ks
}

func TestRevocationMemory(t *testing.T) { revocation(t, "memory", false) }

func TestRevocationRedisTwoGateways(t *testing.T) { revocation(t, testenv.RedisURL(t), false) }

func TestRevocationOfAccountRedisTwoGateways(t *testing.T) {
	revocation(t, testenv.RedisURL(t), true)
}

// revocation: the site's X-Waitroom-Command: revoke on an admitted answer
// ends that token's admission, on the gateway that saw it at once and on
// another sharing the store within a second; the header never reaches the
// client. The token's holder then queues anew, or, an account, is told it
// is done (docs/api.md §3).
func revocation(t *testing.T, store string, account bool) {
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/confirm" {
			w.Header().Set("X-Waitroom-Command", "revoke")
		}
		_, _ = io.WriteString(w, "site "+r.URL.Path)
	}))
	t.Cleanup(backend.Close)
	userID := ""
	if account {
		userID = "user_id {http.request.header.X-User-ID}"
	}
	block := func(port int, lease int) string {
		return fmt.Sprintf(`
http://localhost:%d {
	waitroom {
		event %d
		key k1 %s
		store %s
		lease %d
		%s
	}
	reverse_proxy %s
}
`, port, ev, testSecret, store, lease, userID, backend.Listener.Addr())
	}
	pa, pb := testenv.FreePort(t), testenv.FreePort(t)
	// Another lease makes another store client and room: a gateway of its
	// own, sharing the store (the memory store: the one gateway).
	cfg := fmt.Sprintf("{\n\tskip_install_trust\n\tadmin localhost:%d\n\thttp_port %d\n\thttps_port %d\n\tgrace_period 1ns\n}\n",
		adminPort, pa, pa+1) + block(pa, 1)
	if store != "memory" {
		setUpEvent(t, store, ev)
		cfg += block(pb, 2)
	}
	tc := caddytest.NewTester(t)
	tc.InitServer(cfg, "caddyfile")
	if t.Failed() {
		t.FailNow()
	}
	a := &site{t: t, tc: tc, port: pa}
	b := &site{t: t, tc: tc, port: pb}

	v := newVisitor(t)
	var hdr []string
	if account {
		hdr = []string{"X-User-ID", "alice"}
	}
	res := v.get(a.url("/"), hdr...)
	require.Equal(t, http.StatusOK, res.StatusCode, res.body)
	token := res.json(t)["token"].(string)
	assert.Equal(t, 1.0, res.json(t)["position"])
	code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"set": 1}`)
	require.Equal(t, http.StatusOK, code, raw)
	bearer := func(s *site, path string) response {
		return newVisitor(t).get(s.url(path), append([]string{HeaderToken, token}, hdr...)...)
	}
	require.Eventually(t, func() bool {
		return bearer(a, "/").Header.Get(HeaderStatus) == StatusAdmitted &&
			(store == "memory" || bearer(b, "/").Header.Get(HeaderStatus) == StatusAdmitted)
	}, 5*time.Second, 20*time.Millisecond, "admitted on both gateways")

	res = bearer(a, "/confirm")
	require.Equal(t, http.StatusOK, res.StatusCode, res.body)
	assert.Equal(t, "site /confirm", res.body)
	assert.Equal(t, StatusAdmitted, res.Header.Get(HeaderStatus))
	assert.Empty(t, res.Header.Values("X-Waitroom-Command"), "the command is the gateway's")

	check := func(res response) bool {
		if account {
			return res.StatusCode == http.StatusOK && res.Header.Get(HeaderStatus) == StatusCompleted &&
				res.body == fmt.Sprintf(`{"status":"completed","event":%d}`+"\n", ev)
		}
		return res.Header.Get(HeaderStatus) == StatusWaiting && res.json(t)["position"] != 1.0
	}
	res = bearer(a, "/")
	assert.True(t, check(res), "at once on the gateway that saw it: %d %s %s", res.StatusCode, res.Header.Get(HeaderStatus), res.body)
	if store != "memory" {
		// How soon it arrives (within a poll) is proven on a test clock by
		// TestRevocationOnAnotherGatewayAfterOnePoll; here, only that it does.
		require.Eventually(t, func() bool { return check(bearer(b, "/")) }, 10*time.Second, 10*time.Millisecond,
			"the other gateway")
	}
	if account {
		// A new device of the account: the same position, and done.
		res = newVisitor(t).get(a.url("/"), hdr...)
		assert.Equal(t, StatusCompleted, res.Header.Get(HeaderStatus), res.body)
	}
}

// TestRevocationInEarlyHintsAndTrailers: the site's command in an
// informational answer (103 Early Hints, passed on by reverse_proxy) or in
// a trailer never reaches the client either, and is carried out as in the
// answer's header.
func TestRevocationInEarlyHintsAndTrailers(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hints":
			w.Header().Set("Link", "</site.css>; rel=preload")
			w.Header().Set(HeaderCommand, CommandRevoke)
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del(HeaderCommand)
			w.Header().Del("Link")
		case "/trailer":
			w.Header().Set("Trailer", "X-Site-Digest, "+HeaderCommand)
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "site ")
			w.Header().Set("X-Site-Digest", "d1")
			w.Header().Set(HeaderCommand, CommandRevoke)
		}
		_, _ = io.WriteString(w, "site "+r.URL.Path)
	}))
	t.Cleanup(backend.Close)
	ev := testenv.EventID()
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
	}
	reverse_proxy %s`, ev, testSecret, backend.Listener.Addr()))
	tokens := make([]string, 2)
	for i := range tokens {
		res := newVisitor(t).get(s.url("/"))
		require.Equal(t, http.StatusOK, res.StatusCode, res.body)
		tokens[i] = res.json(t)["token"].(string)
	}
	code, _, raw := adminCall(t, adminPort, http.MethodPost, fmt.Sprintf("/waitroom/events/%d/watermark", ev), `{"set": 2}`)
	require.Equal(t, http.StatusOK, code, raw)
	admitted := func(token string) bool {
		return newVisitor(t).get(s.url("/"), HeaderToken, token).Header.Get(HeaderStatus) == StatusAdmitted
	}
	require.True(t, admitted(tokens[0]) && admitted(tokens[1]))

	var early []http.Header
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		early = append(early, http.Header(h).Clone())
		return nil
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, s.url("/hints"), nil)
	require.NoError(t, err)
	req.Header.Set(HeaderToken, tokens[0])
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Len(t, early, 1, "the early hints reach the client")
	assert.Equal(t, "</site.css>; rel=preload", early[0].Get("Link"))
	assert.Empty(t, early[0].Values(HeaderCommand), "but not the command in them")
	assert.Empty(t, res.Header.Values(HeaderCommand))
	assert.False(t, admitted(tokens[0]), "the command in the early hints was carried out")

	res2 := newVisitor(t).get(s.url("/trailer"), HeaderToken, tokens[1])
	require.Equal(t, http.StatusOK, res2.StatusCode)
	assert.Equal(t, "site site /trailer", res2.body)
	assert.Equal(t, "d1", res2.Trailer.Get("X-Site-Digest"), "the site's other trailers pass")
	assert.Empty(t, res2.Trailer.Values(HeaderCommand), "the command is no trailer of the client's")
	assert.False(t, admitted(tokens[1]), "the command in the trailer was carried out")
}

func TestAbandonersLeaveAheadMemory(t *testing.T) { abandonersLeaveAhead(t, "memory") }

func TestAbandonersLeaveAheadRedis(t *testing.T) { abandonersLeaveAhead(t, testenv.RedisURL(t)) }

// abandonersLeaveAhead: positions whose holders stopped polling for
// abandon_after no longer count in "ahead" (docs/api.md §3).
func abandonersLeaveAhead(t *testing.T, store string) {
	clk := useClock(t)
	ev := testenv.EventID()
	if store != "memory" {
		setUpEvent(t, store, ev)
	}
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
		abandon_after 8s
	}
	respond "the site"`, ev, testSecret, store))
	var last *visitor
	for want := 1.0; want <= 3; want++ {
		last = newVisitor(t)
		res := last.get(s.url("/"))
		require.Equal(t, http.StatusOK, res.StatusCode, res.body)
		require.Equal(t, want, res.json(t)["position"])
	}
	assert.Equal(t, 2.0, last.get(s.url("/")).json(t)["ahead"])
	// Only the last keeps polling.
	require.Eventually(t, func() bool {
		clk.Advance(500 * time.Millisecond)
		return last.get(s.url("/")).json(t)["ahead"] == 0.0
	}, 15*time.Second, 50*time.Millisecond, "1 and 2 gave up")
}

func TestAdmissionWindowMemory(t *testing.T) { admissionWindow(t, "memory") }

func TestAdmissionWindowRedis(t *testing.T) { admissionWindow(t, testenv.RedisURL(t)) }

// admissionWindow: an admitted token passes for admission_window after the
// watermark reached it, then queues anew, unless its holder's admission was
// extended in the store (docs/api.md §3).
func admissionWindow(t *testing.T, store string) {
	clk := useClock(t)
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	if store != "memory" {
		setUpEvent(t, store, ev)
	}
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
		user_id {http.request.header.X-User-ID}
		admission_window 1m
	}
	respond "the site"`, ev, testSecret, store))
	alice, bob := newVisitor(t), newVisitor(t)
	require.Equal(t, 1.0, alice.get(s.url("/"), "X-User-ID", "alice").json(t)["position"])
	require.Equal(t, 2.0, bob.get(s.url("/"), "X-User-ID", "bob").json(t)["position"])
	code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"set": 2}`)
	require.Equal(t, http.StatusOK, code, raw)
	for _, v := range []*visitor{alice, bob} {
		require.Equal(t, StatusAdmitted, v.get(s.url("/")).Header.Get(HeaderStatus))
	}
	// The origin's extension for bob, who holds seats.
	entry := findRoom(ev)
	require.NotNil(t, entry)
	require.NoError(t, entry.room.ExtendAdmission(context.Background(), "bob", 10*time.Minute))

	clk.Advance(61 * time.Second)
	res := alice.get(s.url("/"))
	assert.Equal(t, StatusWaiting, res.Header.Get(HeaderStatus), res.body)
	assert.Equal(t, 3.0, res.json(t)["position"], "alice's turn passed: the back of the queue")
	res = alice.get(s.url("/"))
	assert.Equal(t, 3.0, res.json(t)["position"], "and stays there")
	assert.Equal(t, StatusAdmitted, bob.get(s.url("/")).Header.Get(HeaderStatus), "extended")
}

func TestAdminHardCapLiveMemory(t *testing.T) { adminHardCapLive(t, "memory") }

func TestAdminHardCapLiveRedis(t *testing.T) { adminHardCapLive(t, testenv.RedisURL(t)) }

// adminHardCapLive lowers the hard cap through the admin API: the next
// arrival past it is sold out at once, and a reload with the configured
// cap does not undo it.
func adminHardCapLive(t *testing.T, store string) {
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	cfg := fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
		hard_cap 100
	}
	respond "the site"`, ev, testSecret, store)
	s := load(t, testenv.FreePort(t), cfg)
	for want := 1.0; want <= 2; want++ {
		res := newVisitor(t).get(s.url("/"))
		require.Equal(t, http.StatusOK, res.StatusCode, res.body)
		assert.Equal(t, want, res.json(t)["position"])
	}
	code, state, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/hard_cap", `{"hard_cap": 2}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, 2.0, state["hard_cap"])
	res := newVisitor(t).get(s.url("/"))
	assert.Equal(t, http.StatusGone, res.StatusCode, res.body)

	// A config with another hard_cap sets the event up anew (a new room).
	load(t, s.port, strings.Replace(cfg, "hard_cap 100", "hard_cap 90", 1))
	// The new room's first read of the store may come a moment after.
	require.Eventually(t, func() bool {
		code, state, _ = adminCall(t, adminPort, http.MethodGet, "/waitroom/events/"+evs, "")
		return code == http.StatusOK && state["hard_cap"] == 2.0
	}, 5*time.Second, 20*time.Millisecond, "the configured cap does not undo the live one")
	assert.Equal(t, http.StatusGone, newVisitor(t).get(s.url("/")).StatusCode)

	for _, c := range []struct {
		body   string
		status int
	}{
		{`{}`, 400}, {`{"hard_cap": -1}`, 400}, {`{"hard_cap": "x"}`, 400}, {`{"cap": 1}`, 400},
	} {
		code, body, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/hard_cap", c.body)
		assert.Equal(t, c.status, code, raw)
		assert.Equal(t, "invalid_request", body["error"], raw)
	}
}

func TestAdminAPIErrorsMemory(t *testing.T) { adminAPIErrors(t, "memory") }

func TestAdminAPIErrorsRedis(t *testing.T) { adminAPIErrors(t, testenv.RedisURL(t)) }

func adminAPIErrors(t *testing.T, store string) {
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
		watermark 3
		hard_cap 100
	}
	respond "the site"`, ev, testSecret, store))
	events := "/waitroom/events/" + evs

	code, state, raw := adminCall(t, adminPort, http.MethodGet, events, "")
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, map[string]any{
		"event": float64(ev), "watermark": 3.0, "last_position": 0.0, "hard_cap": 100.0, "sold_out": false, "paused": false,
	}, state)

	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{http.MethodGet, "/waitroom/events/999999999999999", "", 404, "not_found"},
		{http.MethodGet, "/waitroom/events/not-a-number", "", 404, "not_found"},
		{http.MethodPost, "/waitroom/events/999999999999999/watermark", `{"set": 1}`, 404, "not_found"},
		{http.MethodGet, "/waitroom/nothing", "", 404, "not_found"},
		{http.MethodGet, events + "/nothing", "", 404, "not_found"},
		{http.MethodDelete, "/waitroom/events", "", 405, "method_not_allowed"},
		{http.MethodPost, events, `{}`, 405, "method_not_allowed"},
		{http.MethodGet, events + "/watermark", "", 405, "method_not_allowed"},
		{http.MethodPut, events + "/sold_out", `{"sold_out": true}`, 405, "method_not_allowed"},
		{http.MethodPost, events + "/lottery", `{}`, 405, "method_not_allowed"},
		{http.MethodPost, events + "/watermark/more", `{"set": 1}`, 404, "not_found"},
		{http.MethodGet, "/waitroom/", "", 404, "not_found"},
		{http.MethodPost, events + "/watermark", ``, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"set": `, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `not json`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"set": 5, "colour": "blue"}`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"set": -1}`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"raise_by": -10}`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"raise_by": 9223372036854775807}`, 422, "watermark_overflow"},
		{http.MethodPost, events + "/watermark", `{"raise_by": 9223372036854775805}`, 422, "watermark_overflow"},
		{http.MethodPost, events + "/watermark", `{"set": 1, "raise_by": 1}`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{}`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"set": "ten"}`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"set": 1.5}`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"set": 1} {"set": 2}`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `[1]`, 400, "invalid_request"},
		{http.MethodPost, events + "/sold_out", `{"sold_out": "yes"}`, 400, "invalid_request"},
		{http.MethodPost, events + "/sold_out", `{}`, 400, "invalid_request"},
		{http.MethodPost, events + "/pause", `{"pause": true}`, 400, "invalid_request"},
		{http.MethodPost, events + "/pause", `{"paused": true, "x": 1}`, 400, "invalid_request"},
		{http.MethodPost, events + "/pause", `{"paused": "` + strings.Repeat("x", 70<<10) + `"}`, 413, "request_too_large"},
		{http.MethodPost, events + "/watermark", `{"set": 10}` + strings.Repeat(" ", 70<<10), 413, "request_too_large"},
		{http.MethodPost, events + "/watermark", "{\"set\": 5, \"reason\": \"\xff\xfe\"}", 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"set": 6, "reason": "a\u0000b"}`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"Raise_By": 5}`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"raise_by": 1, "raise_by": 2}`, 400, "invalid_request"},
		{http.MethodPost, events + "/watermark", `{"raise_by": 9223372036854775808}`, 400, "invalid_request"},
	} {
		t.Run(c.method+" "+c.path+" "+truncate(c.body), func(t *testing.T) {
			code, body, raw := adminCall(t, adminPort, c.method, c.path, c.body)
			assert.Equal(t, c.status, code, raw)
			assert.Equal(t, c.code, body["error"], raw)
			assert.NotEmpty(t, body["message"], raw)
			assert.NotContains(t, body["message"], "update state", "the store's own words: %s", raw)
		})
	}

	// What is wrong is said in the body's own names.
	for body, want := range map[string]string{
		`{"Raise_By": 5}`:                   `"Raise_By": names are case-sensitive ("raise_by")`,
		`{"raise_by": 1, "raise_by": 2}`:    `"raise_by" is given twice`,
		`{"raise_by": 9223372036854775808}`: `"raise_by" must be a whole number from -9223372036854775808 to 9223372036854775807`,
	} {
		_, refused, raw := adminCall(t, adminPort, http.MethodPost, events+"/watermark", body)
		assert.Contains(t, refused["message"], want, raw)
	}

	// None of the refused calls changed anything.
	code, after, _ := adminCall(t, adminPort, http.MethodGet, events, "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, state, after)

	// The accepted forms.
	_, s, _ := adminCall(t, adminPort, http.MethodPost, events+"/watermark", `{"raise_by": 1000}`)
	assert.Equal(t, 1003.0, s["watermark"])
	_, s, _ = adminCall(t, adminPort, http.MethodPost, events+"/watermark", `{"set": 6000}`)
	assert.Equal(t, 6000.0, s["watermark"])
	_, s, _ = adminCall(t, adminPort, http.MethodPost, events+"/pause", `{"paused": true}`)
	assert.Equal(t, true, s["paused"])
	_, s, _ = adminCall(t, adminPort, http.MethodPost, events+"/pause", `{"paused": false}`)
	assert.Equal(t, false, s["paused"])
	_, s, _ = adminCall(t, adminPort, http.MethodPost, events+"/sold_out", `{"sold_out": true}`)
	assert.Equal(t, true, s["sold_out"])
	_, s, _ = adminCall(t, adminPort, http.MethodPost, events+"/sold_out", `{"sold_out": false}`)
	assert.Equal(t, false, s["sold_out"])
}

func TestAdminConditionalRaiseMemory(t *testing.T) { adminConditionalRaise(t, "memory") }

func TestAdminConditionalRaiseRedis(t *testing.T) { adminConditionalRaise(t, testenv.RedisURL(t)) }

// adminConditionalRaise: two desks raising the watermark from the one
// they both saw raise it once; the other is shown where it is now.
func adminConditionalRaise(t *testing.T, store string) {
	ev := testenv.EventID()
	load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
		watermark 5000
	}
	respond "the site"`, ev, testSecret, store))
	path := "/waitroom/events/" + strconv.FormatInt(ev, 10) + "/watermark"

	type answer struct {
		code int
		body map[string]any
		raw  string
	}
	answers := make(chan answer, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			code, body, raw := adminCall(t, adminPort, http.MethodPost, path, `{"raise_by": 1000, "if_watermark": 5000}`)
			answers <- answer{code, body, raw}
		})
	}
	wg.Wait()
	close(answers)
	codes := map[int]int{}
	for a := range answers {
		codes[a.code]++
		switch a.code {
		case http.StatusOK:
			assert.Equal(t, 6000.0, a.body["watermark"], a.raw)
		case http.StatusConflict:
			assert.Equal(t, "watermark_changed", a.body["error"], a.raw)
			assert.Contains(t, a.body["message"], "the watermark is 6000, not 5000", a.raw)
			require.IsType(t, map[string]any{}, a.body["state"], a.raw)
			assert.Equal(t, 6000.0, a.body["state"].(map[string]any)["watermark"], a.raw)
		}
	}
	assert.Equal(t, map[int]int{http.StatusOK: 1, http.StatusConflict: 1}, codes)

	code, s, raw := adminCall(t, adminPort, http.MethodPost, path, `{"set": 7000, "if_watermark": 6000}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, 7000.0, s["watermark"])
	code, s, raw = adminCall(t, adminPort, http.MethodPost, path, `{"if_watermark": -1, "raise_by": 1}`)
	assert.Equal(t, http.StatusBadRequest, code, raw)
	assert.Equal(t, "invalid_request", s["error"], raw)
	code, s, raw = adminCall(t, adminPort, http.MethodPost, path, `{"raise_by": 1}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, 7001.0, s["watermark"], "without if_watermark a raise is made whatever the watermark")
}

func truncate(s string) string {
	if len(s) > 30 {
		return s[:30] + "…"
	}
	return s
}

func TestReloadKeepsTheQueue(t *testing.T) {
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	port := testenv.FreePort(t)
	block := func(answer string) string {
		return fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
	}
	respond %q`, ev, testSecret, answer)
	}
	s := load(t, port, block("v1"))

	alice, bob := newVisitor(t), newVisitor(t)
	alice.get(s.url("/"))
	bob.get(s.url("/"))
	code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"set": 1}`)
	require.Equal(t, http.StatusOK, code, raw)
	res := alice.get(s.url("/"))
	require.Equal(t, "v1", res.body)

	// Same event, new config: positions and watermark carry on.
	load(t, port, block("v2"))
	res = alice.get(s.url("/"))
	assert.Equal(t, "admitted", res.Header.Get(HeaderStatus))
	assert.Equal(t, "v2", res.body)
	assert.Equal(t, 2.0, bob.get(s.url("/")).json(t)["position"])
	assert.Equal(t, 3.0, newVisitor(t).get(s.url("/")).json(t)["position"])
	_, state, _ := adminCall(t, adminPort, http.MethodGet, "/waitroom/events/"+evs, "")
	assert.Equal(t, 1.0, state["watermark"])
	assert.Equal(t, 3.0, state["last_position"])

	// The old config let go of the room: one reference, the new config's.
	key := roomKey{Store: memoryStore, Event: ev, AbandonAfter: DefaultAbandonAfter, AdmissionWindow: DefaultAdmissionWindow}
	require.Eventually(t, func() bool {
		refs, ok := rooms.References(key)
		return ok && refs == 1
	}, 10*time.Second, 20*time.Millisecond)

	// Bad configs are refused and the running one keeps serving.
	for name, c := range map[string]struct{ text, adapter, want string }{
		"short secret": {siteCaddyfile(port, fmt.Sprintf("waitroom {\n event %d\n key k1 short\n}\nrespond v3", ev)), "caddyfile", "at least 32"},
		"unknown subdirective": {siteCaddyfile(port, fmt.Sprintf("waitroom {\n event %d\n key k1 %s\n colour blue\n}\nrespond v3", ev, testSecret)), "caddyfile",
			`unrecognized waitroom subdirective \"colour\"`},
		"missing event": {siteCaddyfile(port, fmt.Sprintf("waitroom {\n key k1 %s\n}\nrespond v3", testSecret)), "caddyfile", "event: a positive event id is required"},
		"negative watermark": {fmt.Sprintf(`{"admin":{"listen":"localhost:%d"},"apps":{"http":{"servers":{"s":{"listen":[":%d"],"routes":[{"handle":[
			{"handler":"waitroom","event":%d,"keys":[{"id":"k1","secret":%q}],"watermark":-5},
			{"handler":"static_response","body":"v3"}]}]}}}}}`, adminPort, port, ev, testSecret), "json", "watermark: must not be negative"},
		"bad waiting status": {siteCaddyfile(port, fmt.Sprintf("waitroom {\n event %d\n key k1 %s\n waiting_status 418\n}\nrespond v3", ev, testSecret)), "caddyfile", "waiting_status"},
	} {
		t.Run(name, func(t *testing.T) {
			code, msg := reload(t, c.text, c.adapter)
			assert.NotEqual(t, http.StatusOK, code)
			assert.Contains(t, msg, c.want)
			res := alice.get(s.url("/"))
			assert.Equal(t, "v2", res.body, "the old config still serves")
			assert.Equal(t, "admitted", res.Header.Get(HeaderStatus))
		})
	}
	refs, _ := rooms.References(key)
	assert.Equal(t, 1, refs, "failed loads leave no reference behind")
}

func TestRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Caddy and Redis")
	}
	srv := testenv.StartRedis(t)
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	clk := useClock(t)
	setUpEvent(t, srv.URL(), ev)
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
	}
	respond "the site"`, ev, testSecret, srv.URL()))

	alice, bob := newVisitor(t), newVisitor(t)
	assert.Equal(t, 1.0, alice.get(s.url("/")).json(t)["position"])
	code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"set": 1}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, 2.0, bob.get(s.url("/")).json(t)["position"])
	require.Equal(t, "admitted", alice.get(s.url("/")).Header.Get(HeaderStatus))

	srv.Stop()

	// Token holders are judged by the last known state.
	res := alice.get(s.url("/"))
	assert.Equal(t, "admitted", res.Header.Get(HeaderStatus))
	assert.Equal(t, "the site", res.body)
	res = bob.get(s.url("/"))
	assert.Equal(t, "waiting", res.Header.Get(HeaderStatus))
	assert.Equal(t, 2.0, res.json(t)["position"])

	// New arrivals are told to come back: 503 with Retry-After, never a
	// hang (the client's timeout) or a 500.
	res = newVisitor(t).get(s.url("/"))
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.Equal(t, "unavailable", res.Header.Get(HeaderStatus))
	assert.Equal(t, "5", res.Header.Get("Retry-After"))
	assert.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	assert.Empty(t, res.Header.Get("Set-Cookie"))
	assert.Equal(t, "queue_unavailable", res.json(t)["error"])
	assert.NotEmpty(t, res.json(t)["message"])
	res = newVisitor(t).get(s.url("/"), "Accept", "text/html")
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.Contains(t, res.body, `http-equiv="refresh"`)

	// The admin API cannot change what it cannot reach, and says when to
	// try again, as the handler does.
	for _, call := range []struct{ path, body string }{
		{"/watermark", `{"raise_by": 1}`}, {"/sold_out", `{"sold_out": true}`},
		{"/pause", `{"paused": true}`}, {"/hard_cap", `{"hard_cap": 9}`}, {"/log", ""},
	} {
		method := http.MethodPost
		if call.body == "" {
			method = http.MethodGet
		}
		res := adminDo(t, 10*time.Second, func() *http.Request {
			req, err := http.NewRequest(method, fmt.Sprintf("http://localhost:%d/waitroom/events/%s%s", adminPort, evs, call.path), strings.NewReader(call.body))
			require.NoError(t, err)
			return req
		})
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "%s: %s", call.path, raw)
		assert.Equal(t, "5", res.Header.Get("Retry-After"), call.path)
		assert.Contains(t, string(raw), `"error":"queue_unavailable"`, call.path)
	}

	// Redis comes back empty (this one keeps nothing on disk): the gateway
	// reconnects by itself and puts back the queue it remembers, so the
	// watermark holds and positions carry on instead of restarting at 1;
	// new arrivals wait (503) until the restore is done.
	srv.Start()
	require.Eventually(t, func() bool {
		code, state, _ := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"raise_by": 0}`)
		return code == http.StatusOK && state["watermark"] == 1.0 && state["last_position"] == 2.0
	}, 30*time.Second, 100*time.Millisecond)
	res = joinAfterRestore(t, clk, s.url("/"))
	assert.Equal(t, "waiting", res.Header.Get(HeaderStatus))
	assert.Equal(t, 3.0, res.json(t)["position"])
	assert.Equal(t, "admitted", alice.get(s.url("/")).Header.Get(HeaderStatus))
}

// testClock is the clock the running test moves, nil for the real one.
// poolClock reads it at every call rather than being replaced per test: a
// store is pooled by its URL, and the config an earlier test left loaded
// in the in-process Caddy keeps that store alive, so the next test's
// handlers get the same store. With the clock it was created with, that
// store saw the earlier test's clock stand still, and a restore window
// opened on it never ended however far the test moved its own.
var testClock atomic.Pointer[clock]

func init() {
	poolClock = func() time.Time {
		if c := testClock.Load(); c != nil {
			return c.Now()
		}
		return time.Now()
	}
}

// useClock makes the stores and rooms read a clock the test moves, those
// created before the test (pooled, still in use) included.
func useClock(t *testing.T) *clock {
	clk := newClock()
	prev := testClock.Swap(clk)
	t.Cleanup(func() { testClock.Store(prev) })
	return clk
}

// setUpEvent writes an event's state into the Redis at url as a gateway
// that ran before would have left it, so the test's gateway starts on it
// rather than on a new event (which waits out a restore window first).
func setUpEvent(t testing.TB, url string, event int64) {
	rdb, err := waitroom.NewRedisClient(url)
	require.NoError(t, err)
	defer rdb.Close()
	_, err = waitroom.NewRedisStore(rdb, waitroom.RedisOptions{}).Ensure(context.Background(), event, waitroom.Defaults{})
	require.NoError(t, err)
}

// joinAfterRestore makes new arrivals, moving the clock on, until one is
// taken: until then each must have been told to come back (503 with
// Retry-After), never given a place.
func joinAfterRestore(t *testing.T, clk *clock, url string) response {
	t.Helper()
	var res response
	require.Eventually(t, func() bool {
		res = newVisitor(t).get(url)
		if res.StatusCode == http.StatusServiceUnavailable {
			assert.Equal(t, "unavailable", res.Header.Get(HeaderStatus))
			assert.NotEmpty(t, res.Header.Get("Retry-After"))
			assert.Empty(t, res.Header.Get("Set-Cookie"))
			clk.Advance(time.Second)
			return false
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, http.StatusOK, res.StatusCode, res.body)
	return res
}

// TestLostStoreStateHoldsJoins follows docs/api.md §3 "Lost store state": Redis
// loses the event (FLUSHALL) under a watermark the gateway remembers; new
// arrivals are told to come back until the state is put back, and then take
// places after the highest one handed out, never one admitted at once.
func TestLostStoreStateHoldsJoins(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Caddy and Redis")
	}
	srv := testenv.StartRedis(t)
	rdb, err := waitroom.NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	clk := useClock(t)
	setUpEvent(t, srv.URL(), ev)
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
	}
	respond "the site"`, ev, testSecret, srv.URL()))

	visitors := []*visitor{newVisitor(t), newVisitor(t), newVisitor(t)}
	for i, v := range visitors {
		require.Equal(t, float64(i+1), v.get(s.url("/")).json(t)["position"])
	}
	code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"set": 2}`)
	require.Equal(t, http.StatusOK, code, raw)
	require.Equal(t, "admitted", visitors[0].get(s.url("/")).Header.Get(HeaderStatus))

	require.NoError(t, rdb.FlushAll(context.Background()).Err())

	// The counter would restart at 1, under the watermark of 2.
	res := newVisitor(t).get(s.url("/"))
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "a new arrival after the loss: %s %s", res.Header.Get(HeaderStatus), res.body)
	assert.Equal(t, "unavailable", res.Header.Get(HeaderStatus))
	assert.NotEmpty(t, res.Header.Get("Retry-After"))
	assert.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	assert.Empty(t, res.Header.Get("Set-Cookie"))
	assert.Equal(t, "queue_unavailable", res.json(t)["error"])

	// Token holders are judged by what the gateway remembers.
	assert.Equal(t, "admitted", visitors[0].get(s.url("/")).Header.Get(HeaderStatus))
	assert.Equal(t, "admitted", visitors[1].get(s.url("/")).Header.Get(HeaderStatus))
	assert.Equal(t, "waiting", visitors[2].get(s.url("/")).Header.Get(HeaderStatus))

	res = joinAfterRestore(t, clk, s.url("/"))
	assert.Equal(t, "waiting", res.Header.Get(HeaderStatus), "never admitted on account of the loss")
	assert.Equal(t, 4.0, res.json(t)["position"], "after the highest position handed out")
	assert.Equal(t, 5.0, newVisitor(t).get(s.url("/")).json(t)["position"])
	_, state, _ := adminCall(t, adminPort, http.MethodGet, "/waitroom/events/"+evs, "")
	assert.Equal(t, 2.0, state["watermark"])
	assert.Equal(t, 5.0, state["last_position"])
	assert.Equal(t, "admitted", visitors[1].get(s.url("/")).Header.Get(HeaderStatus))
}

// TestCookieSecureBehindTrustedProxy runs the cookie's Secure flag through
// Caddy's own trusted_proxies: a load balancer that terminated TLS is
// believed about the scheme only on the server that trusts it.
func TestCookieSecureBehindTrustedProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Caddy")
	}
	trusting, plain, always := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	ev := testenv.EventID()
	block := func(port int, extra string) string {
		return fmt.Sprintf(`
http://localhost:%d {
	waitroom {
		event %d
		key k1 %s
		%s
	}
	respond "the site"
}
`, port, ev, testSecret, extra)
	}
	tc := caddytest.NewTester(t)
	tc.InitServer(fmt.Sprintf(`{
	skip_install_trust
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1ns
	servers :%d {
		trusted_proxies static 127.0.0.1/8 ::1
	}
}
`, adminPort, trusting, testenv.FreePort(t), trusting)+
		block(trusting, "")+block(plain, "cookie_secure auto")+block(always, "cookie_secure always"), "caddyfile")
	if t.Failed() {
		t.FailNow()
	}

	for _, c := range []struct {
		name  string
		port  int
		proto string
		want  bool
	}{
		{"trusted proxy, client on https", trusting, "https", true},
		{"trusted proxy, client on http", trusting, "http", false},
		{"trusted proxy, no header", trusting, "", false},
		{"untrusted peer claims https", plain, "https", false},
		{"always", always, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var headers []string
			if c.proto != "" {
				headers = []string{"X-Forwarded-Proto", c.proto}
			}
			res := newVisitor(t).get(fmt.Sprintf("http://localhost:%d/", c.port), headers...)
			require.Equal(t, http.StatusOK, res.StatusCode, res.body)
			setCookie := res.Header.Get("Set-Cookie")
			require.NotEmpty(t, setCookie)
			if c.want {
				assert.Contains(t, setCookie, "; Secure", setCookie)
			} else {
				assert.NotContains(t, setCookie, "Secure", setCookie)
			}
		})
	}
}

// TestAdminCallsRightAfterAFailedReload: a config that fails to provision
// still replaces Caddy's admin endpoint and shuts the old one down in the
// background, and for a moment the old one drops what it accepted: a load
// sent right after a failed one can get EOF (TestReloadKeepsTheQueue's
// subtests in a random order did, now and then, under -race). Each admin
// call of these tests is sent again when it got no answer at all.
func TestAdminCallsRightAfterAFailedReload(t *testing.T) {
	ev := testenv.EventID()
	port := testenv.FreePort(t)
	s := load(t, port, fmt.Sprintf("waitroom {\n event %d\n key k1 %s\n}\nrespond ok", ev, testSecret))
	failing := siteCaddyfile(port, fmt.Sprintf("waitroom {\n event %d\n key k1 short\n}\nrespond no", ev))
	for range 200 {
		code, msg := reload(t, failing, "caddyfile")
		require.NotEqual(t, http.StatusOK, code)
		require.Contains(t, msg, "at least 32")
		code, msg = reload(t, siteCaddyfile(port, "waitroom {\n colour blue\n}"), "caddyfile")
		require.NotEqual(t, http.StatusOK, code)
		require.Contains(t, msg, "colour")
	}
	assert.Equal(t, "waiting", newVisitor(t).get(s.url("/")).Header.Get(HeaderStatus), "the running config still serves")
}
