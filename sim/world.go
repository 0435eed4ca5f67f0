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
	gateToken      = "sim-gate-token-0123456789"
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
	// method is the payment's method, on payment_intent events.
	method string
	body   []byte
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
				Metadata      map[string]string `json:"metadata"`
				PaymentMethod string            `json:"payment_method"`
			} `json:"object"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &ev)
	c.mu.Lock()
	c.got = append(c.got, hook{id: ev.ID, typ: ev.Type, booking: ev.Data.Object.Metadata[payment.MetadataBookingID],
		method: ev.Data.Object.PaymentMethod, body: body})
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
	// stateLost: Redis lost the inventory (restarted empty, flushed,
	// down) since the last settle point; the rebuilds and the drift
	// corrector put it back, so drift before the corrector says nothing.
	stateLost bool
	direct    *redis.Client
	store     *waitroom.RedisStore
	oracle    *ledger.Ledger
	fp        *recorder
	hooks     *capture
	nodes     []*node

	// sales are the events on sale (two for SaleTwoEvents).
	sales    []*sale
	holdLife time.Duration

	users     []*user
	watermark int64
	// maxWatermark is the highest watermark ever set: nobody beyond it was
	// ever admitted.
	maxWatermark int64
	queue        []hook
	// holdKeys and bookKeys remember what each Idempotency-Key first got.
	holdKeys map[string]keyUse
	bookKeys map[string]keyUse
	// foreign are the payments the origin never made (Foreign steps):
	// the money check leaves them out.
	foreignPays map[string]bool
	// providerRefunds are the bookings whose payment the provider refunded
	// on its own: their charge.refunded events are lost for good only while
	// the origin asks about them (mustArrive).
	providerRefunds map[string]bool
	// slowRefunds are the payments whose refunds stay pending at the
	// provider (RefundOutcome's RefundsPending).
	slowRefunds map[string]bool
	// amended are the payments changed to another amount at the provider
	// before their booking was confirmed: none may confirm one.
	amended map[string]bool

	// trouble is the wall time of the last fault or 5xx: uncertain writes
	// made then are final only a write timeout later.
	trouble time.Time
	stats   *Stats
	mu      sync.Mutex
	// big is the model's lock: a step holds it while it reads or changes
	// what the buyers did, and lets go of it while a request or pass is
	// under way, so the steps of a group run their requests concurrently.
	big sync.Mutex
	// skipChecks are checks left out while their finding is open
	// (SIM_SKIP_CHECKS); a full run skips none.
	skipChecks map[string]bool
	// notes are the answers of the current step (SIM_TRACE shows them).
	notes []string
}

// sale is one event on sale and what the run knows of it.
type sale struct {
	id       int64
	idx      int
	seated   bool
	sellable int64
	reserve  int64
	capacity int64
	nextPos  int64
	// seatIDs are the reserved seats of the map, in map order.
	seatIDs []string
	// reservedSections and gaSections name the map's sections.
	reservedSections []string
	gaSections       []SectionSpec
	devices          []*device
}

// device is a gate device of a sale.
type device struct {
	id, gate, token string
	sale            *sale
	revoked         bool
	cursor          string
	// voided are the tickets its void feed gave, to catch one given twice.
	voided map[string]bool
}

type user struct {
	id       string
	sale     *sale
	pos      int64
	holds    []string
	bookings []string
	holdKey  string
	holdQty  int
	bookKey  string
	bookHold string
	bookPM   string
	keys     int
	// holdBody is the body of the last hold request (its key's body).
	holdBody map[string]any
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
		holdKeys: map[string]keyUse{}, bookKeys: map[string]keyUse{}, foreignPays: map[string]bool{}, providerRefunds: map[string]bool{}, slowRefunds: map[string]bool{}, amended: map[string]bool{},
	}
	// The run holds the model's lock from here on; requests let go of it.
	w.big.Lock()
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
		// A payment that changes its mind does so a second after: most
		// clock steps pass it, so both outcomes are often queued at once.
		FlipAfter: time.Second,
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

	switch setup.Kind {
	case SaleTwoEvents:
		for i, c := range []int{setup.Capacity, setup.Capacity2} {
			if err := w.newSale(i, map[string]any{"capacity": c, "price": 1000, "overflow_pct": setup.OverflowPc}); err != nil {
				return nil, err
			}
		}
	case SaleReserved, SaleSections:
		var secs []map[string]any
		for _, sec := range setup.Sections {
			m := map[string]any{"id": sec.ID, "price": sec.Price}
			if sec.Capacity > 0 {
				m["capacity"] = sec.Capacity
			} else {
				var rows []map[string]any
				for i, n := range sec.Rows {
					rows = append(rows, map[string]any{"id": fmt.Sprint(i + 1), "seats": n})
				}
				m["rows"] = rows
			}
			secs = append(secs, m)
		}
		if err := w.newSale(0, map[string]any{"seating": map[string]any{"sections": secs}}); err != nil {
			return nil, err
		}
	default:
		if err := w.newSale(0, map[string]any{"capacity": setup.Capacity, "price": 1000, "overflow_pct": setup.OverflowPc}); err != nil {
			return nil, err
		}
	}
	for i := range setup.Users {
		w.users = append(w.users, &user{id: fmt.Sprintf("u%02d", i), sale: w.sales[i%len(w.sales)]})
	}
	w.setWatermark(int64(setup.Users / 3))
	return w, nil
}

// newSale creates an event (fields beside the common ones) and registers
// two gate devices for it.
func (w *world) newSale(idx int, fields map[string]any) error {
	sl := &sale{id: testenv.EventID(), idx: idx}
	body := map[string]any{"id": sl.id, "name": fmt.Sprintf("Sim %d", idx), "currency": "inr",
		"hold_ttl_seconds": int(w.setup.HoldTTL / time.Second), "max_per_user": w.setup.MaxPerUser}
	for k, v := range fields {
		body[k] = v
	}
	admin := map[string]string{"Authorization": "Bearer " + adminToken}
	res := w.call(w.nodes[0], http.MethodPost, "/v1/events", body, admin)
	if res.status != http.StatusCreated {
		return fmt.Errorf("create event: %d %s", res.status, res.body)
	}
	var ev struct {
		Capacity int64 `json:"capacity"`
		Sellable int64 `json:"sellable"`
	}
	_ = json.Unmarshal(res.body, &ev)
	sl.capacity, sl.sellable = ev.Capacity, ev.Sellable
	sl.reserve = ev.Capacity - ev.Sellable
	for _, sec := range w.setup.Sections {
		if sec.Capacity > 0 {
			sl.gaSections = append(sl.gaSections, sec)
			continue
		}
		sl.seated = true
		sl.reservedSections = append(sl.reservedSections, sec.ID)
		for r, n := range sec.Rows {
			for k := range n {
				sl.seatIDs = append(sl.seatIDs, fmt.Sprintf("%s-%d-%d", sec.ID, r+1, k+1))
			}
		}
	}
	sl.seated = sl.seated || len(sl.gaSections) > 0
	for _, g := range []string{"north", "south"} {
		d := &device{gate: fmt.Sprintf("e%d-%s", idx, g), sale: sl, voided: map[string]bool{}}
		// The contract of API.md §12: a device belongs to one event.
		res := w.call(w.nodes[0], http.MethodPost, "/v1/admin/gate-devices", map[string]any{"gate": d.gate, "event": sl.id, "name": d.gate}, admin)
		if res.status != http.StatusCreated {
			return fmt.Errorf("register gate device: %d %s", res.status, res.body)
		}
		var gd struct {
			ID    string `json:"id"`
			Token string `json:"token"`
		}
		_ = json.Unmarshal(res.body, &gd)
		d.id, d.token = gd.ID, gd.Token
		sl.devices = append(sl.devices, d)
	}
	w.sales = append(w.sales, sl)
	return nil
}

// saleOf is the sale of an event id.
func (w *world) saleOf(event int64) *sale {
	for _, sl := range w.sales {
		if sl.id == event {
			return sl
		}
	}
	return nil
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
		Payments: w.fp, TicketKey: ticketKey, GateToken: gateToken,
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

// io runs f without the model's lock: f may block, and the other steps of
// the group go on meanwhile. f must not touch the model.
func (w *world) io(f func()) {
	w.big.Unlock()
	defer w.big.Lock()
	f()
}

// call serves one request on a node, in process, the model unlocked.
func (w *world) call(n *node, method, path string, body any, headers map[string]string) answer {
	var a answer
	w.io(func() { a = w.callRaw(n, method, path, body, headers) })
	return a
}

// callRaw serves one request; the caller has let go of the model's lock.
func (w *world) callRaw(n *node, method, path string, body any, headers map[string]string) answer {
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
	if len(w.notes) > 400 {
		return
	}
	body := string(bytes.TrimSpace(a.body))
	if len(body) > 160 {
		body = body[:160] + "…"
	}
	w.notes = append(w.notes, fmt.Sprintf("%s → %d %s", what, a.status, body))
}

func (w *world) auth(u *user) map[string]string {
	if u.pos == 0 {
		u.sale.nextPos++
		u.pos = u.sale.nextPos
	}
	tk, err := w.keys.Issue(u.id, u.sale.id, u.pos, time.Hour)
	if err != nil {
		panic(err)
	}
	return map[string]string{waitroom.TokenHeader: tk.Raw}
}

func (w *world) setWatermark(wm int64) {
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
	defer cancel()
	for _, sl := range w.sales {
		if _, err := w.store.Update(ctx, sl.id, waitroom.Change{SetWatermark: &wm}); err != nil {
			return // Redis is down: the gateways would raise it again later
		}
	}
	w.watermark = wm
	w.maxWatermark = max(w.maxWatermark, wm)
}

// drainHooks waits for fakepay's deliveries and queues what they carried,
// in an order that depends on the run's bookings, not on goroutines.
func (w *world) drainHooks() {
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	// A payment whose time to change its mind came sends its success.
	w.fp.Tick()
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

// deliver posts a queued event to a node, signed now, the model unlocked.
func (w *world) deliver(n *node, h hook) answer {
	var a answer
	now := w.clock.Now()
	w.io(func() { a = w.deliverRaw(n, h, now) })
	return a
}

// deliverRaw posts an event; the caller has let go of the model's lock.
func (w *world) deliverRaw(n *node, h hook, now time.Time) answer {
	ctx, cancel := context.WithTimeout(w.ctx, requestTimeout)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/webhooks/fakepay", bytes.NewReader(h.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(payment.SignatureHeader, payment.SignWebhook(h.body, webhookSecret, now))
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
func (w *world) remaining(event int64) (int64, bool, error) {
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
	defer cancel()
	return inventory.New(w.direct).Remaining(ctx, event)
}

func (w *world) passCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.ctx, requestTimeout)
}
