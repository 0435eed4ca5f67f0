package origin_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// proxiedRedis is the shared Redis behind a fault proxy.
func proxiedRedis(t *testing.T) (*testenv.Proxy, string) {
	t.Helper()
	u, proxy := testenv.Proxied(t, testenv.RedisURL(t))
	return proxy, u
}

func (h *harness) holdID(event int64, user, key string, qty int) string {
	h.t.Helper()
	res := h.hold(event, user, qty, key)
	require.Equal(h.t, http.StatusCreated, res.status, "%s", res.body)
	var hj holdJSON
	res.json(h.t, &hj)
	return hj.HoldID
}

// A release that Redis refused is retried in the mode it was started in: a
// confirmed hold that the ledger ended comes back whole, and its buyer may
// hold again.
func TestRefusedReleaseIsRetriedInItsMode(t *testing.T) {
	proxy, redisURL := proxiedRedis(t)
	h := newHarness(t, harnessOptions{redisURL: redisURL})
	ev := h.createEvent(map[string]any{"capacity": 2})
	ctx := context.Background()
	id := h.holdID(ev.ID, "ann", "a", 1)

	// Between the confirmation's two steps, another node's reaper expires
	// the row (and dies before its Redis step); then Redis goes away.
	var once atomic.Bool
	h.srv.AfterRedisStep(func() {
		if once.CompareAndSwap(false, true) {
			_, err := h.ledger.Pool().Exec(ctx, `UPDATE holds SET status = 'expired' WHERE id = $1`, id)
			assert.NoError(t, err)
			proxy.Cut()
		}
	})
	_, err := h.srv.ConfirmHold(ctx, id, nil)
	require.ErrorIs(t, err, ledger.ErrHoldNotActive)

	proxy.Restore()
	_, err = h.srv.ReapOnce(ctx)
	require.NoError(t, err)
	inv := h.requireInvariant(ev.ID, 0)
	assert.Equal(t, int64(2), inv.Remaining, "the confirmed seat came back")
	assert.Equal(t, http.StatusCreated, h.hold(ev.ID, "ann", 1, "a2").status, "ann is not blocked by a stale entry")
}

// The reaper returns whatever Redis holds for a hold it expired: a
// confirmation whose ledger step failed left it confirmed in Redis.
func TestReaperReturnsAHoldConfirmedOnlyInRedis(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 2})
	ctx := context.Background()
	id := h.holdID(ev.ID, "ann", "a", 1)

	_, err := h.srv.ConfirmHold(ctx, id, func(ledger.Tx, ledger.Hold) error { return errors.New("booking update failed") })
	require.Error(t, err)
	h.clock.Advance(601 * time.Second)
	n, err := h.srv.ReapOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	inv := h.requireInvariant(ev.ID, 0)
	assert.Equal(t, int64(2), inv.Remaining, "no seat stuck in Redis")

	// The webhook's retry finds the hold over (and is served as a late
	// payment by the booking flow).
	_, err = h.srv.ConfirmHold(ctx, id, nil)
	assert.ErrorIs(t, err, ledger.ErrHoldNotActive)
	assert.Equal(t, http.StatusCreated, h.hold(ev.ID, "ann", 1, "a2").status)
	h.requireInvariant(ev.ID, 1)
}

// A buyer confirmed from the overflow reserve still counts for the
// one-hold-per-user guard, whoever expired the hold first, and after a
// rebuild.
func TestOverflowBuyerKeepsTheGuard(t *testing.T) {
	for _, reaperFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("reaper first %v", reaperFirst), func(t *testing.T) {
			h := newPayHarness(t, payOptions{})
			ev := h.createEvent(map[string]any{"capacity": 2, "overflow_pct": 50, "hold_ttl_seconds": 60})
			ctx := context.Background()
			ann := h.holdOne(ev.ID, "ann", 1)
			b := h.mustBook(ev.ID, "ann", ann.HoldID, payment.MethodSilent)
			h.expireHold(ev.ID, "ann", ann.HoldID)
			if reaperFirst {
				n, err := h.srv.ReapOnce(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, n)
			}
			require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
			got := h.booking(ev.ID, "ann", b.BookingID)
			require.Equal(t, "confirmed", got.Status)
			require.True(t, got.Overflow)
			inv := h.requireSeatsOnce(ev.ID)
			assert.Equal(t, int64(1), inv.Remaining, "the hold's seat went back to the pool")

			for _, rebuild := range []bool{false, true} {
				if rebuild {
					_, err := h.srv.Rebuild(ctx, ev.ID)
					require.NoError(t, err)
				}
				res := h.hold(ev.ID, "ann", 1, fmt.Sprintf("again-%v", rebuild))
				assert.Equal(t, http.StatusOK, res.status, "rebuilt %v: ann bought already: %s", rebuild, res.body)
			}
			assert.Equal(t, http.StatusCreated, h.hold(ev.ID, "bob", 1, "b").status, "the seat is bob's to take")
			h.requireSeatsOnce(ev.ID)
		})
	}
}
