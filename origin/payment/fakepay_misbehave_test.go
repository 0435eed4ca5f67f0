package payment

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFakepayFailThenSucceed(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now, FlipAfter: 5 * time.Second})
	req := CreateRequest{BookingID: "b_1", Amount: 90000, Currency: "INR", PaymentMethod: MethodFailThenSucceed, IdempotencyKey: "k1"}

	p, err := fp.CreatePayment(t.Context(), req)
	var decline *DeclineError
	require.ErrorAs(t, err, &decline, "declined at first")
	assert.Equal(t, StatusFailed, p.Status)
	rcv.waitFor(1)

	clock.Advance(4 * time.Second)
	fp.Tick()
	got, err := fp.GetPayment(t.Context(), p.ID)
	require.NoError(t, err)
	assert.Equal(t, StatusFailed, got.Status, "not before its time")

	clock.Advance(time.Second)
	fp.Tick()
	rcv.waitFor(1)
	got, err = fp.GetPayment(t.Context(), p.ID)
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, got.Status)
	_, events, bad := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, events, 2)
	assert.Equal(t, "payment_intent.payment_failed", events[0].Type)
	assert.Equal(t, "payment_intent.succeeded", events[1].Type)
	assert.NotEqual(t, events[0].ID, events[1].ID)
	assert.Equal(t, "k1", events[0].RequestKey, "the decline came of the create call")
	assert.Empty(t, events[1].RequestKey, "the success of the provider's own doing names no request")

	again, err := fp.CreatePayment(t.Context(), req)
	require.NoError(t, err, "a replay reads the payment as it is now")
	assert.Equal(t, StatusSucceeded, again.Status)
	assert.EqualValues(t, 1, fp.Charges())
}

func TestFakepayProviderRefundsAndRefusals(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})

	p, err := fp.CreatePayment(t.Context(), visa("b_1"))
	require.NoError(t, err)
	rcv.waitFor(1)
	r, err := fp.RefundAtProvider(p.ID, 30000)
	require.NoError(t, err)
	assert.Equal(t, RefundSucceeded, r.Status)
	rcv.waitFor(1)
	_, events, _ := rcv.snapshot()
	require.Len(t, events, 2)
	assert.Equal(t, "charge.refunded", events[1].Type)
	assert.EqualValues(t, 30000, events[1].AmountRefunded, "a partial refund says how much")
	got, _ := fp.GetPayment(t.Context(), p.ID)
	assert.EqualValues(t, 30000, got.AmountRefunded)

	require.NoError(t, fp.SetRefundsRefused(p.ID, true))
	_, err = fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_1", IdempotencyKey: "r1"})
	require.ErrorIs(t, err, ErrInvalidRequest)
	got, _ = fp.GetPayment(t.Context(), p.ID)
	assert.EqualValues(t, 30000, got.AmountRefunded, "a refused refund refunds nothing")
	require.NoError(t, fp.SetRefundsRefused(p.ID, false))
	r, err = fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_1", IdempotencyKey: "r1"})
	require.NoError(t, err, "the refused request left its key unused")
	assert.EqualValues(t, 60000, r.Amount)

	refused, err := fp.CreatePayment(t.Context(), CreateRequest{BookingID: "b_2", Amount: 500, Currency: "INR", PaymentMethod: MethodRefundRefused})
	require.NoError(t, err)
	_, err = fp.Refund(t.Context(), RefundRequest{PaymentID: refused.ID, BookingID: "b_2", IdempotencyKey: "r2"})
	require.ErrorIs(t, err, ErrInvalidRequest)
	_, err = fp.RefundAtProvider("pi_nope", 0)
	assert.True(t, errors.Is(err, ErrNotFound))
}

func TestFakepayForeignPayment(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})
	p := fp.ForeignPayment("b_unknown", 1200, "inr")
	rcv.waitFor(1)
	_, events, _ := rcv.snapshot()
	require.Len(t, events, 1)
	assert.Equal(t, "payment_intent.succeeded", events[0].Type)
	assert.Equal(t, p.ID, events[0].PaymentID)
	assert.Equal(t, "b_unknown", events[0].BookingID)
	assert.Equal(t, []Payment{p}, fp.PaymentsForBooking("b_unknown"))
}

