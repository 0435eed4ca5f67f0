package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/seats"
)

// DriftCorrectorConfig configures the DriftCorrector.
type DriftCorrectorConfig struct {
	// Interval is how often the invariant is checked; default 30 s.
	Interval time.Duration
	// Logger; default discards.
	Logger *slog.Logger
}

// DriftCorrector checks the invariant of every event, exports the drift,
// corrects it while the sale goes on, and rebuilds an event whose drift
// lasts (Postgres wins); it also keeps the sold-out flag in line with the
// inventory.
type DriftCorrector struct {
	cfg   DriftCorrectorConfig
	seats *seats.Protocol
	loop  loop
}

// NewDriftCorrector returns a drift corrector over p.
func NewDriftCorrector(cfg DriftCorrectorConfig, p *seats.Protocol) *DriftCorrector {
	cfg.Interval = orDefault(cfg.Interval, 30*time.Second)
	cfg.Logger = logger(cfg.Logger)
	d := &DriftCorrector{cfg: cfg, seats: p}
	d.loop = loop{name: "drift corrector", interval: cfg.Interval, log: cfg.Logger, pass: d.RunOnce}
	return d
}

// Start runs the corrector until ctx ends or Stop is called.
func (d *DriftCorrector) Start(ctx context.Context) { d.loop.start(ctx) }

// Stop stops the corrector and waits for its pass under way.
func (d *DriftCorrector) Stop() { d.loop.stop() }

// RunOnce checks the invariant of every event (loading any whose keys are
// missing), and logs the drift when it is not zero: the count's, or for
// reserved seating the seats' (which hold has each). Drift is corrected at
// once, without stopping the sale (seats.Protocol.Correct); drift that
// still stays the same over two checks with nothing in flight for the
// event is not transient: the event is rebuilt from the ledger.
func (d *DriftCorrector) RunOnce(ctx context.Context) error {
	if _, err := d.seats.Registry().LoadEvents(ctx); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	var errs []error
	for _, ev := range d.seats.Registry().Events() {
		if err := d.event(ctx, ev); err != nil {
			errs = append(errs, fmt.Errorf("reconcile event %d: %w", ev.ID, err))
		}
		d.seats.Registry().SyncSoldOut(ctx, ev)
	}
	return errors.Join(errs...)
}

func (d *DriftCorrector) event(ctx context.Context, ev *seats.Event) error {
	quiet := d.seats.Recovery().Quiet(ctx, ev)
	inv, err := d.seats.Recovery().CheckInvariant(ctx, ev.ID)
	quiet = quiet && d.seats.Recovery().Quiet(ctx, ev)
	if err != nil {
		return err
	}
	var errs []error
	if inv.Drift != 0 || (inv.SeatDrift != nil && *inv.SeatDrift != 0) {
		// Most of a busy sale's drift is its writes in flight: the hold
		// takes its seats in Redis before its row is written, the release
		// gives them back after, so Redis offers fewer seats. Such drift is
		// neither worth a warning at every check (operators would learn to
		// ignore the one that matters) nor worth counting every record
		// again, which blocks Redis while it reads them. Drift on the side
		// that oversells, or found with the event quiet, is both. The holds
		// Redis lost are put back whatever the drift, and what the
		// correction changes is logged by it.
		level, recount := slog.LevelDebug, inventory.RecountIfChanged
		if inv.Drift > 0 || quiet {
			level, recount = slog.LevelWarn, inventory.RecountAlways
		}
		d.cfg.Logger.Log(ctx, level, "inventory drift: redis and the ledger disagree", "event", ev.ID,
			"remaining", inv.Remaining, "sellable", inv.Sellable, "active_holds", inv.ActiveHolds, "drift", inv.Drift,
			"seat_drift", inv.SeatDrift, "quiet", quiet)
		if _, err := d.seats.Recovery().Correct(ctx, ev, recount); err != nil && !errors.Is(err, inventory.ErrFrozen) && !errors.Is(err, inventory.ErrNotLoaded) {
			errs = append(errs, err)
		}
		quiet = d.seats.Recovery().Quiet(ctx, ev)
		if inv, err = d.seats.Recovery().CheckInvariant(ctx, ev.ID); err != nil {
			return errors.Join(append(errs, err)...)
		}
		quiet = quiet && d.seats.Recovery().Quiet(ctx, ev)
	}
	if err := d.seats.Recovery().RebuildLastingDrift(ctx, ev, inv, quiet); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
