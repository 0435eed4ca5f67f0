package booking

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/origin/seats"
	"github.com/waitroom/waitroom/origin/ticketcode"
)

// Settling a payment: the same code for webhooks and the reconciliation.

// settleFailed records a failed payment.
func (s *Settlement) settleFailed(ctx context.Context, b ledger.Booking, paymentID, reason string) error {
	if b.Status != ledger.BookingPaymentPending {
		return nil
	}
	_, ok, err := s.ledger.Bookings().Fail(ctx, b.ID, paymentID, reason, nil, s.now())
	if ok {
		s.metrics.Bookings.WithLabelValues(ledger.BookingFailed).Inc()
	}
	return err
}

// settlePaid records a succeeded payment: the hold and the booking confirmed
// and the tickets issued, in one transaction; or, when the hold is gone, the
// late-payment policy; or, when the money went back at the provider before
// the payment was settled, the booking refunded. Calling it again changes
// nothing. paid is the webhook event that reported the payment (nil for
// none): a confirmation records it on the booking, and says so in it.
func (s *Settlement) settlePaid(ctx context.Context, b ledger.Booking, paymentID string, paid *paidEvent) error {
	return s.settlePayment(ctx, b, paymentID, nil, paid)
}

// paidEvent is a webhook event a settlement acts on.
type paidEvent struct {
	ID string
	// Recorded: the confirmation it made recorded it (ledger.Confirmation.Event).
	Recorded atomic.Bool
}

// settlePayment is settlePaid with the payment as the provider has it now,
// when the caller has just asked (nil: asked here).
func (s *Settlement) settlePayment(ctx context.Context, b ledger.Booking, paymentID string, known *payment.Payment, paid *paidEvent) error {
	return s.settlePaymentOnce(ctx, b, paymentID, known, paid, 0)
}

// revivals bounds how many times one settlement puts a failed booking back
// to waiting for its payment, should failures keep being reported between.
const revivals = 3

