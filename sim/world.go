package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/internal/faultproxy"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/maintenance"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/waitroom"
)

// The origin's configuration in the simulation: short write timeouts, so
// that settling an uncertain write costs a fraction of a second of wall
// time, and payment delays in the injected clock's minutes.
const (
	holdWriteTimeout    = 400 * time.Millisecond
	clockSkewMargin     = 10 * time.Millisecond
	paymentWindow       = 30 * time.Second
	paymentPendingAfter = 20 * time.Second
	// requestTimeout bounds every request and pass of a step: one that
	// takes longer is a finding (something waits without a deadline).
	requestTimeout = 20 * time.Second
	adminToken     = "sim-admin-token"
	webhookSecret  = "whsec_sim_secret"
)

var (
	tokenSecret = []byte("sim-token-secret-0123456789abcdef")
	ticketKey   = []byte("sim-ticket-key-0123456789abcdef-0123")
)

// simClock is the injected time: the steps move it.
type simClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *simClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// node is one origin server, with a fault proxy of its own in front of
// Redis and of PostgreSQL, so a fault can hit one node and spare the others.
type node struct {
	srv        *origin.Server
	handler    http.Handler
	ledger     *ledger.Ledger
	rdb        *redis.Client
	redisProxy *faultproxy.Proxy
	pgProxy    *faultproxy.Proxy
	pgDown     bool
	logs       *ringLog
}

// recorder is fakepay, noting every booking a payment was asked for: the
// money check goes through all of them at the provider.
type recorder struct {
	*payment.Fakepay
	mu       sync.Mutex
	bookings []string
	seen     map[string]int
}

func (r *recorder) CreatePayment(ctx context.Context, req payment.CreateRequest) (payment.Payment, error) {
	r.note(req.BookingID)
	return r.Fakepay.CreatePayment(ctx, req)
}

func (r *recorder) note(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.seen[id]; ok {
		return n
	}
	r.seen[id] = len(r.bookings)
	r.bookings = append(r.bookings, id)
	return r.seen[id]
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bookings...)
}

// hook is a queued webhook delivery: fakepay's posts are caught and
// delivered when a step says so.
type hook struct {
	id, typ, booking string
	body             []byte
}

// capture is the endpoint fakepay posts its webhooks to.
type capture struct {
	mu  sync.Mutex
	got []hook
}

