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

// charge.refunded for the whole amount of a payment whose booking still
// waits for it used to change nothing, and be recorded as handled, on the
// word that the success's settlement would find the refund when it asked
// the provider. A settlement that had asked just before the refund then
// confirmed the booking: valid tickets for money returned. The refund event
// ends the waiting booking itself.
func TestChargeRefundedEndsAWaitingBooking(t *testing.T) {
	ctx := context.Background()
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 8, "hold_ttl_seconds": 600, "max_per_user": 2})
	hj := h.holdOne(ev.ID, "ann", 2)
	b := h.mustBook(ev.ID, "ann", hj.HoldID, payment.MethodSilent)
	require.Equal(t, "payment_pending", b.Status)

	_, err := h.fp.Refund(ctx, payment.RefundRequest{PaymentID: b.PaymentID, BookingID: b.BookingID, IdempotencyKey: "dashboard"})
	require.NoError(t, err)
	res := h.webhook([]byte(fmt.Sprintf(`{"id":"evt_%s","object":"event","type":"charge.refunded","data":{"object":`+
		`{"id":"ch_1","object":"charge","amount":%d,"amount_refunded":%d,"payment_intent":%q}}}`,
		uuid.NewString(), b.Amount, b.Amount, b.PaymentID)))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)

	got := h.booking(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "refunded", got.Status, "the refund event ends the booking, not a later settlement: %+v", got)
	assert.Equal(t, booking.ReasonRefundedAtProvider, got.StatusReason)
	assert.Empty(t, got.Tickets)
	inv := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, ev.Sellable, inv.Remaining, "the seats are back on sale")

	// The success, delivered after, changes nothing.
	require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
	assert.Equal(t, got, h.booking(ev.ID, "ann", b.BookingID))
	h.requireInvariant(ev.ID, 0)
}
