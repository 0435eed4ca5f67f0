package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/payment"
)

// A sale served from the overflow reserve keeps the buyer's record of no
// seats in Redis's one-hold-per-user guard. Ending that sale (the buyer's
// cancellation, or a refund made at the provider) used to leave the record
// until the next rebuild: a buyer with no seat at all could not hold again.
func TestEndedOverflowSaleFreesTheBuyer(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		end  func(h *payHarness, event int64, b bookingJSON)
	}{
		{name: "cancelled by the buyer", end: func(h *payHarness, event int64, b bookingJSON) {
			got := h.cancel(event, "ann", b.BookingID)
			require.Equal(h.t, "refunded", got.Status, "%+v", got)
		}},
		{name: "refunded at the provider", end: func(h *payHarness, event int64, b bookingJSON) {
			_, err := h.fp.Refund(ctx, payment.RefundRequest{PaymentID: b.PaymentID, BookingID: b.BookingID, IdempotencyKey: "dashboard"})
			require.NoError(h.t, err)
			// A silent payment's refund sends no webhook: signed by hand, as
			// the provider would send it.
			res := h.webhook([]byte(fmt.Sprintf(`{"id":"evt_%s","object":"event","type":"charge.refunded","data":{"object":`+
				`{"id":"ch_1","object":"charge","amount":%d,"amount_refunded":%d,"payment_intent":%q}}}`,
				uuid.NewString(), b.Amount, b.Amount, b.PaymentID)))
			require.Equal(h.t, http.StatusOK, res.status, "%s", res.body)
			require.Equal(h.t, "refunded", h.booking(event, "ann", b.BookingID).Status)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newPayHarness(t, payOptions{})
			ev := h.createEvent(map[string]any{"capacity": 8, "overflow_pct": 25, "hold_ttl_seconds": 600, "max_per_user": 1})
			first := h.holdOne(ev.ID, "ann", 1)
			b := h.mustBook(ev.ID, "ann", first.HoldID, payment.MethodSilent)
			h.expireHold(ev.ID, "ann", first.HoldID)
			require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
			got := h.booking(ev.ID, "ann", b.BookingID)
			require.Equal(t, "confirmed", got.Status, "%+v", got)
			require.True(t, got.Overflow)
			res := h.hold(ev.ID, "ann", 1, "while-she-has-a-seat")
			require.Equal(t, http.StatusOK, res.status, "the buyer has her seat: %s", res.body)

			tc.end(h, ev.ID, b)
			inv := h.requireSeatsOnce(ev.ID)
			assert.Zero(t, inv.OverflowUsed, "%+v", inv)
			assert.Zero(t, inv.Confirmed)

			res = h.hold(ev.ID, "ann", 1, "after-the-sale-ended")
			require.Equal(t, http.StatusCreated, res.status, "no seat left to the buyer: she holds again: %s", res.body)
			var hj holdJSON
			res.json(t, &hj)
			assert.NotEqual(t, first.HoldID, hj.HoldID)
			assert.Equal(t, 1, h.seatsOf(ev.ID, "ann"))
			h.requireInvariant(ev.ID, 1)
			h.money(ev.ID)
		})
	}
}

// A release Redis refused is kept and retried by the reaper; a release of
// the same hold that Redis takes meanwhile, and that does at least as much,
// ends it. Otherwise the retry runs after it: the KeepBuyer release of a
// late payment served from the overflow reserve, retried after the
// cancellation's DropBuyer, wrote the buyer's record back, and the buyer,
// with no seat left, could not hold again.
func TestDeferredReleaseEndsWithTheReleaseThatSupersedesIt(t *testing.T) {
	ctx := context.Background()
	proxy, redisURL := proxiedRedis(t)
	h := newPayHarness(t, payOptions{redisURL: redisURL})
	ev := h.createEvent(map[string]any{"capacity": 8, "overflow_pct": 25, "hold_ttl_seconds": 600, "max_per_user": 1})
	first := h.holdOne(ev.ID, "ann", 1)
	b := h.mustBook(ev.ID, "ann", first.HoldID, payment.MethodSilent)
	h.expireHold(ev.ID, "ann", first.HoldID)

	// Redis goes away once the late payment's confirmation found the hold
	// expired: the release that keeps ann in the guard is deferred.
	var armed atomic.Bool
	armed.Store(true)
	h.srv.AfterRedisStep(func() {
		if armed.CompareAndSwap(true, false) {
			proxy.Cut()
		}
	})
	require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
	got := h.booking(ev.ID, "ann", b.BookingID)
	require.Equal(t, "confirmed", got.Status, "%+v", got)
	require.True(t, got.Overflow)
	proxy.Restore()

	require.Equal(t, "refunded", h.cancel(ev.ID, "ann", b.BookingID).Status)
	_, err := h.srv.ReapOnce(ctx)
	require.NoError(t, err)
	res := h.hold(ev.ID, "ann", 1, "after-the-sale-ended")
	assert.Equal(t, http.StatusCreated, res.status, "no seat left to the buyer: she holds again: %s", res.body)
	h.requireInvariant(ev.ID, 1)
}
