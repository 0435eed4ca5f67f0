package origin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/ledger"
)

// The rest of a hold's life, for the booking flow: extend it while a payment
// runs, confirm it when the payment succeeds. In both, Redis goes first, so
// a failure between the two steps leaves Redis holding more than the ledger
// (seats under-sold until the reaper or a rebuild), never less (seats sold
// twice).
//
// A rebuild must not read the ledger between the two steps: it would load
// the hold as it was before the change (the old expiry, or a hold being
// confirmed back in the expiry index), and Redis would give its seats away
// at that expiry while the ledger keeps them. So, as for a new hold's row
// (holds.go), the change is in flight for the event from before its Redis
// step to the end of its ledger step, which a rebuild on this node waits
// for; and the ledger step commits only before a deadline the server checks
// (HoldWriteTimeout from before the Redis step), which bounds what a
// rebuild on another node waits for (RebuildSettle).

// ErrHoldExpired means the hold's expiry passed before it could be extended
// or confirmed: its seats may be someone else's already.
var ErrHoldExpired = errors.New("hold expired")

// redisStep runs the Redis step of a change to a hold and returns with the
// event's in-flight count raised (the caller lowers it once its ledger step
// is over), and the deadline of that ledger step. While a rebuild holds the
// fence, or the keys are missing, the count is lowered and the step waits
// for the rebuild, which may be waiting for the count.
func (s *Server) redisStep(ctx context.Context, ev *liveEvent, step func() error) (time.Time, error) {
	for {
		ev.inflight.Add(1)
		deadline := time.Now().Add(s.cfg.HoldWriteTimeout)
		err := step()
		if !errors.Is(err, inventory.ErrFrozen) && !errors.Is(err, inventory.ErrNotLoaded) {
			if err == nil && s.afterRedisStep != nil {
				s.afterRedisStep()
			}
			return deadline, err
		}
		ev.inflight.Add(-1)
		if lerr := s.ensureLoaded(ctx, ev); lerr != nil {
			ev.inflight.Add(1)
			return deadline, errors.Join(err, lerr)
		}
	}
}

// ledgerStep runs the ledger step of a change to a hold: f in one
// transaction that commits only before deadline, by the server's clock. A
// commit whose outcome is unknown holds this node's rebuilds of the event
// off until it is final.
func (s *Server) ledgerStep(ctx context.Context, ev *liveEvent, deadline time.Time, f func(ledger.Tx) error) error {
	err := s.ledger.InTx(ctx, deadline, f)
	if errors.Is(err, ledger.ErrUncertain) {
		ev.noteFinal(s.finalAfter(deadline))
	}
	return err
}

// ConfirmHold turns a live pending hold into a sale. Redis first takes the
// hold out of the expiry index (from then on no reaper or expired-hold
// reclaim can return its seats), then one transaction marks the row
// confirmed and runs inTx (nil for none), e.g. to confirm the booking and
// issue tickets with it.
//
// ErrHoldExpired: the hold was past its expiry; nothing changed (the late
// payment path decides). ErrHoldNotActive: the ledger no longer has it
// pending (released, or the reaper expired it first); its seats are
// returned. A hold already confirmed (by an earlier or concurrent call)
// is returned without running inTx. Any other error leaves the hold
// confirmed in Redis and pending in the ledger: the caller retries (a
// webhook is redelivered) and the retry completes it.
func (s *Server) ConfirmHold(ctx context.Context, holdID string, inTx func(ledger.Tx, Hold) error) (Hold, error) {
	h, err := s.ledger.Hold(ctx, holdID)
	if err != nil {
		return Hold{}, err
	}
	if h.Status == StatusConfirmed {
		return h, nil
	}
	if h.Status != StatusPending {
		return h, fmt.Errorf("confirm hold %s: %w", holdID, ErrHoldNotActive)
	}
	ev, err := s.event(ctx, h.EventID)
	if err != nil {
		return Hold{}, err
	}
	now := s.now()
	var outcome inventory.Outcome
	deadline, err := s.redisStep(ctx, ev, func() (err error) {
		outcome, err = s.inv.Confirm(ctx, ev.ID, holdID, now)
		return err
	})
	var confirmed Hold
	if err == nil && outcome == inventory.Confirmed {
		err = s.ledgerStep(ctx, ev, deadline, func(tx ledger.Tx) error {
			var err error
			if confirmed, err = tx.ConfirmHold(ctx, holdID, now); err != nil {
				return err
			}
			if inTx != nil {
				return inTx(tx, confirmed)
			}
			return nil
		})
	}
	ev.inflight.Add(-1)
	if err != nil && !errors.Is(err, ErrHoldNotActive) {
		return h, fmt.Errorf("confirm hold %s: %w", holdID, err)
	}
	switch outcome {
	case inventory.Confirmed:
	case inventory.Expired, inventory.NotLive:
		return h, fmt.Errorf("confirm hold %s: %w", holdID, ErrHoldExpired)
	default:
		return h, fmt.Errorf("confirm hold %s: unexpected outcome %q", holdID, outcome)
	}
	if errors.Is(err, ErrHoldNotActive) {
		// Either a concurrent confirmation of the same hold (a duplicate
		// webhook) committed first, or the reaper (or the buyer) ended the
		// hold in the ledger between the two steps. Only in the second case
		// are the seats to be returned: the reaper's release left the
		// confirmed Redis hold alone.
		now, rerr := s.ledger.Hold(ctx, holdID)
		if rerr != nil {
			return h, fmt.Errorf("confirm hold %s: %w", holdID, rerr)
		}
		if now.Status == StatusConfirmed {
			return now, nil
		}
		s.releaseSeats(ctx, ev, holdID, inventory.AnyHold)
		return h, err
	}
	return confirmed, nil
}

