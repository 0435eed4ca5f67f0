package payment

import (
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v85"
)

// What a real provider does that the origin did not ask for: payments that
// change their mind, refunds made from the provider's dashboard, refunds
// refused, and events about payments the origin never made.

// Tick makes every pm_fakepay_fail_then_succeed payment whose time has come
// (by the provider's clock) succeed, and sends its payment_intent.succeeded.
// Every API call ticks first; a test with an injected clock may tick after
// moving it.
func (f *Fakepay) Tick() {
	f.mu.Lock()
	now := f.now()
	var evs []*fakeEvent
	for _, p := range f.payments {
		if p.flipAt.IsZero() || now.Before(p.flipAt) {
			continue
		}
		p.flipAt = time.Time{}
		p.Status, p.FailureCode, p.FailureMessage, p.decline = StatusSucceeded, "", "", nil
		p.chargeID = "ch_" + randomID()
		f.fakeCounters.charges.Add(1)
		p.outcome = f.newEvent(stripe.EventTypePaymentIntentSucceeded, p.ID, intentObject(p), now)
		if !p.silent {
			evs = append(evs, p.outcome)
		}
	}
	f.mu.Unlock()
	for _, ev := range evs {
		f.dispatch(ev)
	}
}

// tickEverySecond ticks on the real clock, so that a payment flips on time
// though nobody calls the provider.
func (f *Fakepay) tickEverySecond() {
	defer f.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
			f.Tick()
		}
	}
}

// RefundAtProvider refunds amount of a succeeded payment (0: all that is
// left) as the merchant's dashboard would, without the origin asking, and
// sends charge.refunded with the charge's amount_refunded (also for a
// pm_fakepay_silent payment): a partial refund leaves the charge partly kept.
// The refund is pending while the payment's refunds are (SetRefundOutcome),
// until SettleRefund ends it.
func (f *Fakepay) RefundAtProvider(paymentID string, amount int64) (Refund, error) {
	f.mu.Lock()
	p, ok := f.payments[paymentID]
	if !ok {
		f.mu.Unlock()
		return Refund{}, fmt.Errorf("fakepay: refund at the provider %s: %w", paymentID, ErrNotFound)
	}
	left := p.Amount - p.AmountRefunded
	if amount == 0 {
		amount = left
	}
	switch {
	case p.Status != StatusSucceeded:
		f.mu.Unlock()
		return Refund{}, fmt.Errorf("fakepay: refund at the provider %s: %w: payment is %s", paymentID, ErrInvalidRequest, p.Status)
	case left == 0:
		f.mu.Unlock()
		return Refund{}, fmt.Errorf("fakepay: refund at the provider %s: %w", paymentID, ErrAlreadyRefunded)
	case amount < 0 || amount > left:
		f.mu.Unlock()
		return Refund{}, fmt.Errorf("fakepay: refund at the provider %s: %w: %d of the %d left", paymentID, ErrInvalidRequest, amount, left)
	}
	now := f.now()
	// Pending when the payment's refunds are (SetRefundOutcome), until
	// SettleRefund; it counts in the amount refunded meanwhile, as at
	// Stripe, and charge.refunded is sent now either way.
	status := RefundSucceeded
	if p.refundOutcome == RefundPending {
		status = RefundPending
	}
	r := &fakeRefund{Refund: Refund{ID: "re_" + randomID(), PaymentID: p.ID, Amount: amount, Currency: p.Currency,
		Status: status}, bookingID: p.BookingID, created: now.UTC().Truncate(time.Second), atProvider: true}
	f.refunds[r.ID] = r
	p.refundIDs = append(p.refundIDs, r.ID)
	p.AmountRefunded += amount
	if status == RefundSucceeded {
		f.fakeCounters.refunds.Add(1)
	}
	ev := f.newEvent(stripe.EventTypeChargeRefunded, p.ID, chargeObject(p), now)
	f.mu.Unlock()
	// Sent for a silent payment too: silent is about the payment's own
	// outcome, and a refund at the dashboard is news the origin has no
	// other way to learn of a confirmed booking.
	f.dispatch(ev)
	return r.Refund, nil
}

// AmendAtProvider changes a payment's amount and currency at the
// provider, as another integration holding the account's key can (Stripe
// lets a payment's amount change until it is confirmed, and captures less
// than it), with no event: the origin learns of it only by asking. A
// payment the origin has already read as succeeded is refused
// (ErrInvalidRequest): Stripe fixes the amount once a payment succeeds, so
// what the origin was shown then is what was paid.
func (f *Fakepay) AmendAtProvider(paymentID string, amount int64, currency string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.payments[paymentID]
	if !ok {
		return fmt.Errorf("fakepay: amend %s at the provider: %w", paymentID, ErrNotFound)
	}
	if p.shown {
		return fmt.Errorf("fakepay: amend %s at the provider: %w: the origin has read it succeeded", paymentID, ErrInvalidRequest)
	}
	if amount <= 0 || amount < p.AmountRefunded || len(currency) != 3 {
		return fmt.Errorf("fakepay: amend %s at the provider: %w: %d %q", paymentID, ErrInvalidRequest, amount, currency)
	}
	p.Amount, p.Currency = amount, currency
	return nil
}

// SetRefundsRefused decides whether the payment's refund requests are
// refused as invalid (ErrInvalidRequest, nothing refunded): the default of
// MethodRefundRefused, as a disputed charge is at a real provider.
func (f *Fakepay) SetRefundsRefused(paymentID string, refused bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.payments[paymentID]
	if !ok {
		return fmt.Errorf("fakepay: refuse refunds of %s: %w", paymentID, ErrNotFound)
	}
	p.refuseRefunds = refused
	return nil
}

// ForeignPayment is a payment the origin never asked for, made at the
// provider for bookingID (which the origin may not know either), succeeded
// and announced with payment_intent.succeeded: the webhook of a payment the
// origin never saw.
func (f *Fakepay) ForeignPayment(bookingID string, amount int64, currency string) Payment {
	now := f.now()
	p := &fakePayment{
		Payment: Payment{ID: "pi_" + randomID(), BookingID: bookingID, Amount: amount, Currency: currency,
			Status: StatusSucceeded, Created: now.UTC().Truncate(time.Second)},
		method: MethodVisa, metadata: map[string]string{MetadataBookingID: bookingID}, refundOutcome: RefundSucceeded,
		chargeID: "ch_" + randomID(),
	}
	f.fakeCounters.charges.Add(1)
	p.outcome = f.newEvent(stripe.EventTypePaymentIntentSucceeded, p.ID, intentObject(p), now)
	f.mu.Lock()
	f.payments[p.ID] = p
	f.byBooking[bookingID] = append(f.byBooking[bookingID], p.ID)
	f.mu.Unlock()
	f.dispatch(p.outcome)
	return p.Payment
}
