package payment

import (
	"context"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v85"
)

// Refund returns money of a succeeded payment, once per idempotency key;
// a payment with nothing left to refund is ErrAlreadyRefunded.
func (f *Fakepay) Refund(ctx context.Context, req RefundRequest) (Refund, error) {
	req, err := req.normalise()
	if err != nil {
		return Refund{}, fmt.Errorf("fakepay: %w", err)
	}
	if err := f.enter(ctx, "refund payment "+req.PaymentID); err != nil {
		return Refund{}, err
	}
	fp := fmt.Sprintf("%s|%s|%d", req.PaymentID, req.BookingID, req.Amount)
	rec := f.record(f.refundKeys, req.IdempotencyKey)
	rec.mu.Lock()
	if !rec.done {
		r, ev, err := f.refund(req)
		if err != nil {
			// As at Stripe, a refused request leaves the key unused.
			rec.mu.Unlock()
			return Refund{}, fmt.Errorf("fakepay: refund payment %s: %w", req.PaymentID, err)
		}
		rec.done, rec.fingerprint, rec.refund = true, fp, r
		if ev != nil {
			f.dispatch(ev)
		}
	} else if rec.fingerprint != fp {
		rec.mu.Unlock()
		return Refund{}, fmt.Errorf("fakepay: refund payment %s: %w (key %q)", req.PaymentID, ErrIdempotencyConflict, req.IdempotencyKey)
	}
	r := rec.refund
	rec.mu.Unlock()

	if f.roll(func() float64 { return f.timeoutRate }) {
		f.fakeCounters.timeouts.Add(1)
		return Refund{}, fmt.Errorf("fakepay: refund payment %s: %w: injected timeout after the refund", req.PaymentID, ErrAmbiguous)
	}
	return r, nil
}

func (f *Fakepay) refund(req RefundRequest) (Refund, *fakeEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.payments[req.PaymentID]
	switch {
	case !ok:
		return Refund{}, nil, ErrNotFound
	case p.BookingID != req.BookingID:
		return Refund{}, nil, fmt.Errorf("%w: payment belongs to booking %s, not %s", ErrInvalidRequest, p.BookingID, req.BookingID)
	case p.Status != StatusSucceeded:
		return Refund{}, nil, fmt.Errorf("%w: payment is %s, nothing was charged", ErrInvalidRequest, p.Status)
	case p.refuseRefunds:
		f.fakeCounters.refundFailures.Add(1)
		return Refund{}, nil, fmt.Errorf("%w: the charge %s is disputed and cannot be refunded", ErrInvalidRequest, p.chargeID)
	}
	left := p.Amount - p.AmountRefunded
	amount := req.Amount
	if amount == 0 {
		amount = left
	}
	switch {
	case left == 0:
		return Refund{}, nil, ErrAlreadyRefunded
	case amount > left:
		return Refund{}, nil, fmt.Errorf("%w: refund of %d exceeds the %d left", ErrInvalidRequest, amount, left)
	}
	now := f.now()
	r := &fakeRefund{Refund: Refund{ID: "re_" + randomID(), PaymentID: p.ID, Amount: amount, Currency: p.Currency,
		Status: p.refundOutcome}, bookingID: p.BookingID, created: now.UTC().Truncate(time.Second)}
	f.refunds[r.ID] = r
	p.refundIDs = append(p.refundIDs, r.ID)
	var ev *fakeEvent
	switch r.Status {
	case RefundSucceeded:
		p.AmountRefunded += amount
		f.fakeCounters.refunds.Add(1)
		ev = f.newEvent(stripe.EventTypeChargeRefunded, p.ID, chargeObject(p), now)
	case RefundPending:
		// As at Stripe, a pending refund counts in the charge's amount
		// refunded until it fails.
		p.AmountRefunded += amount
		ev = f.newEvent(stripe.EventTypeRefundCreated, p.ID, refundObject(r, p), now)
	default:
		r.FailureReason = string(stripe.RefundFailureReasonLostOrStolenCard)
		f.fakeCounters.refundFailures.Add(1)
		ev = f.newEvent(stripe.EventTypeRefundFailed, p.ID, refundObject(r, p), now)
	}
	if p.silent {
		ev = nil
	}
	return r.Refund, ev, nil
}

