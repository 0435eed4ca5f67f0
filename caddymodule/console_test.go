package caddymodule

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

func TestLiveRates(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	type call struct {
		after             time.Duration // since t0
		arrived, admitted int64
		perArrived        *float64 // arrivals per second
		perAdmitted       *float64
	}
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name  string
		calls []call
	}{
		{"unknown under a second", []call{{0, 10, 0, nil, nil}, {900 * time.Millisecond, 20, 5, nil, nil}}},
		{"since the first call", []call{{0, 10, 0, nil, nil}, {2 * time.Second, 30, 4, f(10), f(2)}}},
		{"the window moves on", []call{
			{0, 0, 0, nil, nil}, {5 * time.Second, 100, 0, f(20), f(0)},
			{15 * time.Second, 200, 50, f(10), f(5)}, // the first sample is 15 s old: from the second on
		}},
		{"a lowered count starts over", []call{{0, 100, 50, nil, nil}, {2 * time.Second, 120, 10, nil, nil}, {4 * time.Second, 140, 20, f(10), f(5)}}},
		{"calls close together keep one sample", []call{
			{0, 0, 0, nil, nil}, {100 * time.Millisecond, 1, 0, nil, nil}, {2 * time.Second, 20, 2, f(10), f(1)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l liveRates
			for i, c := range tc.calls {
				arrivals, admitted := l.observe(7, t0.Add(c.after), c.arrived, c.admitted)
				assert.Equal(t, c.perArrived, arrivals, "call %d: arrivals", i)
				assert.Equal(t, c.perAdmitted, admitted, "call %d: admitted", i)
			}
		})
	}
}

func TestLiveRatesForgetUnloadedEvents(t *testing.T) {
	var l liveRates
	now := time.Unix(1_000_000, 0)
	l.observe(1, now, 1, 0)
	l.observe(2, now, 1, 0)
	l.keep(map[int64]bool{2: true})
	assert.Len(t, l.samples, 1)
	assert.Contains(t, l.samples, int64(2))
}

// newAdmin is the admin API on the given clock, with rates of its own.
func newAdmin(t *testing.T, now func() time.Time) *Admin {
	t.Helper()
	a := new(Admin)
	require.NoError(t, a.Provision(caddy.Context{}))
	a.now, a.rates = now, new(liveRates)
	return a
}

// adminServe calls the admin API a in process.
func adminServe(a *Admin, method, target, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	a.routes.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
	return rec
}

// liveOf reads GET /waitroom/live and returns the entry of event.
func liveOf(t *testing.T, a *Admin, event int64) map[string]any {
	t.Helper()
	rec := adminServe(a, http.MethodGet, "/waitroom/live", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var list []map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &list))
	for _, e := range list {
		if e["event"] == float64(event) {
			return e
		}
	}
	t.Fatalf("event %d not in %s", event, rec.Body.String())
	return nil
}

