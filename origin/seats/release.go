package seats

import (
	"context"
	"errors"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/ledger"
)

// Seats go back to Redis after the ledger says their hold is no longer
// live. If Redis cannot take a release now, it is kept, in its mode, and
// retried by the reaper (RetryReleases); until then the seats are
// under-sold, never over-sold.

// pendingRelease is a release Redis could not take yet.
type pendingRelease struct {
	event int64
	mode  inventory.ReleaseMode
	// user is the buyer (KeepBuyer only).
	user string
}

// releaseRank orders the modes by what they do: each does what the one
// before does, and more.
func releaseRank(m inventory.ReleaseMode) int {
	switch m {
	case inventory.DropBuyer:
		// The end of the sale KeepBuyer kept the buyer for.
		return 3
	case inventory.KeepBuyer:
		return 2
	case inventory.AnyHold:
		return 1
	}
	return 0
}

// ReleaseHold gives a buyer's pending hold back: the ledger first (the
// truth), then the seats in Redis. ledger.ErrHoldNotActive: it is not
// pending, or it has expired, or a payment for it is under way. A release
// whose commit answer was lost may have ended the hold in the ledger, where
// no pass looks for it again: its seats go back once it is final and the
// ledger has it released (uncertain.go).
func (p *Protocol) ReleaseHold(ctx context.Context, h ledger.Hold) error {
	ev, err := p.registry.Event(ctx, h.EventID)
	if err != nil {
		return err
	}
	deadline := p.cfg.WallClock().Add(p.cfg.HoldWriteTimeout)
	if _, err := p.ledger.ReleaseHold(ctx, h.ID, p.now(), deadline); err != nil {
		if errors.Is(err, ledger.ErrUncertain) {
			p.releases.addUncertainRelease(ev, h.ID, deadline)
		}
		return err
	}
	// The ledger has it released: whatever Redis says of it (a confirmation
	// whose ledger step failed) is out of date.
	if res := p.releases.ReleaseSeats(ctx, ev, h.ID, inventory.AnyHold); res.Outcome == inventory.Released {
		ev.seatsTaken(h.Seats, false)
	}
	return nil
}

// compensate returns the seats of a hold that has no ledger row.
func (rs *Releases) compensate(ctx context.Context, ev *Event, holdID string) {
	rs.metrics.Compensations.Inc()
	rs.ReleaseSeats(ctx, ev, holdID, inventory.PendingOnly)
}

// ReleaseSeats returns a hold's seats in Redis, in mode, after the ledger
// ended the hold.
func (rs *Releases) ReleaseSeats(ctx context.Context, ev *Event, holdID string, mode inventory.ReleaseMode) inventory.ReleaseResult {
	return rs.release(ctx, ev, holdID, pendingRelease{event: ev.ID, mode: mode})
}

// ReleaseLateHold returns the seats of a paid hold that expired before its
// payment landed; when the payment was served from the overflow reserve
// (absorbed), the buyer stays counted by the one-hold-per-user guard
// (inventory.KeepBuyer).
func (rs *Releases) ReleaseLateHold(ctx context.Context, ev *Event, holdID, user string, absorbed bool) {
	if absorbed {
		rs.release(ctx, ev, holdID, pendingRelease{event: ev.ID, mode: inventory.KeepBuyer, user: user})
		return
	}
	rs.ReleaseSeats(ctx, ev, holdID, inventory.AnyHold)
}

func (rs *Releases) runRelease(ctx context.Context, holdID string, r pendingRelease) (inventory.ReleaseResult, error) {
	if r.mode == inventory.KeepBuyer {
		return rs.inv.ReleaseKeepingBuyer(ctx, r.event, holdID, r.user, rs.now())
	}
	return rs.inv.Release(ctx, r.event, holdID, r.mode)
}

