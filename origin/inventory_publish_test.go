package origin_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
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

// TestPublisherPacesItsCounts: the holds in the ledger are counted again
// only when the count is due; in between, the seats Redis says are taken
// and not counted confirmed are published as held, so the last seats held
// never read as sold out.
func TestPublisherPacesItsCounts(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	origin.PaceCounts(h.srv, time.Minute)
	ctx := context.Background()
	ev := h.createEvent(map[string]any{"capacity": 4, "hold_ttl_seconds": 600, "max_per_user": 4})
	read := func() waitroom.Inventory {
		t.Helper()
		h.clock.Advance(origin.PublishMaxAge + time.Millisecond)
		require.NoError(t, h.srv.PublishInventoryOnce(ctx))
		inv, err := h.store.Inventory(ctx, ev.ID)
		require.NoError(t, err)
		return inv
	}
	assert.Zero(t, read().Held, "the first count")

	id := h.holdID(ev.ID, "alice", "k1", 4)
	inv := read()
	assert.Equal(t, int64(0), inv.Remaining)
	assert.Equal(t, int64(4), inv.Held, "every seat held since the count, not sold out")

	// The ledger changes under the publisher, as a confirmation on
	// another node would change it.
	_, err := h.ledger.Pool().Exec(ctx, `UPDATE holds SET status = 'confirmed' WHERE id = $1`, id)
	require.NoError(t, err)
	inv = read()
	assert.Zero(t, inv.Confirmed, "not counted before the count is due")
	assert.Equal(t, int64(4), inv.Held)

	h.clock.Advance(time.Minute)
	inv = read()
	assert.Equal(t, int64(4), inv.Confirmed, "counted when due")
	assert.Zero(t, inv.Held)
	assert.Zero(t, inv.Remaining)
}
