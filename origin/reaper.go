package origin

import (
	"context"
	"errors"
	"fmt"

	"github.com/waitroom/waitroom/inventory"
)

// ReapOnce expires every pending hold past its expiry, a batch at a time,
// and returns their seats; it returns how many holds it expired. The ledger
// goes first: a row moves pending → expired in exactly one reaper (SKIP
// LOCKED, status checked again under the lock), and only that reaper runs
// the release script, which itself returns seats once. A confirmed hold is
// never touched in the ledger. Safe to run on every origin node at once.
func (s *Server) ReapOnce(ctx context.Context) (int, error) {
	var errs []error
	if err := s.seats.RetryReleases(ctx); err != nil {
		errs = append(errs, err)
	}
	total := 0
	for {
		rows, err := s.ledger.ExpireDue(ctx, s.now(), s.cfg.ReaperBatch)
		if err != nil {
			return total, errors.Join(append(errs, err)...)
		}
		for _, h := range rows {
			ev, err := s.seats.Event(ctx, h.EventID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			// Usually 0 seats: a hold call reclaims lapsed holds in Redis
			// before the reaper gets to them. Whatever Redis holds for it
			// goes back, confirmed or not: the ledger has it expired, so a
			// confirmation whose ledger step failed can never complete, and
			// its webhook's retry is served as a late payment.
			res := s.seats.ReleaseSeats(ctx, ev, h.ID, inventory.AnyHold)
			s.metrics.reaperHolds.Inc()
			s.metrics.reaperSeats.Add(float64(res.Seats))
		}
		total += len(rows)
		if len(rows) < s.cfg.ReaperBatch {
			break
		}
	}
	if total > 0 {
		s.log.Info("reaper expired holds", "holds", total)
	}
	return total, errors.Join(errs...)
}

// ReconcileOnce checks the invariant of every event (loading any whose keys
// are missing), exports the drift, logs it when it is not zero, and keeps
// the sold-out flag in line with the inventory. Drift is corrected at once,
// without stopping the sale (CorrectDrift); drift that still stays the same
// over two checks with nothing in flight for the event is not transient:
// the event is rebuilt from the ledger (Postgres wins).
func (s *Server) ReconcileOnce(ctx context.Context) error {
	if _, err := s.seats.LoadEvents(ctx); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	var errs []error
	for _, ev := range s.seats.Events() {
		quiet := s.seats.Quiet(ctx, ev)
		inv, err := s.seats.CheckInvariant(ctx, ev.ID)
		quiet = quiet && s.seats.Quiet(ctx, ev)
		if err != nil {
			errs = append(errs, fmt.Errorf("reconcile event %d: %w", ev.ID, err))
			continue
		}
		if inv.Drift != 0 {
			s.log.Warn("inventory drift: redis and the ledger disagree", "event", ev.ID,
				"remaining", inv.Remaining, "sellable", inv.Sellable, "active_holds", inv.ActiveHolds, "drift", inv.Drift)
			// Most of a busy sale's drift is its writes in flight, which the
			// correction leaves as they are; what it changes is lasting.
			if _, err := s.seats.Correct(ctx, ev); err != nil && !errors.Is(err, inventory.ErrFrozen) && !errors.Is(err, inventory.ErrNotLoaded) {
				errs = append(errs, fmt.Errorf("reconcile event %d: %w", ev.ID, err))
			}
			quiet = s.seats.Quiet(ctx, ev)
			if inv, err = s.seats.CheckInvariant(ctx, ev.ID); err != nil {
				errs = append(errs, fmt.Errorf("reconcile event %d: %w", ev.ID, err))
				continue
			}
			quiet = quiet && s.seats.Quiet(ctx, ev)
		}
		if err := s.seats.RebuildLastingDrift(ctx, ev, inv, quiet); err != nil {
			errs = append(errs, fmt.Errorf("reconcile event %d: %w", ev.ID, err))
		}
		s.seats.SyncSoldOut(ctx, ev)
	}
	return errors.Join(errs...)
}
