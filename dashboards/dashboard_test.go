package dashboards_test

// The dashboard queries only series the binaries export: the Caddy module
// (in an in-process Caddy, its admin endpoint's /metrics) and the origin
// (its metrics handler's /metrics, on real Redis and PostgreSQL), each run through
// a little of a sale so that every labelled series exists.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metricsql"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	_ "github.com/waitroom/waitroom/caddymodule"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/waitroom"
)

const secret = "an-example-secret-of-at-least-32-bytes"

// dashboard is the part of a Grafana dashboard that names series.
type dashboard struct {
	Panels []panel `json:"panels"`
	// Templating's queries are label_values(<metric>, <label>).
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// queried returns every metric name the dashboard's expressions select,
// with where each is used.
func queried(t *testing.T, file string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	names := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				expr, err := metricsql.Parse(tg.Expr)
				require.NoError(t, err, "panel %q: %s", p.Title, tg.Expr)
				metricsql.VisitAll(expr, func(e metricsql.Expr) {
					me, ok := e.(*metricsql.MetricExpr)
					if !ok {
						return
					}
					for _, group := range me.LabelFilterss {
						// The name, when given, is the group's first filter.
						require.True(t, len(group) > 0 && group[0].Label == "__name__" && !group[0].IsRegexp && !group[0].IsNegative,
							"panel %q selects by name: %s", p.Title, tg.Expr)
						names[group[0].Value] = append(names[group[0].Value], "panel "+p.Title)
					}
				})
			}
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil || q.Query == "" {
			continue
		}
		m := labelValues.FindStringSubmatch(q.Query)
		require.NotNil(t, m, "variable %s: %s", v.Name, q.Query)
		names[m[1]] = append(names[m[1]], "variable "+v.Name)
	}
	require.NotEmpty(t, names)
	return names
}

// exported parses a /metrics answer into the series names it holds: a
// histogram's _bucket, _sum and _count.
func exported(t *testing.T, body io.Reader, into map[string]string, who string) {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(body)
	require.NoError(t, err)
	for name, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		names := []string{name}
		if f.GetType().String() == "HISTOGRAM" {
			names = []string{name + "_bucket", name + "_sum", name + "_count"}
		}
		for _, n := range names {
			into[n] = who
		}
	}
}

func TestDashboardQueriesExportedSeries(t *testing.T) {
	names := queried(t, "waitroom.json")
	series := map[string]string{}
	exported(t, strings.NewReader(gatewayMetrics(t)), series, "gateway")
	exported(t, strings.NewReader(originMetrics(t)), series, "origin")
	for name, uses := range names {
		if _, ok := series[name]; !ok {
			t.Errorf("%s (%s) is exported by neither the gateway nor the origin", name, strings.Join(uses, ", "))
		}
	}
	// The dashboard covers both binaries.
	var gw, or int
	for name := range names {
		switch series[name] {
		case "gateway":
			gw++
		case "origin":
			or++
		}
	}
	require.Positive(t, gw, "gateway series")
	require.Positive(t, or, "origin series")
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// gatewayMetrics loads a config guarding one event into an in-process
// Caddy, sends it a visitor, and reads the admin endpoint's /metrics.
func gatewayMetrics(t *testing.T) string {
	if testing.Short() {
		t.Skip("runs Caddy")
	}
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("XDG_DATA_HOME", dir)
	admin, port := freePort(t), freePort(t)
	caddytest.Default.AdminPort = admin
	tc := caddytest.NewTester(t)
	tc.InitServer(fmt.Sprintf(`{
	skip_install_trust
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1ns
}

http://localhost:%d {
	waitroom {
		event %d
		key k1 %s
		watermark 1
	}
	respond "the site"
}
`, admin, port, freePort(t), port, testenv.EventID(), secret), "caddyfile")
	t.Cleanup(func() { _ = caddy.Stop() })
	for range 2 { // one admitted, one waiting
		res, err := http.Get(fmt.Sprintf("http://localhost:%d/", port))
		require.NoError(t, err)
		res.Body.Close()
	}
	return get(t, fmt.Sprintf("http://localhost:%d/metrics", admin))
}

// originMetrics starts the origin's handler on real Redis and PostgreSQL,
// creates an event, makes a hold, a booking and a webhook call that are
// refused, rebuilds the event, checks the invariant once, and reads
// /metrics.
func originMetrics(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	lg, err := ledger.Open(ctx, testenv.Postgres(t), ledger.Options{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(lg.Close)
	keys, err := waitroom.NewKeySet(time.Now, waitroom.Key{ID: "k1", Secret: []byte(secret)})
	require.NoError(t, err)
	fp, err := payment.NewFakepay(ctx, payment.FakepayConfig{Seed: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = fp.Close() })
	srv, err := origin.New(origin.Config{Keys: keys, AdminToken: "admin-token", Payments: fp, TicketKey: []byte(secret)}, lg, rdb)
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)

	id := testenv.EventID()
	call := func(method, path, body string, headers ...string) {
		t.Helper()
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
	}
	call(http.MethodPost, "/v1/events", fmt.Sprintf(`{"id":%d,"name":"Final","capacity":10,"price":1000,"currency":"inr"}`, id),
		"Authorization", "Bearer admin-token")
	call(http.MethodPost, fmt.Sprintf("/v1/events/%d/holds", id), `{"quantity":1}`, "Idempotency-Key", "k")
	call(http.MethodPost, "/v1/bookings", `{"hold_id":"h"}`, "Idempotency-Key", "k")
	call(http.MethodPost, "/v1/webhooks/fakepay", `{}`)
	call(http.MethodPost, fmt.Sprintf("/v1/admin/events/%d/rebuild", id), ``, "Authorization", "Bearer admin-token")
	require.NoError(t, srv.ReconcileOnce(ctx))
	metrics := httptest.NewServer(srv.MetricsHandler())
	t.Cleanup(metrics.Close)
	return get(t, metrics.URL+"/metrics")
}

func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}