func (c *capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var ev struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Data struct {
			Object struct {
				Metadata map[string]string `json:"metadata"`
			} `json:"object"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &ev)
	c.mu.Lock()
	c.got = append(c.got, hook{id: ev.ID, typ: ev.Type, booking: ev.Data.Object.Metadata[payment.MetadataBookingID], body: body})
	c.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (c *capture) take() []hook {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.got
	c.got = nil
	return out
}

// ringLog keeps a node's last log lines, shown when a run fails.
type ringLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *ringLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimRight(string(p), "\n"))
	if len(l.lines) > 60 {
		l.lines = l.lines[len(l.lines)-60:]
	}
	return len(p), nil
}

func (l *ringLog) last() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// world is everything one run owns: a private Redis, a database of its
// own, the origin nodes, the provider, and the model of what the buyers
// did.
type world struct {
	tb    testing.TB
	setup Setup
	ctx   context.Context
	clock *simClock
	keys  *waitroom.KeySet

	redis     *testenv.RedisServer
	redisDown bool
	direct    *redis.Client
	store     *waitroom.RedisStore
	oracle    *ledger.Ledger
	fp        *recorder
	hooks     *capture
	nodes     []*node

	event    int64
	sellable int64
	reserve  int64
	holdLife time.Duration

	users     []*user
	nextPos   int64
	watermark int64
	// maxWatermark is the highest watermark ever set: nobody beyond it was
	// ever admitted.
	maxWatermark int64
	queue        []hook
	// holdKeys and bookKeys remember what each Idempotency-Key first got.
	holdKeys map[string]keyUse
	bookKeys map[string]keyUse

	// trouble is the wall time of the last fault or 5xx: uncertain writes
	// made then are final only a write timeout later.
	trouble time.Time
	stats   *Stats
	mu      sync.Mutex
	// skipChecks are checks left out while their finding is open
	// (SIM_SKIP_CHECKS); a full run skips none.
	skipChecks map[string]bool
	// notes are the answers of the current step (SIM_TRACE shows them).
	notes []string
}

type user struct {
	id       string
	pos      int64
	holds    []string
	bookings []string
	holdKey  string
	holdQty  int
	bookKey  string
	bookHold string
	bookPM   string
	keys     int
}

type keyUse struct {
	body   string
	status int
	id     string
}

func newWorld(tb testing.TB, seed uint64, stats *Stats) (*world, error) {
	ctx := context.Background()
	setup := SetupOf(seed)
	w := &world{
		tb: tb, setup: setup, ctx: ctx, stats: stats,
		clock:    &simClock{t: time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)},
		holdKeys: map[string]keyUse{}, bookKeys: map[string]keyUse{},
	}
	var err error
	if w.keys, err = waitroom.NewKeySet(w.clock.Now, waitroom.Key{ID: "k1", Secret: tokenSecret}); err != nil {
		return nil, err
	}
	w.redis = testenv.StartRedis(tb)
	w.direct = redis.NewClient(&redis.Options{Addr: w.redis.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	tb.Cleanup(func() { _ = w.direct.Close() })
	w.store = waitroom.NewRedisStore(w.direct, waitroom.RedisOptions{})
	dbURL := testenv.Postgres(tb)
	if w.oracle, err = ledger.Open(ctx, dbURL, ledger.Options{MaxConns: 4}); err != nil {
		return nil, fmt.Errorf("oracle ledger: %w", err)
	}
	tb.Cleanup(w.oracle.Close)

	w.hooks = &capture{}
	hs := httptest.NewServer(w.hooks)
	tb.Cleanup(hs.Close)
	fp, err := payment.NewFakepay(ctx, payment.FakepayConfig{
		WebhookSecret: webhookSecret, WebhookURL: hs.URL, Now: w.clock.Now, Seed: seed, MaxAttempts: 1,
	})
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = fp.Close() })
	w.fp = &recorder{Fakepay: fp, seen: map[string]int{}}

	dbHost, err := hostOf(dbURL)
	if err != nil {
		return nil, err
	}
	for range setup.Nodes {
		n, err := w.newNode(dbURL, dbHost)
		if err != nil {
			return nil, err
		}
		w.nodes = append(w.nodes, n)
	}

	w.event = testenv.EventID()
	res := w.call(w.nodes[0], http.MethodPost, "/v1/events", map[string]any{
		"id": w.event, "name": "Sim", "capacity": setup.Capacity, "price": 1000, "currency": "inr",
		"hold_ttl_seconds": int(setup.HoldTTL / time.Second), "max_per_user": setup.MaxPerUser, "overflow_pct": setup.OverflowPc,
	}, map[string]string{"Authorization": "Bearer " + adminToken})
	if res.status != http.StatusCreated {
		return nil, fmt.Errorf("create event: %d %s", res.status, res.body)
	}
	var ev struct {
		Sellable int64 `json:"sellable"`
	}
	_ = json.Unmarshal(res.body, &ev)
	w.sellable = ev.Sellable
	w.reserve = int64(setup.Capacity) - ev.Sellable
	for i := range setup.Users {
		w.users = append(w.users, &user{id: fmt.Sprintf("u%02d", i)})
	}
	w.setWatermark(int64(setup.Users / 3))
	return w, nil
}

func hostOf(dbURL string) (string, error) {
	_, rest, ok := strings.Cut(dbURL, "@")
	if !ok {
		_, rest, _ = strings.Cut(dbURL, "://")
	}
	host, _, _ := strings.Cut(rest, "/")
	if host == "" {
		return "", fmt.Errorf("no host in %q", dbURL)
	}
	return host, nil
}

func (w *world) newNode(dbURL, dbHost string) (*node, error) {
	n := &node{logs: &ringLog{}}
	var err error
	if n.redisProxy, err = faultproxy.Start(w.redis.Addr()); err != nil {
		return nil, err
	}
	w.tb.Cleanup(func() { _ = n.redisProxy.Close() })
	if n.pgProxy, err = faultproxy.Start(dbHost); err != nil {
		return nil, err
	}
	w.tb.Cleanup(func() { _ = n.pgProxy.Close() })
	// Short timeouts and few retries: a lost reply costs a fraction of a
	// second, and a fault then shows as the origin's error handling, not as
	// a wait.
	n.rdb = redis.NewClient(&redis.Options{
		Addr: n.redisProxy.Addr(), DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond, MaxRetries: 2, MinRetryBackoff: 2 * time.Millisecond,
		MaxRetryBackoff: 20 * time.Millisecond, PoolSize: 20,
	})
	w.tb.Cleanup(func() { _ = n.rdb.Close() })
	url := strings.Replace(dbURL, dbHost, n.pgProxy.Addr(), 1)
	if n.ledger, err = ledger.Open(w.ctx, url, ledger.Options{MaxConns: 8, StatementTimeout: 3 * time.Second}); err != nil {
		return nil, fmt.Errorf("node ledger: %w", err)
	}
	w.tb.Cleanup(n.ledger.Close)
	cfg := origin.Config{
		Keys: w.keys, AdminToken: adminToken, Clock: w.clock.Now,
		Logger:           slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		HoldWriteTimeout: holdWriteTimeout, ClockSkewMargin: clockSkewMargin,
		Payments: w.fp, TicketKey: ticketKey,
		PaymentWindow: paymentWindow, PaymentTimeout: 2 * time.Second,
		PaymentReconciler: maintenance.PaymentReconcilerConfig{PendingAfter: paymentPendingAfter},
	}
	w.holdLife = 2 * w.setup.HoldTTL
	// The whole-life cap of a hold, where this origin has one.
	if f := reflect.ValueOf(&cfg).Elem().FieldByName("HoldMaxLife"); f.IsValid() && f.CanSet() {
		f.Set(reflect.ValueOf(w.holdLife))
	}
	if n.srv, err = origin.New(cfg, n.ledger, n.rdb); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(w.ctx)
	w.tb.Cleanup(cancel)
	if err := n.srv.Start(ctx); err != nil {
		return nil, err
	}
	n.handler = n.srv.Handler()
	return n, nil
}

type answer struct {
	status int
	body   []byte
	// took is set when the request outlived requestTimeout.
	stuck bool
}

// call serves one request on a node, in process.
func (w *world) call(n *node, method, path string, body any, headers map[string]string) answer {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(w.ctx, requestTimeout)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, method, path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	start := time.Now()
	n.handler.ServeHTTP(rec, req)
	a := answer{status: rec.Code, body: rec.Body.Bytes(), stuck: time.Since(start) >= requestTimeout}
	w.note(method+" "+path, a)
	return a
}

func (w *world) note(what string, a answer) {
	// Raced requests note at once.
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.answer(a.status)
	if a.status >= 500 {
		w.trouble = time.Now()
	}
	body := string(bytes.TrimSpace(a.body))
	if len(body) > 160 {
		body = body[:160] + "…"
	}
	w.notes = append(w.notes, fmt.Sprintf("%s → %d %s", what, a.status, body))
}

func (w *world) auth(u *user) map[string]string {
	if u.pos == 0 {
		w.nextPos++
		u.pos = w.nextPos
	}
	tk, err := w.keys.Issue(u.id, w.event, u.pos, time.Hour)
	if err != nil {
		panic(err)
	}
	return map[string]string{waitroom.TokenHeader: tk.Raw}
}

func (w *world) setWatermark(wm int64) {
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
	defer cancel()
	if _, err := w.store.Update(ctx, w.event, waitroom.Change{SetWatermark: &wm}); err != nil {
		return // Redis is down: the gateways would raise it again later
	}
	w.watermark = wm
	w.maxWatermark = max(w.maxWatermark, wm)
}

// drainHooks waits for fakepay's deliveries and queues what they carried,
// in an order that depends on the run's bookings, not on goroutines.
func (w *world) drainHooks() {
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	_ = w.fp.WaitIdle(ctx)
	got := w.hooks.take()
	sort.SliceStable(got, func(i, j int) bool {
		a, b := w.fp.note(got[i].booking), w.fp.note(got[j].booking)
		if a != b {
			return a < b
		}
		return got[i].typ < got[j].typ
	})
	w.queue = append(w.queue, got...)
}

// deliver posts a queued event to a node, signed now.
func (w *world) deliver(n *node, h hook) answer {
	ctx, cancel := context.WithTimeout(w.ctx, requestTimeout)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/webhooks/fakepay", bytes.NewReader(h.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(payment.SignatureHeader, payment.SignWebhook(h.body, webhookSecret, w.clock.Now()))
	rec := httptest.NewRecorder()
	start := time.Now()
	n.handler.ServeHTTP(rec, req)
	a := answer{status: rec.Code, body: rec.Body.Bytes(), stuck: time.Since(start) >= requestTimeout}
	w.note("webhook "+h.typ, a)
	return a
}

// heal ends every fault.
func (w *world) heal() {
	for _, n := range w.nodes {
		n.pgProxy.Restore()
		n.pgProxy.Resume()
		n.redisProxy.Restore()
		n.redisProxy.Resume()
		n.pgDown = false
	}
	if w.redisDown {
		w.redis.Start()
		w.redisDown = false
	}
	_ = w.fp.SetFaults(0, 0)
	// The gateways' staff or autopilot publish the watermark again when the
	// store lost it.
	w.setWatermark(w.watermark)
}

// remaining reads Redis's count directly (no reload, no reclaim).
func (w *world) remaining() (int64, bool, error) {
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
	defer cancel()
	return inventory.New(w.direct).Remaining(ctx, w.event)
}

func (w *world) passCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.ctx, requestTimeout)
}
