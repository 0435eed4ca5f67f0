package origin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/maintenance"
	"github.com/waitroom/waitroom/origin/outbox"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/origin/seats"
	"github.com/waitroom/waitroom/origin/storefront"
	"github.com/waitroom/waitroom/origin/ticketcode"
	"github.com/waitroom/waitroom/waitroom"
)

// Config configures a Server. Zero values take the defaults named.
type Config struct {
	// Keys verifies queue tokens: the gateway's key set. Required.
	Keys *waitroom.KeySet
	// AdminToken is the bearer token of the admin routes; with none set the
	// admin routes always answer 401.
	AdminToken string
	// Clock is the time every expiry is judged by; default time.Now.
	Clock func() time.Time
	// Logger; default discards.
	Logger *slog.Logger
	// Registry receives the origin's metrics; default a new one (with the Go
	// and process collectors).
	Registry *prometheus.Registry
	// MetricsApart: GET /metrics is served by MetricsHandler on an address
	// of its own, and not by Handler, for a site whose public routes reach
	// the origin.
	MetricsApart bool

	// Reaper, DriftCorrector, UncertainResolver and PaymentReconciler
	// configure the maintenance services Run starts (package maintenance:
	// zero values are their defaults); their clocks and loggers are the
	// server's.
	Reaper            maintenance.ReaperConfig
	DriftCorrector    maintenance.DriftCorrectorConfig
	UncertainResolver maintenance.UncertainResolverConfig
	PaymentReconciler maintenance.PaymentReconcilerConfig

	// HoldWriteTimeout bounds the ledger write of a hold, counted from before
	// its hold script runs; default 2 s. The deadline is also checked by
	// PostgreSQL itself, so a write that reaches it later (held up in the
	// network) writes nothing: a write's outcome is final once its deadline
	// has passed.
	HoldWriteTimeout time.Duration
	// ClockSkewMargin is how far apart the wall clocks of the origin nodes
	// and of the PostgreSQL and Redis hosts may be. A write's deadline is
	// judged by the server's clock, so the origin counts it as passed only
	// this much later; default 1 s, negative for none (one host).
	ClockSkewMargin time.Duration
	// RebuildSettle is how long, after a rebuild froze the inventory, hold
	// writes of other origin nodes may still be under way: their
	// HoldWriteTimeout. The rebuild waits that long plus ClockSkewMargin
	// before it reads the ledger; default HoldWriteTimeout. A single node
	// can set it to a negative value (no wait): it waits for its own writes
	// exactly.
	RebuildSettle time.Duration
	// HoldMaxLife caps a hold's whole life, counted from its creation: no
	// extension (each booking attempt makes one) takes its expiry beyond
	// created_at + HoldMaxLife. Default 2 × the event's hold lifetime.
	HoldMaxLife time.Duration
	// WallClock sets the deadlines of writes, which the Redis and
	// PostgreSQL servers check by their own clocks; default time.Now.
	WallClock func() time.Time
	// RoomPollInterval is how often the admission state is re-read besides
	// change notices; default waitroom.DefaultPollInterval.
	RoomPollInterval time.Duration
	// SeatMapMaxAge is how old the seat map served of a reserved-seating
	// event may be; default 1 s (seats.DefaultSeatMapMaxAge).
	SeatMapMaxAge time.Duration

	// Payments is the provider bookings are charged and refunded through,
	// and whose webhooks /v1/webhooks/{its name} takes. Without one the
	// booking routes answer 503.
	Payments payment.Provider
	// TicketKey is the secret the Ed25519 key that signs ticket codes is
	// derived from (package ticketcode), at least ticketcode.MinSecretLen
	// bytes; required with Payments. The public key, which is all a gate
	// device needs to verify a ticket offline, is served at
	// GET /v1/scans/keys.
	TicketKey []byte
	// TicketRetiredKeys are the public keys of ticket keys signed with
	// before, whose tickets still admit (docs/origin.md, the gate).
	TicketRetiredKeys []ticketcode.PublicKey
	// GateToken is the bearer token the gate devices share (POST /v1/scans),
	// beside the tokens of the devices registered in the ledger; with
	// neither the gate answers 503 gate_disabled.
	GateToken string
	// PaymentWindow is how long, at least, a booking keeps its hold from
	// now on to cover the payment (never more than the event's hold
	// lifetime); default 2 min.
	PaymentWindow time.Duration
	// PaymentTimeout bounds one call to the provider; default 20 s.
	PaymentTimeout time.Duration
	// BuyerKey signs the storefront's buyer cookie, at least
	// storefront.MinBuyerKeyLen bytes; every origin node needs the same
	// one. Default a random key: the cookies of a restarted node are void.
	BuyerKey []byte
	// Events sends the booking events of the ledger's outbox to the site
	// (package outbox); off while its URL is empty. The ledger must be
	// opened with ledger.Options.Outbox for events to be written. Its clock
	// and logger default to the server's.
	Events outbox.Config
}

