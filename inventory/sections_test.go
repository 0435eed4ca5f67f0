package inventory_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/inventory"
)

// General-admission sections inside a seat map: a count of places per
// section beside the event's remaining.

// loadedSections loads a fresh event of seats (reserved and general
// admission together) whose general-admission sections have the places
// of sections left.
func loadedSections(t *testing.T, seats int64, sections map[string]int64, holds ...inventory.LiveHold) (*inventory.Inventory, redis.UniversalClient, int64) {
	t.Helper()
	rdb := testenv.Redis(t)
	inv := inventory.New(rdb)
	event := testenv.EventID()
	err := inv.Rebuild(context.Background(), event, func(context.Context) (inventory.Snapshot, error) {
		return inventory.Snapshot{Remaining: seats, Sections: sections, Holds: holds}, nil
	})
	require.NoError(t, err)
	return inv, rdb, event
}

func holdPlaces(t *testing.T, inv *inventory.Inventory, event int64, user, section string, qty int64, now time.Time) inventory.HoldResult {
	t.Helper()
	res, err := inv.Hold(context.Background(), inventory.HoldRequest{
		Event: event, HoldID: fmt.Sprintf("h-%s-%d", user, holdSeq.Add(1)), User: user, Quantity: qty,
		Section: section, ExpiresAt: now.Add(10 * time.Minute), Now: now,
	})
	require.NoError(t, err)
	return res
}

func places(t *testing.T, inv *inventory.Inventory, event int64, now time.Time) map[string]int64 {
	t.Helper()
	st, ok, err := inv.SeatStates(context.Background(), event, now)
	require.NoError(t, err)
	require.True(t, ok)
	return st.Places
}

func TestSectionHoldIsBoundedBySection(t *testing.T) {
	inv, _, event := loadedSections(t, 20, map[string]int64{"GA-East": 5, "GA-West": 10})

	ann := holdPlaces(t, inv, event, "ann", "GA-East", 4, t0)
	require.Equal(t, inventory.Held, ann.Outcome)
	assert.Equal(t, "GA-East", ann.Record.Section)
	assert.Equal(t, int64(16), ann.Remaining)

	bob := holdPlaces(t, inv, event, "bob", "GA-East", 2, t0)
	assert.Equal(t, inventory.SoldOut, bob.Outcome, "the event has 16 left, the section 1")
	assert.Equal(t, int64(1), bob.Remaining, "sold_out counts the section's places")
	assert.Equal(t, int64(16), remaining(t, inv, event), "nothing was taken")

	cat := holdPlaces(t, inv, event, "cat", "GA-East", 1, t0)
	require.Equal(t, inventory.Held, cat.Outcome, "exactly the last place")
	assert.Equal(t, inventory.SoldOut, holdPlaces(t, inv, event, "dan", "GA-East", 1, t0).Outcome)
	assert.Equal(t, inventory.Held, holdPlaces(t, inv, event, "dan", "GA-West", 3, t0).Outcome)
	assert.Equal(t, inventory.SoldOut, holdPlaces(t, inv, event, "eve", "GA-North", 1, t0).Outcome,
		"a section with no count has no places")
	assert.Equal(t, map[string]int64{"GA-East": 0, "GA-West": 7}, places(t, inv, event, t0))
	assert.Equal(t, int64(12), remaining(t, inv, event))
}