// settlePaymentOnce is settlePayment after the booking was revived that
// many times.
func (s *Settlement) settlePaymentOnce(ctx context.Context, b ledger.Booking, paymentID string, known *payment.Payment, paid *paidEvent, revived int) error {
	switch b.Status {
	case ledger.BookingConfirmed, ledger.BookingCancelled, ledger.BookingRefunded:
		return nil
	}
	if paymentID == "" {
		paymentID = b.PaymentID
	}
	if b.Amount > 0 && paymentID != "" {
		// The success event may be older than what the provider has done
		// since (a refund from its dashboard, whose charge.refunded found
		// nothing to end then), and a signed event is not proof of money
		// taken where the provider says otherwise: its present word decides.
		p := known
		if p == nil {
			pctx, cancel := s.paymentContext(ctx)
			got, err := s.payments.GetPayment(pctx, paymentID)
			cancel()
			switch {
			case errors.Is(err, payment.ErrNotFound):
				// The payment is the booking's own (its create call's, or
				// the one the provider named for it), so the provider not
				// showing it is a fault (an API key of another account or
				// mode, a provider that lost its state), not evidence of
				// money taken or not: nothing is settled, and the event
				// comes again.
				s.log.Error("the provider does not show the booking's payment: not settled; check the API key",
					"booking", b.ID, "payment", paymentID)
				return fmt.Errorf("settle payment of booking %s: %w", b.ID, err)
			case err != nil:
				return fmt.Errorf("settle payment of booking %s: %w", b.ID, err)
			}
			p = &got
		}
		if p.Status != payment.StatusSucceeded {
			// Before the payment's failure is undone or a seat is sold: a
			// booking settles on money the provider has, and the event is
			// answered as not handled, so it comes again (as does the
			// reconciliation's question) once the provider agrees.
			return fmt.Errorf("settle payment of booking %s: %w (the provider has it %s)", b.ID, errNotSucceeded, p.Status)
		}
		known = p
		if !p.Pays(b.Amount, b.Currency) {
			return s.refundMismatched(ctx, b, paymentID, p)
		}
		if b.Status != ledger.BookingFailed && p.Returned() >= b.Amount {
			return s.refundedBeforeSettled(ctx, b, paymentID)
		}
	}
	if b.Status == ledger.BookingFailed {
		return s.paidAfterFailure(ctx, b, paymentID, known, paid, revived)
	}
	ev, err := s.seats.Registry().Event(ctx, b.EventID)
	if err != nil {
		return err
	}
	// The hold and the booking confirmed, the tickets issued and the event
	// recorded together, committed with the other confirmations of the
	// moment.
	c := ledger.Confirmation{
		HoldID: b.HoldID, BookingID: b.ID, PaymentID: paymentID, EventID: b.EventID, Seated: ev.Seated(),
		Sign: func(seats []int32, seatIDs []string) ([]string, error) { return s.signTickets(b, seats, seatIDs) },
	}
	if paid != nil {
		c.Event = paid.ID
	}
	done, err := s.seats.ConfirmBooking(ctx, c)
	switch {
	case err == nil && done:
		s.metrics.Bookings.WithLabelValues(ledger.BookingConfirmed).Inc()
		if paid != nil {
			paid.Recorded.Store(true)
		}
	case err == nil:
		// The hold was confirmed already, by a concurrent settlement of
		// this booking (which confirmed the booking with it).
		err = s.confirmAfterHold(ctx, b, paymentID)
	case errors.Is(err, seats.ErrHoldExpired), errors.Is(err, ledger.ErrHoldNotActive):
		err = s.latePayment(ctx, ev, b, paymentID)
	case errors.Is(err, ledger.ErrBookingSettled):
		// Settled between the read and the ledger step, with the hold
		// confirmed in Redis: by a failure reported meanwhile (the
		// payment_failed webhook, the reconciliation), which the success
		// overrides, or by a concurrent settlement of this success.
		return s.paidAfterFailure(ctx, b, paymentID, known, paid, revived)
	}
	if errors.Is(err, ledger.ErrNoSeatLeft) {
		err = s.refundUnseated(ctx, ev, b, paymentID)
	}
	if errors.Is(err, errBookingSettled) {
		// The booking stopped waiting for its payment before the step
		// that settles it locked its row: settled by a concurrent
		// settlement of this success (nothing left to do), or failed by a
		// failure reported meanwhile, which the success overrides: the
		// money ends as a sale or a refund, never kept.
		return s.paidAfterFailure(ctx, b, paymentID, known, paid, revived)
	}
	if err == nil && known != nil && (known.Returned() > 0 || known.RefundPending > 0) {
		// Part of it went back at the provider before the sale was
		// settled (or is on its way back), whose charge.refunded found
		// nothing to record it on: recorded if the sale stands, whichever
		// way it was confirmed (its hold, or late, from the reserve); a
		// booking that ended otherwise is left as it is.
		return s.recordPartlyRefunded(ctx, b, *known, "")
	}
	return err
}

