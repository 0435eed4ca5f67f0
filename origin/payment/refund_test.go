package payment

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFakepayRefundFails(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})

	p, err := fp.CreatePayment(t.Context(), CreateRequest{BookingID: "b_f", Amount: 90000, Currency: "inr",
		PaymentMethod: MethodRefundFails, Metadata: map[string]string{"event_id": "42"}})
	require.NoError(t, err, "the payment itself succeeds")
	assert.Equal(t, StatusSucceeded, p.Status)
	rcv.waitFor(1)

	r, err := fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_f"})
	require.NoError(t, err, "a failed refund is an answer, not an error")
	assert.Equal(t, RefundFailed, r.Status)
	assert.Regexp(t, `^re_`, r.ID)
	assert.NotEmpty(t, r.FailureReason)
	rcv.waitFor(1)
	_, events, bad := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, events, 2)
	assert.Equal(t, Event{ID: events[1].ID, Type: "refund.failed", Kind: KindRefundUpdated, PaymentID: p.ID, BookingID: "b_f",
		Amount: 90000, Currency: "inr", RefundID: r.ID, RefundStatus: RefundFailed, Created: clock.Now()}, events[1])

	again, err := fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_f"})
	require.NoError(t, err)
	assert.Equal(t, r, again, "the same key returns the failed refund, it does not try again")
	second, err := fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_f", IdempotencyKey: RefundAttemptKey("b_f", 1)})
	require.NoError(t, err)
	assert.Equal(t, RefundFailed, second.Status, "every refund of the payment fails")
	assert.NotEqual(t, r.ID, second.ID)
	got, err := fp.GetPayment(t.Context(), p.ID)
	require.NoError(t, err)
	assert.Zero(t, got.AmountRefunded, "no money went back")
	assert.EqualValues(t, 2, fp.RefundFailures())
	assert.Zero(t, fp.Refunds())
	assert.Equal(t, FakepayMoney{Charges: 1, Charged: 90000, FailedRefunds: 2}, fp.Money(42))
	assert.Equal(t, FakepayMoney{}, fp.Money(7), "another event's")

	require.NoError(t, fp.SetRefundOutcome(p.ID, RefundSucceeded))
	third, err := fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_f", IdempotencyKey: RefundAttemptKey("b_f", 2)})
	require.NoError(t, err)
	assert.Equal(t, RefundSucceeded, third.Status)
	assert.Equal(t, FakepayMoney{Charges: 1, Charged: 90000, Refunded: 90000, FailedRefunds: 2}, fp.Money(0))
	read, err := fp.GetRefund(t.Context(), r.ID)
	require.NoError(t, err)
	assert.Equal(t, r, read)
	_, err = fp.GetRefund(t.Context(), "re_unknown")
	assert.ErrorIs(t, err, ErrNotFound)
	assert.Len(t, fp.RefundsForPayment(p.ID), 3)
}

func TestFakepayPendingRefundSettledLater(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})
	p, err := fp.CreatePayment(t.Context(), visa("b_p"))
	require.NoError(t, err)
	rcv.waitFor(1)
	require.NoError(t, fp.SetRefundOutcome(p.ID, RefundPending))

	r, err := fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_p"})
	require.NoError(t, err)
	assert.Equal(t, RefundPending, r.Status)
	rcv.waitFor(1)
	_, err = fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_p", IdempotencyKey: "other"})
	assert.ErrorIs(t, err, ErrAlreadyRefunded, "a pending refund holds the amount")
	assert.Equal(t, FakepayMoney{Charges: 1, Charged: 90000, RefundPending: 90000}, fp.Money(0))

	require.NoError(t, fp.SettleRefund(r.ID, RefundSucceeded))
	rcv.waitFor(2)
	got, err := fp.GetRefund(t.Context(), r.ID)
	require.NoError(t, err)
	assert.Equal(t, RefundSucceeded, got.Status)
	assert.Error(t, fp.SettleRefund(r.ID, RefundPending), "never back to pending")

	// A card refund can fail after it succeeded: the money is the
	// merchant's again, and the amount can be refunded anew.
	require.NoError(t, fp.SettleRefund(r.ID, RefundFailed))
	rcv.waitFor(1)
	got, err = fp.GetRefund(t.Context(), r.ID)
	require.NoError(t, err)
	assert.Equal(t, RefundFailed, got.Status)
	pay, err := fp.GetPayment(t.Context(), p.ID)
	require.NoError(t, err)
	assert.Zero(t, pay.AmountRefunded)

	_, events, bad := rcv.snapshot()
	require.Empty(t, bad)
	var types []string
	for _, ev := range events[1:] {
		types = append(types, ev.Type)
		if ev.Kind == KindRefundUpdated {
			assert.Equal(t, r.ID, ev.RefundID)
			assert.Equal(t, "b_p", ev.BookingID)
		}
	}
	assert.ElementsMatch(t, []string{"refund.created", "refund.updated", "charge.refunded", "refund.failed"}, types)
	assert.Error(t, fp.SetRefundOutcome(p.ID, "maybe"))
	assert.ErrorIs(t, fp.SettleRefund("re_unknown", RefundSucceeded), ErrNotFound)
}

