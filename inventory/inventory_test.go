package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/inventory"
)

var t0 = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

var holdSeq atomic.Int64

// loaded returns an inventory and a fresh event loaded with seats.
func loaded(t *testing.T, seats int64, holds ...inventory.LiveHold) (*inventory.Inventory, redis.UniversalClient, int64) {
	t.Helper()
	rdb := testenv.Redis(t)
	inv := inventory.New(rdb)
	event := testenv.EventID()
	err := inv.Rebuild(context.Background(), event, func(context.Context) (inventory.Snapshot, error) {
		return inventory.Snapshot{Remaining: seats, Holds: holds}, nil
	})
	require.NoError(t, err)
	return inv, rdb, event
}

func hold(t *testing.T, inv *inventory.Inventory, event int64, user string, qty int64, now time.Time) inventory.HoldResult {
	t.Helper()
	res, err := inv.Hold(context.Background(), inventory.HoldRequest{
		Event: event, HoldID: fmt.Sprintf("h-%s-%d", user, holdSeq.Add(1)), User: user, Quantity: qty,
		ExpiresAt: now.Add(10 * time.Minute), Now: now,
	})
	require.NoError(t, err)
	return res
}

func remaining(t *testing.T, inv *inventory.Inventory, event int64) int64 {
	t.Helper()
	n, ok, err := inv.Remaining(context.Background(), event)
	require.NoError(t, err)
	require.True(t, ok, "event should be loaded")
	return n
}

func TestKeysShareTheEventTag(t *testing.T) {
	k := inventory.KeysFor(42)
	for _, key := range []string{k.Remaining, k.Users, k.Holds, k.Expiry, k.Frozen, k.Seats, k.Sections} {
		assert.Contains(t, key, "{evt:42}")
	}
}

func TestHoldOutcomes(t *testing.T) {
	inv, _, event := loaded(t, 5)

	first := hold(t, inv, event, "ann", 2, t0)
	assert.Equal(t, inventory.Held, first.Outcome)
	assert.Equal(t, int64(3), first.Remaining)
	assert.Equal(t, t0.Add(10*time.Minute), first.ExpiresAt)
	assert.Equal(t, inventory.Record{User: "ann", Quantity: 2}, first.Record)

	again := hold(t, inv, event, "ann", 1, t0)
	assert.Equal(t, inventory.AlreadyHeld, again.Outcome)
	assert.Equal(t, first.HoldID, again.HoldID)
	assert.Equal(t, int64(2), again.Record.Quantity, "the existing hold is returned as it is")
	assert.Equal(t, int64(3), again.Remaining)

	tooMany := hold(t, inv, event, "bob", 4, t0)
	assert.Equal(t, inventory.SoldOut, tooMany.Outcome)
	assert.Equal(t, int64(3), tooMany.Remaining, "a refused hold takes nothing")

	last := hold(t, inv, event, "bob", 3, t0)
	assert.Equal(t, inventory.Held, last.Outcome)
	assert.Equal(t, int64(0), last.Remaining)

	assert.Equal(t, inventory.SoldOut, hold(t, inv, event, "cat", 1, t0).Outcome)
	assert.Equal(t, int64(0), remaining(t, inv, event))
}

func TestHoldClaimsTheRequestKey(t *testing.T) {
	inv, rdb, event := loaded(t, 1)
	ctx := context.Background()
	claim := "idem:" + hashtag.Event(event) + ":holds:k"
	req := func(user, value, replace string) inventory.HoldRequest {
		return inventory.HoldRequest{Event: event, HoldID: "h-" + value, User: user, Quantity: 1,
			ExpiresAt: t0.Add(time.Minute), Now: t0, Claim: claim, ClaimValue: value, ClaimReplace: replace, ClaimTTL: time.Hour}
	}
	value := func() string {
		v, err := rdb.Get(ctx, claim).Result()
		require.NoError(t, err)
		return v
	}

	res, err := inv.Hold(ctx, req("ann", "first", ""))
	require.NoError(t, err)
	assert.Equal(t, inventory.Held, res.Outcome)
	assert.Equal(t, "first", value())
	ttl, err := rdb.PTTL(ctx, claim).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 59*time.Minute)

	res, err = inv.Hold(ctx, req("bob", "second", ""))
	require.NoError(t, err)
	assert.Equal(t, inventory.Claimed, res.Outcome)
	assert.Equal(t, "first", res.ClaimedBy)
	assert.Equal(t, int64(0), remaining(t, inv, event), "a claimed call changes nothing")

	res, err = inv.Hold(ctx, req("bob", "second", "stale"))
	require.NoError(t, err)
	assert.Equal(t, inventory.Claimed, res.Outcome, "only the value named may be replaced")

	res, err = inv.Hold(ctx, req("bob", "second", "first"))
	require.NoError(t, err)
	assert.Equal(t, inventory.SoldOut, res.Outcome)
	assert.Equal(t, "second", value(), "a sold-out answer claims the key too")

	// A call that cannot reach the inventory claims nothing.
	require.NoError(t, rdb.Del(ctx, claim, inventory.KeysFor(event).Remaining).Err())
	_, err = inv.Hold(ctx, req("cat", "third", ""))
	assert.ErrorIs(t, err, inventory.ErrNotLoaded)
	assert.Zero(t, rdb.Exists(ctx, claim).Val())
}