func (c *Config) defaults() error {
	if c.Keys == nil {
		return errors.New("origin config: no queue token key set")
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	for _, l := range []**slog.Logger{&c.Reaper.Logger, &c.DriftCorrector.Logger, &c.UncertainResolver.Logger, &c.PaymentReconciler.Logger} {
		if *l == nil {
			*l = c.Logger
		}
	}
	if c.Reaper.Clock == nil {
		c.Reaper.Clock = c.Clock
	}
	if c.PaymentReconciler.Clock == nil {
		c.PaymentReconciler.Clock = c.Clock
	}
	if c.HoldWriteTimeout <= 0 {
		c.HoldWriteTimeout = 2 * time.Second
	}
	switch {
	case c.ClockSkewMargin == 0:
		c.ClockSkewMargin = time.Second
	case c.ClockSkewMargin < 0:
		c.ClockSkewMargin = 0
	}
	switch {
	case c.RebuildSettle == 0:
		c.RebuildSettle = c.HoldWriteTimeout
	case c.RebuildSettle > 0 && c.RebuildSettle < c.HoldWriteTimeout:
		// A rebuild would read the ledger while other nodes' hold rows may
		// still commit: remaining too high, seats sold twice.
		return fmt.Errorf("origin config: the rebuild settle time %v is shorter than the hold write timeout %v: "+
			"leave it unset (it follows the timeout) or set it to at least the timeout", c.RebuildSettle, c.HoldWriteTimeout)
	}
	if c.HoldMaxLife < 0 {
		return fmt.Errorf("origin config: the hold max life %v is negative", c.HoldMaxLife)
	}
	if c.Payments != nil && len(c.TicketKey) < ticketcode.MinSecretLen {
		return fmt.Errorf("origin config: the ticket key must be at least %d bytes", ticketcode.MinSecretLen)
	}
	if c.PaymentWindow <= 0 {
		c.PaymentWindow = 2 * time.Minute
	}
	if c.PaymentTimeout <= 0 {
		c.PaymentTimeout = 20 * time.Second
	}
	return nil
}

// Server is the origin: the HTTP API over the seat protocol (package
// seats), the bookings and payments, and the maintenance services, over
// one ledger and one Redis.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ledger *ledger.Ledger
	rdb    redis.UniversalClient
	seats  *seats.Protocol
	// bookings is nil without a payment provider, and so are tickets and
	// its verifier.
	bookings *booking.Service
	tickets  *ticketcode.Signer
	verifier *ticketcode.Verifier
	idem     *idem.Store
	metrics  *metrics
	gate     *gate
	// seatMaps are the rendered seat maps of reserved-seating events.
	seatMaps seatMaps
	// shop is the buyer's pages (package storefront).
	shop *storefront.Store

	reaper    *maintenance.Reaper
	drift     *maintenance.DriftCorrector
	uncertain *maintenance.UncertainResolver
	payments  *maintenance.PaymentReconciler
	// publisher keeps the events' inventory published for the gateways.
	publisher *publisher
	// events sends the outbox's booking events; nil when off.
	events *outbox.Deliverer
}

