package booking

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/origin/seats"
)

// Outcome is what a booking request came to.
type Outcome int

const (
	// Created: the booking was made and its payment started (Result.Body
	// is the booking as that step left it, payment_pending or, free,
	// confirmed).
	Created Outcome = iota + 1
	// Declined: the booking was made and the provider declined its payment.
	Declined
	// Replayed: a retry of the request that made Result.Booking; Result.Body
	// is the first answer.
	Replayed
	// Existing: the hold has a booking already, Result.Booking, made with
	// another Idempotency-Key.
	Existing
	// HoldExpired: the hold's expiry passed; its seats may be someone else's.
	HoldExpired
	// HoldNotActive: the hold is confirmed or released (Result.HoldStatus).
	HoldNotActive
	// KeyReused: the Idempotency-Key was used with another request body.
	KeyReused
	// Unavailable: the ledger or Redis cannot take the booking now.
	Unavailable
)

// Request is a validated booking request, its Idempotency-Key claimed.
type Request struct {
	Event *seats.Event
	Hold  ledger.Hold
	User  string
	// Key is the Idempotency-Key, Digest the request body's digest.
	Key, Digest string
	// Method is the payment method token.
	Method string
}

// Result is a booking request's outcome.
type Result struct {
	Outcome    Outcome
	Booking    ledger.Booking
	Body       []byte
	HoldStatus string
}

// Create is the booking flow after the request is authenticated, validated
// and its idempotency key claimed: the booking row and the hold's extension
// in one transaction, then the provider's charge outside it.
func (s *Service) Create(ctx context.Context, req Request) Result {
	h, ev := req.Hold, req.Event
	if b, err := s.ledger.Bookings().ByKey(ctx, req.User, req.Key); err == nil {
		return s.resumeBooking(ctx, ev, b, req.Digest)
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return s.unavailable("booking looked up by its key", "hold", h.ID, err)
	}
	if b, err := s.ledger.Bookings().LiveOfHold(ctx, h.ID); err == nil && (live(b) || h.Status != ledger.StatusPending) {
		// A pending hold's ended booking (a payment refunded after it
		// failed, the buyer paying through another) does not stop a new one.
		return Result{Outcome: Existing, Booking: b}
	} else if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return s.unavailable("hold's booking looked up", "hold", h.ID, err)
	}
	now := s.now()
	switch st := h.StatusAt(now); st {
	case ledger.StatusExpired:
		return Result{Outcome: HoldExpired}
	case ledger.StatusConfirmed, ledger.StatusReleased:
		return Result{Outcome: HoldNotActive, HoldStatus: st}
	}

	// The hold must outlast the payment: at least PaymentWindow from now,
	// never longer than a fresh hold would last.
	until := now.Add(min(s.cfg.PaymentWindow, ev.HoldTTL()))
	id := uuid.Must(uuid.NewV7()).String()
	var created ledger.Booking
	_, err := s.seats.ExtendHold(ctx, h.ID, until, func(tx ledger.Tx, held ledger.Hold) error {
		var err error
		created, err = tx.Bookings().Insert(ctx, ledger.NewBooking{
			ID: id, HoldID: h.ID, EventID: ev.ID, UserID: req.User, Quantity: held.Quantity, Amount: held.Amount,
			Currency: ev.Currency, Provider: s.payments.Name(), PaymentMethod: req.Method,
			IdempotencyKey: req.Key, RequestDigest: req.Digest, CreatedAt: now, HoldUntil: held.ExpiresAt,
		})
		return err
	})
	switch {
	case err == nil:
	case errors.Is(err, ledger.ErrBookingExists), errors.Is(err, ledger.ErrHoldNotActive):
		// A booking with another key won the hold a moment ago.
		b, lerr := s.ledger.Bookings().LiveOfHold(ctx, h.ID)
		if lerr == nil {
			return Result{Outcome: Existing, Booking: b}
		}
		if errors.Is(err, ledger.ErrBookingExists) {
			return s.unavailable("the hold's other booking looked up", "hold", h.ID, lerr)
		}
		return Result{Outcome: HoldNotActive, HoldStatus: "no longer pending"}
	case errors.Is(err, ledger.ErrBookingKeyUsed):
		b, lerr := s.ledger.Bookings().ByKey(ctx, req.User, req.Key)
		if lerr != nil {
			return s.unavailable("booking looked up by its key", "hold", h.ID, lerr)
		}
		return s.resumeBooking(ctx, ev, b, req.Digest)
	case errors.Is(err, seats.ErrHoldExpired):
		return Result{Outcome: HoldExpired}
	default:
		return s.unavailable("booking not recorded", "hold", h.ID, err)
	}
	s.metrics.Bookings.WithLabelValues("created").Inc()
	return s.pay(ctx, created, false)
}