// A hold call that reaches Redis after its deadline (by Redis's clock)
// takes nothing, so a caller whose reply was lost knows when no run of it
// can take seats any more. A run that took seats left its claim: a late
// retry of it still says so.
func TestHoldDeadline(t *testing.T) {
	inv, rdb, event := loaded(t, 3)
	ctx := context.Background()
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Minute)
	req := func(user string, deadline time.Time, claim string) inventory.HoldRequest {
		r := inventory.HoldRequest{Event: event, HoldID: "h-" + user, User: user, Quantity: 1,
			ExpiresAt: t0.Add(time.Minute), Now: t0, Deadline: deadline}
		if claim != "" {
			r.Claim, r.ClaimValue, r.ClaimTTL = "idem:"+hashtag.Event(event)+":holds:"+claim, claim, time.Hour
		}
		return r
	}

	for _, claim := range []string{"", "k-late"} {
		res, err := inv.Hold(ctx, req("late"+claim, past, claim))
		require.NoError(t, err)
		assert.Equal(t, inventory.Late, res.Outcome)
	}
	assert.Equal(t, int64(3), remaining(t, inv, event), "a late call takes nothing")
	assert.Zero(t, rdb.Exists(ctx, "idem:"+hashtag.Event(event)+":holds:k-late").Val(), "nor claims its key")

	res, err := inv.Hold(ctx, req("ann", future, "k-ann"))
	require.NoError(t, err)
	assert.Equal(t, inventory.Held, res.Outcome)
	res, err = inv.Hold(ctx, req("ann", past, "k-ann"))
	require.NoError(t, err)
	assert.Equal(t, inventory.Claimed, res.Outcome, "a late retry of a call that ran finds its claim")
	assert.Equal(t, "k-ann", res.ClaimedBy)

	res, err = inv.Hold(ctx, req("bob", future, ""))
	require.NoError(t, err)
	assert.Equal(t, inventory.Held, res.Outcome)
	assert.Equal(t, int64(1), res.Remaining)
}

func TestHoldRejectsBadQuantity(t *testing.T) {
	inv, _, event := loaded(t, 5)
	for _, q := range []int64{0, -1} {
		_, err := inv.Hold(context.Background(), inventory.HoldRequest{Event: event, HoldID: "x", User: "u", Quantity: q, Now: t0, ExpiresAt: t0})
		assert.Error(t, err, "quantity %d", q)
	}
	assert.Equal(t, int64(5), remaining(t, inv, event))
}

