package origin_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/payment"
)

// A payment the provider has succeeded for another amount or currency than
// the booking's (changed at the provider after the origin asked) used to
// be confirmed: seats sold for what someone else decided, the difference
// kept or missing.
func TestPaymentForAnotherAmountIsRefunded(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		amount   func(int64) int64
		currency string
		// reconcile: the payment reconciliation settles the payment
		// instead of payment_intent.succeeded.
		reconcile bool
		// refundedFirst: the payment is refunded at the provider before
		// the origin settles it, so nothing is left for its own refund.
		refundedFirst bool
	}{
		{name: "less, payment_intent.succeeded", amount: func(a int64) int64 { return a / 10 }, currency: "inr"},
		{name: "more, the reconciliation", amount: func(a int64) int64 { return a + 1 }, currency: "inr", reconcile: true},
		{name: "another currency, payment_intent.succeeded", amount: func(a int64) int64 { return a }, currency: "usd"},
		{name: "less, refunded at the provider first", amount: func(a int64) int64 { return a / 10 }, currency: "inr", refundedFirst: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newPayHarness(t, payOptions{})
			ev := h.createEvent(map[string]any{"capacity": 8, "hold_ttl_seconds": 600, "max_per_user": 2, "currency": "inr"})
			hj := h.holdOne(ev.ID, "ann", 2)
			b := h.mustBook(ev.ID, "ann", hj.HoldID, payment.MethodSilent)
			require.Equal(t, "payment_pending", b.Status)

			paid := tc.amount(b.Amount)
			require.NoError(t, h.fp.AmendAtProvider(b.PaymentID, paid, tc.currency))
			if tc.refundedFirst {
				_, err := h.fp.RefundAtProvider(b.PaymentID, 0)
				require.NoError(t, err)
			}
			if tc.reconcile {
				h.reconcile()
			} else {
				require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
			}

			got := h.settled(ev.ID, "ann", b.BookingID)
			assert.Equal(t, "refunded", got.Status, "%+v", got)
			assert.Equal(t, booking.ReasonPaymentMismatch, got.StatusReason)
			assert.Equal(t, "succeeded", got.RefundStatus)
			assert.Empty(t, got.Tickets, "no ticket for a payment of another amount")
			assert.Zero(t, h.count(`SELECT count(*) FROM tickets WHERE booking_id = $1`, b.BookingID))
			p, err := h.fp.GetPayment(ctx, b.PaymentID)
			require.NoError(t, err)
			assert.Equal(t, paid, p.Returned(), "all of the payment went back")

			// The hold is the buyer's still: paid at its price, it is sold.
			var after holdJSON
			h.do(http.MethodGet, "/v1/holds/"+hj.HoldID, nil, h.auth("ann", ev.ID)).json(t, &after)
			assert.Equal(t, "pending", after.Status)
			again := h.mustBook(ev.ID, "ann", hj.HoldID, payment.MethodVisa)
			sold := h.settled(ev.ID, "ann", again.BookingID)
			assert.Equal(t, "confirmed", sold.Status, "%+v", sold)
			assert.Len(t, sold.Tickets, 2)

			// The news again changes nothing.
			require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
			assert.Equal(t, got, h.settled(ev.ID, "ann", b.BookingID))
			inv := h.requireSeatsOnce(ev.ID)
			assert.EqualValues(t, 2, inv.Confirmed, "%+v", inv)
			m := h.money(ev.ID)
			assert.EqualValues(t, 1, m.Refunded.Count, "%+v", m)
		})
	}
}
