package booking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// The payment reconciliation's part of a booking (maintenance.PaymentReconciler
// leases the bookings due): a pending refund is asked about, a failed one
// made again, and a payment whose outcome was not heard of asked about,
// through the same code as the webhooks.

// SettleUnsettled settles one booking the payment reconciliation leased.
func (s *Settlement) SettleUnsettled(ctx context.Context, b ledger.Booking) error {
	var err error
	switch {
	case b.RefundStatus == ledger.RefundPending:
		err = s.refundBooking(ctx, b)
	case b.RefundStatus == ledger.RefundFailed:
		err = s.retryRefund(ctx, b)
	case b.Status == ledger.BookingPaymentPending:
		err = s.resolvePayment(ctx, b)
	case b.Status == ledger.BookingFailed:
		err = s.recheckFailed(ctx, b)
	case b.Status == ledger.BookingConfirmed && b.ProviderRefundPending:
		err = s.partlyRefunded(ctx, b, payment.Event{})
	}
	if err != nil {
		s.metrics.PaymentChecks.WithLabelValues("error").Inc()
	}
	return err
}

// AfterPass sets the gauges of failed refunds and of unresolved payments
// once a pass is over, from the ledger, so every node reports the whole
// figure.
func (s *Settlement) AfterPass(ctx context.Context) {
	s.countFailedRefunds(ctx)
	n, err := s.ledger.Bookings().CountUnresolvedPayments(ctx, s.now().Add(-CreateRepeatWindow))
	if err != nil {
		s.log.Warn("unresolved payments not counted", "error", err)
		return
	}
	s.metrics.PaymentsUnresolved.Set(float64(n))
}

