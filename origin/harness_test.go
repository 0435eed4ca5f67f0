package origin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/apitest"
	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/waitroom"
)

const adminToken = "test-admin-token"

var secret = []byte("0123456789abcdef0123456789abcdef")

// clock is the injected time: expiry tests move it instead of sleeping.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type harnessOptions struct {
	redisURL string
	dbURL    string
	config   func(*origin.Config)
	// clock is the injected time; a new one when nil.
	clock *clock
	// outbox opens the ledger with the booking events' outbox on.
	outbox bool
}

// harness is an origin over real Redis and Postgres, served by httptest.
type harness struct {
	t      *testing.T
	srv    *origin.Server
	url    string
	client *http.Client
	clock  *clock
	keys   *waitroom.KeySet
	store  *waitroom.RedisStore
	rdb    redis.UniversalClient
	ledger *ledger.Ledger
	dbURL  string
}

func newHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	if o.redisURL == "" {
		o.redisURL = testenv.RedisURL(t)
	}
	if o.dbURL == "" {
		o.dbURL = testenv.Postgres(t)
	}
	rdb, err := redisurl.New(o.redisURL, redisurl.Defaults{PoolSize: 200})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })

	ctx := context.Background()
	lg, err := ledger.Open(ctx, o.dbURL, ledger.Options{MaxConns: 40, Outbox: o.outbox})
	require.NoError(t, err)
	t.Cleanup(lg.Close)

	if o.clock == nil {
		o.clock = newClock()
	}
	h := &harness{t: t, clock: o.clock, rdb: rdb, ledger: lg, dbURL: o.dbURL,
		store: waitroom.NewRedisStore(rdb, waitroom.RedisOptions{})}
	h.keys, err = waitroom.NewKeySet(h.clock.Now, waitroom.Key{ID: "k1", Secret: secret})
	require.NoError(t, err)
	h.srv = h.newServer(h.clock, o.config)

	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	h.url = ts.URL
	// The timeout only ends a hung request: 500 concurrent buyers under the
	// race detector on a starved machine have waited 30 s for an answer.
	h.client = &http.Client{Transport: checkedTransport(t, &http.Transport{MaxIdleConnsPerHost: 600}), Timeout: 2 * time.Minute}
	t.Cleanup(h.client.CloseIdleConnections)
	return h
}

// checkedTransport validates every request a test sends to the origin and
// every answer against docs/openapi.yaml: an answer the document does not
// describe fails the test.
func checkedTransport(t *testing.T, base http.RoundTripper) http.RoundTripper {
	t.Helper()
	v, err := apitest.Origin()
	require.NoError(t, err)
	tr := v.Transport(t, base)
	t.Cleanup(func() {
		t.Logf("openapi: %d responses validated in this test, %d in all so far", tr.Count(), v.Count())
	})
	return tr
}

// with is h reporting to t (a subtest).
func (h *harness) with(t *testing.T) *harness {
	c := *h
	c.t = t
	return &c
}

// testLogger shows the origin's warnings in the test's output.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// testWriter stops logging when the test ends: background goroutines may
// outlive it by a moment.
type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// newServer starts another origin node over the same ledger and Redis.
func (h *harness) newServer(c *clock, configure func(*origin.Config)) *origin.Server {
	h.t.Helper()
	cfg := origin.Config{
		Keys:          h.keys,
		AdminToken:    adminToken,
		Clock:         c.Now,
		RebuildSettle: -1, // one node: it waits for its own writes exactly
		// One host: the clocks agree.
		ClockSkewMargin: 10 * time.Millisecond,
		// Generous: the race detector on a small machine is slow, and a
		// write given up on mid-way keeps its seat until resolved.
		HoldWriteTimeout: 20 * time.Second,
		Logger:           testLogger(h.t),
	}
	if configure != nil {
		configure(&cfg)
	}
	srv, err := origin.New(cfg, h.ledger, h.rdb)
	require.NoError(h.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	require.NoError(h.t, srv.Start(ctx))
	return srv
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func (r result) json(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, v), "body: %s", r.body)
}

func (r result) errorCode(t *testing.T) string {
	t.Helper()
	var e struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	r.json(t, &e)
	require.NotEmpty(t, e.Message, "error answers carry a message")
	return e.Error
}

