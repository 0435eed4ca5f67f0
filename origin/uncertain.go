package origin

import (
	"context"
	"errors"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
)

// A hold write whose connection broke after the INSERT was sent may still
// commit on the server: the bytes can reach it long after the origin gave up
// (a network stall delivers them late, and the statement timeout only starts
// when they arrive). Returning the seats at once could then sell them twice,
// so they stay taken until the write is final. Every hold row is written
// with a deadline that PostgreSQL checks itself (queries.go), so the write
// is final once the deadline has passed on the server's clock: by this
// node's clock, deadline + ClockSkewMargin. Then the ledger is asked: if the
// row is there the hold stands; if not, the seats go back.

type uncertainHold struct {
	event int64
	// final is when (wall clock) the write can no longer be committed.
	final time.Time
}

// finalAfter is when a write with deadline d can no longer be committed, by
// this node's clock: the server judges d by its own.
func (s *Server) finalAfter(d time.Time) time.Time { return d.Add(s.cfg.ClockSkewMargin) }

// unknownDeadline bounds the deadline of a write this node did not make
// (another node's, or one whose request is gone) of a hold that exists now:
// its deadline was set before its hold script ran, so before now.
func (s *Server) unknownDeadline() time.Time { return time.Now().Add(s.cfg.HoldWriteTimeout) }

// addUncertain keeps a hold's seats until its write, whose deadline is
// deadline, is final, and holds off rebuilds of the event until then.
func (s *Server) addUncertain(ev *liveEvent, holdID string, deadline time.Time) {
	final := s.finalAfter(deadline)
	ev.noteFinal(final)
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	if _, ok := s.uncertain[holdID]; !ok {
		s.uncertain[holdID] = uncertainHold{event: ev.ID, final: final}
	}
}

// ResolveUncertain settles the uncertain hold writes that are final and
// returns how many it settled. On a ledger error (the ledger is likely
// still away) it settles none and tries again on the next call.
func (s *Server) ResolveUncertain(ctx context.Context) (int, error) {
	now := time.Now()
	s.pendingMu.Lock()
	due := make(map[string]uncertainHold)
	var ids []string
	for id, u := range s.uncertain {
		if !now.Before(u.final) {
			due[id] = u
			ids = append(ids, id)
		}
	}
	s.pendingMu.Unlock()
	if len(due) == 0 {
		return 0, nil
	}

	written, err := s.ledger.HoldsWritten(ctx, ids)
	if errors.Is(err, ledger.ErrHoldWritesBusy) {
		return 0, nil // the next call asks again
	}
	if err != nil {
		return 0, err
	}
	settled := 0
	for id, u := range due {
		if !written[id] {
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

// retryReleases retries the seat releases Redis could not take, each in the
// mode it was started in.
func (s *Server) retryReleases(ctx context.Context) error {
	s.pendingMu.Lock()
	todo := make(map[string]pendingRelease, len(s.unreleased))
	for id, p := range s.unreleased {
		todo[id] = p
	}
	s.pendingMu.Unlock()
	for id, p := range todo {
		ev, err := s.event(ctx, p.event)
		if err != nil {
			return err
		}
		res, err := s.runRelease(ctx, id, p)
		if err != nil {
			return err
		}
		s.pendingMu.Lock()
		if s.unreleased[id] == p {
			delete(s.unreleased, id)
		}
		s.pendingMu.Unlock()
		if res.Seats > 0 && ev.room.State().SoldOut {
			s.syncSoldOut(ctx, ev)
		}
	}
	return nil
}