func TestSectionPlacesComeBack(t *testing.T) {
	ctx := context.Background()
	inv, _, event := loadedSections(t, 10, map[string]int64{"GA": 10})
	ann := holdPlaces(t, inv, event, "ann", "GA", 3, t0)
	bob := holdPlaces(t, inv, event, "bob", "GA", 2, t0.Add(time.Minute))
	cat := holdPlaces(t, inv, event, "cat", "GA", 4, t0.Add(2*time.Minute))
	require.Equal(t, map[string]int64{"GA": 1}, places(t, inv, event, t0))

	res, err := inv.Release(ctx, event, ann.HoldID, inventory.PendingOnly)
	require.NoError(t, err)
	assert.Equal(t, int64(3), res.Seats)
	assert.Equal(t, map[string]int64{"GA": 4}, places(t, inv, event, t0))

	// Lapsed: free on the map at once, and back in the count when reclaimed.
	lapsed := bob.ExpiresAt.Add(time.Millisecond)
	assert.Equal(t, map[string]int64{"GA": 6}, places(t, inv, event, lapsed))
	_, seats, _, err := inv.Reclaim(ctx, event, lapsed)
	require.NoError(t, err)
	assert.Equal(t, int64(2), seats)
	assert.Equal(t, map[string]int64{"GA": 6}, places(t, inv, event, t0))

	// A hold of the section reclaims a lapsed one itself (lazy expiry).
	dan := holdPlaces(t, inv, event, "dan", "GA", 10, cat.ExpiresAt.Add(time.Millisecond))
	require.Equal(t, inventory.Held, dan.Outcome)
	assert.Equal(t, int64(4), dan.Reclaimed)

	// A sale served from the overflow reserve keeps the buyer, not the places.
	_, err = inv.ReleaseKeepingBuyer(ctx, event, dan.HoldID, "dan", t0)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"GA": 10}, places(t, inv, event, t0))
	assert.Equal(t, int64(10), remaining(t, inv, event))
}

func TestSectionCountsRebuiltAndCorrected(t *testing.T) {
	ctx := context.Background()
	inv, rdb, event := loadedSections(t, 8, map[string]int64{"GA-East": 3, "GA-West": 5},
		inventory.LiveHold{ID: "p", User: "ann", Quantity: 2, Section: "GA-East", ExpiresAt: t0.Add(time.Hour)},
		inventory.LiveHold{ID: "c", User: "bob", Quantity: 1, Section: "GA-West", Confirmed: true})
	assert.Equal(t, map[string]int64{"GA-East": 3, "GA-West": 5}, places(t, inv, event, t0))

	// The ledger had released ann's hold without Redis hearing of it, and
	// Redis's counts drifted.
	k := inventory.KeysFor(event)
	require.NoError(t, rdb.HSet(ctx, k.Sections, "GA-East", 9).Err())
	c, err := inv.Correct(ctx, event, 11, map[string]int64{"GA-East": 5, "GA-West": 6}, time.Time{}, inventory.RecountAlways, nil, []string{"p"})
	require.NoError(t, err)
	assert.Equal(t, int64(1), c.Dropped)
	assert.Equal(t, int64(10), c.After)
	assert.Equal(t, int64(4+0), c.Places, "GA-East 9 → 5; GA-West 5 is right")
	assert.Equal(t, map[string]int64{"GA-East": 5, "GA-West": 5}, places(t, inv, event, t0))
	assert.Equal(t, inventory.Held, holdPlaces(t, inv, event, "cat", "GA-East", 5, t0).Outcome)
	assert.Equal(t, inventory.SoldOut, holdPlaces(t, inv, event, "dan", "GA-East", 1, t0).Outcome)
}

func TestConcurrentSectionHoldsNeverOversell(t *testing.T) {
	inv, _, event := loadedSections(t, 100, map[string]int64{"GA": 37, "Floor": 63})
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int64{}
	for i := range 80 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			section := []string{"GA", "Floor"}[i%2]
			res, err := inv.Hold(context.Background(), inventory.HoldRequest{
				Event: event, HoldID: fmt.Sprintf("h-%d", i), User: fmt.Sprintf("u%d", i), Quantity: int64(1 + i%4),
				Section: section, ExpiresAt: t0.Add(time.Minute), Now: t0,
			})
			if assert.NoError(t, err) && res.Outcome == inventory.Held {
				mu.Lock()
				got[section] += res.Record.Quantity
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	left := places(t, inv, event, t0)
	assert.LessOrEqual(t, got["GA"], int64(37))
	assert.LessOrEqual(t, got["Floor"], int64(63))
	assert.Equal(t, int64(37)-got["GA"], left["GA"])
	assert.Equal(t, int64(63)-got["Floor"], left["Floor"])
	assert.Equal(t, int64(100)-got["GA"]-got["Floor"], remaining(t, inv, event))
}
