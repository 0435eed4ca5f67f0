package seats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/ledger"
)

// Every change to a hold (its creation, extension, confirmation) has a Redis
// step and then a ledger step. Redis goes first, so a failure between the
// two leaves Redis holding more than the ledger (seats under-sold until the
// reaper or a rebuild), never less (seats sold twice).
//
// A rebuild must not read the ledger between the two steps: it would load
// the hold as it was before the change (no row yet, the old expiry, or a
// hold being confirmed back in the expiry index), and Redis would give its
// seats away while the ledger keeps them. So the change is in flight for
// the event from before its Redis step to the end of its ledger step, which
// a rebuild on this node waits for; and the ledger step commits only before
// a deadline the server checks (HoldWriteTimeout from before the Redis
// step), which bounds what a rebuild on another node waits for
// (RebuildSettle).

// The in-flight count of both is raised and lowered by inFlight (place.go).

// ErrHoldExpired means the hold's expiry passed before it could be extended
// or confirmed: its seats may be someone else's already.
var ErrHoldExpired = errors.New("hold expired")

// ledgerStep runs the ledger step of a change to a hold: f in one
// transaction that commits only before deadline, by the server's clock. A
// commit whose outcome is unknown holds this node's rebuilds of the event
// off until it is final.
func (p *Protocol) ledgerStep(ctx context.Context, ev *Event, deadline time.Time, f func(ledger.Tx) error) error {
	err := p.ledger.InTx(ctx, deadline, f)
	if errors.Is(err, ledger.ErrUncertain) {
		ev.noteFinal(p.releases.finalAfter(deadline))
	}
	return err
}

// ConfirmHold turns a live pending hold into a sale. Redis first takes the
// hold out of the expiry index (from then on no reaper or expired-hold
// reclaim can return its seats), then one transaction marks the row
// confirmed and runs inTx (nil for none).
//
// ErrHoldExpired: the hold was past its expiry; nothing changed (the late
// payment path decides). ledger.ErrHoldNotActive: the ledger no longer has
// it pending (released, or the reaper expired it first); its seats are
// returned. A hold already confirmed (by an earlier or concurrent call)
// is returned without running inTx. Any other error leaves the hold
// confirmed in Redis and pending in the ledger: the caller retries (a
// webhook is redelivered) and the retry completes it.
func (p *Protocol) ConfirmHold(ctx context.Context, holdID string, inTx func(ledger.Tx, ledger.Hold) error) (ledger.Hold, error) {
	var confirmed ledger.Hold
	h, done, err := p.confirm(ctx, holdID, func(ev *Event, deadline time.Time, now time.Time) error {
		return p.ledgerStep(ctx, ev, deadline, func(tx ledger.Tx) error {
			var err error
			if confirmed, err = tx.ConfirmHold(ctx, holdID, now); err != nil {
				return err
			}
			if inTx != nil {
				return inTx(tx, confirmed)
			}
			return nil
		})
	})
	if done {
		return confirmed, err
	}
	return h, err
}

// ConfirmBooking is ConfirmHold for a paid booking, c (its hold, its
// booking, its tickets), whose ledger step is written by the confirmation
// writer with the confirmations of other bookings made at the same moment:
// one transaction and one commit for all of them (ledger.ConfirmWriter).
// c.Now and c.Deadline are set here. It reports whether it confirmed the
// booking: false with no error when the hold was confirmed already, by an
// earlier or concurrent confirmation. ledger.ErrBookingSettled: the booking
// no longer waits for its payment; nothing changed in the ledger.
func (p *Protocol) ConfirmBooking(ctx context.Context, c ledger.Confirmation) (bool, error) {
	_, done, err := p.confirm(ctx, c.HoldID, func(ev *Event, deadline time.Time, now time.Time) error {
		c.Now, c.Deadline = now, deadline
		err := p.confirmRows.Confirm(ctx, c)
		if errors.Is(err, ledger.ErrUncertain) {
			ev.noteFinal(p.releases.finalAfter(deadline))
		}
		return err
	})
	return done, err
}

