package booking

import (
	"context"
	"errors"
	"fmt"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// An operator's resolution of a booking whose payment the origin cannot
// find out about by itself: past the provider's idempotency window, with
// no payment id, a search that finds nothing (or is not offered). The
// operator looks the booking up in the provider's dashboard and either
// names its payment, which is then asked about and settled as a webhook's
// would be, or says nothing was charged, which fails the booking.

// ReasonNotCharged: an operator found no payment of the booking at the
// provider, after the origin could no longer find out (ResolveNotCharged).
const ReasonNotCharged = "not_charged"

// ResolveOutcome is what a resolution did.
type ResolveOutcome int

const (
	// Resolved: the booking is as its payment left it (confirmed, failed,
	// refunded, or still waiting when the provider says the payment is).
	Resolved ResolveOutcome = iota
	// ResolveNotPending: the booking no longer waits for its payment.
	ResolveNotPending
	// ResolvePaymentKnown: the booking has its payment id; the
	// reconciliation asks the provider about it, and so may the operator,
	// by naming it.
	ResolvePaymentKnown
	// ResolveStillAsking: the booking is younger than the window in which
	// the reconciliation repeats its create call, which finds its payment.
	ResolveStillAsking
	// ResolveNotItsPayment: the payment named is not the booking's: its
	// metadata names another booking, or the booking's create call got
	// another.
	ResolveNotItsPayment
	// ResolveNoSuchPayment: the provider does not know the payment named.
	ResolveNoSuchPayment
)

// ResolvePayment settles booking id by the payment the operator names: the
// provider is asked about it, and it must name the booking in its
// metadata, and be the one its create call got when that is known.
func (s *Settlement) ResolvePayment(ctx context.Context, id, paymentID string) (ledger.Booking, ResolveOutcome, error) {
	b, err := s.ledger.Bookings().Get(ctx, id)
	if err != nil {
		return ledger.Booking{}, 0, err
	}
	if b.Status != ledger.BookingPaymentPending {
		return b, ResolveNotPending, nil
	}
	own := b.PaymentID
	if own == "" {
		if own, err = s.paid.Of(ctx, b); err != nil {
			return b, 0, fmt.Errorf("resolve booking %s: %w", id, err)
		}
	}
	if own != "" && own != paymentID {
		return b, ResolveNotItsPayment, nil
	}
	pctx, cancel := s.paymentContext(ctx)
	p, err := s.payments.GetPayment(pctx, paymentID)
	cancel()
	switch {
	case errors.Is(err, payment.ErrNotFound):
		return b, ResolveNoSuchPayment, nil
	case err != nil:
		return b, 0, fmt.Errorf("resolve booking %s: %w", id, err)
	case p.BookingID != b.ID:
		return b, ResolveNotItsPayment, nil
	}
	if err := s.ledger.Bookings().Answered(ctx, b.ID, p.ID, b.Response, s.now()); err != nil {
		return b, 0, err
	}
	s.log.Warn("booking resolved by an operator with its payment", "booking", b.ID, "payment", p.ID, "status", p.Status)
	switch p.Status {
	case payment.StatusSucceeded:
		err = s.settlePayment(ctx, b, p.ID, &p, nil)
	case payment.StatusFailed, payment.StatusCanceled:
		err = s.settleFailed(ctx, b, p.ID, failureReason(p))
	}
	if err != nil {
		return b, 0, err
	}
	b, err = s.ledger.Bookings().Get(ctx, id)
	return b, Resolved, err
}

// ResolveNotCharged fails booking id on the operator's word that the
// provider made no payment for it: only a booking the origin can no longer
// find out about by itself (no payment id, past the window in which its
// create call is repeated). Should a payment of it turn up after all, its
// webhook is a payment after a failure: refunded, or confirmed while the
// hold is still the buyer's.
func (s *Settlement) ResolveNotCharged(ctx context.Context, id string) (ledger.Booking, ResolveOutcome, error) {
	b, err := s.ledger.Bookings().Get(ctx, id)
	if err != nil {
		return ledger.Booking{}, 0, err
	}
	switch {
	case b.Status != ledger.BookingPaymentPending:
		return b, ResolveNotPending, nil
	case b.PaymentID != "":
		return b, ResolvePaymentKnown, nil
	case s.mayRepeatCreate(b):
		return b, ResolveStillAsking, nil
	}
	if known, err := s.paid.Of(ctx, b); err != nil {
		return b, 0, fmt.Errorf("resolve booking %s: %w", id, err)
	} else if known != "" {
		b.PaymentID = known
		return b, ResolvePaymentKnown, nil
	}
	if err := s.settleFailed(ctx, b, "", ReasonNotCharged); err != nil {
		return b, 0, err
	}
	s.log.Warn("booking failed by an operator: no payment of it at the provider", "booking", b.ID)
	b, err = s.ledger.Bookings().Get(ctx, id)
	return b, Resolved, err
}
