package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/waitroom"
)

// Drift is corrected while holds keep coming: Redis selling seats the ledger
// has given away (remaining raised, a hold's record lost as a failover
// loses acknowledged writes) is set right by one reconcile pass, and the
// sale ends with exactly the sellable seats held.
func TestDriftCorrectedUnderLoad(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 3000})
	ctx := context.Background()
	keys := inventory.KeysFor(ev.ID)
	lost := h.holdID(ev.ID, "lost", "k", 2)

	var held, soldOut atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				user := fmt.Sprintf("w%d-%d", w, i)
				res := h.hold(ev.ID, user, 1, "k")
				switch res.status {
				case http.StatusCreated:
					if i%7 != 3 {
						held.Add(1)
						break
					}
					// Some buyers give their seat back at once: releases run
					// alongside the holds.
					var hj holdJSON
					res.json(t, &hj)
					del := h.do(http.MethodDelete, "/v1/holds/"+hj.HoldID, nil, map[string]string{waitroom.TokenHeader: h.token(user, ev.ID, 1)})
					if del.status != http.StatusNoContent {
						t.Errorf("release: %d %s", del.status, del.body)
						return
					}
				case http.StatusConflict:
					if soldOut.Add(1) > 50 {
						return
					}
				default:
					t.Errorf("hold: %d %s", res.status, res.body)
					return
				}
			}
		})
	}
	for held.Load() < 200 {
		runtime.Gosched()
	}
	// Mid-sale: Redis loses "lost"'s hold (its seats come back with it) and
	// gains 5 seats from nowhere.
	_, err := h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, keys.Holds, lost)
		p.HDel(ctx, keys.Users, "lost")
		p.ZRem(ctx, keys.Expiry, lost)
		p.IncrBy(ctx, keys.Remaining, 2+5)
		return nil
	})
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, h.srv.ReconcileOnce(ctx))
	}
	left, _, err := h.srv.Inventory().Remaining(ctx, ev.ID)
	require.NoError(t, err)
	require.Positive(t, left, "the sale was still on when the reconciler ran")

	wg.Wait()
	close(stop)
	// Settled: nothing in flight. A pass now finds nothing to correct, or
	// only a seat a release made stuck for a moment (the safe side).
	require.NoError(t, h.srv.ReconcileOnce(ctx))
	inv := h.requireInvariant(ev.ID, 3000)
	assert.Zero(t, inv.Remaining)
	assert.Equal(t, int64(3000-2), held.Load(), "never oversold")
	assert.Equal(t, http.StatusOK, h.hold(ev.ID, "lost", 1, "k2").status, "lost's hold is back in the guard")
}
