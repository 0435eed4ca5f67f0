package booking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// Webhooks come at least once, in any order, maybe concurrently, maybe for
// a payment whose create call has not even returned yet. So:
//
//   - nothing is read before the signature is verified (400, nothing
//     changes);
//   - an event id seen before answers 200 at once: the id is recorded, under
//     a unique constraint, when the event was acted on (on the booking, by
//     the confirmation a payment's success made, in its transaction; else
//     in payment_events after it), so an event whose handling failed (503)
//     is acted on when redelivered;
//   - copies racing each other share one settlement on a node, and on
//     different nodes each run it, which changes a booking only from the
//     status it expects (so once);
//   - the booking is found by payment id, or by the booking id in the
//     payment's metadata while the ledger has not recorded the payment id
//     (it does when the payment settles), checked against the payment its
//     create call got;
//   - refund events (charge.refunded, refund.*) are followed up by asking
//     the provider, never taken at their word (refunds.go);
//   - an event for a payment no booking knows, or of a type the flow does
//     not act on, answers 200 and changes nothing.

// Webhook outcomes, in the answer's body and the metric.
const (
	webhookProcessed = "processed"
	webhookDuplicate = "duplicate"
	webhookIgnored   = "ignored"
)

// settleTimeout bounds the settlement of one payment event; each of its
// steps has a shorter deadline of its own.
const settleTimeout = 30 * time.Second

// HandlePaymentEvent acts on a verified event of the configured provider
// and returns what it did: processed, duplicate or ignored. An error means
// it could not be acted on now (the provider redelivers it).
func (s *Settlement) HandlePaymentEvent(ctx context.Context, ev payment.Event) (string, error) {
	if !ev.Known() {
		return webhookIgnored, nil
	}
	provider := s.payments.Name()
	seen, err := s.ledger.Bookings().EventSeen(ctx, provider, ev.ID)
	if err != nil {
		return "", err
	}
	if seen {
		return webhookDuplicate, nil
	}
	b, found, err := s.bookingOfEvent(ctx, provider, ev)
	if err != nil {
		return "", err
	}
	if !found {
		s.log.Info("webhook for a payment no booking knows: ignored", "event", ev.ID, "type", ev.Type,
			"payment", ev.PaymentID, "booking", ev.BookingID)
		return webhookIgnored, nil
	}
	// Copies of one event arrive together (at-least-once delivery): on this
	// node they share one settlement, which is idempotent, instead of each
	// taking a connection to wait on the same row locks. Only copies: two
	// events of one kind (a refund of 30, then of the other 70) each ask the
	// provider, since one that joined the other's settlement would be
	// recorded as handled on an answer read before it happened. The work is
	// detached from the request that started it, since the others wait for
	// it too.
	v, err, _ := s.flight.Do("settle:"+ev.ID, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		switch ev.Kind {
		case payment.KindPaymentSucceeded:
			paid := &paidEvent{ID: ev.ID}
			return paid, s.settlePaid(ctx, b, ev.PaymentID, paid)
		case payment.KindPaymentFailed:
			reason := ev.FailureCode
			if reason == "" {
				reason = "payment_declined"
			}
			return nil, s.settleFailed(ctx, b, ev.PaymentID, reason)
		case payment.KindRefunded:
			return nil, s.chargeRefunded(ctx, b, ev)
		case payment.KindRefundUpdated:
			return nil, s.refundUpdated(ctx, b, ev)
		}
		return nil, nil
	})
	if err != nil {
		return "", err
	}
	// The confirmation recorded the event on its booking: the first of the
	// copies that shared it is the one that processed it.
	if paid, ok := v.(*paidEvent); ok && paid.Recorded.CompareAndSwap(true, false) {
		return webhookProcessed, nil
	}
	recorded, err := s.ledger.Bookings().RecordEvent(ctx, provider, ev.ID, ev.Type, ev.PaymentID, b.ID, s.now())
	if err != nil {
		return "", err
	}
	if !recorded {
		return webhookDuplicate, nil
	}
	return webhookProcessed, nil
}

