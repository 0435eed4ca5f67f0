package origin_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/waitroom"
)

// TestOriginPublishesInventory: the origin writes each event's seat
// figures and its health where the gateways read them, on change and at
// least every second.
func TestOriginPublishesInventory(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ctx := context.Background()
	ev := h.createEvent(map[string]any{"capacity": 10, "hold_ttl_seconds": 600})
	read := func() waitroom.Inventory {
		t.Helper()
		require.NoError(t, h.srv.PublishInventoryOnce(ctx))
		inv, err := h.store.Inventory(ctx, ev.ID)
		require.NoError(t, err)
		return inv
	}

	inv := read()
	assert.Equal(t, waitroom.Inventory{Sellable: 10, Remaining: 10, HoldTTLSeconds: 600, Healthy: true, At: h.clock.Now()}, inv)

	require.Equal(t, http.StatusCreated, h.hold(ev.ID, "alice", 2, "k1").status)
	inv = read()
	assert.Equal(t, int64(2), inv.Held, "published on change")
	assert.Equal(t, int64(8), inv.Remaining)
	assert.Zero(t, inv.ExpiringSoon)

	h.clock.Advance(500 * time.Millisecond)
	assert.True(t, read().At.Equal(inv.At), "unchanged figures wait for their second")
	h.clock.Advance(600 * time.Millisecond)
	assert.True(t, read().At.Equal(h.clock.Now()), "and are published again after it")

	h.clock.Advance(600*time.Second - waitroom.InventorySoon)
	inv = read()
	assert.Equal(t, int64(2), inv.ExpiringSoon, "the hold expires within %s", waitroom.InventorySoon)

	h.clock.Advance(waitroom.InventorySoon + time.Second)
	inv = read()
	assert.Equal(t, waitroom.Inventory{Sellable: 10, Remaining: 10, HoldTTLSeconds: 600, Healthy: true, At: h.clock.Now()}, inv,
		"the expired hold's seats are free again")
}
