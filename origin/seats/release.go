package seats

import (
	"context"

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
// pending, or it has expired, or a payment for it is under way.
func (p *Protocol) ReleaseHold(ctx context.Context, h ledger.Hold) error {
	ev, err := p.Event(ctx, h.EventID)
	if err != nil {
		return err
	}
	if _, err := p.ledger.ReleaseHold(ctx, h.ID, p.now()); err != nil {
		return err
	}
	// The ledger has it released: whatever Redis says of it (a confirmation
	// whose ledger step failed) is out of date.
	p.ReleaseSeats(ctx, ev, h.ID, inventory.AnyHold)
	return nil
}

// compensate returns the seats of a hold that has no ledger row.
func (p *Protocol) compensate(ctx context.Context, ev *Event, holdID string) {
	p.metrics.Compensations.Inc()
	p.ReleaseSeats(ctx, ev, holdID, inventory.PendingOnly)
}

// ReleaseSeats returns a hold's seats in Redis, in mode, after the ledger
// ended the hold.
func (p *Protocol) ReleaseSeats(ctx context.Context, ev *Event, holdID string, mode inventory.ReleaseMode) inventory.ReleaseResult {
	return p.release(ctx, ev, holdID, pendingRelease{event: ev.ID, mode: mode})
}

// ReleaseLateHold returns the seats of a paid hold that expired before its
// payment landed; when the payment was served from the overflow reserve
// (absorbed), the buyer stays counted by the one-hold-per-user guard
// (inventory.KeepBuyer).
func (p *Protocol) ReleaseLateHold(ctx context.Context, ev *Event, holdID, user string, absorbed bool) {
	if absorbed {
		p.release(ctx, ev, holdID, pendingRelease{event: ev.ID, mode: inventory.KeepBuyer, user: user})
		return
	}
	p.ReleaseSeats(ctx, ev, holdID, inventory.AnyHold)
}

func (p *Protocol) runRelease(ctx context.Context, holdID string, r pendingRelease) (inventory.ReleaseResult, error) {
	if r.mode == inventory.KeepBuyer {
		return p.inv.ReleaseKeepingBuyer(ctx, r.event, holdID, r.user, p.now())
	}
	return p.inv.Release(ctx, r.event, holdID, r.mode)
}

func (p *Protocol) release(ctx context.Context, ev *Event, holdID string, r pendingRelease) inventory.ReleaseResult {
	res, err := p.runRelease(ctx, holdID, r)
	p.pendingMu.Lock()
	prev, deferred := p.unreleased[holdID]
	switch {
	case err != nil && (!deferred || releaseRank(r.mode) >= releaseRank(prev.mode)):
		// A weaker mode never replaces a stronger one kept for the hold.
		p.unreleased[holdID] = r
	case err == nil && deferred && releaseRank(r.mode) >= releaseRank(prev.mode):
		// Done, and at least what the kept one would do: retried later, the
		// kept one would undo what came after it (a KeepBuyer retried after
		// the DropBuyer that ended the sale writes the buyer's record back).
		delete(p.unreleased, holdID)
	}
	p.pendingMu.Unlock()
	if err != nil {
		p.log.Warn("seat release deferred: redis unavailable", "event", ev.ID, "hold", holdID, "mode", r.mode, "error", err)
		return res
	}
	if res.Seats > 0 && ev.room.State().SoldOut {
		p.SyncSoldOut(ctx, ev)
	}
	return res
}

// RetryReleases retries the seat releases Redis could not take, each in the
// mode it was started in.
func (p *Protocol) RetryReleases(ctx context.Context) error {
	p.pendingMu.Lock()
	todo := make(map[string]pendingRelease, len(p.unreleased))
	for id, r := range p.unreleased {
		todo[id] = r
	}
	p.pendingMu.Unlock()
	for id, r := range todo {
		ev, err := p.Event(ctx, r.event)
		if err != nil {
			return err
		}
		res, err := p.runRelease(ctx, id, r)
		if err != nil {
			return err
		}
		p.pendingMu.Lock()
		if p.unreleased[id] == r {
			delete(p.unreleased, id)
		}
		p.pendingMu.Unlock()
		if res.Seats > 0 && ev.room.State().SoldOut {
			p.SyncSoldOut(ctx, ev)
		}
	}
	return nil
}