// ExtendHold moves a live pending hold's expiry to until (never earlier),
// e.g. to cover payment processing: Redis first, then one transaction
// updates the row and runs inTx (nil for none), e.g. to insert the booking.
// until is capped at the hold's creation plus its whole-life cap
// (HoldMaxLifeOf), so repeated booking attempts cannot keep seats forever.
// ErrHoldExpired: past its expiry; ErrHoldNotActive: not pending.
func (s *Server) ExtendHold(ctx context.Context, holdID string, until time.Time, inTx func(ledger.Tx, Hold) error) (Hold, error) {
	h, err := s.ledger.Hold(ctx, holdID)
	if err != nil {
		return Hold{}, err
	}
	now := s.now()
	if h.StatusAt(now) != StatusPending {
		return h, fmt.Errorf("extend hold %s: %w", holdID, notExtendable(h, now))
	}
	ev, err := s.event(ctx, h.EventID)
	if err != nil {
		return Hold{}, err
	}
	if limit := h.CreatedAt.Add(s.HoldMaxLifeOf(ev.Event)); until.After(limit) {
		until = limit
	}
	until = until.UTC().Truncate(time.Second)
	var outcome inventory.Outcome
	deadline, err := s.redisStep(ctx, ev, func() (err error) {
		outcome, _, err = s.inv.Extend(ctx, ev.ID, holdID, now, until)
		return err
	})
	defer ev.inflight.Add(-1)
	if err != nil {
		return Hold{}, err
	}
	switch outcome {
	case inventory.Extended:
	case inventory.Confirmed:
		return h, fmt.Errorf("extend hold %s: %w", holdID, ErrHoldNotActive)
	default:
		return h, fmt.Errorf("extend hold %s: %w", holdID, ErrHoldExpired)
	}
	var extended Hold
	err = s.ledgerStep(ctx, ev, deadline, func(tx ledger.Tx) error {
		var err error
		if extended, err = tx.ExtendHold(ctx, holdID, now, until); err != nil {
			return err
		}
		if inTx != nil {
			return inTx(tx, extended)
		}
		return nil
	})
	if errors.Is(err, ErrHoldNotActive) {
		// The reaper may have expired the row since it was read.
		if again, rerr := s.ledger.Hold(ctx, holdID); rerr == nil {
			err = notExtendable(again, now)
		}
	}
	if err != nil {
		return h, fmt.Errorf("extend hold %s: %w", holdID, err)
	}
	return extended, nil
}

// HoldMaxLifeOf is the whole-life cap of the holds of e: Config.HoldMaxLife,
// or by default twice the event's hold lifetime.
func (s *Server) HoldMaxLifeOf(e Event) time.Duration {
	if s.cfg.HoldMaxLife > 0 {
		return s.cfg.HoldMaxLife
	}
	return 2 * e.HoldTTL()
}

// notExtendable says why a hold that is not pending cannot be extended: one
// that expired, by the clock or by the reaper, is ErrHoldExpired (the buyer
// hears 410 hold_expired); confirmed or released, ErrHoldNotActive.
func notExtendable(h Hold, now time.Time) error {
	if h.StatusAt(now) == StatusExpired {
		return ErrHoldExpired
	}
	return ErrHoldNotActive
}
