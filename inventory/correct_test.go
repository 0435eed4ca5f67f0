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

func TestCorrect(t *testing.T) {
	ctx := context.Background()
	inv, rdb, event := loaded(t, 8,
		inventory.LiveHold{ID: "kept", User: "ann", Quantity: 1, ExpiresAt: t0.Add(time.Hour)},
		inventory.LiveHold{ID: "ended", User: "bob", Quantity: 3, ExpiresAt: t0.Add(time.Hour)},
		inventory.LiveHold{ID: "buyer", User: "eve", Overflow: true})
	// A hold whose ledger row is still being written: only Redis knows it.
	inFlight := hold(t, inv, event, "cat", 2, t0)
	require.Equal(t, inventory.Held, inFlight.Outcome)
	// Redis lost dan's hold and gained 5 seats from nowhere.
	k := inventory.KeysFor(event)
	require.NoError(t, rdb.IncrBy(ctx, k.Remaining, 5).Err())
	require.Equal(t, int64(6+5), remaining(t, inv, event))

	dan := inventory.LiveHold{ID: "lost", User: "dan", Quantity: 4, ExpiresAt: t0.Add(time.Hour)}
	again := inventory.LiveHold{ID: "kept", User: "ann", Quantity: 1, ExpiresAt: t0.Add(time.Hour)}
	c, err := inv.Correct(ctx, event, 12, nil, time.Time{}, inventory.RecountAlways, []inventory.LiveHold{dan, again}, []string{"ended", "buyer", "unknown"})
	require.NoError(t, err)
	// 12 sellable − ann 1 − cat 2 − dan 4.
	assert.Equal(t, inventory.Correction{Before: 11, After: 5, Added: 1, Dropped: 1}, c)
	assert.Equal(t, int64(5), remaining(t, inv, event))

	assert.Equal(t, inventory.AlreadyHeld, hold(t, inv, event, "dan", 1, t0).Outcome, "dan's hold is back")
	assert.Equal(t, inventory.AlreadyHeld, hold(t, inv, event, "eve", 1, t0).Outcome, "a buyer's record stays")
	assert.Equal(t, inventory.Held, hold(t, inv, event, "bob", 1, t0).Outcome, "bob's ended hold is gone")
	res, err := inv.Release(ctx, event, "lost", inventory.PendingOnly)
	require.NoError(t, err)
	assert.Equal(t, int64(4), res.Seats, "dan's hold is a hold like any other")

	// Nothing to correct: nothing changes.
	c, err = inv.Correct(ctx, event, 12, nil, time.Time{}, inventory.RecountAlways, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, c.Before, c.After)
}

// Counting every record again is what costs: with RecountIfChanged a call
// that changes no record leaves the counts as the scripts keep them, and one
// that adds or drops a record counts them all, setting right what was
// written outside the scripts too.
func TestCorrectRecountsOnlyWhatChanged(t *testing.T) {
	ctx := context.Background()
	inv, rdb, event := loaded(t, 9,
		inventory.LiveHold{ID: "kept", User: "ann", Quantity: 1, ExpiresAt: t0.Add(time.Hour)})
	k := inventory.KeysFor(event)
	require.NoError(t, rdb.DecrBy(ctx, k.Remaining, 2).Err())

	kept := inventory.LiveHold{ID: "kept", User: "ann", Quantity: 1, ExpiresAt: t0.Add(time.Hour)}
	c, err := inv.Correct(ctx, event, 10, nil, time.Time{}, inventory.RecountIfChanged, []inventory.LiveHold{kept}, []string{"unknown"})
	require.NoError(t, err)
	assert.Equal(t, inventory.Correction{Before: 7, After: 7}, c, "no record changed: nothing counted")
	assert.Equal(t, int64(7), remaining(t, inv, event))

	lost := inventory.LiveHold{ID: "lost", User: "bob", Quantity: 3, ExpiresAt: t0.Add(time.Hour)}
	c, err = inv.Correct(ctx, event, 10, nil, time.Time{}, inventory.RecountIfChanged, []inventory.LiveHold{lost}, nil)
	require.NoError(t, err)
	// 10 sellable − ann 1 − bob 3.
	assert.Equal(t, inventory.Correction{Before: 7, After: 6, Added: 1}, c)

	require.NoError(t, rdb.DecrBy(ctx, k.Remaining, 2).Err())
	c, err = inv.Correct(ctx, event, 10, nil, time.Time{}, inventory.RecountIfChanged, nil, []string{"lost"})
	require.NoError(t, err)
	assert.Equal(t, inventory.Correction{Before: 4, After: 9, Dropped: 1}, c, "a drop counts every record again")

	require.NoError(t, rdb.DecrBy(ctx, k.Remaining, 2).Err())
	c, err = inv.Correct(ctx, event, 10, nil, time.Time{}, inventory.RecountAlways, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, inventory.Correction{Before: 7, After: 9}, c)
}

