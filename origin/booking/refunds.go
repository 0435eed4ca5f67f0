package booking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// Refunds are followed to the provider's word. A refund call that answers
// is not a refund done: the provider may say pending (it ends later, one way
// or the other), failed, or succeeded and fail days later. And a refund
// returns what is left of the payment: succeeded is all of it back only
// when no refund made at the provider before it is pending (allReturned).
// So:
//
//	decided ─► pending ─► Refund call ─► succeeded: booking refunded
//	                          │       └► pending: refund id kept; the refund
//	                          │          webhooks and the payment
//	                          │          reconciliation (GetRefund) follow it
//	                          └► failed: booking cancelled, refund_status
//	                             failed (visible, and in a gauge); the payment
//	                             reconciliation makes a new attempt, under a
//	                             new key, until one succeeds
//
// Webhooks about refunds come in any order, so they only say "ask": what is
// recorded is what the provider answers when asked, never what an event
// says. Every change names the attempt it is about, so an answer about an
// attempt given up on changes nothing.
//
// A refund made at the provider (charge.refunded for a confirmed booking)
// ends the sale as a cancellation does: the tickets are void and the seats
// back on sale.

// refundBooking makes a decided refund at the provider, or asks about the
// one made already, and records what the provider says of it (see
// below). The key is derived from the booking and the attempt, so the
// cancellation, the late payment, the webhooks and their retries refund
// once.
func (s *env) refundBooking(ctx context.Context, b ledger.Booking) error {
	if b.RefundStatus == "" {
		return nil
	}
	if b.PaymentID == "" {
		return fmt.Errorf("refund booking %s: no payment id known", b.ID)
	}
	pctx, cancel := s.paymentContext(ctx)
	defer cancel()
	var r payment.Refund
	var err error
	switch {
	case b.RefundID != "":
		r, err = s.payments.GetRefund(pctx, b.RefundID)
	case b.RefundStatus == ledger.RefundPending:
		r, err = s.payments.Refund(pctx, payment.RefundRequest{PaymentID: b.PaymentID, BookingID: b.ID,
			IdempotencyKey: payment.RefundAttemptKey(b.ID, b.RefundAttempts)})
	default:
		// Money returned by a refund the origin did not make: there is
		// nothing of its own to ask about.
		return nil
	}
	switch {
	case errors.Is(err, payment.ErrAlreadyRefunded):
		// Nothing is left to refund: whether the refunds made return it
		// all is decided below, as for a refund of the origin's own.
		r = payment.Refund{Status: payment.RefundSucceeded}
	case errors.Is(err, payment.ErrUnauthorized):
		// The API key refused (rolled, revoked, of another mode) says
		// nothing of the refund: it stays pending, asked again under the
		// same key on the next pass, not failed and put off for an hour.
		s.metrics.Refunds.WithLabelValues("error").Inc()
		s.log.Error("the provider refused the API key: the refund waits for it", "booking", b.ID, "error", err)
		return fmt.Errorf("refund booking %s: %w", b.ID, err)
	case errors.Is(err, payment.ErrInvalidRequest) && b.RefundID == "":
		return s.refundRefused(ctx, b, err)
	case err != nil:
		s.metrics.Refunds.WithLabelValues("error").Inc()
		return fmt.Errorf("refund booking %s: %w", b.ID, err)
	}
	if r.Status == payment.RefundSucceeded {
		if r, err = s.allReturned(pctx, b, r); err != nil {
			return err
		}
	}
	return s.refundOutcome(ctx, b, r)
}

// allReturned checks a refund the provider says succeeded (or, with no ID,
// its answer that nothing is left to refund) against the payment of
// booking b: a refund returns what was left of the payment when it was
// made, and refunds made at the provider before it (its dashboard) may
// still be pending, and fail. Only all of the payment back for good settles
// the refund owed. It answers r when that is so; r pending while refunds
// at the provider are (the reconciliation and the refund webhooks ask
// again); and r failed when one of them failed since, so that a new attempt
// refunds the rest. A refund of the booking's whole amount is all of it
// back without asking (the one call a refund costs, as a mass cancellation
// makes thousands), except for a payment of another amount than the
// booking's, where the payment's own amount is owed.
func (s *env) allReturned(ctx context.Context, b ledger.Booking, r payment.Refund) (payment.Refund, error) {
	if r.ID != "" && r.Amount >= b.Amount && b.StatusReason != ReasonPaymentMismatch {
		return r, nil
	}
	p, err := s.payments.GetPayment(ctx, b.PaymentID)
	if err != nil {
		s.metrics.Refunds.WithLabelValues("error").Inc()
		return payment.Refund{}, fmt.Errorf("refund booking %s: %w", b.ID, err)
	}
	owed := owedBack(b, p)
	switch {
	case p.Returned() >= owed:
		return r, nil
	case p.RefundPending > 0 || r.ID == "":
		s.log.Info("the refund owed waits for refunds pending at the provider", "booking", b.ID,
			"pending", p.RefundPending, "returned", p.Returned())
		r.Status = payment.RefundPending
		return r, nil
	}
	r.Status = payment.RefundFailed
	r.FailureReason = fmt.Sprintf("another refund of the payment failed: %d of %d returned", p.Returned(), owed)
	return r, nil
}