// unavailable is the answer of a backing service that failed the request,
// its cause logged: the buyer is told only that it is unavailable.
func (s *Service) unavailable(what, key, id string, err error) Result {
	s.log.Warn(what+": answered unavailable", key, id, "error", err)
	return Result{Outcome: Unavailable}
}

// live reports whether a booking can still become or is a sale.
func live(b ledger.Booking) bool {
	return b.Status == ledger.BookingPaymentPending || b.Status == ledger.BookingConfirmed
}

// resumeBooking answers a retry of the request that made b, whose
// idempotency record is gone: the stored answer; the booking waiting for
// the payment its charge made; or, when the first attempt stopped before
// the provider answered, the payment carried on (the same payment key: the
// provider charges once).
func (s *Service) resumeBooking(ctx context.Context, ev *seats.Event, b ledger.Booking, digest string) Result {
	if b.RequestDigest != digest {
		return Result{Outcome: KeyReused}
	}
	if b.Response != nil {
		return Result{Outcome: Replayed, Booking: b, Body: b.Response}
	}
	// Past the provider's idempotency window the same create would be a new
	// payment: the booking is answered as it is, left to the reconciliation.
	if b.Status == ledger.BookingPaymentPending && b.PaymentID == "" && s.mayRepeatCreate(b) {
		return s.pay(ctx, b, true)
	}
	if b.PaymentID != "" && b.Amount > 0 {
		// A charge the provider took answers the booking waiting for that
		// payment, and is not kept in the ledger (pay): rendered again, it
		// is the same answer, whatever the booking became since.
		return Result{Outcome: Replayed, Booking: b, Body: s.cfg.Render(asCharged(b), nil)}
	}
	// The booking as it is now, with its tickets once it is confirmed (a
	// webhook may have settled it since the first attempt).
	body, err := s.Body(ctx, b)
	if err != nil {
		return s.unavailable("booking's answer not made", "booking", b.ID, err)
	}
	if err := s.ledger.Bookings().Answered(ctx, b.ID, b.PaymentID, body, s.now()); err != nil {
		s.log.Warn("booking response not kept", "booking", b.ID, "error", err)
	}
	return Result{Outcome: Replayed, Booking: b, Body: body}
}

// asCharged is b as it was when its charge was taken: waiting for the
// payment.
func asCharged(b ledger.Booking) ledger.Booking {
	b.Status, b.StatusReason, b.Overflow = ledger.BookingPaymentPending, "", false
	b.RefundStatus, b.AmountRefunded = "", 0
	return b
}

// pay charges a new booking, outside any transaction, and answers with the
// booking as this step leaves it: payment_pending (the webhook or the
// reconciliation settles it) or failed (declined). A failure keeps the
// answer in the booking's row in the same write; a charge the provider
// took keeps its payment id in Redis (paymentIDs) and writes nothing more
// to the ledger before it settles: a retry that finds Redis without its
// idempotency record charges again with the same payment key, which the
// provider answers with the same payment. Any other answer is kept in the
// booking's row. repeat says an earlier attempt may have called the
// provider with the same payment key.
func (s *Service) pay(ctx context.Context, b ledger.Booking, repeat bool) Result {
	var kept bool
	if b.Amount == 0 {
		// Nothing to charge (a free event): confirmed at once.
		if err := s.settle.settlePaid(ctx, b, "", nil); err != nil {
			s.log.Warn("free booking not confirmed yet", "booking", b.ID, "error", err)
		} else if cur, err := s.ledger.Booking(ctx, b.ID); err == nil {
			b = cur
		}
	} else {
		pctx, cancel := s.paymentContext(ctx)
		p, err := s.payments.CreatePayment(pctx, s.paymentRequest(b))
		cancel()
		b.PaymentID = p.ID
		switch {
		case err == nil && p.ID != "":
			if kerr := s.paid.Keep(context.WithoutCancel(ctx), b, p.ID); kerr != nil {
				s.log.Warn("payment id not kept in Redis; kept in the ledger", "booking", b.ID, "error", kerr)
			} else {
				kept = true
			}
		case err == nil:
		case errors.Is(err, payment.ErrDeclined):
			reason, pid := declineReason(err, p)
			b.PaymentID = pid
			b, kept = s.failPayment(ctx, b, pid, reason)
		case refusedUnseen(err, repeat):
			s.log.Error("payment outcome unknown: the provider refused the create call without saying what "+
				"an earlier call under its key did; left to the reconciliation", "booking", b.ID, "error", err)
		case errors.Is(err, payment.ErrInvalidRequest):
			s.log.Error("payment request refused by the provider", "booking", b.ID, "error", err)
			b, kept = s.failPayment(ctx, b, p.ID, ReasonPaymentRejected)
		default:
			// Unknown outcome: the booking waits; the webhook or the payment
			// reconciliation (same payment key) settles it.
			s.log.Warn("payment outcome unknown; left to the reconciliation", "booking", b.ID, "error", err)
		}
	}
	body := s.cfg.Render(b, nil)
	if b.Status == ledger.BookingConfirmed {
		if full, err := s.Body(ctx, b); err == nil {
			body = full
		}
	}
	if !kept {
		if err := s.ledger.Bookings().Answered(context.WithoutCancel(ctx), b.ID, b.PaymentID, body, s.now()); err != nil {
			s.log.Warn("booking response not kept", "booking", b.ID, "error", err)
		}
	}
	if b.Status == ledger.BookingFailed {
		return Result{Outcome: Declined, Booking: b, Body: body}
	}
	return Result{Outcome: Created, Booking: b, Body: body}
}