func TestReleaseKeepingBuyer(t *testing.T) {
	ctx := context.Background()
	inv, _, event := loaded(t, 3)
	h := hold(t, inv, event, "ann", 2, t0)
	res, err := inv.ReleaseKeepingBuyer(ctx, event, h.HoldID, "ann", t0)
	require.NoError(t, err)
	assert.Equal(t, inventory.ReleaseResult{Outcome: inventory.Released, Remaining: 3, Seats: 2}, res)
	again := hold(t, inv, event, "ann", 1, t0)
	assert.Equal(t, inventory.AlreadyHeld, again.Outcome)
	assert.True(t, again.Record.Overflow)
	assert.Zero(t, again.Record.Quantity)

	for _, mode := range []inventory.ReleaseMode{inventory.PendingOnly, inventory.AnyHold} {
		res, err = inv.Release(ctx, event, h.HoldID, mode)
		require.NoError(t, err)
		assert.Equal(t, inventory.NotLive, res.Outcome, "%s: the buyer's record takes no seat", mode)
	}
	res, err = inv.ReleaseKeepingBuyer(ctx, event, h.HoldID, "ann", t0)
	require.NoError(t, err)
	assert.Zero(t, res.Seats, "seats come back once")

	// A hold already reclaimed still leaves the buyer's record; a buyer who
	// holds other seats keeps that hold in the guard.
	b := hold(t, inv, event, "bob", 1, t0)
	_, _, _, err = inv.Reclaim(ctx, event, t0.Add(time.Hour))
	require.NoError(t, err)
	res, err = inv.ReleaseKeepingBuyer(ctx, event, b.HoldID, "bob", t0.Add(time.Hour))
	require.NoError(t, err)
	assert.Zero(t, res.Seats)
	assert.Equal(t, inventory.AlreadyHeld, hold(t, inv, event, "bob", 1, t0.Add(time.Hour)).Outcome)
	c := hold(t, inv, event, "cat", 1, t0.Add(time.Hour))
	_, err = inv.ReleaseKeepingBuyer(ctx, event, "old-hold-of-cat", "cat", t0.Add(time.Hour))
	require.NoError(t, err)
	got := hold(t, inv, event, "cat", 1, t0.Add(time.Hour))
	assert.Equal(t, c.HoldID, got.HoldID, "cat's live hold stays hers")
	assert.Equal(t, int64(1), got.Record.Quantity)

	// A hold of the buyer's that lapsed (not reclaimed yet) holds no seat:
	// the buyer's record takes the guard, and stays once the lapsed hold is
	// reclaimed.
	d := hold(t, inv, event, "dan", 1, t0)
	late := t0.Add(time.Hour)
	_, err = inv.ReleaseKeepingBuyer(ctx, event, "old-hold-of-dan", "dan", late)
	require.NoError(t, err)
	got = hold(t, inv, event, "dan", 1, late)
	assert.Equal(t, inventory.AlreadyHeld, got.Outcome)
	assert.Equal(t, "old-hold-of-dan", got.HoldID, "the buyer's record, not the lapsed hold %s", d.HoldID)
	assert.True(t, got.Record.Overflow)
}

func TestReleaseDroppingBuyer(t *testing.T) {
	ctx := context.Background()
	inv, _, event := loaded(t, 3)
	h := hold(t, inv, event, "ann", 2, t0)
	_, err := inv.ReleaseKeepingBuyer(ctx, event, h.HoldID, "ann", t0)
	require.NoError(t, err)
	require.Equal(t, inventory.AlreadyHeld, hold(t, inv, event, "ann", 1, t0).Outcome)

	// The sale ended: the buyer's record goes, and the buyer holds again.
	res, err := inv.Release(ctx, event, h.HoldID, inventory.DropBuyer)
	require.NoError(t, err)
	assert.Equal(t, inventory.ReleaseResult{Outcome: inventory.Released, Remaining: 3}, res, "the record took no seat")
	again := hold(t, inv, event, "ann", 1, t0)
	assert.Equal(t, inventory.Held, again.Outcome)
	res, err = inv.Release(ctx, event, h.HoldID, inventory.DropBuyer)
	require.NoError(t, err)
	assert.Equal(t, inventory.NotLive, res.Outcome, "once")
	assert.Equal(t, inventory.AlreadyHeld, hold(t, inv, event, "ann", 1, t0).Outcome, "her new hold is left alone")

	// On a hold with seats it does what AnyHold does.
	c := hold(t, inv, event, "cat", 1, t0)
	_, err = inv.Confirm(ctx, event, c.HoldID, t0)
	require.NoError(t, err)
	res, err = inv.Release(ctx, event, c.HoldID, inventory.DropBuyer)
	require.NoError(t, err)
	assert.Equal(t, inventory.ReleaseResult{Outcome: inventory.Released, Remaining: 2, Seats: 1}, res)
}

