package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/payment"
)

// A payment refunded at the provider while its booking still waited for
// it (charge.refunded changes nothing then) used to be confirmed when
// payment_intent.succeeded came after: tickets issued for money already
// returned.
func TestPaymentRefundedBeforeItSettles(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// chargeRefunded: the provider's charge.refunded comes first.
		chargeRefunded bool
		// expired: the hold expires before the payment lands (a late
		// payment, which the overflow reserve would serve).
		expired bool
		// reconcile: the payment reconciliation settles the payment
		// instead of payment_intent.succeeded.
		reconcile bool
	}{
		{name: "charge.refunded, then payment_intent.succeeded", chargeRefunded: true},
		{name: "charge.refunded, then the reconciliation", chargeRefunded: true, reconcile: true},
		{name: "no refund event, payment_intent.succeeded"},
		{name: "late, payment_intent.succeeded", chargeRefunded: true, expired: true},
		{name: "late, the reconciliation", expired: true, reconcile: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newPayHarness(t, payOptions{})
			ev := h.createEvent(map[string]any{"capacity": 8, "overflow_pct": 25, "hold_ttl_seconds": 600, "max_per_user": 2})
			hj := h.holdOne(ev.ID, "ann", 2)
			b := h.mustBook(ev.ID, "ann", hj.HoldID, payment.MethodSilent)
			require.Equal(t, "payment_pending", b.Status)

			// Refunded at the provider (its dashboard) before the origin
			// heard of the payment.
			_, err := h.fp.Refund(ctx, payment.RefundRequest{PaymentID: b.PaymentID, BookingID: b.BookingID, IdempotencyKey: "dashboard"})
			require.NoError(t, err)
			if tc.chargeRefunded {
				res := h.webhook([]byte(fmt.Sprintf(`{"id":"evt_%s","object":"event","type":"charge.refunded","data":{"object":`+
					`{"id":"ch_1","object":"charge","amount":%d,"amount_refunded":%d,"payment_intent":%q}}}`,
					uuid.NewString(), b.Amount, b.Amount, b.PaymentID)))
				require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			}
			if tc.expired {
				h.expireHold(ev.ID, "ann", hj.HoldID)
			}
			if tc.reconcile {
				h.reconcile()
			} else {
				require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
			}

			got := h.booking(ev.ID, "ann", b.BookingID)
			assert.Equal(t, "refunded", got.Status, "%+v", got)
			assert.Equal(t, "succeeded", got.RefundStatus)
			assert.Equal(t, booking.ReasonRefundedAtProvider, got.StatusReason)
			assert.Empty(t, got.Tickets, "no ticket for money returned")
			assert.False(t, got.Overflow)
			assert.Zero(t, h.count(`SELECT count(*) FROM tickets WHERE booking_id = $1`, b.BookingID), "no ticket issued")
			assert.Equal(t, int64(1), h.fp.Refunds(), "the origin refunded nothing itself")

			var after holdJSON
			h.do(http.MethodGet, "/v1/holds/"+hj.HoldID, nil, h.auth("ann", ev.ID)).json(t, &after)
			if tc.expired && !tc.chargeRefunded {
				// charge.refunded ended it before it expired.
				assert.Equal(t, "expired", after.Status)
			} else {
				assert.Equal(t, "released", after.Status)
			}
			inv := h.requireSeatsOnce(ev.ID)
			assert.Zero(t, inv.Confirmed, "%+v", inv)
			assert.Zero(t, inv.OverflowUsed)
			assert.Equal(t, ev.Sellable, inv.Remaining, "the seats are back on sale")
			m := h.money(ev.ID)
			assert.EqualValues(t, 1, m.Refunded.Count, "%+v", m)

			// The news again changes nothing; the buyer holds again.
			require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
			assert.Equal(t, got, h.booking(ev.ID, "ann", b.BookingID))
			h.holdOne(ev.ID, "ann", 1)
			h.requireInvariant(ev.ID, 1)
		})
	}
}
