package origin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waitroom/waitroom/inventory"
)

// The rest of a hold's life, for the booking flow: extend it while a payment
// runs, confirm it when the payment succeeds. In both, Redis goes first, so
// a failure between the two steps leaves Redis holding more than the ledger
// (seats under-sold until the reaper or a rebuild), never less (seats sold
// twice).

// ErrHoldExpired means the hold's expiry passed before it could be extended
// or confirmed: its seats may be someone else's already.
var ErrHoldExpired = errors.New("hold expired")

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
func (s *Server) ConfirmHold(ctx context.Context, holdID string, inTx func(pgx.Tx, Hold) error) (Hold, error) {
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
	outcome, err := s.inv.Confirm(ctx, ev.ID, holdID, now)
	if err != nil {
		return Hold{}, err
	}
	switch outcome {
	case inventory.Confirmed:
	case inventory.Expired, inventory.NotLive:
		return h, fmt.Errorf("confirm hold %s: %w", holdID, ErrHoldExpired)
	default:
		return h, fmt.Errorf("confirm hold %s: unexpected outcome %q", holdID, outcome)
	}
	var confirmed Hold
	err = pgx.BeginTxFunc(ctx, s.ledger.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var err error
		if confirmed, err = ConfirmHoldTx(ctx, tx, holdID, now); err != nil {
			return err
		}
		if inTx != nil {
			return inTx(tx, confirmed)
		}
		return nil
	})
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
	if err != nil {
		return h, fmt.Errorf("confirm hold %s: %w", holdID, err)
	}
	return confirmed, nil
}

// ExtendHold moves a live pending hold's expiry to until (never earlier),
// e.g. to cover payment processing: Redis first, then one transaction
// updates the row and runs inTx (nil for none), e.g. to insert the booking.
// ErrHoldExpired: past its expiry; ErrHoldNotActive: not pending.
func (s *Server) ExtendHold(ctx context.Context, holdID string, until time.Time, inTx func(pgx.Tx, Hold) error) (Hold, error) {
	h, err := s.ledger.Hold(ctx, holdID)
	if err != nil {
		return Hold{}, err
	}
	now := s.now()
	if h.Status != StatusPending {
		return h, fmt.Errorf("extend hold %s: %w", holdID, ErrHoldNotActive)
	}
	if h.ExpiresAt.Before(now) {
		return h, fmt.Errorf("extend hold %s: %w", holdID, ErrHoldExpired)
	}
	until = until.UTC().Truncate(time.Second)
	outcome, _, err := s.inv.Extend(ctx, h.EventID, holdID, now, until)
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
	err = pgx.BeginTxFunc(ctx, s.ledger.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var err error
		if extended, err = ExtendHoldTx(ctx, tx, holdID, now, until); err != nil {
			return err
		}
		if inTx != nil {
			return inTx(tx, extended)
		}
		return nil
	})
	if err != nil {
		return h, fmt.Errorf("extend hold %s: %w", holdID, err)
	}
	return extended, nil
}