// resolvePayment asks the provider about a booking still waiting for its
// payment. Without a payment id (the create call's answer was lost) it
// repeats the create with the same key: the provider returns the payment
// it made, or makes it if the first call never reached it.
func (s *Settlement) resolvePayment(ctx context.Context, b ledger.Booking) error {
	if b.Amount == 0 {
		return s.settlePaid(ctx, b, "", nil)
	}
	pctx, cancel := s.paymentContext(ctx)
	defer cancel()
	var p payment.Payment
	var err error
	if b.PaymentID == "" && !s.mayRepeatCreate(b) {
		found, ok := s.pastCreateWindow(pctx, b)
		if !ok {
			return nil
		}
		b.PaymentID = found
	}
	if b.PaymentID != "" {
		p, err = s.payments.GetPayment(pctx, b.PaymentID)
		if errors.Is(err, payment.ErrNotFound) {
			s.metrics.PaymentChecks.WithLabelValues("not_found").Inc()
			if !s.payments.NotFoundIsFinal() {
				s.log.Error("the provider answers 404 for the booking's payment, which it gave: the API key is of "+
					"another account or mode than the payment; the booking waits", "booking", b.ID, "payment", b.PaymentID)
				return fmt.Errorf("resolve payment of booking %s: %w", b.ID, err)
			}
			s.log.Warn("the provider does not know the booking's payment: failed", "booking", b.ID, "payment", b.PaymentID)
			return s.settleFailed(ctx, b, "", ReasonPaymentNotFound)
		}
	} else {
		p, err = s.payments.CreatePayment(pctx, s.paymentRequest(b))
		switch {
		case errors.Is(err, payment.ErrDeclined):
			s.metrics.PaymentChecks.WithLabelValues("failed").Inc()
			reason, pid := declineReason(err, p)
			return s.settleFailed(ctx, b, pid, reason)
		case refusedUnseen(err, true):
			s.log.Error("payment outcome unknown: the provider refused the repeated create call without saying "+
				"what the first did; the booking waits", "booking", b.ID, "error", err)
			return fmt.Errorf("resolve payment of booking %s: %w", b.ID, err)
		case errors.Is(err, payment.ErrInvalidRequest):
			s.metrics.PaymentChecks.WithLabelValues("failed").Inc()
			return s.settleFailed(ctx, b, p.ID, ReasonPaymentRejected)
		case err != nil && (errors.Is(err, payment.ErrAmbiguous) || refusedUnseen(err, true)):
			// Stripe answers a create it answered 500 with the same 500
			// for 24 hours, whatever payment it made: looked for by its
			// metadata instead.
			if found, ok := s.findPayment(pctx, b); ok {
				p, err = found, nil
			}
		}
		if err == nil && p.ID != "" {
			if aerr := s.ledger.Bookings().Answered(ctx, b.ID, p.ID, b.Response, s.now()); aerr != nil {
				return aerr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("resolve payment of booking %s: %w", b.ID, err)
	}
	switch p.Status {
	case payment.StatusSucceeded:
		s.metrics.PaymentChecks.WithLabelValues("succeeded").Inc()
		return s.settlePayment(ctx, b, p.ID, &p, nil)
	case payment.StatusFailed, payment.StatusCanceled:
		s.metrics.PaymentChecks.WithLabelValues("failed").Inc()
		return s.settleFailed(ctx, b, p.ID, failureReason(p))
	}
	s.metrics.PaymentChecks.WithLabelValues("pending").Inc()
	return nil
}

// CreateRepeatWindow is how long after a booking was made its payment's
// create call may be repeated: Stripe keeps an idempotency key 24 hours,
// and a create repeated after that is a new payment (a second charge).
const CreateRepeatWindow = 23 * time.Hour

// mayRepeatCreate reports whether b's create call may still be repeated
// under its payment key.
func (s *env) mayRepeatCreate(b ledger.Booking) bool {
	return s.now().Sub(b.CreatedAt) < CreateRepeatWindow
}

// pastCreateWindow is the payment of b, waiting past CreateRepeatWindow
// without a payment id in the ledger: the one its create call kept in
// Redis, or the one a search by its metadata finds. Without either its
// outcome stays unknown, and nothing but the search asks the provider
// again: the booking waits, counted by the gauge of unresolved payments,
// for an operator.
func (s *Settlement) pastCreateWindow(ctx context.Context, b ledger.Booking) (string, bool) {
	id, err := s.paid.Of(ctx, b)
	if err != nil {
		s.log.Warn("payment id not read from Redis; searching the provider", "booking", b.ID, "error", err)
	}
	if id == "" {
		if p, ok := s.findPayment(ctx, b); ok {
			id = p.ID
		}
	}
	if id == "" {
		s.metrics.PaymentChecks.WithLabelValues("unresolved").Inc()
		s.log.Error("payment outcome unknown past the provider's idempotency window: the create call is not "+
			"repeated (it would be a new payment); look the booking id up in the provider's dashboard "+
			"(metadata booking_id), then settle or refund", "booking", b.ID, "created_at", b.CreatedAt)
		return "", false
	}
	if err := s.ledger.Bookings().Answered(ctx, b.ID, id, b.Response, s.now()); err != nil {
		s.log.Warn("payment id of the booking not recorded", "booking", b.ID, "payment", id, "error", err)
	}
	return id, true
}

// paymentFinder is a provider that can look payments up by the booking
// their metadata names (Stripe's Search API).
type paymentFinder interface {
	FindPayments(ctx context.Context, bookingID string) ([]payment.Payment, error)
}

// findPayment looks up the payment made for b by its metadata, where the
// provider can. Finding none says nothing (the search lags, or is not
// offered); finding several (metadata anyone with the key can write)
// says no more, and is left to an operator.
func (s *Settlement) findPayment(ctx context.Context, b ledger.Booking) (payment.Payment, bool) {
	f, ok := s.payments.(paymentFinder)
	if !ok {
		return payment.Payment{}, false
	}
	found, err := f.FindPayments(ctx, b.ID)
	if err != nil {
		s.log.Warn("payments of the booking not searched", "booking", b.ID, "error", err)
		return payment.Payment{}, false
	}
	switch len(found) {
	case 0:
		return payment.Payment{}, false
	case 1:
		return found[0], true
	}
	ids := make([]string, len(found))
	for i, p := range found {
		ids[i] = p.ID
	}
	s.log.Error("several payments name the booking: none is taken for its own", "booking", b.ID, "payments", ids)
	return payment.Payment{}, false
}

// recheckFailed asks the provider again about the payment of a failed
// booking: a payment reported failed can still succeed (an asynchronous
// authentication), and if that success's webhook never came the money
// would be kept. The lease asks a few times, further apart each time.
func (s *Settlement) recheckFailed(ctx context.Context, b ledger.Booking) error {
	if b.PaymentID == "" {
		return nil
	}
	pctx, cancel := s.paymentContext(ctx)
	p, err := s.payments.GetPayment(pctx, b.PaymentID)
	cancel()
	switch {
	case errors.Is(err, payment.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("recheck failed booking %s: %w", b.ID, err)
	case p.Status != payment.StatusSucceeded:
		return nil
	}
	s.metrics.PaymentChecks.WithLabelValues("succeeded_after_failure").Inc()
	return s.settlePayment(ctx, b, p.ID, &p, nil)
}

// failureReason is the status_reason of a booking whose payment p failed
// or was cancelled: the provider's code, or what became of the payment.
func failureReason(p payment.Payment) string {
	if p.FailureCode != "" {
		return p.FailureCode
	}
	return "payment_" + string(p.Status)
}