func (rs *Releases) release(ctx context.Context, ev *Event, holdID string, r pendingRelease) inventory.ReleaseResult {
	res, err := rs.runRelease(ctx, holdID, r)
	rs.pendingMu.Lock()
	prev, deferred := rs.unreleased[holdID]
	switch {
	case err != nil && (!deferred || releaseRank(r.mode) >= releaseRank(prev.mode)):
		// A weaker mode never replaces a stronger one kept for the hold.
		rs.unreleased[holdID] = r
	case err == nil && deferred && releaseRank(r.mode) >= releaseRank(prev.mode):
		// Done, and at least what the kept one would do: retried later, the
		// kept one would undo what came after it (a KeepBuyer retried after
		// the DropBuyer that ended the sale writes the buyer's record back).
		delete(rs.unreleased, holdID)
	}
	rs.pendingMu.Unlock()
	if err != nil {
		rs.log.Warn("seat release deferred: redis unavailable", "event", ev.ID, "hold", holdID, "mode", r.mode, "error", err)
		return res
	}
	if res.Seats > 0 && ev.room.State().SoldOut {
		rs.registry.SyncSoldOut(ctx, ev)
	}
	return res
}

// RetryReleases retries the seat releases Redis could not take, each in the
// mode it was started in, then makes those the ledger notes Redis is owed
// (releaseOwed).
func (rs *Releases) RetryReleases(ctx context.Context) error {
	return errors.Join(rs.retryReleases(ctx), rs.releaseOwed(ctx))
}

func (rs *Releases) retryReleases(ctx context.Context) error {
	rs.pendingMu.Lock()
	todo := make(map[string]pendingRelease, len(rs.unreleased))
	for id, r := range rs.unreleased {
		todo[id] = r
	}
	rs.pendingMu.Unlock()
	for id, r := range todo {
		ev, err := rs.registry.Event(ctx, r.event)
		if err != nil {
			return err
		}
		res, err := rs.runRelease(ctx, id, r)
		if err != nil {
			return err
		}
		rs.pendingMu.Lock()
		if rs.unreleased[id] == r {
			delete(rs.unreleased, id)
		}
		rs.pendingMu.Unlock()
		if res.Seats > 0 && ev.room.State().SoldOut {
			rs.registry.SyncSoldOut(ctx, ev)
		}
	}
	return nil
}

// owedBatch is how many of the ledger's owed releases one read takes.
const owedBatch = 100

// releaseOwed makes the releases the ledger notes Redis is owed: holds of
// a general-admission section that it ended on its own (a new hold of the
// section expired them, lapsed, when its buckets fell short), which may
// still be confirmed in Redis, their confirmation's ledger step having
// failed. Redis never reclaims a confirmed hold, so until released there
// it keeps places the ledger has given back. Each is released whatever its
// flag (inventory.AnyHold: the ledger has the hold over for good), then
// forgotten. A release made twice (by two nodes, or again after its
// forgetting failed) finds the hold gone and gives nothing back: the
// places come back once.
func (rs *Releases) releaseOwed(ctx context.Context) error {
	for {
		owed, err := rs.ledger.ReleasesOwed(ctx, 0, owedBatch)
		if err != nil || len(owed) == 0 {
			return err
		}
		made := make([]string, 0, len(owed))
		var errs []error
		for _, o := range owed {
			if err := rs.releaseOne(ctx, o); err != nil {
				errs = append(errs, err)
				continue
			}
			made = append(made, o.HoldID)
		}
		if len(made) > 0 {
			if err := rs.ledger.ReleasesMade(ctx, made); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 || len(owed) < owedBatch {
			return errors.Join(errs...)
		}
	}
}

// releaseOne makes one owed release.
func (rs *Releases) releaseOne(ctx context.Context, o ledger.OwedRelease) error {
	ev, err := rs.registry.Event(ctx, o.EventID)
	if err != nil {
		return err
	}
	res, err := rs.runRelease(ctx, o.HoldID, pendingRelease{event: o.EventID, mode: inventory.AnyHold})
	if err != nil {
		return err
	}
	if res.Seats > 0 {
		rs.log.Info("places of a hold the ledger expired returned in redis", "event", o.EventID, "hold", o.HoldID, "places", res.Seats)
		if ev.room.State().SoldOut {
			rs.registry.SyncSoldOut(ctx, ev)
		}
	}
	return nil
}