func TestRefundAttemptKey(t *testing.T) {
	assert.Equal(t, RefundKey("b_1"), RefundAttemptKey("b_1", 0))
	assert.Equal(t, RefundKey("b_1")+"-1", RefundAttemptKey("b_1", 1))
	assert.NotEqual(t, RefundAttemptKey("b_1", 1), RefundAttemptKey("b_1", 2))
}

func TestStripeRefundAgainstStripeMock(t *testing.T) {
	base := startStripeMock(t)
	rec := &recorder{}
	s := newTestStripe(t, base, rec)
	ctx := t.Context()

	r, err := s.Refund(ctx, RefundRequest{PaymentID: "pi_123", BookingID: "b_1", IdempotencyKey: RefundAttemptKey("b_1", 2)})
	require.NoError(t, err)
	assert.Equal(t, RefundSucceeded, r.Status, "stripe-mock's fixture")
	req := rec.last(t)
	assert.Equal(t, "POST /v1/refunds", req.Method+" "+req.Path)
	assert.Equal(t, RefundAttemptKey("b_1", 2), req.Header.Get("Idempotency-Key"))

	got, err := s.GetRefund(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, r.ID, got.ID)
	assert.Equal(t, RefundSucceeded, got.Status)
	req = rec.last(t)
	assert.Equal(t, "GET /v1/refunds/"+r.ID, req.Method+" "+req.Path)
}

func TestStripeRefundStatus(t *testing.T) {
	tests := []struct {
		status, extra string
		want          RefundStatus
	}{
		{"succeeded", "", RefundSucceeded},
		{"pending", `,"pending_reason":"processing"`, RefundPending},
		{"requires_action", "", RefundPending},
		{"failed", `,"failure_reason":"expired_or_canceled_card"`, RefundFailed},
		{"canceled", "", RefundFailed},
	}
	for _, tt := range tests {
		t.Run(tt.status, func(t *testing.T) {
			body := `{"id":"re_1","object":"refund","amount":900,"currency":"inr","payment_intent":"pi_1","status":"` +
				tt.status + `","metadata":{"booking_id":"b_1"}` + tt.extra + `}`
			s := newTestStripe(t, cannedStripe(t, http.StatusOK, body), http.DefaultTransport)
			made, err := s.Refund(t.Context(), RefundRequest{PaymentID: "pi_1", BookingID: "b_1"})
			require.NoError(t, err)
			read, err := s.GetRefund(t.Context(), "re_1")
			require.NoError(t, err)
			for _, r := range []Refund{made, read} {
				assert.Equal(t, tt.want, r.Status)
				assert.Equal(t, "re_1", r.ID)
				assert.Equal(t, "pi_1", r.PaymentID)
				assert.EqualValues(t, 900, r.Amount)
			}
			if tt.status == "failed" {
				assert.Equal(t, "expired_or_canceled_card", read.FailureReason)
			}
		})
	}
	t.Run("unknown refund", func(t *testing.T) {
		s := newTestStripe(t, cannedStripe(t, http.StatusNotFound,
			`{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such refund"}}`), http.DefaultTransport)
		_, err := s.GetRefund(t.Context(), "re_x")
		assert.ErrorIs(t, err, ErrNotFound)
	})
}