// owedBack is what a refund of booking b must return: all of payment p,
// also when the provider has it for another amount than the booking's.
func owedBack(b ledger.Booking, p payment.Payment) int64 {
	if p.Amount > 0 {
		return p.Amount
	}
	return b.Amount
}

// refundOutcome records what the provider said of booking b's current
// refund attempt.
func (s *env) refundOutcome(ctx context.Context, b ledger.Booking, r payment.Refund) error {
	ctx = context.WithoutCancel(ctx)
	var o ledger.RefundOutcome
	switch r.Status {
	case payment.RefundSucceeded:
		s.metrics.Refunds.WithLabelValues(ledger.RefundSucceeded).Inc()
		o = ledger.RefundWasDone
	case payment.RefundFailed:
		s.metrics.Refunds.WithLabelValues(ledger.RefundFailed).Inc()
		o = ledger.RefundWasFailed
	default:
		s.metrics.Refunds.WithLabelValues(ledger.RefundPending).Inc()
		if b.RefundID != "" || r.ID == "" {
			return nil
		}
		o = ledger.RefundWasMade
	}
	got, changed, err := s.ledger.Bookings().RecordRefund(ctx, b.ID, b.RefundAttempts, o, r.ID, s.now())
	if err != nil || !changed {
		// Not changed: another settlement recorded it first, or it is about
		// an attempt given up on.
		return err
	}
	switch r.Status {
	case payment.RefundSucceeded:
		s.metrics.Bookings.WithLabelValues(ledger.BookingRefunded).Inc()
	case payment.RefundFailed:
		s.log.Warn("refund failed at the provider; the payment reconciliation makes a new one", "booking", b.ID,
			"refund", got.RefundID, "attempt", got.RefundAttempts, "reason", r.FailureReason, "was", b.RefundStatus)
	default:
		return nil
	}
	s.countFailedRefunds(ctx)
	return nil
}

// Backoff of a refund the provider refused as an invalid request: the
// first wait, doubled at each refusal, up to the last.
const (
	refusedRefundFirstWait = time.Hour
	refusedRefundMaxWait   = 24 * time.Hour
)

// refundRefused records a refund the provider refused as an invalid
// request (the payment cannot be refunded as asked). Made again at once it
// would be refused again, on every pass of the reconciliation: the refund
// is failed instead, visibly (refund_status failed, the gauge, an error
// logged, the provider's reason kept on the booking for an operator), and
// the next attempt waits, longer after each refusal.
func (s *env) refundRefused(ctx context.Context, b ledger.Booking, refused error) error {
	wait := refusedRefundFirstWait
	for range min(b.RefundAttempts, 16) {
		wait = min(2*wait, refusedRefundMaxWait)
	}
	now := s.now()
	got, changed, err := s.ledger.Bookings().RefundRefused(context.WithoutCancel(ctx), b.ID, b.RefundAttempts,
		refused.Error(), now.Add(wait), now)
	if err != nil || !changed {
		return err
	}
	s.metrics.Refunds.WithLabelValues("refused").Inc()
	s.log.Error("refund refused by the provider as an invalid request; an operator should look; tried again later",
		"booking", b.ID, "attempt", got.RefundAttempts, "retry_at", now.Add(wait), "reason", refused)
	s.countFailedRefunds(ctx)
	return nil
}

// retryRefund makes a new refund for a booking whose refund failed.
func (s *Settlement) retryRefund(ctx context.Context, b ledger.Booking) error {
	next, ok, err := s.ledger.Bookings().RetryRefund(ctx, b.ID, b.RefundAttempts, s.now())
	if err != nil || !ok {
		return err
	}
	s.log.Info("refund made again", "booking", b.ID, "attempt", next.RefundAttempts)
	return s.refundBooking(ctx, next)
}

// countFailedRefunds sets the gauge of failed refunds from the ledger, so
// every node reports the whole figure.
func (s *env) countFailedRefunds(ctx context.Context) {
	n, err := s.ledger.Bookings().CountFailedRefunds(ctx)
	if err != nil {
		s.log.Warn("failed refunds not counted", "error", err)
		return
	}
	s.metrics.RefundsFailed.Set(float64(n))
}

