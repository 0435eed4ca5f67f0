package origin

import (
	"context"
	"time"

	"github.com/waitroom/waitroom/inventory"
)

// A hold write whose connection broke after the INSERT was sent may still
// commit on the server. Returning the seats at once could then sell them
// twice, so they stay taken until the ledger can say whether the row exists:
// checked once UncertainGrace has passed (longer than the statement timeout,
// after which the server can no longer commit it). If the row is there the
// hold stands; if not, the seats go back.

type uncertainHold struct {
	event int64
	since time.Time
}

func (s *Server) addUncertain(event int64, holdID string, now time.Time) {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	if _, ok := s.uncertain[holdID]; !ok {
		s.uncertain[holdID] = uncertainHold{event: event, since: now}
	}
}

// ResolveUncertain settles the uncertain hold writes whose grace has passed
// and returns how many it settled. It stops at the first ledger error (the
// ledger is likely still away) and tries again on the next call.
func (s *Server) ResolveUncertain(ctx context.Context) (int, error) {
	now := s.now()
	s.pendingMu.Lock()
	due := make(map[string]uncertainHold)
	for id, u := range s.uncertain {
		if now.Sub(u.since) >= s.cfg.UncertainGrace {
			due[id] = u
		}
	}
	s.pendingMu.Unlock()

	settled := 0
	for id, u := range due {
		exists, err := s.ledger.HoldExists(ctx, id)
		if err != nil {
			return settled, err
		}
		if !exists {
			ev, err := s.event(ctx, u.event)
			if err != nil {
				return settled, err
			}
			s.compensate(ctx, ev, id)
			s.log.Info("uncertain hold write was not applied; seats returned", "event", u.event, "hold", id)
		}
		s.pendingMu.Lock()
		delete(s.uncertain, id)
		s.pendingMu.Unlock()
		settled++
	}
	return settled, nil
}

// retryReleases retries the seat releases Redis could not take.
func (s *Server) retryReleases(ctx context.Context) error {
	s.pendingMu.Lock()
	todo := make(map[string]int64, len(s.unreleased))
	for id, event := range s.unreleased {
		todo[id] = event
	}
	s.pendingMu.Unlock()
	for id, event := range todo {
		ev, err := s.event(ctx, event)
		if err != nil {
			return err
		}
		res, err := s.inv.Release(ctx, event, id, inventory.PendingOnly)
		if err != nil {
			return err
		}
		s.pendingMu.Lock()
		delete(s.unreleased, id)
		s.pendingMu.Unlock()
		if res.Seats > 0 && ev.room.State().SoldOut {
			s.syncSoldOut(ctx, ev)
		}
	}
	return nil
}