// New returns a server over l and rdb (both the caller's to close). It does
// no I/O; Start loads the events.
func New(cfg Config, l *ledger.Ledger, rdb redis.UniversalClient) (*Server, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	reg := cfg.Registry
	if reg == nil {
		reg = newRegistry()
		cfg.Registry = reg
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	store := idem.New(rdb)
	p, err := seats.New(seats.Config{
		Ledger: l, Redis: rdb, Idempotency: store, Clock: cfg.Clock, WallClock: cfg.WallClock, Logger: cfg.Logger,
		Metrics: &seats.Metrics{
			Compensations: m.compensations, ReclaimedSeats: m.reclaimedSeats, Drift: m.drift, Remaining: m.remaining,
			Rebuilds: m.rebuilds, DriftCorrections: m.driftCorrections,
		},
		HoldWriteTimeout: cfg.HoldWriteTimeout, ClockSkewMargin: cfg.ClockSkewMargin, RebuildSettle: cfg.RebuildSettle,
		HoldMaxLife: cfg.HoldMaxLife, RoomPollInterval: cfg.RoomPollInterval, SeatMapMaxAge: cfg.SeatMapMaxAge,
	})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, ledger: l, rdb: rdb, seats: p, idem: store, metrics: m,
		gate: &gate{keys: cfg.Keys, adminToken: cfg.AdminToken}}
	rc := cfg.Reaper
	rc.Holds, rc.Seats = m.reaperHolds, m.reaperSeats
	s.reaper = maintenance.NewReaper(rc, l, p)
	s.drift = maintenance.NewDriftCorrector(cfg.DriftCorrector, p)
	s.uncertain = maintenance.NewUncertainResolver(cfg.UncertainResolver, p)
	s.publisher = newPublisher(s)
	if cfg.Payments != nil {
		if s.tickets, err = ticketcode.NewSigner(cfg.TicketKey); err != nil {
			return nil, fmt.Errorf("origin config: %w", err)
		}
		if s.verifier, err = ticketcode.NewVerifier(append([]ticketcode.PublicKey{s.tickets.PublicKey()}, cfg.TicketRetiredKeys...)...); err != nil {
			return nil, fmt.Errorf("origin config: %w", err)
		}
		s.bookings, err = booking.New(booking.Config{
			Ledger: l, Seats: p, Redis: rdb, Payments: cfg.Payments, Tickets: s.tickets,
			PaymentWindow: cfg.PaymentWindow, PaymentTimeout: cfg.PaymentTimeout,
			Render: func(b ledger.Booking, ts []ledger.Ticket) []byte { return renderBooking(b, ticketsJSON(ts)) },
			Clock:  cfg.Clock, Logger: cfg.Logger,
			Metrics: &booking.Metrics{Bookings: m.bookings, LatePayments: m.latePayments, PaymentChecks: m.paymentChecks,
				Refunds: m.refunds, RefundsFailed: m.refundsFailed, PaymentsUnresolved: m.paymentsUnresolved},
		})
		if err != nil {
			return nil, err
		}
		s.payments = maintenance.NewPaymentReconciler(cfg.PaymentReconciler, l, s.bookings.Settlement())
	}
	if cfg.Events.URL != "" {
		ec := cfg.Events
		if ec.Clock == nil {
			ec.Clock = cfg.Clock
		}
		if ec.Logger == nil {
			ec.Logger = cfg.Logger
		}
		if ec.Metrics == nil {
			if ec.Metrics, err = outbox.NewMetrics(reg); err != nil {
				return nil, err
			}
		}
		if s.events, err = outbox.New(ec, l); err != nil {
			return nil, fmt.Errorf("origin config: %w", err)
		}
	}
	if s.shop, err = s.newStorefront(); err != nil {
		return nil, fmt.Errorf("origin config: %w", err)
	}
	return s, nil
}

// now is the server's clock at millisecond precision, the precision Redis
// keeps expiries in, so Redis and Postgres judge an expiry alike.
func (s *Server) now() time.Time { return s.cfg.Clock().UTC().Truncate(time.Millisecond) }

// Ledger is the server's ledger.
func (s *Server) Ledger() *ledger.Ledger { return s.ledger }

// Seats is the server's seat protocol.
func (s *Server) Seats() *seats.Protocol { return s.seats }

// Inventory is the server's Redis inventory.
func (s *Server) Inventory() *inventory.Inventory { return s.seats.Inventory() }

// Idempotency is the server's Idempotency-Key store.
func (s *Server) Idempotency() *idem.Store { return s.idem }