// metrics is the origin's /metrics, served on an address of its own
// (MetricsHandler), never through the API.
func (h *harness) metrics() result {
	h.t.Helper()
	rec := httptest.NewRecorder()
	h.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return result{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func (h *harness) do(method, path string, body any, headers map[string]string) result {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		// Of no length known beforehand: sent chunked, with no
		// Content-Length.
		rd = b
	default:
		raw, err := json.Marshal(b)
		require.NoError(h.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	require.NoError(h.t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return result{status: resp.StatusCode, header: resp.Header, body: raw}
}

func admin() map[string]string { return map[string]string{"Authorization": "Bearer " + adminToken} }

type eventJSON struct {
	ID              int64  `json:"id"`
	Name            string `json:"name"`
	Capacity        int64  `json:"capacity"`
	Sellable        int64  `json:"sellable"`
	Remaining       int64  `json:"remaining"`
	Price           int64  `json:"price"`
	Currency        string `json:"currency"`
	HoldTTLSeconds  int64  `json:"hold_ttl_seconds"`
	MaxPerUser      int64  `json:"max_per_user"`
	SoldOut         bool   `json:"sold_out"`
	OverflowReserve int64  `json:"overflow_reserve"`
}

type holdJSON struct {
	HoldID    string `json:"hold_id"`
	EventID   int64  `json:"event_id"`
	UserID    string `json:"user_id"`
	Quantity  int64  `json:"quantity"`
	Status    string `json:"status"`
	ExpiresAt string `json:"expires_at"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
}

// createEvent creates an event with a fresh id; fields override the
// defaults (capacity 100, no overflow reserve). Everyone up to position
// 1,000,000 is admitted.
func (h *harness) createEvent(fields map[string]any) eventJSON {
	h.t.Helper()
	body := map[string]any{
		"id": testenv.EventID(), "name": "Final", "capacity": 100, "price": 90000, "currency": "inr",
		"hold_ttl_seconds": 600, "max_per_user": 4, "overflow_pct": 0,
	}
	for k, v := range fields {
		body[k] = v
	}
	res := h.do(http.MethodPost, "/v1/events", body, admin())
	require.Equal(h.t, http.StatusCreated, res.status, "create event: %s", res.body)
	var ev eventJSON
	res.json(h.t, &ev)
	h.admit(ev.ID, 1_000_000)
	return ev
}

// admit sets the event's watermark, as gateway staff or the autopilot would.
func (h *harness) admit(event, watermark int64) {
	h.t.Helper()
	_, err := h.store.Update(context.Background(), event, waitroom.Change{SetWatermark: &watermark})
	require.NoError(h.t, err)
}

func (h *harness) token(user string, event, position int64) string {
	h.t.Helper()
	tk, err := h.keys.Issue(user, event, position, 24*time.Hour)
	require.NoError(h.t, err)
	return tk.Raw
}

// hold asks for qty seats as user (position 1) with an Idempotency-Key.
func (h *harness) hold(event int64, user string, qty any, key string) result {
	h.t.Helper()
	return h.do(http.MethodPost, fmt.Sprintf("/v1/events/%d/holds", event), map[string]any{"quantity": qty}, map[string]string{
		waitroom.TokenHeader: h.token(user, event, 1),
		"Idempotency-Key":    key,
	})
}

func (h *harness) invariant(event int64) origin.Invariant {
	h.t.Helper()
	inv, err := h.srv.CheckInvariant(context.Background(), event)
	require.NoError(h.t, err)
	return inv
}

// requireInvariant checks remaining == sellable − active holds, and that
// the ledger's own count of seats agrees with expected.
func (h *harness) requireInvariant(event, activeSeats int64) origin.Invariant {
	h.t.Helper()
	inv := h.invariant(event)
	require.Zero(h.t, inv.Drift, "drift: %+v", inv)
	require.Equal(h.t, activeSeats, inv.ActiveHolds, "active seats: %+v", inv)
	require.GreaterOrEqual(h.t, inv.Remaining, int64(0))
	return inv
}

func (h *harness) state(event int64) waitroom.State {
	h.t.Helper()
	st, err := h.store.State(context.Background(), event)
	require.NoError(h.t, err)
	return st
}

// liveHoldsPerUser is the most live holds any one user has in the ledger.
func (h *harness) liveHoldsPerUser(event int64) int {
	h.t.Helper()
	var n int
	err := h.ledger.Pool().QueryRow(context.Background(), `SELECT coalesce(max(c), 0) FROM (
		SELECT count(*) AS c FROM holds WHERE event_id = $1 AND status IN ('pending', 'confirmed') GROUP BY user_id) x`,
		event).Scan(&n)
	require.NoError(h.t, err)
	return n
}