// refundedBeforeSettled ends a booking whose payment was refunded at the
// provider before the origin settled it: refunded, with no ticket, and its
// hold released, the seats back on sale. A settlement that confirmed it
// meanwhile leaves a confirmed booking, which ends as any confirmed booking
// refunded at the provider does.
func (s *Settlement) refundedBeforeSettled(ctx context.Context, b ledger.Booking, paymentID string) error {
	now := s.now()
	var done ledger.Booking
	var acted, release, confirmed bool
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		acted, release, confirmed = false, false, false
		cur, err := tx.Bookings().Lock(ctx, b.ID)
		if err != nil {
			return err
		}
		if cur.Status != ledger.BookingPaymentPending {
			confirmed = cur.Status == ledger.BookingConfirmed
			return nil
		}
		// A hold past its expiry ends expired, as it would have without
		// the payment; a live one is released.
		if release, err = tx.ExpireLateHold(ctx, cur.HoldID, now); err == nil && !release {
			release, err = tx.ReleaseUnseatedHold(ctx, cur.HoldID, now)
		}
		if err != nil {
			return err
		}
		done, acted, err = tx.Bookings().RefundedUnsettled(ctx, cur.ID, ReasonRefundedAtProvider, paymentID, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("booking %s refunded at the provider before it settled: %w", b.ID, err)
	}
	if confirmed {
		return s.refundedAtProvider(ctx, b.ID)
	}
	if !acted {
		return nil
	}
	s.metrics.Bookings.WithLabelValues(ledger.BookingRefunded).Inc()
	s.log.Warn("payment refunded at the provider before it settled: the booking is refunded, its hold released",
		"booking", b.ID, "event", done.EventID, "seats", done.Quantity)
	if release {
		// Whatever Redis holds for the hold goes back, also a confirmation
		// whose ledger step never came.
		return s.returnSeats(ctx, done)
	}
	return nil
}

// refundMismatched ends a booking whose payment succeeded for another
// amount or currency than the booking's: whoever changed it at the
// provider, the seats were priced at the booking's amount, so no ticket is
// issued for it and the money goes back whole. The hold stays as it is: the
// buyer may still pay it through a new booking, or it expires.
func (s *Settlement) refundMismatched(ctx context.Context, b ledger.Booking, paymentID string, p *payment.Payment) error {
	settled, refund, err := s.ledger.Bookings().RefundPayment(ctx, b.ID, ReasonPaymentMismatch, paymentID, s.now())
	if err != nil {
		return fmt.Errorf("refund booking %s paid for another amount: %w", b.ID, err)
	}
	if !refund {
		// Settled meanwhile (confirmed by an earlier word of the provider,
		// or refunded already): ended as such a booking ends.
		return nil
	}
	s.metrics.Bookings.WithLabelValues(ledger.BookingCancelled).Inc()
	s.log.Error("payment succeeded for another amount than the booking's: refunded",
		"booking", b.ID, "payment", paymentID, "amount", b.Amount, "currency", b.Currency,
		"paid", p.Amount, "paid_currency", p.Currency)
	if err := s.refundBooking(ctx, settled); err != nil {
		s.log.Warn("refund not made yet; the payment reconciliation retries it", "booking", b.ID, "error", err)
	}
	return nil
}

// confirmBookingTx confirms a waiting booking and issues its tickets, in tx.
func (s *env) confirmBookingTx(ctx context.Context, tx ledger.Tx, b ledger.Booking, paymentID string, overflow bool, reason string, now time.Time) (ledger.Booking, error) {
	c, ok, err := tx.Bookings().Confirm(ctx, b.ID, paymentID, overflow, reason, now)
	if err != nil {
		return ledger.Booking{}, err
	}
	if !ok {
		return ledger.Booking{}, fmt.Errorf("confirm booking %s: %w", b.ID, errBookingSettled)
	}
	if err := s.issueTickets(ctx, tx, c, now); err != nil {
		return ledger.Booking{}, err
	}
	return c, nil
}

// issueTickets gives a confirmed booking one ticket per seat. A reserved
// seat's ticket carries the seat (its number in the map, and its id) the
// hold claimed. Otherwise seat numbers of the event are handed out under
// its row lock: freed seats first, then new numbers, which a constraint
// keeps within the event's capacity (errNoSeatLeft, and tx is left
// aborted: the caller rolls back).
func (s *env) issueTickets(ctx context.Context, tx ledger.Tx, b ledger.Booking, now time.Time) error {
	ev, err := s.seats.Registry().Event(ctx, b.EventID)
	if err != nil {
		return fmt.Errorf("issue tickets of booking %s: %w", b.ID, err)
	}
	var seats []int32
	var seatIDs []string
	if ev.Seated() {
		seats, seatIDs, err = tx.SeatsOfHold(ctx, b.EventID, b.HoldID)
	} else {
		seats, err = tx.TakeSeats(ctx, b.EventID, b.Quantity)
	}
	if err != nil {
		return fmt.Errorf("issue tickets of booking %s: %w", b.ID, err)
	}
	if int64(len(seats)) != b.Quantity {
		return fmt.Errorf("issue tickets of booking %s: %d seat numbers for %d seats", b.ID, len(seats), b.Quantity)
	}
	codes, err := s.signTickets(b, seats, seatIDs)
	if err != nil {
		return fmt.Errorf("issue tickets of booking %s: %w", b.ID, err)
	}
	return tx.IssueTickets(ctx, b.ID, codes, seats, seatIDs, now)
}

