package origin

import (
	"context"
	"errors"

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
	if err := s.retryReleases(ctx); err != nil {
		errs = append(errs, err)
	}
	total := 0
	for {
		rows, err := s.ledger.ExpireDue(ctx, s.now(), s.cfg.ReaperBatch)
		if err != nil {
			return total, errors.Join(append(errs, err)...)
		}
		for _, h := range rows {
			ev, err := s.event(ctx, h.EventID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			// Usually 0 seats: a hold call reclaims lapsed holds in Redis
			// before the reaper gets to them. Whatever Redis holds for it
			// goes back, confirmed or not: the ledger has it expired, so a
			// confirmation whose ledger step failed can never complete, and
			// its webhook's retry is served as a late payment.
			res := s.releaseSeats(ctx, ev, h.ID, inventory.AnyHold)
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
