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

// seatsOf is how many seats user holds in the event, as the ledger has it:
// live holds (pending and not expired, or sold) and the seats of
// bookings confirmed from the overflow reserve (whose holds expired).
func (h *payHarness) seatsOf(event int64, user string) int {
	h.t.Helper()
	return h.count(`SELECT coalesce(sum(q), 0)::int FROM (
		SELECT quantity AS q FROM holds WHERE event_id = $1 AND user_id = $2
			AND (status = 'confirmed' OR (status = 'pending' AND (expiry(holds) >= $3 OR hold_sold(event_id, id))))
		UNION ALL
		SELECT quantity FROM bookings WHERE event_id = $1 AND user_id = $2 AND status = 'confirmed' AND overflow) x`,
		event, user, h.clock.Now())
}

// A payment that landed after its hold expired used to be confirmed from
// the overflow reserve whatever else the buyer held: a buyer who had held
// again meanwhile (or whose other late payment was confirmed first) ended
// with more seats than max_per_user.
func TestLatePaymentKeepsThePerUserLimit(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		maxPerUser int
		// second: the buyer's other hold is booked too and expires before
		// the first payment lands (two late payments), instead of staying
		// live.
		second bool
		// reconcile: the late payment is found by the payment
		// reconciliation instead of a (delayed) webhook.
		reconcile bool
		// giveBack: the buyer gives the other hold back afterwards and holds
		// the limit.
		giveBack bool
	}{
		{name: "holds again, webhook lands late", maxPerUser: 1},
		{name: "holds again, reconciliation finds the payment", maxPerUser: 1, reconcile: true},
		{name: "two late payments", maxPerUser: 1, second: true},
		{name: "two late payments, reconciliation", maxPerUser: 1, second: true, reconcile: true},
		// Within the limit at first; but the buyer holds one hold at a
		// time, so once the other hold is given back they could hold the
		// limit on top of the late sale.
		{name: "holds again within the limit, then gives that hold back", maxPerUser: 2, giveBack: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newPayHarness(t, payOptions{})
			// 8 seats: 6 sellable, 2 in the overflow reserve.
			ev := h.createEvent(map[string]any{"capacity": 8, "overflow_pct": 25, "hold_ttl_seconds": 600,
				"max_per_user": tc.maxPerUser})
			require.Equal(t, int64(2), ev.OverflowReserve)

			first := h.holdOne(ev.ID, "ann", 1)
			fb := h.mustBook(ev.ID, "ann", first.HoldID, payment.MethodSilent)
			h.expireHold(ev.ID, "ann", first.HoldID)
			again := h.holdOne(ev.ID, "ann", 1)
			require.NotEqual(t, first.HoldID, again.HoldID, "the first hold expired: a new one")
			var sb bookingJSON
			if tc.second {
				sb = h.mustBook(ev.ID, "ann", again.HoldID, payment.MethodSilent)
				h.expireHold(ev.ID, "ann", again.HoldID)
			}

			settle := func(b bookingJSON) {
				if tc.reconcile {
					h.reconcile()
					return
				}
				require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
			}
			settle(fb)
			late := fb
			if tc.second {
				// The one settled first fits (the reconciliation settles
				// both, in either order); the other is over the limit.
				if !tc.reconcile {
					settle(sb)
				}
				first, second := h.booking(ev.ID, "ann", fb.BookingID), h.booking(ev.ID, "ann", sb.BookingID)
				late = sb
				if first.Status != "confirmed" {
					first, second, late = second, first, fb
				}
				require.Equal(t, "confirmed", first.Status, "one late payment fits: %+v, %+v", first, second)
				require.True(t, first.Overflow)
			}
			got := h.booking(ev.ID, "ann", late.BookingID)
			assert.Equal(t, "refunded", got.Status, "%+v", got)
			assert.Equal(t, booking.ReasonLatePerUserLimit, got.StatusReason)
			assert.Equal(t, "succeeded", got.RefundStatus)
			assert.Empty(t, got.Tickets)
			pays := h.fp.PaymentsForBooking(late.BookingID)
			require.Len(t, pays, 1)
			assert.Equal(t, pays[0].Amount, pays[0].AmountRefunded, "the money went back")
			assert.LessOrEqual(t, h.seatsOf(ev.ID, "ann"), tc.maxPerUser, "seats of one buyer")
			inv := h.requireSeatsOnce(ev.ID)
			if !tc.second {
				var hj holdJSON
				h.do(http.MethodGet, "/v1/holds/"+again.HoldID, nil, h.auth("ann", ev.ID)).json(t, &hj)
				assert.Equal(t, "pending", hj.Status, "the new hold is the buyer's still")
				assert.Equal(t, int64(1), inv.ActiveHolds)
			}
			wantOverflow := int64(0)
			if tc.second {
				wantOverflow = 1
			}
			assert.Equal(t, wantOverflow, inv.OverflowUsed, "%+v", inv)
			h.money(ev.ID)

			// Another hold while the buyer holds is the one they have.
			res := h.hold(ev.ID, "ann", 1, "one-more")
			assert.Equal(t, http.StatusOK, res.status, "%s", res.body)
			assert.LessOrEqual(t, h.seatsOf(ev.ID, "ann"), tc.maxPerUser)
			if tc.giveBack {
				res := h.do(http.MethodDelete, "/v1/holds/"+again.HoldID, nil, h.auth("ann", ev.ID))
				require.Equal(t, http.StatusNoContent, res.status, "%s", res.body)
				res = h.hold(ev.ID, "ann", tc.maxPerUser, "the-limit")
				require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
				assert.LessOrEqual(t, h.seatsOf(ev.ID, "ann"), tc.maxPerUser, "seats of one buyer")
				h.requireSeatsOnce(ev.ID)
			}
		})
	}
}
