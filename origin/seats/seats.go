// Package seats is the seat protocol between Redis (package inventory, the
// hold scripts) and the ledger (package ledger, the truth): a hold placed,
// extended, confirmed and released, the writes whose outcome is unknown,
// and the rebuild, settle and drift correction that keep
//
//	remaining (Redis) == sellable − seats of (confirmed + unexpired pending holds)
//
// It answers with outcomes (Result, sentinel errors), never with HTTP.
// Time comes from two injected clocks: Clock, by which holds expire (Redis
// and the ledger judge expiry by it), and WallClock, by which the deadlines
// of writes are set: those are checked by the Redis and PostgreSQL servers
// against their own clocks.
package seats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/waitroom"
)

// Config configures the protocol. Zero values take the defaults named.
type Config struct {
	Ledger *ledger.Ledger
	Redis  redis.UniversalClient
	// Idempotency keeps the hold requests' Idempotency-Key records; default
	// one over Redis.
	Idempotency *idem.Store
	// Clock is the time every expiry is judged by; default time.Now.
	Clock func() time.Time
	// WallClock sets the deadlines of writes, which the Redis and
	// PostgreSQL servers check by their own clocks; default time.Now.
	WallClock func() time.Time
	// Logger; default discards.
	Logger *slog.Logger
	// Metrics; default unregistered collectors.
	Metrics *Metrics
	// HoldWriteTimeout bounds the ledger write of a hold, or of a change to
	// one, counted from before its Redis step; default 2 s.
	HoldWriteTimeout time.Duration
	// ClockSkewMargin is how far apart the wall clocks of the origin nodes
	// and of the servers may be; default 0.
	ClockSkewMargin time.Duration
	// RebuildSettle is how long a rebuild waits, once the inventory is
	// frozen, for other nodes' writes (plus ClockSkewMargin); 0 for none.
	RebuildSettle time.Duration
	// HoldMaxLife caps a hold's whole life; default 2 × the event's hold
	// lifetime.
	HoldMaxLife time.Duration
	// SeatMapMaxAge is how old the seat map view of a reserved-seating
	// event may be; default DefaultSeatMapMaxAge.
	SeatMapMaxAge time.Duration
	// RoomPollInterval is how often the admission state is re-read besides
	// change notices; default waitroom.DefaultPollInterval.
	RoomPollInterval time.Duration
}

// Metrics are the protocol's collectors; the origin registers them.
type Metrics struct {
	Compensations    prometheus.Counter
	ReclaimedSeats   prometheus.Counter
	Drift            *prometheus.GaugeVec // by event
	Remaining        *prometheus.GaugeVec // by event
	Rebuilds         *prometheus.CounterVec
	DriftCorrections prometheus.Counter
}

func unregisteredMetrics() *Metrics {
	c := func(name string) prometheus.Counter { return prometheus.NewCounter(prometheus.CounterOpts{Name: name}) }
	g := func(name string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name}, []string{"event"})
	}
	return &Metrics{
		Compensations: c("compensations"), ReclaimedSeats: c("reclaimed"), Drift: g("drift"), Remaining: g("remaining"),
		Rebuilds:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rebuilds"}, []string{"reason"}),
		DriftCorrections: c("corrections"),
	}
}

// base is what every part of the protocol shares.
type base struct {
	cfg     Config
	log     *slog.Logger
	ledger  *ledger.Ledger
	rdb     redis.UniversalClient
	inv     *inventory.Inventory
	metrics *Metrics
}

// now is the protocol's clock at millisecond precision, the precision Redis
// keeps expiries in, so Redis and Postgres judge an expiry alike.
func (b *base) now() time.Time { return b.cfg.Clock().UTC().Truncate(time.Millisecond) }

// Protocol is the seat protocol of one origin node: the changes to holds
// (place, extend, confirm, release). Its parts are the events it serves
// (Registry), the seats owed back to Redis and the writes of unknown
// outcome (Releases), and the invariant's check and repair (Recovery).
type Protocol struct {
	*base
	registry *Registry
	releases *Releases
	recovery *Recovery
	idem     *idem.Store

	// holdRows writes the ledger rows of new holds, in batches.
	holdRows *ledger.HoldWriter
	// confirmRows writes the confirmations of paid bookings, in batches.
	confirmRows *ledger.ConfirmWriter
	// afterRedisStep, when set (tests), runs between the Redis step and the
	// ledger step of a change to a hold.
	afterRedisStep func()

	// loadDone of loadTotal events the last Start has loaded (Loading).
	loadDone, loadTotal atomic.Int64
}

// Registry is the events this node serves, each with its admission state
// and the per-event coordination of the protocol.
type Registry struct {
	*base
	store waitroom.Store
	// bg is the context background work (admission rooms) runs under.
	bg context.Context

	mu     sync.RWMutex
	events map[int64]*Event
}

// Releases are the seats owed back to Redis: releases Redis refused, kept
// to retry in their mode (release.go), the hold writes whose outcome is
// unknown, whose seats go back once they are final and not applied, and
// the buyers' releases whose outcome is unknown, whose seats go back once
// they are final and applied (uncertain.go).
type Releases struct {
	*base
	registry *Registry

	pendingMu         sync.Mutex
	uncertain         map[string]uncertainHold
	uncertainReleases map[string]uncertainHold
	unreleased        map[string]pendingRelease
}