func TestLive(t *testing.T) {
	clk := newClock()
	h := provision(t, &Handler{Watermark: 2, HardCap: 6, now: clk.Now})
	a := newAdmin(t, clk.Now)
	join := func(n int) {
		for range n {
			serve(t, h, get(h, ""))
		}
	}
	view := func(e map[string]any) map[string]any {
		return pick(e, "last_position", "watermark", "hard_cap", "admitted", "waiting", "sold_out", "paused", "arrivals_per_second", "admitted_per_second")
	}

	join(5)
	assert.Equal(t, map[string]any{"last_position": 5.0, "watermark": 2.0, "hard_cap": 6.0, "admitted": 2.0, "waiting": 3.0,
		"sold_out": false, "paused": false, "arrivals_per_second": nil, "admitted_per_second": nil}, view(liveOf(t, a, h.Event)))

	clk.Advance(2 * time.Second)
	join(3) // the eighth is past the hard cap
	assert.Equal(t, map[string]any{"last_position": 8.0, "watermark": 2.0, "hard_cap": 6.0, "admitted": 2.0, "waiting": 4.0,
		"sold_out": false, "paused": false, "arrivals_per_second": 1.5, "admitted_per_second": 0.0}, view(liveOf(t, a, h.Event)),
		"waiting counts no position past the hard cap")

	rec := adminServe(a, http.MethodPost, fmt.Sprintf("/waitroom/events/%d/watermark", h.Event), `{"raise_by": 2}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	clk.Advance(2 * time.Second)
	e := liveOf(t, a, h.Event)
	assert.Equal(t, 4.0, e["admitted"])
	assert.Equal(t, 2.0, e["waiting"])
	assert.Equal(t, 0.75, e["arrivals_per_second"], "3 positions in 4 s")
	assert.Equal(t, 0.5, e["admitted_per_second"], "2 admitted in 4 s")

	assert.Nil(t, e["inventory"], "the origin published nothing yet")
	published := time.Now().UTC().Truncate(time.Millisecond)
	require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 10, Held: 3, Confirmed: 2, Remaining: 5, Healthy: true, At: published}))
	e = liveOf(t, a, h.Event)
	assert.Equal(t, map[string]any{"sellable": 10.0, "held": 3.0, "confirmed": 2.0, "remaining": 5.0, "expiring_soon": 0.0,
		"healthy": true, "error_rate": 0.0, "at": published.Format(time.RFC3339Nano), "fresh": true}, e["inventory"])
	require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Remaining: 4, At: published.Add(-time.Minute)}))
	assert.Equal(t, false, liveOf(t, a, h.Event)["inventory"].(map[string]any)["fresh"], "figures a minute old are stale")

	rec = adminServe(a, http.MethodPost, fmt.Sprintf("/waitroom/events/%d/sold_out", h.Event), `{"sold_out": true}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	e = liveOf(t, a, h.Event)
	assert.Equal(t, true, e["sold_out"])
	assert.Equal(t, 0.0, e["waiting"], "no one waits for a sold-out event")
	assert.Equal(t, 4.0, e["admitted"])
}

func TestChangeLogLimit(t *testing.T) {
	h := provision(t, &Handler{})
	a := newAdmin(t, poolClock)
	events := fmt.Sprintf("/waitroom/events/%d", h.Event)
	for i := range 3 {
		rec := adminServe(a, http.MethodPost, events+"/watermark", fmt.Sprintf(`{"set": %d}`, i+1))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	for _, tc := range []struct {
		query   string
		code    int
		entries int
	}{
		{"", http.StatusOK, 3},
		{"?limit=2", http.StatusOK, 2},
		{"?limit=5000", http.StatusOK, 3},
		{"?limit=99999999999999999999", http.StatusOK, 3},
		{"?limit=0", http.StatusBadRequest, 0},
		{"?limit=-99999999999999999999", http.StatusBadRequest, 0},
		{"?limit=x", http.StatusBadRequest, 0},
	} {
		t.Run(tc.query, func(t *testing.T) {
			rec := adminServe(a, http.MethodGet, events+"/log"+tc.query, "")
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			var body any
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			if tc.code != http.StatusOK {
				assert.Equal(t, "invalid_request", body.(map[string]any)["error"])
				return
			}
			require.Len(t, body, tc.entries)
			assert.Equal(t, 3.0, body.([]any)[0].(map[string]any)["to"], "newest first")
		})
	}
}

// TestConsolePage: the page carries its style and script inline, and its
// policy allows exactly those, requests to its own origin only, and no
// framing.
func TestConsolePage(t *testing.T) {
	a := newAdmin(t, poolClock)
	rec := adminServe(a, http.MethodGet, "/waitroom/console", "")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
	assert.Equal(t, "DENY", rec.Header().Get("X-Frame-Options"))
	assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	csp := rec.Header().Get("Content-Security-Policy")
	page := rec.Body.String()
	for _, tag := range []string{"style", "script"} {
		m := regexp.MustCompile(`(?s)<`+tag+`>(.*?)</`+tag+`>`).FindAllStringSubmatch(page, -1)
		require.Len(t, m, 1, tag)
		sum := sha256.Sum256([]byte(m[0][1]))
		assert.Contains(t, csp, tag+"-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'", "the policy allows the inline %s", tag)
	}
	for _, directive := range []string{"default-src 'none'", "connect-src 'self'", "frame-ancestors 'none'"} {
		assert.Contains(t, csp, directive)
	}
	assert.NotContains(t, page, "{{", "every placeholder is filled")
	assert.NotRegexp(t, `(src|href)="(https?:)?//`, page, "nothing from elsewhere")
	// One page, fetched once a session on the admin endpoint, its style
	// and script inline: small, with room for a control or two more.
	assert.Less(t, len(page), 20<<10, "the page stays small")
}

// TestConsoleOrigins: Caddy's checks of the admin endpoint's origins hold
// for the console and the routes it calls. With the default origins a
// browser's typed address (Sec-Fetch-Mode and no Origin or Referer) is
// refused; adding the empty origin, as docs/operations.md says, lets it
// open the console while other sites' requests stay refused.
func TestConsoleOrigins(t *testing.T) {
	admin := fmt.Sprintf("http://localhost:%d", adminPort)
	for _, cfg := range []struct {
		name    string
		options string
		typed   int // the console opened from the address bar
	}{
		{"default origins", fmt.Sprintf("admin localhost:%d", adminPort), http.StatusForbidden},
		{"enforced, with the empty origin", fmt.Sprintf("admin localhost:%d {\n\t\torigins localhost:%d \"\"\n\t\tenforce_origin\n\t}", adminPort, adminPort), http.StatusOK},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			ev := testenv.EventID()
			port := testenv.FreePort(t)
			if testing.Short() {
				t.Skip("runs Caddy")
			}
			tc := caddytest.NewTester(t)
			tc.InitServer(fmt.Sprintf(`{
	skip_install_trust
	%s
	http_port %d
	https_port %d
	grace_period 1ns
}

http://localhost:%d {
	waitroom {
		event %d
		key k1 %s
	}
	respond "the site"
}
`, cfg.options, port, port+1, port, ev, testSecret), "caddyfile")
			event := admin + "/waitroom/events/" + strconv.FormatInt(ev, 10)
			pause, soldOut := event+"/pause", event+"/sold_out"
			for _, rq := range []struct {
				name    string
				method  string
				url     string
				headers map[string]string
				code    int
			}{
				{"typed address", http.MethodGet, admin + "/waitroom/console",
					map[string]string{"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Site": "none"}, cfg.typed},
				{"link from the admin origin", http.MethodGet, admin + "/waitroom/console",
					map[string]string{"Sec-Fetch-Mode": "navigate", "Referer": admin + "/"}, http.StatusOK},
				{"the page's own poll", http.MethodGet, admin + "/waitroom/live",
					map[string]string{"Sec-Fetch-Mode": "cors", "Referer": admin + "/waitroom/console"}, http.StatusOK},
				{"the page's own change", http.MethodPost, pause,
					map[string]string{"Sec-Fetch-Mode": "cors", "Origin": admin, "Content-Type": "application/json"}, http.StatusOK},
				{"another site's change", http.MethodPost, soldOut,
					map[string]string{"Sec-Fetch-Mode": "cors", "Origin": "http://tickets.example", "Content-Type": "application/json"}, http.StatusForbidden},
				{"another site's form", http.MethodPost, soldOut,
					map[string]string{"Sec-Fetch-Mode": "navigate", "Origin": "http://tickets.example", "Content-Type": "text/plain"}, http.StatusForbidden},
				{"another site's form, no referrer", http.MethodPost, soldOut,
					map[string]string{"Sec-Fetch-Mode": "navigate", "Origin": "null", "Content-Type": "text/plain"}, http.StatusBadRequest},
				{"another site's read", http.MethodGet, admin + "/waitroom/live",
					map[string]string{"Sec-Fetch-Mode": "cors", "Origin": "http://tickets.example"}, http.StatusForbidden},
				{"another site's script tag", http.MethodGet, admin + "/waitroom/live",
					map[string]string{"Sec-Fetch-Mode": "no-cors"}, http.StatusBadRequest},
			} {
				res := adminDo(t, 10*time.Second, func() *http.Request {
					body := `{"paused": true}`
					if rq.url == soldOut {
						body = `{"sold_out": true}`
					}
					req, err := http.NewRequest(rq.method, rq.url, strings.NewReader(body))
					require.NoError(t, err)
					for k, v := range rq.headers {
						req.Header.Set(k, v)
					}
					return req
				})
				res.Body.Close()
				assert.Equal(t, rq.code, res.StatusCode, rq.name)
			}
			code, state, raw := adminCall(t, adminPort, http.MethodGet, "/waitroom/events/"+strconv.FormatInt(ev, 10), "")
			require.Equal(t, http.StatusOK, code, raw)
			assert.Equal(t, true, state["paused"], "the page's change went through")
			assert.Equal(t, false, state["sold_out"], "no other site's did")
		})
	}
}

// TestCompactScript: the served script loses what the browser has no use
// for, the line breaks after ";", "{" and "," among it, and keeps every
// break that can change what it says.
func TestCompactScript(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"statements", "  a();\n  b();\n", "a();b();"},
		{"a block and a list", "if (x) {\n  f(1,\n    2);\n}\n", "if (x) {f(1,2);}\n"},
		{"comment lines and blanks", "// why\n\n  a();\n", "a();"},
		{"a break that ends a statement", "return\nx;\n", "return\nx;"},
		{"a line with a comment keeps its break", "a(); // why\nb();\n", "a(); // why\nb();"},
		{"a string with //", "const u = \"http://h/\";\nb();\n", "const u = \"http://h/\";\nb();"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, compactScript(tc.in))
		})
	}
}
