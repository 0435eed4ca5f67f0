package origin_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/payment"
)

// TestOperatorResolvesAnUnresolvedBooking: past the window in which the
// origin repeats a booking's create call, a booking whose payment it never
// heard of is settled by an operator: by naming its payment, which is
// asked about at the provider and must be the booking's, or by saying the
// provider has none. Neither is taken while the origin can still find out
// by itself, nor for a booking that no longer waits.
func TestOperatorResolvesAnUnresolvedBooking(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5, "hold_ttl_seconds": 600, "overflow_pct": 20})
	resolve := func(id string, body any, headers map[string]string) result {
		t.Helper()
		return h.do(http.MethodPost, "/v1/admin/bookings/"+id+"/resolution", body, headers)
	}

	// Ann's create charged her and its answer was lost; Bob's never
	// reached the provider. Neither webhook comes.
	require.NoError(t, h.fp.SetFaults(0, 1))
	charged := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, payment.MethodSilent)
	require.NoError(t, h.fp.SetFaults(1, 0))
	lost := h.mustBook(ev.ID, "bob", h.holdOne(ev.ID, "bob", 1).HoldID, payment.MethodSilent)
	require.NoError(t, h.fp.SetFaults(0, 0))
	require.Empty(t, charged.PaymentID)
	require.Empty(t, lost.PaymentID)
	made := h.fp.PaymentsForBooking(charged.BookingID)
	require.Len(t, made, 1, "the provider charged Ann")
	require.Empty(t, h.fp.PaymentsForBooking(lost.BookingID))
	paid := h.settled(ev.ID, "carol", h.mustBook(ev.ID, "carol", h.holdOne(ev.ID, "carol", 1).HoldID, payment.MethodVisa).BookingID)
	require.Equal(t, "confirmed", paid.Status)

	res := resolve(lost.BookingID, map[string]any{"charged": false}, admin())
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	assert.Equal(t, "payment_resolvable", res.errorCode(t), "the create is still repeated")

	h.clock.Advance(24 * time.Hour)
	for name, c := range map[string]struct {
		id      string
		body    any
		headers map[string]string
		status  int
		code    string
	}{
		"no admin token":        {lost.BookingID, map[string]any{"charged": false}, nil, http.StatusUnauthorized, ""},
		"nothing said":          {lost.BookingID, map[string]any{}, admin(), http.StatusBadRequest, "invalid_request"},
		"charged, no payment":   {lost.BookingID, map[string]any{"charged": true}, admin(), http.StatusBadRequest, "invalid_request"},
		"both":                  {lost.BookingID, map[string]any{"charged": false, "payment_id": made[0].ID}, admin(), http.StatusBadRequest, "invalid_request"},
		"empty payment id":      {lost.BookingID, map[string]any{"payment_id": ""}, admin(), http.StatusBadRequest, "invalid_request"},
		"unknown field":         {lost.BookingID, map[string]any{"charged": false, "note": "x"}, admin(), http.StatusBadRequest, "invalid_request"},
		"not a booking id":      {"b-1", map[string]any{"charged": false}, admin(), http.StatusNotFound, "not_found"},
		"unknown booking":       {uuid.NewString(), map[string]any{"charged": false}, admin(), http.StatusNotFound, "not_found"},
		"unknown payment":       {charged.BookingID, map[string]any{"payment_id": "pi_nobody"}, admin(), http.StatusUnprocessableEntity, "payment_not_found"},
		"another's payment":     {charged.BookingID, map[string]any{"payment_id": paid.PaymentID}, admin(), http.StatusUnprocessableEntity, "payment_not_of_booking"},
		"a settled booking":     {paid.BookingID, map[string]any{"payment_id": paid.PaymentID}, admin(), http.StatusConflict, "booking_settled"},
		"a settled one, unpaid": {paid.BookingID, map[string]any{"charged": false}, admin(), http.StatusConflict, "booking_settled"},
	} {
		t.Run(name, func(t *testing.T) {
			res := resolve(c.id, c.body, c.headers)
			require.Equal(t, c.status, res.status, "%s", res.body)
			if c.code != "" {
				assert.Equal(t, c.code, res.errorCode(t))
			}
		})
	}
	assert.Equal(t, "payment_pending", h.booking(ev.ID, "ann", charged.BookingID).Status, "nothing changed")
	assert.Equal(t, "payment_pending", h.booking(ev.ID, "bob", lost.BookingID).Status, "nothing changed")

	// Ann's payment, named: asked about and settled as a late payment
	// (her hold ended a day ago), from the overflow reserve.
	res = resolve(charged.BookingID, map[string]any{"payment_id": made[0].ID}, admin())
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	var got bookingJSON
	res.json(t, &got)
	assert.Equal(t, made[0].ID, got.PaymentID)
	assert.Equal(t, "confirmed", got.Status, "%+v", got)
	assert.Equal(t, "late_payment_overflow", got.StatusReason)
	assert.Len(t, got.Tickets, 1)

	// Bob: nothing at the provider.
	res = resolve(lost.BookingID, map[string]any{"charged": false}, admin())
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res.json(t, &got)
	assert.Equal(t, "failed", got.Status)
	assert.Equal(t, "not_charged", got.StatusReason)
	res = resolve(lost.BookingID, map[string]any{"charged": false}, admin())
	assert.Equal(t, http.StatusConflict, res.status, "once: %s", res.body)
	assert.Equal(t, int64(2), h.fp.Charges(), "no charge made by a resolution")
	h.requireSeatsOnce(ev.ID)
}
