package seats

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/ledger"
)

// A hold write whose connection broke after the INSERT was sent may still
// commit on the server: the bytes can reach it long after the origin gave up
// (a network stall delivers them late, and the statement timeout only starts
// when they arrive). Returning the seats at once could then sell them twice,
// so they stay taken until the write is final. Every hold row is written
// with a deadline that PostgreSQL checks itself (package ledger), so the write
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
func (rs *Releases) finalAfter(d time.Time) time.Time { return d.Add(rs.cfg.ClockSkewMargin) }

// unknownDeadline bounds the deadline of a write this node did not make
// (another node's, or one whose request is gone) of a hold that exists now:
// its deadline was set before its hold script ran, so before now.
func (rs *Releases) unknownDeadline() time.Time {
	return rs.cfg.WallClock().Add(rs.cfg.HoldWriteTimeout)
}

// addUncertain keeps a hold's seats until its write, whose deadline is
// deadline, is final, and holds off rebuilds of the event until then.
func (rs *Releases) addUncertain(ev *Event, holdID string, deadline time.Time) {
	final := rs.finalAfter(deadline)
	ev.noteFinal(final)
	rs.pendingMu.Lock()
	defer rs.pendingMu.Unlock()
	if _, ok := rs.uncertain[holdID]; !ok {
		rs.uncertain[holdID] = uncertainHold{event: ev.ID, final: final}
	}
}

// addUncertainRelease keeps a buyer's release, whose ledger write has the
// deadline deadline and an unknown outcome, until it is final: then its
// seats go back if the ledger has the hold released. Until then the seats
// stay taken (under-sold, never sold twice) and rebuilds of the event are
// held off.
func (rs *Releases) addUncertainRelease(ev *Event, holdID string, deadline time.Time) {
	final := rs.finalAfter(deadline)
	ev.noteFinal(final)
	rs.pendingMu.Lock()
	defer rs.pendingMu.Unlock()
	if _, ok := rs.uncertainReleases[holdID]; !ok {
		rs.uncertainReleases[holdID] = uncertainHold{event: ev.ID, final: final}
	}
}

// finalBy returns the entries of m that are final by now.
func finalBy(m map[string]uncertainHold, now time.Time) map[string]uncertainHold {
	out := make(map[string]uncertainHold)
	for id, u := range m {
		if !now.Before(u.final) {
			out[id] = u
		}
	}
	return out
}

// ResolveUncertain settles the uncertain hold writes and releases that are
// final and returns how many it settled. The holds are read once no write
// of the table can still commit (ledger.HoldsWritten), in one read for
// both kinds: its lock holds up the hold writes while it waits. On a ledger
// error (the ledger is likely still away) it settles none and tries again
// on the next call.
func (rs *Releases) ResolveUncertain(ctx context.Context) (int, error) {
	now := rs.cfg.WallClock()
	rs.pendingMu.Lock()
	writes, releases := finalBy(rs.uncertain, now), finalBy(rs.uncertainReleases, now)
	rs.pendingMu.Unlock()
	if len(writes)+len(releases) == 0 {
		return 0, nil
	}
	ids := slices.AppendSeq(slices.Collect(maps.Keys(writes)), maps.Keys(releases))
	rows, err := rs.ledger.HoldsWritten(ctx, ids)
	if errors.Is(err, ledger.ErrHoldWritesBusy) {
		return 0, nil // the next call asks again
	}
	if err != nil {
		return 0, err
	}
	settled := 0
	for id, u := range writes {
		if err := rs.settleWrite(ctx, id, u, rows); err != nil {
			return settled, err
		}
		settled++
	}
	for id, u := range releases {
		if err := rs.settleRelease(ctx, id, u, rows); err != nil {
			return settled, err
		}
		settled++
	}
	return settled, nil
}

// settleWrite settles a hold write that is final: if the ledger does not
// have its row (rows), its seats go back.
func (rs *Releases) settleWrite(ctx context.Context, id string, u uncertainHold, rows map[string]ledger.Hold) error {
	if _, ok := rows[id]; !ok {
		ev, err := rs.registry.Event(ctx, u.event)
		if err != nil {
			return err
		}
		rs.compensate(ctx, ev, id)
		rs.log.Info("uncertain hold write was not applied; seats returned", "event", u.event, "hold", id)
	}
	rs.pendingMu.Lock()
	delete(rs.uncertain, id)
	rs.pendingMu.Unlock()
	return nil
}

// settleRelease settles a buyer's release that is final: if the ledger has
// the hold released (rows), its seats go back (inventory.AnyHold: the
// ledger has the hold over for good, whatever Redis says of it). A hold
// still pending was not released; one ended otherwise (expired, confirmed)
// is another path's to settle. Reading after the table's writes is what
// sees a release's COMMIT held up in the network past its deadline, rather
// than take it for one that never came.
func (rs *Releases) settleRelease(ctx context.Context, id string, u uncertainHold, rows map[string]ledger.Hold) error {
	if h, ok := rows[id]; ok && h.Status == ledger.StatusReleased {
		ev, err := rs.registry.Event(ctx, u.event)
		if err != nil {
			return err
		}
		if res := rs.ReleaseSeats(ctx, ev, id, inventory.AnyHold); res.Outcome == inventory.Released {
			ev.seatsTaken(h.Seats, false)
		}
		rs.log.Info("uncertain release was applied; seats returned", "event", u.event, "hold", id)
	}
	rs.pendingMu.Lock()
	delete(rs.uncertainReleases, id)
	rs.pendingMu.Unlock()
	return nil
}

// WaitUncertainFinal waits until every hold write this node gave up on is
// final (its deadline and the clock-skew margin have passed): for tests.
// The deadlines are wall-clock ones: this is a real wait, as long as
// HoldWriteTimeout at most.
func (rs *Releases) WaitUncertainFinal() {
	rs.pendingMu.Lock()
	var last time.Time
	for _, m := range []map[string]uncertainHold{rs.uncertain, rs.uncertainReleases} {
		for _, u := range m {
			if u.final.After(last) {
				last = u.final
			}
		}
	}
	rs.pendingMu.Unlock()
	time.Sleep(last.Sub(rs.cfg.WallClock()))
}

// pending reports whether a write of unknown outcome or a release owed to
// Redis is kept for the event.
func (rs *Releases) pending(event int64) bool {
	rs.pendingMu.Lock()
	defer rs.pendingMu.Unlock()
	for _, m := range []map[string]uncertainHold{rs.uncertain, rs.uncertainReleases} {
		for _, u := range m {
			if u.event == event {
				return true
			}
		}
	}
	for _, r := range rs.unreleased {
		if r.event == event {
			return true
		}
	}
	return false
}
