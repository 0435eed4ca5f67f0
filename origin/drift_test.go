package origin_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin"
)

// Drift the reconciler sees is corrected from the ledger in the same pass,
// without a rebuild; drift of writes under way is left alone.
func TestReconcilerCorrectsLastingDrift(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 20})
	ctx := context.Background()
	reconcile := func() origin.Invariant {
		t.Helper()
		require.NoError(t, h.srv.ReconcileOnce(ctx))
		return h.invariant(ev.ID)
	}

	// A hold whose row is still being written: Redis has taken the seat,
	// the ledger not yet.
	gate := origin.GateHoldBatches(h.srv)
	var wg sync.WaitGroup
	wg.Go(func() { assert.Equal(t, http.StatusCreated, h.hold(ev.ID, "slow", 1, "k").status) })
	gate.WaitQueued(t, 0)
	for range 3 {
		assert.Equal(t, int64(-1), reconcile().Drift, "transient drift is not corrected")
	}
	gate.Open()
	wg.Wait()
	h.requireInvariant(ev.ID, 1)
	h.holdAll(ev.ID, 4, "u")
	assert.Zero(t, h.rebuilds("drift"))

	key := inventory.KeysFor(ev.ID).Remaining
	for _, change := range []int64{3, -6} {
		// Redis sells 3 seats the ledger has given away; then 6 seats stay
		// stuck.
		require.NoError(t, h.rdb.IncrBy(ctx, key, change).Err())
		assert.Equal(t, change, h.invariant(ev.ID).Drift)
		inv := reconcile()
		assert.Zero(t, inv.Drift, "corrected in one pass")
		assert.Equal(t, int64(15), inv.Remaining)
	}
	assert.Zero(t, h.rebuilds("drift"), "no rebuild was needed")
	assert.False(t, h.state(ev.ID).Paused, "admission never paused")
}

// rebuilds reads the rebuilds metric of a reason.
func (h *harness) rebuilds(reason string) float64 {
	h.t.Helper()
	v, _ := h.series(`waitroom_origin_rebuilds_total{reason="` + reason + `"}`)
	return v
}