// chargeRefunded acts on charge.refunded: the charge's money went back. For
// a confirmed booking that is a refund made at the provider; for a booking
// owing a refund, possibly its own refund ending, or someone else's making
// it good. A partial refund of a confirmed booking is recorded on it
// (partlyRefunded); the sale stands.
func (s *Settlement) chargeRefunded(ctx context.Context, b ledger.Booking, ev payment.Event) error {
	if b.Amount == 0 {
		return nil
	}
	if ev.AmountRefunded < b.Amount {
		switch {
		case ev.AmountRefunded <= 0:
			return nil
		case b.Status == ledger.BookingPaymentPending:
			return s.partlyRefundedWhileWaiting(ctx, b, ev)
		case b.Status != ledger.BookingConfirmed:
			return nil
		}
		return s.partlyRefunded(ctx, b, ev)
	}
	switch {
	case b.RefundStatus == ledger.RefundPending:
		return s.refundBooking(ctx, b)
	case b.Status != ledger.BookingConfirmed && b.Status != ledger.BookingPaymentPending &&
		b.RefundStatus != ledger.RefundFailed:
		return nil
	}
	paymentID := b.PaymentID
	if paymentID == "" {
		paymentID = ev.PaymentID
	}
	// The event may be older than a refund that failed since: the payment
	// as the provider has it now decides.
	pctx, cancel := s.paymentContext(ctx)
	p, err := s.payments.GetPayment(pctx, paymentID)
	cancel()
	if err != nil {
		return fmt.Errorf("charge refunded, booking %s: %w", b.ID, err)
	}
	if p.Returned() < b.Amount {
		if b.Status == ledger.BookingConfirmed && (p.Returned() > 0 || p.RefundPending > 0) {
			// The rest is in refunds still pending, or came back after
			// one failed: the sale stands, with what went back recorded.
			return s.recordPartlyRefunded(ctx, b, p, ev.ID)
		}
		s.log.Info("charge.refunded for a payment not refunded for good: ignored", "booking", b.ID, "event", ev.ID,
			"refunded", p.AmountRefunded, "pending", p.RefundPending)
		return nil
	}
	switch b.Status {
	case ledger.BookingConfirmed:
		return s.refundedAtProvider(ctx, b.ID)
	case ledger.BookingPaymentPending:
		// The money went back before the payment's success was settled,
		// or while a settlement that asked the provider before the refund
		// was confirming it: the event ends the booking itself (a
		// confirmation that won the row lock ends as a confirmed booking
		// refunded at the provider), rather than be recorded as handled on
		// a later settlement's word.
		return s.refundedBeforeSettled(ctx, b, paymentID)
	}
	return s.refundOutcome(ctx, b, payment.Refund{Status: payment.RefundSucceeded})
}

// partlyRefundedWhileWaiting acts on part of the payment of a booking still
// waiting for it returned at the provider. A settlement may have read the
// payment before this refund and be confirming the sale on that word, so the
// booking is marked as one whose refunds the payment reconciliation asks
// about once it is confirmed (a settlement that read the refund records it,
// and clears the mark); a booking confirmed meanwhile is followed up now.
func (s *Settlement) partlyRefundedWhileWaiting(ctx context.Context, b ledger.Booking, ev payment.Event) error {
	_, marked, err := s.ledger.Bookings().MarkRefundPendingWhileWaiting(ctx, b.ID, s.now())
	if err != nil || marked {
		return err
	}
	cur, err := s.ledger.Bookings().Get(ctx, b.ID)
	if err != nil {
		return err
	}
	if cur.Status == ledger.BookingConfirmed && cur.RefundStatus == "" {
		return s.partlyRefunded(ctx, cur, ev)
	}
	return nil
}

// partlyRefunded records a partial refund of a confirmed booking's payment
// at the provider (its dashboard, say): the sale stands, with its tickets,
// and the amount returned is recorded on the booking and counted apart in
// the money report. The provider's present word decides, as the event may
// be older than another refund: all of it returned ends the sale. The
// payment reconciliation calls it too (with no event), for a booking that
// had such a refund pending when last looked at.
func (s *Settlement) partlyRefunded(ctx context.Context, b ledger.Booking, ev payment.Event) error {
	pctx, cancel := s.paymentContext(ctx)
	p, err := s.payments.GetPayment(pctx, b.PaymentID)
	cancel()
	if err != nil {
		return fmt.Errorf("charge partly refunded, booking %s: %w", b.ID, err)
	}
	if p.Returned() >= b.Amount {
		return s.refundedAtProvider(ctx, b.ID)
	}
	return s.recordPartlyRefunded(ctx, b, p, ev.ID)
}