// GetRefund reads a refund as it is now.
func (f *Fakepay) GetRefund(ctx context.Context, refundID string) (Refund, error) {
	if err := f.enter(ctx, "get refund "+refundID); err != nil {
		return Refund{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.refunds[refundID]
	if !ok {
		return Refund{}, fmt.Errorf("fakepay: get refund %s: %w", refundID, ErrNotFound)
	}
	return r.Refund, nil
}

// SetRefundOutcome decides how the payment's next refunds end: succeeded
// (the default), failed (the default of MethodRefundFails), or pending
// until SettleRefund.
func (f *Fakepay) SetRefundOutcome(paymentID string, s RefundStatus) error {
	switch s {
	case RefundSucceeded, RefundFailed, RefundPending:
	default:
		return fmt.Errorf("fakepay: refund outcome %q: %w", s, ErrInvalidRequest)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.payments[paymentID]
	if !ok {
		return fmt.Errorf("fakepay: set refund outcome of %s: %w", paymentID, ErrNotFound)
	}
	p.refundOutcome = s
	return nil
}

// SettleRefund ends a pending refund (succeeded or failed), or fails one
// that succeeded (as a card refund can, days later), and sends its webhook:
// refund.updated and charge.refunded when it succeeded, refund.failed when
// it failed (for a silent payment only when the refund was made at the
// provider).
func (f *Fakepay) SettleRefund(refundID string, s RefundStatus) error {
	f.mu.Lock()
	r, ok := f.refunds[refundID]
	if !ok {
		f.mu.Unlock()
		return fmt.Errorf("fakepay: settle refund %s: %w", refundID, ErrNotFound)
	}
	p := f.payments[r.PaymentID]
	now := f.now()
	var evs []*fakeEvent
	switch {
	case s == RefundSucceeded && r.Status == RefundPending:
		r.Status = RefundSucceeded
		f.fakeCounters.refunds.Add(1)
		evs = append(evs, f.newEvent(stripe.EventTypeRefundUpdated, p.ID, refundObject(r, p), now),
			f.newEvent(stripe.EventTypeChargeRefunded, p.ID, chargeObject(p), now))
	case s == RefundFailed && (r.Status == RefundPending || r.Status == RefundSucceeded):
		r.Status, r.FailureReason = RefundFailed, string(stripe.RefundFailureReasonExpiredOrCanceledCard)
		p.AmountRefunded -= r.Amount
		f.fakeCounters.refundFailures.Add(1)
		evs = append(evs, f.newEvent(stripe.EventTypeRefundFailed, p.ID, refundObject(r, p), now))
	default:
		f.mu.Unlock()
		return fmt.Errorf("fakepay: settle refund %s (%s) as %s: %w", refundID, r.Status, s, ErrInvalidRequest)
	}
	// A silent payment's refunds send nothing, but one made from the
	// dashboard is news the origin has no other way to learn of, as its
	// charge.refunded was (RefundAtProvider): its end is sent too.
	silent := p.silent && !r.atProvider
	f.mu.Unlock()
	if !silent {
		for _, ev := range evs {
			f.dispatch(ev)
		}
	}
	return nil
}

// RefundsForPayment lists a payment's refunds, oldest first.
func (f *Fakepay) RefundsForPayment(paymentID string) []Refund {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.payments[paymentID]
	if !ok {
		return nil
	}
	out := make([]Refund, 0, len(p.refundIDs))
	for _, id := range p.refundIDs {
		out = append(out, f.refunds[id].Refund)
	}
	return out
}