// TestCorrectNeverPutsBackAReclaimedHold: a node whose clock is ahead
// reclaimed a lapsed hold; the corrector, its clock behind, still reads the
// hold live in the ledger. A hold expiring before the corrector's bound
// (its clock plus the nodes' skew margin) is not added back: its seats
// could be another buyer's by now.
func TestCorrectNeverPutsBackAReclaimedHold(t *testing.T) {
	ctx := context.Background()
	lapsed := inventory.LiveHold{ID: "lapsed", User: "ann", Quantity: 2, ExpiresAt: t0}
	inv, _, event := loaded(t, 10, lapsed)

	// The node ahead reclaims it.
	_, seats, _, err := inv.Reclaim(ctx, event, t0.Add(time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, int64(2), seats)
	require.Equal(t, int64(12), remaining(t, inv, event))

	// The corrector's clock is 500 ms behind; the margin is a second.
	const margin = time.Second
	slow := t0.Add(time.Millisecond - 500*time.Millisecond)
	later := inventory.LiveHold{ID: "later", User: "bob", Quantity: 3, ExpiresAt: slow.Add(margin + time.Second)}
	c, err := inv.Correct(ctx, event, 12, nil, slow.Add(margin), inventory.RecountAlways, []inventory.LiveHold{lapsed, later}, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(1), c.Added, "only the hold that cannot have lapsed on any node is put back")
	assert.Equal(t, int64(1), c.Lapsed)
	assert.Equal(t, int64(12-3), remaining(t, inv, event), "the reclaimed seats stay free")
	assert.Equal(t, inventory.Held, hold(t, inv, event, "ann", 1, t0).Outcome, "ann's lapsed hold is gone")
}

// TestCorrectConfirmsALostConfirmation: a hold the ledger has confirmed
// and Redis has pending (its confirmation lost) is confirmed, out of the
// expiry index, so no reclaim returns its seats; a pending one passed as
// pending, and a buyer's record, are left as they are.
func TestCorrectConfirmsALostConfirmation(t *testing.T) {
	ctx := context.Background()
	inv, rdb, event := loaded(t, 5,
		inventory.LiveHold{ID: "sold", User: "ann", Quantity: 2, ExpiresAt: t0.Add(time.Minute)},
		inventory.LiveHold{ID: "held", User: "bob", Quantity: 1, ExpiresAt: t0.Add(time.Minute)},
		inventory.LiveHold{ID: "buyer", User: "eve", Overflow: true})
	k := inventory.KeysFor(event)

	c, err := inv.Correct(ctx, event, 8, nil, time.Time{}, inventory.RecountAlways, []inventory.LiveHold{
		{ID: "sold", User: "ann", Quantity: 2, Confirmed: true},
		{ID: "held", User: "bob", Quantity: 1, ExpiresAt: t0.Add(time.Minute)},
		{ID: "buyer", User: "eve", Confirmed: true},
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, inventory.Correction{Before: 5, After: 5, Confirmed: 1}, c)
	pending, err := rdb.ZRange(ctx, k.Expiry, 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"held"}, pending)

	// Past the expiry: only bob's seat comes back.
	n, _, _, err := inv.Reclaim(ctx, event, t0.Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, int64(6), n)
}

// The listings Correct works from are read a page at a time: an event with
// more holds than a page lists each exactly once.
func TestHoldIDsAndPendingIDsReadEveryPage(t *testing.T) {
	ctx := context.Background()
	const n = 2500
	var holds []inventory.LiveHold
	var all, pending []string
	for i := range n {
		h := inventory.LiveHold{ID: fmt.Sprintf("hold-%d", i), User: fmt.Sprintf("user-%d", i), Quantity: 1,
			ExpiresAt: t0.Add(time.Hour), Confirmed: i%3 == 0}
		holds = append(holds, h)
		all = append(all, h.ID)
		if !h.Confirmed {
			pending = append(pending, h.ID)
		}
	}
	inv, _, event := loaded(t, n, holds...)

	ids, err := inv.HoldIDs(ctx, event)
	require.NoError(t, err)
	assert.ElementsMatch(t, all, ids)
	ids, err = inv.PendingIDs(ctx, event)
	require.NoError(t, err)
	assert.ElementsMatch(t, pending, ids)
}
