package inventory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/inventory"
)

func holdSeats(t *testing.T, inv *inventory.Inventory, event int64, user string, now time.Time, seats ...string) inventory.HoldResult {
	t.Helper()
	res, err := inv.Hold(context.Background(), inventory.HoldRequest{
		Event: event, HoldID: fmt.Sprintf("h-%s-%d", user, holdSeq.Add(1)), User: user, Quantity: int64(len(seats)),
		Seats: seats, ExpiresAt: now.Add(10 * time.Minute), Now: now,
	})
	require.NoError(t, err)
	return res
}

func seatStates(t *testing.T, inv *inventory.Inventory, event int64, now time.Time) map[string]inventory.SeatState {
	t.Helper()
	st, ok, err := inv.SeatStates(context.Background(), event, now)
	require.NoError(t, err)
	require.True(t, ok)
	return st.Seats
}

func TestSeatHoldIsAllOrNothing(t *testing.T) {
	inv, _, event := loaded(t, 10)

	ann := holdSeats(t, inv, event, "ann", t0, "A-1-2", "A-1-1")
	require.Equal(t, inventory.Held, ann.Outcome)
	assert.Equal(t, []string{"A-1-1", "A-1-2"}, ann.Record.Seats, "kept sorted")
	assert.Equal(t, int64(8), ann.Remaining)

	bob := holdSeats(t, inv, event, "bob", t0, "A-1-3", "A-1-2", "A-1-1")
	assert.Equal(t, inventory.SeatsTaken, bob.Outcome)
	assert.Equal(t, []string{"A-1-1", "A-1-2"}, bob.Taken, "exactly the seats another hold has")
	assert.Equal(t, int64(8), remaining(t, inv, event), "nothing was taken")

	cat := holdSeats(t, inv, event, "cat", t0, "A-1-3")
	assert.Equal(t, inventory.Held, cat.Outcome, "the seat bob could not have alone is still free")

	assert.Equal(t, map[string]inventory.SeatState{"A-1-1": inventory.SeatHeld, "A-1-2": inventory.SeatHeld, "A-1-3": inventory.SeatHeld},
		seatStates(t, inv, event, t0))
}

func TestSeatsOfAnExpiredHoldAreFree(t *testing.T) {
	inv, _, event := loaded(t, 4)
	ann := holdSeats(t, inv, event, "ann", t0, "A-1-1", "A-1-2")
	require.Equal(t, inventory.Held, ann.Outcome)

	later := ann.ExpiresAt.Add(time.Millisecond)
	assert.Empty(t, seatStates(t, inv, event, later), "lapsed holds hold no seat on the map")
	bob := holdSeats(t, inv, event, "bob", later, "A-1-2")
	require.Equal(t, inventory.Held, bob.Outcome)
	assert.Equal(t, int64(2), bob.Reclaimed, "ann's hold was reclaimed, both seats")
	assert.Equal(t, int64(3), bob.Remaining)
	assert.Equal(t, map[string]inventory.SeatState{"A-1-2": inventory.SeatHeld}, seatStates(t, inv, event, later))
}

func TestReleaseAndReclaimFreeSeats(t *testing.T) {
	ctx := context.Background()
	inv, _, event := loaded(t, 6)
	ann := holdSeats(t, inv, event, "ann", t0, "A-1-1", "A-1-2")
	bob := holdSeats(t, inv, event, "bob", t0.Add(time.Minute), "B-1-1")
	cat := holdSeats(t, inv, event, "cat", t0, "C-1-1")

	res, err := inv.Release(ctx, event, ann.HoldID, inventory.PendingOnly)
	require.NoError(t, err)
	assert.Equal(t, int64(2), res.Seats)
	o, err := inv.Confirm(ctx, event, cat.HoldID, t0)
	require.NoError(t, err)
	require.Equal(t, inventory.Confirmed, o)
	assert.Equal(t, map[string]inventory.SeatState{"B-1-1": inventory.SeatHeld, "C-1-1": inventory.SeatSold}, seatStates(t, inv, event, t0))

	_, seats, _, err := inv.Reclaim(ctx, event, bob.ExpiresAt.Add(time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, int64(1), seats)
	assert.Equal(t, map[string]inventory.SeatState{"C-1-1": inventory.SeatSold}, seatStates(t, inv, event, t0))

	res, err = inv.Release(ctx, event, cat.HoldID, inventory.AnyHold)
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.Seats)
	assert.Empty(t, seatStates(t, inv, event, t0))
	assert.Equal(t, int64(6), remaining(t, inv, event))
}

func TestRebuildAndCorrectRestoreSeatOwners(t *testing.T) {
	ctx := context.Background()
	inv, rdb, event := loaded(t, 7,
		inventory.LiveHold{ID: "p", User: "ann", Quantity: 2, Seats: []string{"A-1-2", "A-1-1"}, ExpiresAt: t0.Add(time.Hour)},
		inventory.LiveHold{ID: "c", User: "bob", Quantity: 1, Seats: []string{"B-1-1"}, Confirmed: true})
	want := map[string]inventory.SeatState{"A-1-1": inventory.SeatHeld, "A-1-2": inventory.SeatHeld, "B-1-1": inventory.SeatSold}
	assert.Equal(t, want, seatStates(t, inv, event, t0))
	assert.Equal(t, inventory.SeatsTaken, holdSeats(t, inv, event, "cat", t0, "A-1-1").Outcome)

	// Redis lost one owner, gained a stray one and has a third wrong.
	k := inventory.KeysFor(event)
	require.NoError(t, rdb.HDel(ctx, k.Seats, "A-1-1").Err())
	require.NoError(t, rdb.HSet(ctx, k.Seats, "Z-9-9", "nobody", "B-1-1", "p").Err())
	c, err := inv.Correct(ctx, event, 10, nil, time.Time{}, inventory.RecountAlways, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(3), c.Seats)
	assert.Equal(t, int64(7), c.After)
	assert.Equal(t, want, seatStates(t, inv, event, t0))

	c, err = inv.Correct(ctx, event, 10, nil, time.Time{}, inventory.RecountAlways, nil, []string{"p"})
	require.NoError(t, err)
	assert.Equal(t, int64(2), c.Seats, "a dropped hold's seats are freed")
	assert.Equal(t, map[string]inventory.SeatState{"B-1-1": inventory.SeatSold}, seatStates(t, inv, event, t0))
}

func TestReleaseKeepingBuyerFreesSeats(t *testing.T) {
	ctx := context.Background()
	inv, _, event := loaded(t, 3)
	h := holdSeats(t, inv, event, "ann", t0, "A-1-1")
	_, err := inv.ReleaseKeepingBuyer(ctx, event, h.HoldID, "ann", t0)
	require.NoError(t, err)
	assert.Empty(t, seatStates(t, inv, event, t0))
	again := holdSeats(t, inv, event, "ann", t0, "A-1-1")
	assert.Equal(t, inventory.AlreadyHeld, again.Outcome)
	assert.Empty(t, again.Record.Seats)
	assert.Equal(t, inventory.Held, holdSeats(t, inv, event, "bob", t0, "A-1-1").Outcome)
}