// signTickets signs the codes of b's tickets: seats[i] is a seat's number,
// seatIDs[i] its reserved seat (nil for general admission).
func (s *env) signTickets(b ledger.Booking, seats []int32, seatIDs []string) ([]string, error) {
	codes := make([]string, len(seats))
	for i, seat := range seats {
		// The code names the seat as the ticket shows it: the reserved
		// seat's id, else its number.
		label := strconv.Itoa(int(seat))
		if seatIDs != nil {
			label = seatIDs[i]
		}
		code, err := s.cfg.Tickets.Sign(ticketcode.Claims{BookingID: b.ID, EventID: b.EventID, Seat: label})
		if err != nil {
			return nil, err
		}
		codes[i] = code
	}
	return codes, nil
}

// confirmAfterHold confirms a booking whose hold is confirmed already.
func (s *Settlement) confirmAfterHold(ctx context.Context, b ledger.Booking, paymentID string) error {
	confirmed := false
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		cur, err := tx.Bookings().Lock(ctx, b.ID)
		if err != nil {
			return err
		}
		if cur.Status != ledger.BookingPaymentPending {
			return errBookingSettled
		}
		h, err := tx.LockHold(ctx, cur.HoldID)
		if err != nil {
			return err
		}
		if h.Status != ledger.StatusConfirmed {
			return fmt.Errorf("confirm booking %s: hold %s is %s: retry", b.ID, h.ID, h.Status)
		}
		_, err = s.confirmBookingTx(ctx, tx, cur, paymentID, false, "", s.now())
		confirmed = err == nil
		return err
	})
	if confirmed {
		s.metrics.Bookings.WithLabelValues(ledger.BookingConfirmed).Inc()
	}
	return err
}

