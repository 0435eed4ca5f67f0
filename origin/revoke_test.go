package origin_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/payment"
)

// The answer that shows a buyer their booking confirmed tells the gateway
// to end their admission; no other answer does.
func TestConfirmedBookingRevokesAdmission(t *testing.T) {
	tests := []struct {
		name   string
		price  int
		method string
		// postStatus is the booking the POST answers with.
		postStatus string
		// getStatus is the booking once the provider is done.
		getStatus string
	}{
		{name: "paid: confirmed by the webhook", price: 90000, method: payment.MethodVisa,
			postStatus: "payment_pending", getStatus: "confirmed"},
		{name: "free: confirmed at once", price: 0, method: payment.MethodVisa,
			postStatus: "confirmed", getStatus: "confirmed"},
		{name: "declined", price: 90000, method: payment.MethodDeclined,
			postStatus: "failed", getStatus: "failed"},
		{name: "paid, no webhook yet", price: 90000, method: payment.MethodSilent,
			postStatus: "payment_pending", getStatus: "payment_pending"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newPayHarness(t, payOptions{})
			ev := h.createEvent(map[string]any{"capacity": 10, "price": tc.price})
			hold := h.holdOne(ev.ID, "ann", 1)
			revokes := func(r result) bool { return r.header.Get(origin.CommandHeader) == origin.CommandRevoke }

			key := "book-" + uuid.NewString()
			res := h.book(ev.ID, "ann", hold.HoldID, tc.method, key)
			require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
			var b bookingJSON
			res.json(t, &b)
			require.Equal(t, tc.postStatus, b.Status)
			assert.Equal(t, tc.postStatus == "confirmed", revokes(res), "POST answering %s", b.Status)

			replay := h.book(ev.ID, "ann", hold.HoldID, tc.method, key)
			require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
			assert.Equal(t, tc.postStatus == "confirmed", revokes(replay), "a replay answers as the first")

			got := h.settled(ev.ID, "ann", b.BookingID)
			require.Equal(t, tc.getStatus, got.Status, "%+v", got)
			res = h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, h.auth("ann", ev.ID))
			require.Equal(t, http.StatusOK, res.status)
			assert.Equal(t, tc.getStatus == "confirmed", revokes(res), "GET answering %s", got.Status)

			// Another key on the booked hold: that booking, 200.
			other := h.book(ev.ID, "ann", hold.HoldID, tc.method, "book-"+uuid.NewString())
			if other.status == http.StatusOK {
				assert.Equal(t, tc.getStatus == "confirmed", revokes(other), "the existing booking, %s", got.Status)
			}

			if tc.getStatus == "confirmed" {
				res = h.do(http.MethodPost, "/v1/bookings/"+b.BookingID+"/cancellation", nil, h.auth("ann", ev.ID))
				require.Equal(t, http.StatusOK, res.status, "%s", res.body)
				assert.False(t, revokes(res), "a cancellation confirms nothing")
				res = h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, h.auth("ann", ev.ID))
				assert.False(t, revokes(res), "a cancelled booking")
			}
		})
	}
}

// max_per_user counts the seats a buyer bought, confirmed from their hold
// or from the overflow reserve (a late payment, whose hold expired): a
// buyer who bought the limit is answered 200 with the hold they bought
// (one hold per buyer per event), and no seat more is taken; also after
// Redis is rebuilt from the ledger.
func TestPerAccountLimitCountsConfirmedSeats(t *testing.T) {
	tests := []struct {
		name     string
		overflow bool
		rebuild  bool
	}{
		{name: "confirmed from the hold"},
		{name: "confirmed from the hold, redis rebuilt", rebuild: true},
		{name: "confirmed from the overflow reserve", overflow: true},
		{name: "confirmed from the overflow reserve, redis rebuilt", overflow: true, rebuild: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newPayHarness(t, payOptions{})
			// 8 seats: 6 sellable, 2 in the overflow reserve.
			ev := h.createEvent(map[string]any{"capacity": 8, "overflow_pct": 25, "max_per_user": 2})
			bought := h.holdOne(ev.ID, "ann", 2)
			method := payment.MethodVisa
			if tc.overflow {
				method = payment.MethodSilent
			}
			b := h.mustBook(ev.ID, "ann", bought.HoldID, method)
			if tc.overflow {
				h.expireHold(ev.ID, "ann", bought.HoldID)
				require.NoError(t, h.fp.Redeliver(t.Context(), b.PaymentID))
			}
			got := h.settled(ev.ID, "ann", b.BookingID)
			require.Equal(t, "confirmed", got.Status, "%+v", got)
			require.Equal(t, tc.overflow, got.Overflow)
			require.Equal(t, 2, h.seatsOf(ev.ID, "ann"))
			if tc.rebuild {
				res := h.do(http.MethodPost, fmt.Sprintf("/v1/admin/events/%d/rebuild", ev.ID), nil, admin())
				require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			}
			before := h.invariant(ev.ID)

			for i, qty := range []int{1, 2} {
				res := h.hold(ev.ID, "ann", qty, fmt.Sprintf("again-%d", i))
				require.Equal(t, http.StatusOK, res.status, "holding again: %s", res.body)
				var hj holdJSON
				res.json(t, &hj)
				assert.Equal(t, bought.HoldID, hj.HoldID, "the hold the buyer bought")
				wantStatus := "confirmed"
				if tc.overflow {
					wantStatus = "expired" // the reserve took the sale, not the hold
				}
				assert.Equal(t, wantStatus, hj.Status)
				assert.Equal(t, 2, h.seatsOf(ev.ID, "ann"), "seats of the buyer")
			}
			after := h.requireSeatsOnce(ev.ID)
			assert.Equal(t, before.Remaining, after.Remaining, "no seat taken")
			assert.Equal(t, before.ActiveHolds, after.ActiveHolds)

			// Someone else still can.
			h.holdOne(ev.ID, "bob", 2)
		})
	}
}