func TestNotLoadedIsNotSoldOut(t *testing.T) {
	inv := inventory.New(testenv.Redis(t))
	event := testenv.EventID()
	_, err := inv.Hold(context.Background(), inventory.HoldRequest{Event: event, HoldID: "x", User: "u", Quantity: 1, Now: t0, ExpiresAt: t0})
	assert.ErrorIs(t, err, inventory.ErrNotLoaded)
	_, ok, err := inv.Remaining(context.Background(), event)
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestConcurrentHoldsNeverOversell(t *testing.T) {
	tests := []struct {
		name  string
		seats int64
		qty   func(i int) int64
	}{
		{"one seat each", 100, func(int) int64 { return 1 }},
		{"one to four seats", 101, func(i int) int64 { return int64(i%4 + 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, _, event := loaded(t, tt.seats)
			var sold, minRemaining atomic.Int64
			minRemaining.Store(tt.seats)
			var wg sync.WaitGroup
			for i := range 500 {
				wg.Go(func() {
					res, err := inv.Hold(context.Background(), inventory.HoldRequest{
						Event: event, HoldID: fmt.Sprintf("h%d", i), User: fmt.Sprintf("u%d", i),
						Quantity: tt.qty(i), ExpiresAt: t0.Add(time.Minute), Now: t0,
					})
					if !assert.NoError(t, err) {
						return
					}
					if res.Outcome == inventory.Held {
						sold.Add(res.Record.Quantity)
					}
					for {
						cur := minRemaining.Load()
						if res.Remaining >= cur || minRemaining.CompareAndSwap(cur, res.Remaining) {
							break
						}
					}
				})
			}
			wg.Wait()
			left := remaining(t, inv, event)
			assert.GreaterOrEqual(t, minRemaining.Load(), int64(0), "remaining never below 0")
			assert.Equal(t, tt.seats, sold.Load()+left, "every seat sold or left, none twice")
			assert.Less(t, left, int64(4), "the pool is drained down to less than the largest request")
		})
	}
}

func TestReleaseOnce(t *testing.T) {
	inv, _, event := loaded(t, 3)
	h := hold(t, inv, event, "ann", 2, t0)
	ctx := context.Background()

	var released atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			res, err := inv.Release(ctx, event, h.HoldID, inventory.PendingOnly)
			assert.NoError(t, err)
			released.Add(res.Seats)
		})
	}
	wg.Wait()
	assert.Equal(t, int64(2), released.Load())
	assert.Equal(t, int64(3), remaining(t, inv, event))

	// The user's guard went with the hold: a new hold is a new one.
	again := hold(t, inv, event, "ann", 1, t0)
	assert.Equal(t, inventory.Held, again.Outcome)
	assert.NotEqual(t, h.HoldID, again.HoldID)

	res, err := inv.Release(ctx, event, "unknown", inventory.PendingOnly)
	require.NoError(t, err)
	assert.Equal(t, inventory.NotLive, res.Outcome)
}

func TestConfirmedHoldStays(t *testing.T) {
	inv, _, event := loaded(t, 3)
	ctx := context.Background()
	h := hold(t, inv, event, "ann", 2, t0)

	o, err := inv.Confirm(ctx, event, h.HoldID, t0.Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, inventory.Confirmed, o)
	o, err = inv.Confirm(ctx, event, h.HoldID, t0.Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, inventory.Confirmed, o, "confirming twice is fine")

	res, err := inv.Release(ctx, event, h.HoldID, inventory.PendingOnly)
	require.NoError(t, err)
	assert.Equal(t, inventory.Confirmed, res.Outcome)

	// Long after its expiry, a hold call reclaims expired holds: not this one.
	later := hold(t, inv, event, "bob", 1, t0.Add(24*time.Hour))
	assert.Equal(t, inventory.Held, later.Outcome)
	assert.Equal(t, int64(0), later.Reclaimed)
	assert.Equal(t, int64(0), later.Remaining)
	mine := hold(t, inv, event, "ann", 1, t0.Add(24*time.Hour))
	assert.Equal(t, inventory.AlreadyHeld, mine.Outcome)
	assert.True(t, mine.Record.Confirmed)
	assert.True(t, mine.ExpiresAt.IsZero())

	// A cancelled sale gives the seats back.
	res, err = inv.Release(ctx, event, h.HoldID, inventory.AnyHold)
	require.NoError(t, err)
	assert.Equal(t, inventory.Released, res.Outcome)
	assert.Equal(t, int64(2), res.Remaining)
}