// confirm runs a confirmation: the Redis step, then write, the ledger step,
// which confirms the hold's row or fails. done says whether write
// confirmed it; h is the hold as it was read first, or as a concurrent
// confirmation left it.
func (p *Protocol) confirm(ctx context.Context, holdID string, write func(ev *Event, deadline, now time.Time) error) (h ledger.Hold, done bool, err error) {
	h, err = p.ledger.Hold(ctx, holdID)
	if err != nil {
		return ledger.Hold{}, false, err
	}
	if h.Status == ledger.StatusConfirmed {
		return h, false, nil
	}
	if h.Status != ledger.StatusPending {
		return h, false, fmt.Errorf("confirm hold %s: %w", holdID, ledger.ErrHoldNotActive)
	}
	ev, err := p.registry.Event(ctx, h.EventID)
	if err != nil {
		return ledger.Hold{}, false, err
	}
	now := p.now()
	var outcome inventory.Outcome
	p.inFlight(ctx, ev, func(time.Time) (err error) {
		outcome, err = p.inv.Confirm(ctx, ev.ID, holdID, now)
		return err
	}, func(deadline time.Time, rerr error) {
		if err = rerr; err != nil || outcome != inventory.Confirmed {
			return
		}
		err = write(ev, deadline, now)
	})
	if err != nil && !errors.Is(err, ledger.ErrHoldNotActive) {
		return h, false, fmt.Errorf("confirm hold %s: %w", holdID, err)
	}
	switch outcome {
	case inventory.Confirmed:
	case inventory.Expired, inventory.NotLive:
		return h, false, fmt.Errorf("confirm hold %s: %w", holdID, ErrHoldExpired)
	default:
		return h, false, fmt.Errorf("confirm hold %s: unexpected outcome %q", holdID, outcome)
	}
	if errors.Is(err, ledger.ErrHoldNotActive) {
		// Either a concurrent confirmation of the same hold (a duplicate
		// webhook) committed first, or the reaper (or the buyer) ended the
		// hold in the ledger between the two steps. Only in the second case
		// are the seats to be returned: the reaper's release left the
		// confirmed Redis hold alone.
		cur, rerr := p.ledger.Hold(ctx, holdID)
		if rerr != nil {
			return h, false, fmt.Errorf("confirm hold %s: %w", holdID, rerr)
		}
		if cur.Status == ledger.StatusConfirmed {
			return cur, false, nil
		}
		p.releases.ReleaseSeats(ctx, ev, holdID, inventory.AnyHold)
		return h, false, err
	}
	return h, true, nil
}

// ExtendHold moves a live pending hold's expiry to until (never earlier),
// e.g. to cover payment processing: Redis first, then one transaction. With
// book, which inserts a booking that carries the extension in the ledger
// (NewBooking.HoldUntil, the ExpiresAt of the hold it is given), the
// transaction locks the hold's row and runs book: the row is not rewritten
// (migration 016). Without (nil), it moves the row's own expiry.
// until is capped at the hold's creation plus its whole-life cap
// (HoldMaxLifeOf), so repeated booking attempts cannot keep seats forever.
// ErrHoldExpired: past its expiry; ledger.ErrHoldNotActive: not pending.
func (p *Protocol) ExtendHold(ctx context.Context, holdID string, until time.Time, book func(ledger.Tx, ledger.Hold) error) (ledger.Hold, error) {
	h, err := p.ledger.Hold(ctx, holdID)
	if err != nil {
		return ledger.Hold{}, err
	}
	now := p.now()
	if h.StatusAt(now) != ledger.StatusPending {
		return h, fmt.Errorf("extend hold %s: %w", holdID, notExtendable(h, now))
	}
	ev, err := p.registry.Event(ctx, h.EventID)
	if err != nil {
		return ledger.Hold{}, err
	}
	if limit := h.CreatedAt.Add(p.HoldMaxLifeOf(ev.Event)); until.After(limit) {
		until = limit
	}
	until = until.UTC().Truncate(time.Second)
	var outcome inventory.Outcome
	var extended ledger.Hold
	p.inFlight(ctx, ev, func(time.Time) (err error) {
		outcome, _, err = p.inv.Extend(ctx, ev.ID, holdID, now, until)
		return err
	}, func(deadline time.Time, rerr error) {
		if err = rerr; err != nil {
			return
		}
		switch outcome {
		case inventory.Extended:
		case inventory.Confirmed:
			err = ledger.ErrHoldNotActive
			return
		default:
			err = ErrHoldExpired
			return
		}
		err = p.ledgerStep(ctx, ev, deadline, func(tx ledger.Tx) error {
			var err error
			if book == nil {
				extended, err = tx.ExtendHold(ctx, holdID, now, until)
				return err
			}
			if extended, err = tx.LockHoldForBooking(ctx, holdID, now, until); err != nil {
				return err
			}
			return book(tx, extended)
		})
		if errors.Is(err, ledger.ErrHoldNotActive) {
			// The reaper may have expired the row since it was read.
			if again, rerr := p.ledger.Hold(ctx, holdID); rerr == nil {
				err = notExtendable(again, now)
			}
		}
	})
	if err != nil {
		return h, fmt.Errorf("extend hold %s: %w", holdID, err)
	}
	p.extendAdmission(ctx, ev, extended)
	return extended, nil
}

// notExtendable says why a hold that is not pending cannot be extended: one
// that expired, by the clock or by the reaper, is ErrHoldExpired (the buyer
// hears 410 hold_expired); confirmed or released, ledger.ErrHoldNotActive.
func notExtendable(h ledger.Hold, now time.Time) error {
	if h.StatusAt(now) == ledger.StatusExpired {
		return ErrHoldExpired
	}
	return ledger.ErrHoldNotActive
}