// latePayment settles a payment whose hold expired before it landed: the
// seats come from the overflow reserve if it has them (a conditional
// update: never oversold) and the buyer stays within max_per_user with
// them, otherwise the money goes back. The hold's own seats went (or go
// now) back to the sellable pool either way.
//
// The buyer may have held again after the hold expired, or have had
// another late payment confirmed: neither the one-live-hold index nor the
// one-hold-per-user guard in Redis knows this booking's expired hold, so
// the buyer's other seats are counted here, from the ledger, under the
// buyer's lock, which every new hold's row is written under too (a row
// written before is counted; one after is refused while the buyer has
// seats from the reserve), and after the event's row is locked by taking
// the reserve's seats (which orders this count after any other late
// payment of the event). A buyer with any is
// refunded, even within max_per_user: the guard keeps one hold per buyer,
// and a second sale would be uncounted once the other hold ended, leaving
// the buyer free to hold the limit on top of it.
func (s *Settlement) latePayment(ctx context.Context, ev *seats.Event, b ledger.Booking, paymentID string) error {
	now := s.now()
	var settled ledger.Booking
	var expired, absorbed, refund bool
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		expired, absorbed, refund = false, false, false
		// The buyer's lock first, as a new hold's row takes it: the count
		// below sees any hold row written before, and a row written after
		// is refused once this sale is confirmed from the reserve.
		if err := tx.LockBuyer(ctx, b.EventID, b.UserID); err != nil {
			return err
		}
		cur, err := tx.Bookings().Lock(ctx, b.ID)
		if err != nil {
			return err
		}
		if cur.Status != ledger.BookingPaymentPending {
			return errBookingSettled
		}
		h, err := tx.LockHold(ctx, cur.HoldID)
		if err != nil {
			return err
		}
		switch {
		case h.Status == ledger.StatusConfirmed:
			return fmt.Errorf("late payment of booking %s: hold %s was confirmed meanwhile: retry", b.ID, h.ID)
		case h.Status == ledger.StatusPending && !h.ExpiresAt.Before(now):
			return fmt.Errorf("late payment of booking %s: hold %s is live in the ledger, not in redis: retry", b.ID, h.ID)
		case h.Status == ledger.StatusPending:
			if _, err := tx.ExpireLateHold(ctx, h.ID, now); err != nil {
				return err
			}
			expired = true
		}
		// The reserve's seats and the tickets in a savepoint: without a
		// seat to give, they are undone and the money goes back.
		err = tx.Savepoint(ctx, func(sp ledger.Tx) error {
			if err := sp.TakeOverflow(ctx, ev.ID, cur.Quantity); err != nil {
				return err
			}
			others, err := sp.SeatsOfBuyer(ctx, ev.ID, cur.UserID, cur.ID, cur.HoldID, now)
			if err != nil {
				return err
			}
			if others > 0 || cur.Quantity > ev.MaxPerUser {
				return errPerUserLimit
			}
			settled, err = s.confirmBookingTx(ctx, sp, cur, paymentID, true, ReasonLateOverflow, now)
			return err
		})
		reason := ReasonLateSoldOut
		switch {
		case err == nil:
			absorbed = true
			return nil
		case errors.Is(err, ledger.ErrNoSeatLeft):
			reason = ReasonNoSeatLeft
		case errors.Is(err, errPerUserLimit):
			reason = ReasonLatePerUserLimit
		case !errors.Is(err, ledger.ErrOverflowUsedUp):
			return err
		}
		settled, refund, err = tx.Bookings().RefundPayment(ctx, b.ID, reason, paymentID, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("late payment of booking %s: %w", b.ID, err)
	}
	if expired || absorbed {
		// This call took the hold from pending to expired, so it returns
		// the seats, once (also when a failed confirmation left them
		// confirmed in Redis).
		s.seats.Releases().ReleaseLateHold(ctx, ev, b.HoldID, b.UserID, absorbed)
	}
	switch {
	case absorbed:
		s.metrics.LatePayments.WithLabelValues("absorbed").Inc()
		s.metrics.Bookings.WithLabelValues(ledger.BookingConfirmed).Inc()
		s.log.Info("late payment confirmed from the overflow reserve", "booking", b.ID, "event", ev.ID, "seats", b.Quantity)
	case refund:
		s.metrics.LatePayments.WithLabelValues("refunded").Inc()
		switch settled.StatusReason {
		case ReasonNoSeatLeft:
			s.log.Error("late payment refunded: no seat number left although the overflow reserve had room; "+
				"the inventory invariant was broken", "booking", b.ID, "event", ev.ID)
		case ReasonLatePerUserLimit:
			s.log.Info("late payment refunded: the buyer holds other seats meanwhile",
				"booking", b.ID, "event", ev.ID, "user", b.UserID)
		default:
			s.log.Info("late payment refunded: the overflow reserve is used up", "booking", b.ID, "event", ev.ID)
		}
		if err := s.refundBooking(ctx, settled); err != nil {
			s.log.Warn("refund not made yet; the payment reconciliation retries it", "booking", b.ID, "error", err)
		}
	}
	return nil
}