// recordPartlyRefunded records the part of confirmed booking b's payment p
// the provider gave back for good, and whether a refund of it is still
// pending there, whose end the reconciliation then asks about (its webhooks
// may never come); event names the webhook that told (” for none).
func (s *Settlement) recordPartlyRefunded(ctx context.Context, b ledger.Booking, p payment.Payment, event string) error {
	got, changed, err := s.ledger.Bookings().PartlyRefunded(ctx, b.ID, max(p.Returned(), 0), p.RefundPending > 0, s.now())
	if err != nil || !changed {
		return err
	}
	if got.AmountRefunded != b.AmountRefunded {
		s.log.Warn("partial refund at the provider: the sale stands, the amount returned is recorded", "booking", b.ID,
			"event", event, "refunded", got.AmountRefunded, "amount", got.Amount, "pending", p.RefundPending)
	}
	return nil
}

// refundUpdated acts on a refund event (created, updated, failed) about the
// booking's current refund attempt, by asking the provider how it stands.
func (s *Settlement) refundUpdated(ctx context.Context, b ledger.Booking, ev payment.Event) error {
	switch {
	case b.RefundStatus == "" && b.Status == ledger.BookingConfirmed:
		// A refund made at the provider (its dashboard) of a sale that
		// stands. charge.refunded comes once, when the refund is made: one
		// pending then, which succeeds or fails later, is told of only by
		// the refund events, so the provider is asked what is returned now.
		return s.partlyRefunded(ctx, b, ev)
	case b.RefundStatus == "":
		return nil
	case b.Status == ledger.BookingRefunded && b.RefundID == "":
		// Ended by a refund made at the provider, which may fail since.
		return s.providerRefundFailed(ctx, b)
	case b.RefundID != "" && ev.RefundID != b.RefundID && b.RefundStatus != ledger.RefundPending:
		// An attempt given up on, or a refund the origin did not make. (One
		// that ends while the origin's own waits for it decides how that
		// one stands: see allReturned.)
		return nil
	case b.RefundID == "" && b.RefundStatus != ledger.RefundPending:
		return nil
	}
	return s.refundBooking(ctx, b)
}

// providerRefundFailed checks a booking ended by a refund made at the
// provider: when that refund failed, the money is back with the merchant
// and the seats gone, so the origin makes the refund itself.
func (s *Settlement) providerRefundFailed(ctx context.Context, b ledger.Booking) error {
	pctx, cancel := s.paymentContext(ctx)
	p, err := s.payments.GetPayment(pctx, b.PaymentID)
	cancel()
	if err != nil {
		return fmt.Errorf("refund event, booking %s: %w", b.ID, err)
	}
	if p.Returned() >= owedBack(b, p) || p.RefundPending > 0 {
		// All of it back, or a refund still on its way.
		return nil
	}
	got, changed, err := s.ledger.Bookings().ProviderRefundFailed(ctx, b.ID, s.now())
	if err != nil || !changed {
		return err
	}
	s.log.Warn("a refund made at the provider failed after it ended the booking: the origin refunds the payment itself",
		"booking", b.ID, "payment", b.PaymentID, "returned", p.Returned(), "amount", p.Amount)
	return s.refundBooking(ctx, got)
}

// refundedAtProvider ends a confirmed booking whose payment was refunded at
// the provider: refunded, its tickets void and its seats given back as a
// cancellation gives them. A booking a gate let a ticket of in keeps its
// sale, whose seats are in use: the refund is recorded in amount_refunded.
func (s *Settlement) refundedAtProvider(ctx context.Context, bookingID string) error {
	now := s.now()
	var done ledger.Booking
	var acted, release bool
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		acted, release = false, false
		cur, err := tx.Bookings().Lock(ctx, bookingID)
		if err != nil || cur.Status != ledger.BookingConfirmed {
			return err
		}
		if release, err = giveSeatsBack(ctx, tx, cur, now); err != nil {
			return err
		}
		done, acted, err = tx.Bookings().RefundedAtProvider(ctx, cur.ID, ReasonRefundedAtProvider, now)
		return err
	})
	if errors.Is(err, ErrBookingLetIn) {
		got, changed, err := s.ledger.Bookings().RefundedInFullAfterEntry(ctx, bookingID, now)
		if err != nil || !changed {
			return err
		}
		s.log.Warn("payment refunded at the provider after a ticket was let in: the sale stands, the amount returned is recorded",
			"booking", bookingID, "event", got.EventID, "refunded", got.AmountRefunded)
		return nil
	}
	if err != nil {
		return fmt.Errorf("booking %s refunded at the provider: %w", bookingID, err)
	}
	if !acted {
		return nil
	}
	s.metrics.Bookings.WithLabelValues(ledger.BookingRefunded).Inc()
	s.log.Warn("payment refunded at the provider: the booking's tickets are void and its seats back on sale",
		"booking", bookingID, "event", done.EventID, "seats", done.Quantity)
	if release {
		return s.returnSeats(ctx, done)
	}
	return nil
}
