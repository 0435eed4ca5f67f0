package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
)

// PaymentReconcilerConfig configures the PaymentReconciler.
type PaymentReconcilerConfig struct {
	// Interval is how often the reconciliation runs; default 15 s.
	Interval time.Duration
	// PendingAfter is how long a booking may wait for its payment's
	// outcome before it is asked about (and how often it is asked again
	// while it keeps its hold; each wait after that is twice the one
	// before, at most an hour); default 1 min.
	PendingAfter time.Duration
	// Batch is how many bookings one statement leases; default 100.
	Batch int
	// Clock; default time.Now.
	Clock func() time.Time
	// Logger; default discards.
	Logger *slog.Logger
}

// Settler settles one booking that has waited too long for its payment's
// outcome or owes a refund, by asking the provider; AfterPass runs once a
// pass is over.
type Settler interface {
	SettleUnsettled(ctx context.Context, b ledger.Booking) error
	AfterPass(ctx context.Context)
}

// PaymentReconciler settles what the webhooks did not: a webhook may never
// come (lost, the endpoint down for longer than the provider retries, a
// payment that succeeded silently), a refund call may fail, and a refund
// may stay pending or fail at the provider, and a payment reported failed
// may succeed after all. Each pass takes the bookings still waiting for
// their payment PendingAfter after they were made (or last looked at; once
// their hold's keep is over, each wait twice the one before, at most an
// hour), owing a refund (one pending at the provider as such a payment is,
// one the provider refused as invalid only once its wait is over),
// failed with a payment asked about fewer than 5 times (each wait twice
// the one before), or confirmed with a refund made at the provider pending
// when last seen or part of its payment returned while it waited (waits as
// a pending refund's), leases them (SKIP LOCKED, so nodes split the work),
// and hands each to the Settler.
type PaymentReconciler struct {
	cfg     PaymentReconcilerConfig
	ledger  *ledger.Ledger
	settler Settler
	loop    loop
}

// NewPaymentReconciler returns a reconciler of l's bookings through s.
func NewPaymentReconciler(cfg PaymentReconcilerConfig, l *ledger.Ledger, s Settler) *PaymentReconciler {
	cfg.Interval = orDefault(cfg.Interval, 15*time.Second)
	cfg.PendingAfter = orDefault(cfg.PendingAfter, time.Minute)
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	cfg.Logger = logger(cfg.Logger)
	r := &PaymentReconciler{cfg: cfg, ledger: l, settler: s}
	r.loop = loop{name: "payment reconciliation", interval: cfg.Interval, log: cfg.Logger, pass: func(ctx context.Context) error {
		_, err := r.RunOnce(ctx)
		return err
	}}
	return r
}

// Start runs the reconciler until ctx ends or Stop is called.
func (r *PaymentReconciler) Start(ctx context.Context) { r.loop.start(ctx) }

// Stop stops the reconciler and waits for its pass under way.
func (r *PaymentReconciler) Stop() { r.loop.stop() }

// RunOnce settles the bookings due and returns how many it looked at.
func (r *PaymentReconciler) RunOnce(ctx context.Context) (int, error) {
	now := r.cfg.Clock().UTC().Truncate(time.Millisecond)
	var errs []error
	total := 0
	for {
		due, err := r.ledger.Bookings().ClaimUnsettled(ctx, now, now.Add(-r.cfg.PendingAfter), r.cfg.Batch)
		if err != nil {
			return total, errors.Join(append(errs, err)...)
		}
		for _, b := range due {
			if err := r.settler.SettleUnsettled(ctx, b); err != nil {
				errs = append(errs, err)
			}
		}
		total += len(due)
		if len(due) < r.cfg.Batch {
			break
		}
	}
	r.settler.AfterPass(ctx)
	return total, errors.Join(errs...)
}