// refundUnseated refunds a payment whose booking cannot get a seat number:
// every seat of the event is ticketed, so more holds were live than the
// event has seats (the inventory invariant was broken). Answering the
// webhook with an error would only have it retried until the provider gives
// up, the money taken and no ticket. The hold is released in the ledger;
// its seats are not given back to Redis, which sold more than there are:
// the reconciler corrects Redis from the ledger.
func (s *Settlement) refundUnseated(ctx context.Context, ev *seats.Event, b ledger.Booking, paymentID string) error {
	now := s.now()
	var settled ledger.Booking
	var refund bool
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		cur, err := tx.Bookings().Lock(ctx, b.ID)
		if err != nil {
			return err
		}
		if cur.Status != ledger.BookingPaymentPending {
			return errBookingSettled
		}
		if _, err := tx.ReleaseUnseatedHold(ctx, cur.HoldID, now); err != nil {
			return err
		}
		settled, refund, err = tx.Bookings().RefundPayment(ctx, b.ID, ReasonNoSeatLeft, paymentID, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("refund booking %s without a seat: %w", b.ID, err)
	}
	if !refund {
		return nil
	}
	s.log.Error("payment refunded: no seat number left for a paid booking; the inventory invariant was broken",
		"booking", b.ID, "event", ev.ID, "hold", b.HoldID, "seats", b.Quantity)
	if err := s.refundBooking(ctx, settled); err != nil {
		s.log.Warn("refund not made yet; the payment reconciliation retries it", "booking", b.ID, "error", err)
	}
	return nil
}

// paidAfterFailure settles a succeeded payment of a booking marked failed:
// a failure was reported first (an asynchronous authentication, a
// declined attempt the provider retried), or meanwhile. The success is the
// provider's last word, so the money ends as a sale or a refund, never kept:
//
//   - the hold still pending and no other booking of it live: the booking
//     waits for its payment again and is settled as any paid booking (the
//     hold confirmed in Redis and the ledger, the tickets issued; or, the
//     hold expired meanwhile, the late-payment policy);
//   - otherwise (the buyer pays through another booking of the hold, or the
//     hold ended): refunded, ReasonPaidAfterFailure.
//
// The booking's row and then its hold's are locked: a booking of the hold
// is written in the transaction that locks the hold's row, so once this
// one has it, a new statement sees any such booking committed.
func (s *Settlement) paidAfterFailure(ctx context.Context, b ledger.Booking, paymentID string, known *payment.Payment, paid *paidEvent, revived int) error {
	now := s.now()
	var cur, settled ledger.Booking
	var hold ledger.Hold
	var again, refund bool
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		again, refund = false, false
		var err error
		if cur, err = tx.Bookings().Lock(ctx, b.ID); err != nil {
			return err
		}
		switch {
		case cur.Status == ledger.BookingPaymentPending:
			// Revived by a concurrent settlement: settled as waiting.
			again = true
			return nil
		case cur.Status != ledger.BookingFailed || cur.RefundStatus != "":
			return nil
		}
		if hold, err = tx.LockHold(ctx, cur.HoldID); err != nil {
			return err
		}
		taken := false
		switch other, err := tx.Bookings().LiveOfHold(ctx, cur.HoldID); {
		case err == nil:
			taken = live(other)
		case !errors.Is(err, ledger.ErrNotFound):
			return err
		}
		if hold.Status == ledger.StatusPending && !taken && revived < revivals {
			cur, again, err = tx.Bookings().Revive(ctx, cur.ID, paymentID, now)
			return err
		}
		settled, refund, err = tx.Bookings().RefundPayment(ctx, cur.ID, ReasonPaidAfterFailure, paymentID, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("payment of failed booking %s succeeded: %w", b.ID, err)
	}
	if again {
		s.log.Info("payment of a failed booking succeeded: settled as paid", "booking", b.ID)
		return s.settlePaymentOnce(ctx, cur, paymentID, known, paid, revived+1)
	}
	if !refund {
		return nil
	}
	s.log.Warn("payment of a failed booking succeeded while its hold is another booking's or ended: refunded",
		"booking", b.ID, "hold", b.HoldID, "hold_status", hold.Status)
	if hold.Status != ledger.StatusPending && hold.Status != ledger.StatusConfirmed {
		// The ledger ended the hold: whatever Redis has of it (a
		// confirmation whose ledger step found the booking failed) goes
		// back. A pending hold is left to its live booking, which settles
		// it, or to the reaper.
		if err := s.returnSeats(ctx, settled); err != nil {
			s.log.Warn("seats of an ended hold not returned; the drift corrector will", "booking", b.ID, "error", err)
		}
	}
	if err := s.refundBooking(ctx, settled); err != nil {
		s.log.Warn("refund not made yet; the payment reconciliation retries it", "booking", b.ID, "error", err)
	}
	return nil
}