// bookingOfEvent finds the booking an event is about: by payment id, as
// its create call recorded it in Redis (paymentIDs; the ledger records it
// when the payment settles, so a waiting booking's is only there) or in
// the ledger; or by the booking id of the payment's metadata.
func (s *Settlement) bookingOfEvent(ctx context.Context, provider string, ev payment.Event) (ledger.Booking, bool, error) {
	if b, found, err := s.madeFor(ctx, ev.PaymentID); found || err != nil {
		return b, found, err
	}
	b, err := s.ledger.Bookings().ByPayment(ctx, provider, ev.PaymentID)
	if err == nil {
		return b, true, nil
	}
	if !errors.Is(err, ledger.ErrNotFound) {
		return ledger.Booking{}, false, err
	}
	id, perr := uuid.Parse(ev.BookingID)
	if perr != nil {
		return ledger.Booking{}, false, nil
	}
	b, err = s.ledger.Booking(ctx, id.String())
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return ledger.Booking{}, false, nil
	case err != nil:
		return ledger.Booking{}, false, err
	case b.Provider != provider:
		return ledger.Booking{}, false, nil
	case b.PaymentID != "" && b.PaymentID != ev.PaymentID:
		s.log.Warn("webhook names a booking paid by another payment: ignored", "event", ev.ID,
			"payment", ev.PaymentID, "booking", b.ID, "booking_payment", b.PaymentID)
		return ledger.Booking{}, false, nil
	case b.PaymentID == "":
		// The ledger records a booking's payment when it settles, and
		// metadata anyone can write names the booking. Only the booking's
		// own payment may settle it: the one its create call kept in
		// Redis, or, when Redis has none (the create call's answer is late
		// or was lost, or Redis lost it), the one the provider says, as
		// the payment reconciliation asks it. An outcome caused by the
		// create call itself, which the provider names by the call's
		// idempotency key, needs neither: asking again repeats that call,
		// which Stripe answers for 24 hours as it answered it the first
		// time, a 500 included, while the payment it made is real.
		if ev.RequestKey != "" && ev.RequestKey == payment.PaymentKey(b.ID) {
			return b, true, nil
		}
		own, err := s.paid.Of(ctx, b)
		if err != nil {
			s.log.Warn("payment id not read from Redis; asking the provider", "booking", b.ID, "error", err)
		}
		if own == "" {
			if own, err = s.ownPayment(ctx, b); err != nil {
				return ledger.Booking{}, false, err
			}
		}
		if own != ev.PaymentID {
			s.log.Warn("webhook names a booking another payment is for: ignored", "event", ev.ID,
				"payment", ev.PaymentID, "booking", b.ID, "booking_payment", own)
			return ledger.Booking{}, false, nil
		}
	}
	return b, true, nil
}

// madeFor is the booking the payment was made for as its create call
// recorded it in Redis, if that booking has no other payment.
func (s *Settlement) madeFor(ctx context.Context, paymentID string) (ledger.Booking, bool, error) {
	if paymentID == "" {
		return ledger.Booking{}, false, nil
	}
	id, err := s.paid.BookingOf(ctx, paymentID)
	if err != nil {
		s.log.Warn("payment record not read from Redis; looking further", "payment", paymentID, "error", err)
	}
	if id == "" {
		return ledger.Booking{}, false, nil
	}
	b, err := s.ledger.Booking(ctx, id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return ledger.Booking{}, false, nil
	case err != nil:
		return ledger.Booking{}, false, err
	}
	return b, b.PaymentID == "" || b.PaymentID == paymentID, nil
}

// ownPayment is the id of the payment the booking's create call made: the
// same request again, which the provider answers with the payment it made
// for that idempotency key ("" when it made none and will not).
func (s *Settlement) ownPayment(ctx context.Context, b ledger.Booking) (string, error) {
	pctx, cancel := s.paymentContext(ctx)
	defer cancel()
	if !s.mayRepeatCreate(b) {
		// Repeated now, the create call would make a new payment: only a
		// search by the booking's metadata may say which is its own.
		if p, ok := s.findPayment(pctx, b); ok {
			return p.ID, nil
		}
		s.log.Error("which payment is the booking's is not known past the provider's idempotency window",
			"booking", b.ID, "created_at", b.CreatedAt)
		return "", fmt.Errorf("the payment of booking %s: not found by search past the idempotency window", b.ID)
	}
	p, err := s.payments.CreatePayment(pctx, s.paymentRequest(b))
	switch {
	case p.ID != "":
		return p.ID, nil
	case refusedUnseen(err, true):
		// Which payment is the booking's is not known: the event comes
		// again rather than being ignored.
		s.log.Error("the provider refused the repeated create call without saying which payment is the booking's",
			"booking", b.ID, "error", err)
		return "", fmt.Errorf("the payment of booking %s: %w", b.ID, err)
	case errors.Is(err, payment.ErrDeclined), errors.Is(err, payment.ErrInvalidRequest):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("the payment of booking %s: %w", b.ID, err)
	}
	return "", nil
}