// refusedUnseen reports whether err refuses a create call without saying
// what an earlier call under the same payment key did, which may have
// charged: a key reused with other parameters (the booking's payment key
// is its own, so an earlier call under it reached the provider) or, for a
// repeat, credentials refused before the provider looked at the key (a key
// rolled or revoked since). Such a booking waits, it is not failed.
func refusedUnseen(err error, repeat bool) bool {
	return errors.Is(err, payment.ErrIdempotencyConflict) || repeat && errors.Is(err, payment.ErrUnauthorized)
}

// failPayment marks a waiting booking failed and returns it as it is now,
// and whether the request's answer (the booking as it is now) was kept with
// the failure, in the same write. Its hold is left alone: the buyer may pay
// again (a new booking) until it expires.
func (s *Service) failPayment(ctx context.Context, b ledger.Booking, paymentID, reason string) (ledger.Booking, bool) {
	want := b
	want.Status, want.StatusReason = ledger.BookingFailed, reason
	if want.PaymentID == "" {
		want.PaymentID = paymentID
	}
	answer := s.cfg.Render(want, nil)
	failed, ok, err := s.ledger.Bookings().Fail(ctx, b.ID, paymentID, reason, answer, s.now())
	switch {
	case err != nil:
		s.log.Warn("booking not marked failed", "booking", b.ID, "error", err)
		return b, false
	case ok:
		s.metrics.Bookings.WithLabelValues(ledger.BookingFailed).Inc()
		return failed, bytes.Equal(s.cfg.Render(failed, nil), answer)
	}
	if cur, err := s.ledger.Booking(ctx, b.ID); err == nil {
		return cur, false
	}
	return b, false
}

// Cancel cancels a confirmed booking: its tickets are voided and its
// seats given back (to the inventory once, or to the overflow reserve) in
// one transaction, then the payment is refunded outside it. Cancelling a
// booking the buyer cancelled already returns it as it is (retrying a
// refund still due); a booking a gate let a ticket of in is
// ErrBookingLetIn; anything else is ErrBookingNotCancellable.
func (s *Service) Cancel(ctx context.Context, bookingID string) (ledger.Booking, error) {
	now := s.now()
	var cancelled ledger.Booking
	var acted, release bool
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		acted, release = false, false
		cur, err := tx.Bookings().Lock(ctx, bookingID)
		if err != nil {
			return err
		}
		switch {
		case cur.Status == ledger.BookingConfirmed:
		case (cur.Status == ledger.BookingCancelled || cur.Status == ledger.BookingRefunded) && cur.StatusReason == ReasonCancelled:
			cancelled = cur
			return nil
		default:
			return fmt.Errorf("cancel booking %s (%s): %w", bookingID, cur.Status, ErrBookingNotCancellable)
		}
		if release, err = giveSeatsBack(ctx, tx, cur, now); err != nil {
			return fmt.Errorf("cancel booking %s: %w", bookingID, err)
		}
		refund := ""
		if cur.Amount > 0 && cur.PaymentID != "" {
			refund = ledger.RefundPending
		}
		cancelled, acted, err = tx.Bookings().Cancel(ctx, cur.ID, ReasonCancelled, refund, now)
		return err
	})
	if err != nil {
		return ledger.Booking{}, err
	}
	if acted {
		s.metrics.Bookings.WithLabelValues(ledger.BookingCancelled).Inc()
	}
	if release {
		if err := s.returnSeats(ctx, cancelled); err != nil {
			return ledger.Booking{}, err
		}
	}
	if cancelled.RefundStatus == ledger.RefundPending {
		if err := s.refundBooking(ctx, cancelled); err != nil {
			s.log.Warn("refund not made yet; the payment reconciliation retries it", "booking", bookingID, "error", err)
			return cancelled, nil
		}
		return s.ledger.Booking(ctx, bookingID)
	}
	return cancelled, nil
}