// giveSeatsBack takes a confirmed booking's seats back, in tx: its tickets
// are voided and their seat numbers freed, and its seats go to the overflow
// reserve (a late payment's) or, its hold released, to the inventory:
// release says the caller settles Redis (returnSeats) after the commit:
// the hold's seats returned, or the overflow buyer's record of no seats
// removed from the one-hold-per-user guard. A cancellation and a refund
// made at the provider both end a sale this way, but never one a gate let
// a ticket of in (ErrBookingLetIn): its seats are in use.
func giveSeatsBack(ctx context.Context, tx ledger.Tx, b ledger.Booking, now time.Time) (release bool, err error) {
	if b.Overflow {
		if err := tx.GiveOverflow(ctx, b.EventID, b.Quantity); err != nil {
			return false, err
		}
	} else {
		ok, err := tx.ReleaseConfirmedHold(ctx, b.HoldID, now)
		if err != nil {
			return false, err
		}
		if !ok {
			return false, fmt.Errorf("hold %s is not confirmed", b.HoldID)
		}
	}
	if err := tx.VoidTicketsAt(ctx, b.ID, b.EventID, now); err != nil {
		return false, err
	}
	// Asked once the tickets are void: a scan under way (it locks its
	// ticket) finished first, and a later one finds them void. The caller's
	// transaction rolls back.
	switch in, err := tx.Bookings().LetIn(ctx, b.ID); {
	case err != nil:
		return false, err
	case in:
		return false, ErrBookingLetIn
	}
	return true, nil
}

// returnSeats settles Redis for a sale giveSeatsBack ended: the seats of
// its hold back, or, for a sale served from the overflow reserve, the
// buyer's record of no seats gone, so the buyer, who has no seat any more,
// may hold again.
func (s *env) returnSeats(ctx context.Context, b ledger.Booking) error {
	ev, err := s.seats.Registry().Event(ctx, b.EventID)
	if err != nil {
		return err
	}
	mode := inventory.AnyHold
	if b.Overflow {
		mode = inventory.DropBuyer
	}
	s.seats.Releases().ReleaseSeats(ctx, ev, b.HoldID, mode)
	return nil
}

func (s *env) paymentRequest(b ledger.Booking) payment.CreateRequest {
	return payment.CreateRequest{
		BookingID: b.ID, Amount: b.Amount, Currency: b.Currency, PaymentMethod: b.PaymentMethod,
		Metadata: map[string]string{"hold_id": b.HoldID, "event_id": strconv.FormatInt(b.EventID, 10)},
	}
}

// paymentContext bounds a provider call, detached from the client: a buyer
// who hangs up must not cut a charge in half.
func (s *env) paymentContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.PaymentTimeout)
}

// declineReason is the reason a failed payment gives.
func declineReason(err error, p payment.Payment) (reason, paymentID string) {
	paymentID = p.ID
	var d *payment.DeclineError
	if errors.As(err, &d) {
		if d.PaymentID != "" {
			paymentID = d.PaymentID
		}
		switch {
		case d.DeclineCode != "":
			return d.DeclineCode, paymentID
		case d.Code != "":
			return d.Code, paymentID
		}
	}
	if p.FailureCode != "" {
		return p.FailureCode, paymentID
	}
	return "payment_declined", paymentID
}