func TestConfirmAfterExpiry(t *testing.T) {
	inv, _, event := loaded(t, 3)
	h := hold(t, inv, event, "ann", 1, t0)
	o, err := inv.Confirm(context.Background(), event, h.HoldID, h.ExpiresAt.Add(time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, inventory.Expired, o)
	o, err = inv.Confirm(context.Background(), event, h.HoldID, h.ExpiresAt)
	require.NoError(t, err)
	assert.Equal(t, inventory.Confirmed, o, "a hold is live up to and including expires_at")
}

func TestExpiredHoldsAreReclaimed(t *testing.T) {
	inv, _, event := loaded(t, 2)
	a := hold(t, inv, event, "ann", 1, t0)
	hold(t, inv, event, "bob", 1, t0.Add(time.Minute))
	assert.Equal(t, inventory.SoldOut, hold(t, inv, event, "cat", 1, t0.Add(5*time.Minute)).Outcome)

	// Just past ann's expiry: her seat is free again, bob's is not.
	after := a.ExpiresAt.Add(time.Millisecond)
	c := hold(t, inv, event, "cat", 1, after)
	assert.Equal(t, inventory.Held, c.Outcome)
	assert.Equal(t, int64(1), c.Reclaimed)
	assert.Equal(t, int64(0), c.Remaining)

	// ann's hold is gone: she can hold again once a seat is free, and the
	// reaper's release of her old hold gives back nothing.
	res, err := inv.Release(context.Background(), event, a.HoldID, inventory.PendingOnly)
	require.NoError(t, err)
	assert.Equal(t, inventory.NotLive, res.Outcome)
	assert.Equal(t, int64(0), remaining(t, inv, event))
}

func TestOwnExpiredHoldMakesRoomForANewOne(t *testing.T) {
	inv, _, event := loaded(t, 1)
	a := hold(t, inv, event, "ann", 1, t0)
	b := hold(t, inv, event, "ann", 1, a.ExpiresAt.Add(time.Second))
	assert.Equal(t, inventory.Held, b.Outcome)
	assert.NotEqual(t, a.HoldID, b.HoldID)
	assert.Equal(t, int64(0), b.Remaining)
}

func TestExtend(t *testing.T) {
	inv, _, event := loaded(t, 2)
	ctx := context.Background()
	h := hold(t, inv, event, "ann", 1, t0)

	o, until, err := inv.Extend(ctx, event, h.HoldID, t0, h.ExpiresAt.Add(2*time.Minute))
	require.NoError(t, err)
	assert.Equal(t, inventory.Extended, o)
	assert.Equal(t, h.ExpiresAt.Add(2*time.Minute), until)

	o, until, err = inv.Extend(ctx, event, h.HoldID, t0, h.ExpiresAt)
	require.NoError(t, err)
	assert.Equal(t, inventory.Extended, o)
	assert.Equal(t, h.ExpiresAt.Add(2*time.Minute), until, "never shortened")

	// The old expiry has passed, the new one has not: the seat stays held.
	later := hold(t, inv, event, "bob", 2, h.ExpiresAt.Add(time.Minute))
	assert.Equal(t, inventory.SoldOut, later.Outcome)
	assert.Equal(t, int64(0), later.Reclaimed)

	o, _, err = inv.Extend(ctx, event, h.HoldID, until.Add(time.Millisecond), until.Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, inventory.Expired, o)
	o, _, err = inv.Extend(ctx, event, "unknown", t0, t0)
	require.NoError(t, err)
	assert.Equal(t, inventory.NotLive, o)
}

func TestRebuildRestoresGuard(t *testing.T) {
	confirmed := inventory.LiveHold{ID: "hc", User: "carl", Quantity: 2, Confirmed: true}
	pending := inventory.LiveHold{ID: "hp", User: "pam", Quantity: 1, ExpiresAt: t0.Add(time.Minute), KeyDigest: "k", BodyDigest: "b"}
	inv, rdb, event := loaded(t, 7, confirmed, pending)
	ctx := context.Background()
	assert.Equal(t, int64(7), remaining(t, inv, event))

	p := hold(t, inv, event, "pam", 3, t0)
	assert.Equal(t, inventory.AlreadyHeld, p.Outcome)
	assert.Equal(t, "hp", p.HoldID)
	assert.Equal(t, inventory.Record{User: "pam", Quantity: 1, KeyDigest: "k", BodyDigest: "b"}, p.Record)
	assert.Equal(t, t0.Add(time.Minute), p.ExpiresAt)
	c := hold(t, inv, event, "carl", 1, t0)
	assert.Equal(t, inventory.AlreadyHeld, c.Outcome)
	assert.True(t, c.Record.Confirmed)

	// A second rebuild replaces everything, including holds made since.
	hold(t, inv, event, "zed", 1, t0)
	require.NoError(t, inv.Rebuild(ctx, event, func(context.Context) (inventory.Snapshot, error) {
		return inventory.Snapshot{Remaining: 9}, nil
	}))
	assert.Equal(t, int64(9), remaining(t, inv, event))
	assert.Equal(t, inventory.Held, hold(t, inv, event, "zed", 1, t0).Outcome)
	n, err := rdb.HLen(ctx, inventory.KeysFor(event).Holds).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
}

func TestRebuildInBatches(t *testing.T) {
	var holds []inventory.LiveHold
	for i := range 1234 {
		holds = append(holds, inventory.LiveHold{ID: fmt.Sprintf("h%d", i), User: fmt.Sprintf("u%d", i), Quantity: 1, ExpiresAt: t0.Add(time.Hour)})
	}
	inv, rdb, event := loaded(t, 10, holds...)
	n, err := rdb.HLen(context.Background(), inventory.KeysFor(event).Users).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1234), n)
	assert.Equal(t, inventory.AlreadyHeld, hold(t, inv, event, "u1233", 1, t0).Outcome)
}