// Start serves every event of the ledger: it follows their admission state
// until ctx ends and loads into Redis the ones whose keys are missing (a
// new or flushed Redis).
func (s *Server) Start(ctx context.Context) error {
	if err := s.seats.Start(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return nil
}

// Loading is how many of the ledger's events Start has loaded into Redis,
// of how many.
func (s *Server) Loading() (loaded, total int64) { return s.seats.Loading() }

// Run runs the maintenance services (the reaper, the drift corrector, the
// resolution of uncertain writes, the publishing of the inventory for the
// gateways, with payments the payment reconciliation, and with events
// their deliverer) until ctx ends, and returns once they have stopped.
func (s *Server) Run(ctx context.Context) {
	services := []interface {
		Start(context.Context)
		Stop()
	}{s.reaper, s.drift, s.uncertain, s.publisher}
	if s.cfg.Payments != nil {
		services = append(services, s.payments)
	}
	if s.events != nil {
		services = append(services, s.events)
	}
	for _, svc := range services {
		svc.Start(ctx)
	}
	<-ctx.Done()
	for _, svc := range services {
		svc.Stop()
	}
}

// DeliverEventsOnce runs one pass of the booking events' deliverer (none
// when events are off).
func (s *Server) DeliverEventsOnce(ctx context.Context) (outbox.Pass, error) {
	if s.events == nil {
		return outbox.Pass{}, nil
	}
	return s.events.RunOnce(ctx)
}

// ReapOnce runs one pass of the reaper and returns how many holds it
// expired.
func (s *Server) ReapOnce(ctx context.Context) (int, error) { return s.reaper.RunOnce(ctx) }

// ReconcileOnce runs one pass of the drift corrector over every event.
func (s *Server) ReconcileOnce(ctx context.Context) error { return s.drift.RunOnce(ctx) }

// ReconcilePaymentsOnce runs one pass of the payment reconciliation and
// returns how many bookings it looked at.
func (s *Server) ReconcilePaymentsOnce(ctx context.Context) (int, error) {
	if s.cfg.Payments == nil {
		return 0, nil
	}
	return s.payments.RunOnce(ctx)
}

// Ready reports whether Redis and Postgres both answer.
func (s *Server) Ready(ctx context.Context) error {
	var errs []error
	if err := redisurl.Ping(ctx, s.rdb); err != nil {
		errs = append(errs, fmt.Errorf("redis: %w", err))
	}
	if err := s.ledger.Ping(ctx); err != nil {
		errs = append(errs, fmt.Errorf("postgres: %w", err))
	}
	return errors.Join(errs...)
}

// The seat protocol's operations, as the server's callers know them.

// Invariant is the check of one event's inventory against the ledger.
type Invariant = seats.Invariant

// ErrHoldExpired means the hold's expiry passed before it could be extended
// or confirmed.
var ErrHoldExpired = seats.ErrHoldExpired

// ConfirmHold turns a live pending hold into a sale (seats.Protocol.ConfirmHold).
func (s *Server) ConfirmHold(ctx context.Context, holdID string, inTx func(ledger.Tx, ledger.Hold) error) (ledger.Hold, error) {
	return s.seats.ConfirmHold(ctx, holdID, inTx)
}

// ExtendHold moves a live pending hold's expiry (seats.Protocol.ExtendHold).
func (s *Server) ExtendHold(ctx context.Context, holdID string, until time.Time, inTx func(ledger.Tx, ledger.Hold) error) (ledger.Hold, error) {
	return s.seats.ExtendHold(ctx, holdID, until, inTx)
}

// ReleaseHold gives a buyer's pending hold back.
func (s *Server) ReleaseHold(ctx context.Context, h ledger.Hold) error {
	return s.seats.ReleaseHold(ctx, h)
}

// CreateEvent writes a new event and loads its seats into Redis.
func (s *Server) CreateEvent(ctx context.Context, e ledger.Event) (ledger.Event, error) {
	return s.seats.CreateEvent(ctx, e)
}

// CheckInvariant computes the invariant of an event.
func (s *Server) CheckInvariant(ctx context.Context, id int64) (Invariant, error) {
	return s.seats.Recovery().CheckInvariant(ctx, id)
}

// CorrectDrift corrects an event's inventory from the ledger while its sale
// goes on.
func (s *Server) CorrectDrift(ctx context.Context, id int64) (inventory.Correction, error) {
	return s.seats.Recovery().CorrectDrift(ctx, id)
}

// Rebuild reloads an event's inventory from the ledger and returns the
// invariant after it.
func (s *Server) Rebuild(ctx context.Context, id int64) (Invariant, error) {
	return s.seats.Recovery().Rebuild(ctx, id)
}

// ResolveUncertain settles the uncertain hold writes that are final.
func (s *Server) ResolveUncertain(ctx context.Context) (int, error) {
	return s.uncertain.RunOnce(ctx)
}