// Recovery checks an event's inventory against the ledger and repairs it:
// the drift correction while the sale goes on, the rebuild (drift.go).
type Recovery struct {
	*base
	registry *Registry
	releases *Releases
	flight   singleflight.Group
	// duringRebuild, when set (tests), runs in a rebuild once the
	// inventory is frozen.
	duringRebuild func()
	// beforeCorrect, when set (tests), runs in a drift correction between
	// its reading of the ledger and its script.
	beforeCorrect func()
}

// New returns the protocol over cfg.Ledger and cfg.Redis. It does no I/O.
func New(cfg Config) (*Protocol, error) {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.WallClock == nil {
		cfg.WallClock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = unregisteredMetrics()
	}
	if cfg.HoldWriteTimeout <= 0 {
		cfg.HoldWriteTimeout = 2 * time.Second
	}
	if cfg.Idempotency == nil {
		cfg.Idempotency = idem.New(cfg.Redis)
	}
	b := &base{cfg: cfg, log: cfg.Logger, ledger: cfg.Ledger, rdb: cfg.Redis, inv: inventory.New(cfg.Redis), metrics: cfg.Metrics}
	g := &Registry{base: b, store: waitroom.NewRedisStore(cfg.Redis, waitroom.RedisOptions{Now: cfg.Clock}), bg: context.Background(),
		events: make(map[int64]*Event)}
	r := &Releases{base: b, registry: g, uncertain: make(map[string]uncertainHold),
		uncertainReleases: make(map[string]uncertainHold), unreleased: make(map[string]pendingRelease)}
	c := &Recovery{base: b, registry: g, releases: r}
	return &Protocol{base: b, registry: g, releases: r, recovery: c, idem: cfg.Idempotency,
		holdRows: ledger.NewHoldWriter(cfg.Ledger), confirmRows: ledger.NewConfirmWriter(cfg.Ledger)}, nil
}

// Registry is the events this node serves.
func (p *Protocol) Registry() *Registry { return p.registry }

// Releases are the seats owed back to Redis.
func (p *Protocol) Releases() *Releases { return p.releases }

// Recovery is the invariant's check and repair.
func (p *Protocol) Recovery() *Recovery { return p.recovery }

// Inventory is the Redis inventory.
func (p *Protocol) Inventory() *inventory.Inventory { return p.inv }

// HoldWriter is the writer of new holds' rows (for tests that gate it).
func (p *Protocol) HoldWriter() *ledger.HoldWriter { return p.holdRows }

// ConfirmWriter is the writer of paid bookings' confirmations (for tests
// that gate it).
func (p *Protocol) ConfirmWriter() *ledger.ConfirmWriter { return p.confirmRows }

// Hooks has the protocol run afterRedisStep between the Redis step and the
// ledger step of every change to a hold, and duringRebuild in every rebuild
// once the inventory is frozen (nil: none): for tests, set before any
// request.
func (p *Protocol) Hooks(afterRedisStep, duringRebuild func()) {
	if afterRedisStep != nil {
		p.afterRedisStep = afterRedisStep
	}
	if duringRebuild != nil {
		p.recovery.duringRebuild = duringRebuild
	}
}

// HookCorrect has every drift correction run f between its reading of the
// ledger and its script: for tests, set before any request.
func (p *Protocol) HookCorrect(f func()) { p.recovery.beforeCorrect = f }

// SettleTime is how long a rebuild waits for other nodes' hold writes.
func (rc *Recovery) SettleTime() time.Duration { return rc.cfg.RebuildSettle + rc.cfg.ClockSkewMargin }

// Start serves every event of the ledger: it follows their admission state
// until ctx ends and loads into Redis the ones whose keys are missing (a
// new or flushed Redis).
func (p *Protocol) Start(ctx context.Context) error {
	p.registry.bg = ctx
	events, err := p.registry.LoadEvents(ctx)
	if err != nil {
		return err
	}
	p.loadDone.Store(0)
	p.loadTotal.Store(int64(len(events)))
	// Loading an event is mostly waiting (the rebuild's settle), so events
	// load together; the limit bounds the ledger reads and Redis writes of
	// the rebuilds at once. One event's failure does not stop the others:
	// the error names each event that failed.
	var (
		g    errgroup.Group
		mu   sync.Mutex
		errs []error
	)
	g.SetLimit(startLoaders)
	for _, ev := range events {
		g.Go(func() error {
			if err := p.recovery.ensureLoaded(ctx, ev); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("load event %d: %w", ev.ID, err))
				mu.Unlock()
				return nil
			}
			p.loadDone.Add(1)
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// startLoaders is how many events Start loads into Redis at once.
const startLoaders = 16

// Loading is how many of the ledger's events the last Start has loaded into
// Redis, of how many.
func (p *Protocol) Loading() (loaded, total int64) { return p.loadDone.Load(), p.loadTotal.Load() }

// HoldMaxLifeOf is the whole-life cap of the holds of e: Config.HoldMaxLife,
// or by default twice the event's hold lifetime.
func (p *Protocol) HoldMaxLifeOf(e ledger.Event) time.Duration {
	if p.cfg.HoldMaxLife > 0 {
		return p.cfg.HoldMaxLife
	}
	return 2 * e.HoldTTL()
}