func TestRebuildFence(t *testing.T) {
	inv, _, event := loaded(t, 5)
	ctx := context.Background()
	h := hold(t, inv, event, "ann", 1, t0)

	inside, proceed := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- inv.Rebuild(ctx, event, func(context.Context) (inventory.Snapshot, error) {
			close(inside)
			<-proceed // until the test has looked
			return inventory.Snapshot{}, errors.New("ledger unavailable")
		})
	}()
	<-inside

	_, err := inv.Hold(ctx, inventory.HoldRequest{Event: event, HoldID: "x", User: "bob", Quantity: 1, Now: t0, ExpiresAt: t0.Add(time.Minute)})
	assert.ErrorIs(t, err, inventory.ErrFrozen)
	err = inv.Rebuild(ctx, event, func(context.Context) (inventory.Snapshot, error) { return inventory.Snapshot{}, nil })
	assert.ErrorIs(t, err, inventory.ErrRebuilding)
	_, loadedNow, err := inv.Remaining(ctx, event)
	require.NoError(t, err)
	assert.False(t, loadedNow, "frozen keys are not trusted")
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = inv.Release(short, event, h.HoldID, inventory.PendingOnly)
	cancel()
	assert.ErrorIs(t, err, inventory.ErrFrozen, "a release waits for the rebuild rather than being lost")
	// Confirm and extend tell their caller, who may have work the rebuild
	// waits for.
	_, err = inv.Confirm(ctx, event, h.HoldID, t0)
	assert.ErrorIs(t, err, inventory.ErrFrozen)
	_, _, err = inv.Extend(ctx, event, h.HoldID, t0, t0.Add(time.Hour))
	assert.ErrorIs(t, err, inventory.ErrFrozen)

	close(proceed)
	assert.Error(t, <-done)

	// The failed rebuild lifted its fence and left the keys as they were.
	assert.Equal(t, int64(4), remaining(t, inv, event))
	res, err := inv.Release(ctx, event, h.HoldID, inventory.PendingOnly)
	require.NoError(t, err)
	assert.Equal(t, inventory.Released, res.Outcome)
	assert.Equal(t, int64(5), res.Remaining)
}

// TestReloadOnlyWhenMissing: a reload asked for by a request that saw the
// keys missing while another rebuild was loading them leaves the loaded keys
// alone; once the keys are really gone, it loads them.
func TestReloadOnlyWhenMissing(t *testing.T) {
	inv, rdb, event := loaded(t, 5)
	ctx := context.Background()
	h := hold(t, inv, event, "ann", 2, t0)

	read := func(context.Context) (inventory.Snapshot, error) {
		return inventory.Snapshot{Remaining: 5}, nil
	}
	reloaded, err := inv.Reload(ctx, event, read)
	require.NoError(t, err)
	assert.False(t, reloaded)
	assert.Equal(t, int64(3), remaining(t, inv, event), "ann's hold is still there")
	assert.Equal(t, inventory.AlreadyHeld, hold(t, inv, event, "ann", 1, t0).Outcome)
	frozen, err := inv.Frozen(ctx, event)
	require.NoError(t, err)
	assert.False(t, frozen, "the fence is lifted")

	k := inventory.KeysFor(event)
	require.NoError(t, rdb.Del(ctx, k.Remaining, k.Users, k.Holds, k.Expiry).Err())
	reloaded, err = inv.Reload(ctx, event, func(context.Context) (inventory.Snapshot, error) {
		return inventory.Snapshot{Remaining: 3, Holds: []inventory.LiveHold{{ID: h.HoldID, User: "ann", Quantity: 2, ExpiresAt: h.ExpiresAt}}}, nil
	})
	require.NoError(t, err)
	assert.True(t, reloaded)
	assert.Equal(t, int64(3), remaining(t, inv, event))
	assert.Equal(t, inventory.AlreadyHeld, hold(t, inv, event, "ann", 1, t0).Outcome)
}

func TestReclaim(t *testing.T) {
	inv, _, event := loaded(t, 5)
	ctx := context.Background()
	a := hold(t, inv, event, "ann", 2, t0)
	hold(t, inv, event, "bob", 1, t0.Add(time.Second))

	n, seats, ok, err := inv.Reclaim(ctx, event, a.ExpiresAt)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, int64(2), n, "live up to and including expires_at")
	assert.Equal(t, int64(0), seats)

	n, seats, ok, err = inv.Reclaim(ctx, event, a.ExpiresAt.Add(time.Millisecond))
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, int64(4), n, "ann's seats are back, bob's are not")
	assert.Equal(t, int64(2), seats)
	assert.Equal(t, inventory.Held, hold(t, inv, event, "ann", 1, a.ExpiresAt.Add(time.Second)).Outcome)

	_, _, ok, err = inv.Reclaim(ctx, testenv.EventID(), t0)
	require.NoError(t, err)
	assert.False(t, ok)
}