// A payment whose own outcome is sent no webhook (pm_fakepay_silent) is
// still refunded at the dashboard with a charge.refunded: the refund is
// news of its own, which the origin has no other way to learn of a
// confirmed booking.
func TestFakepayRefundAtProviderOfASilentPayment(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})
	p, err := fp.CreatePayment(t.Context(), CreateRequest{BookingID: "b_s", Amount: 900, Currency: "inr", PaymentMethod: MethodSilent})
	require.NoError(t, err)
	_, err = fp.RefundAtProvider(p.ID, 0)
	require.NoError(t, err)
	rcv.waitFor(1)
	_, events, _ := rcv.snapshot()
	require.Len(t, events, 1)
	assert.Equal(t, "charge.refunded", events[0].Type)
	assert.EqualValues(t, 900, events[0].AmountRefunded)
}

// The end of a dashboard refund left pending is news too: a silent
// payment sends it (refund.updated and charge.refunded), as it sent the
// refund's charge.refunded; the end of a refund the origin made of it
// sends nothing, as its own outcome did not.
func TestFakepaySilentPaymentsDashboardRefundEnds(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})
	p, err := fp.CreatePayment(t.Context(), CreateRequest{BookingID: "b_s", Amount: 900, Currency: "inr", PaymentMethod: MethodSilent})
	require.NoError(t, err)
	require.NoError(t, fp.SetRefundOutcome(p.ID, RefundPending))
	dashboard, err := fp.RefundAtProvider(p.ID, 300)
	require.NoError(t, err)
	require.Equal(t, RefundPending, dashboard.Status)
	rcv.waitFor(1)
	own, err := fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_s", IdempotencyKey: "r1"})
	require.NoError(t, err)
	require.Equal(t, RefundPending, own.Status)

	require.NoError(t, fp.SettleRefund(own.ID, RefundSucceeded))
	require.NoError(t, fp.SettleRefund(dashboard.ID, RefundSucceeded))
	rcv.waitFor(2)
	require.NoError(t, fp.WaitIdle(t.Context()))
	_, events, _ := rcv.snapshot()
	var types []string
	var refunded int64
	for _, ev := range events {
		types = append(types, ev.Type)
		if ev.Type == "charge.refunded" {
			refunded = max(refunded, ev.AmountRefunded)
		}
	}
	assert.ElementsMatch(t, []string{"charge.refunded", "refund.updated", "charge.refunded"}, types,
		"the dashboard refund's creation and end; nothing of the origin's own")
	assert.EqualValues(t, 900, refunded, "the charge as it ended")
}

// A payment's amount changes at the provider only until the origin reads it
// succeeded (GetPayment, or a create repeated with its key): Stripe fixes it
// once the payment succeeds, and a change landing between the origin's read
// and its confirmation would be a sale on a price it was never shown.
func TestFakepayAmendOnlyBeforeTheOriginReadsIt(t *testing.T) {
	clock := newClock()
	fp := newFakepay(t, FakepayConfig{Now: clock.Now})
	req := CreateRequest{BookingID: "b_a", Amount: 900, Currency: "inr", PaymentMethod: MethodSilent, IdempotencyKey: "ka"}
	p, err := fp.CreatePayment(t.Context(), req)
	require.NoError(t, err)
	require.NoError(t, fp.AmendAtProvider(p.ID, 450, "inr"), "the create's own answer is not a read")
	assert.Equal(t, int64(450), fp.PaymentsForBooking("b_a")[0].Amount, "a test's look is not the origin's")
	require.NoError(t, fp.AmendAtProvider(p.ID, 400, "inr"))

	got, err := fp.GetPayment(t.Context(), p.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(400), got.Amount)
	err = fp.AmendAtProvider(p.ID, 200, "inr")
	require.ErrorIs(t, err, ErrInvalidRequest, "read succeeded")
	got, err = fp.GetPayment(t.Context(), p.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(400), got.Amount)

	other := CreateRequest{BookingID: "b_r", Amount: 900, Currency: "inr", PaymentMethod: MethodSilent, IdempotencyKey: "kr"}
	first, err := fp.CreatePayment(t.Context(), other)
	require.NoError(t, err)
	_, err = fp.CreatePayment(t.Context(), other)
	require.NoError(t, err)
	require.ErrorIs(t, fp.AmendAtProvider(first.ID, 450, "inr"), ErrInvalidRequest, "a repeated create reads it")

	declined, err := fp.CreatePayment(t.Context(), CreateRequest{BookingID: "b_d", Amount: 900, Currency: "inr", PaymentMethod: MethodDeclined, IdempotencyKey: "kd"})
	require.Error(t, err)
	_, err = fp.GetPayment(t.Context(), declined.ID)
	require.NoError(t, err)
	require.NoError(t, fp.AmendAtProvider(declined.ID, 450, "inr"), "a failed payment was not read succeeded")
}
