package waitroom

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoomServesDefaultsBeforeTheStoreAnswers(t *testing.T) {
	r := NewRoom(NewMemoryStore(nil), 7, RoomOptions{Defaults: Defaults{Watermark: 20, HardCap: 100}})
	assert.Equal(t, State{Event: 7, Watermark: 20, HardCap: 100}, r.State())
	assert.True(t, r.State().Admits(20))
	assert.False(t, r.State().Admits(21))
}

func TestRoomFollowsChangesFromOtherNodes(t *testing.T) {
	store := NewMemoryStore(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := NewRoom(store, 1, RoomOptions{Defaults: Defaults{Watermark: 5}})
	b := NewRoom(store, 1, RoomOptions{Defaults: Defaults{Watermark: 5}, PollInterval: time.Hour})
	go a.Run(ctx)
	go b.Run(ctx)
	// Ready once Run has read the store, and it subscribes before that.
	<-a.Ready()
	<-b.Ready()

	_, err := a.Update(ctx, Change{RaiseBy: 100})
	require.NoError(t, err)
	assert.Equal(t, int64(105), a.State().Watermark, "the node that changed it sees it at once")
	// b polls only hourly: the change notice is what carries it.
	require.Eventually(t, func() bool { return b.State().Watermark == 105 }, 5*time.Second, 5*time.Millisecond)

	_, err = b.Update(ctx, Change{SoldOut: ptrTo(true)})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.State().SoldOut }, 5*time.Second, 5*time.Millisecond)
}

func TestRoomFollowNeverWritesDefaults(t *testing.T) {
	store := NewMemoryStore(nil)
	ctx := context.Background()
	_, err := store.Ensure(ctx, 3, Defaults{Watermark: 10, HardCap: 500})
	require.NoError(t, err)
	origin := NewRoom(store, 3, RoomOptions{Follow: true})
	st, err := origin.Refresh(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(500), st.HardCap)
	got, err := store.State(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, int64(500), got.HardCap, "a follower leaves the gateway's hard cap alone")
}

func TestRoomJoinMovesLastPositionForward(t *testing.T) {
	r := NewRoom(NewMemoryStore(nil), 1, RoomOptions{})
	ctx := context.Background()
	for want := int64(1); want <= 3; want++ {
		pos, err := r.Join(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, pos)
	}
	assert.Equal(t, int64(3), r.State().LastPosition)
}

// JoinAtHand hands out the positions Join would, in the same order, while
// they need no call: a memory store's always, a leased block's until it is
// spent; never a position of its own without a lease, nor while the
// store's state is restored.
func TestRoomJoinAtHand(t *testing.T) {
	ctx := context.Background()
	t.Run("memory", func(t *testing.T) {
		r := NewRoom(NewMemoryStore(nil), 1, RoomOptions{})
		for want := int64(1); want <= 3; want++ {
			pos, ok := r.JoinAtHand()
			require.True(t, ok)
			assert.Equal(t, want, pos)
		}
		pos, err := r.Join(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(4), pos)
		assert.Equal(t, int64(4), r.State().LastPosition)
	})
	rdb := testenv.Redis(t)
	t.Run("lease 3", func(t *testing.T) {
		clock := newLockedClock()
		r := NewRoom(NewRedisStore(rdb, RedisOptions{Lease: 3, Now: clock.Now}), testenv.EventID(), RoomOptions{Now: clock.Now})
		_, err := r.Refresh(ctx)
		require.NoError(t, err)
		// A new event's state is written as a restore's is.
		clock.Advance(DefaultRestoreWindow)
		_, ok := r.JoinAtHand()
		require.False(t, ok, "no block leased yet")
		var got []int64
		for range 2 {
			pos, err := r.Join(ctx)
			require.NoError(t, err)
			got = append(got, pos)
			for {
				pos, ok := r.JoinAtHand()
				if !ok {
					break
				}
				got = append(got, pos)
			}
		}
		assert.Equal(t, []int64{1, 2, 3, 4, 5, 6}, got)
		assert.Equal(t, int64(6), r.State().LastPosition)
	})
	t.Run("lease 1", func(t *testing.T) {
		clock := newLockedClock()
		r := NewRoom(NewRedisStore(rdb, RedisOptions{Lease: 1, Now: clock.Now}), testenv.EventID(), RoomOptions{Now: clock.Now})
		_, err := r.Refresh(ctx)
		require.NoError(t, err)
		// A new event's state is written as a restore's is.
		clock.Advance(DefaultRestoreWindow)
		_, err = r.Join(ctx)
		require.NoError(t, err)
		_, ok := r.JoinAtHand()
		assert.False(t, ok)
	})
	t.Run("restoring", func(t *testing.T) {
		clock := newLockedClock()
		r := NewRoom(NewMemoryStore(nil), 1, RoomOptions{Now: clock.Now})
		r.state.Store(&State{Event: 1, RestoringUntil: clock.Now().Add(time.Second)})
		_, ok := r.JoinAtHand()
		assert.False(t, ok)
		_, err := r.Join(ctx)
		assert.ErrorIs(t, err, ErrRestoring)
	})
}

func TestRoomAutopilot(t *testing.T) {
	clock := newClock()
	store := NewMemoryStore(clock.Now)
	r := NewRoom(store, 1, RoomOptions{Now: clock.Now, Autopilot: Autopilot{Step: 10, Interval: time.Second}})
	ctx := context.Background()

	require.NoError(t, r.autopilot(ctx))
	assert.Equal(t, int64(0), r.State().Watermark, "nobody waits: nothing to raise")

	for range 25 {
		_, err := r.Join(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, r.autopilot(ctx))
	assert.Equal(t, int64(10), r.State().Watermark)
	require.NoError(t, r.autopilot(ctx))
	assert.Equal(t, int64(10), r.State().Watermark, "one raise per interval")

	clock.Advance(time.Second)
	require.NoError(t, r.autopilot(ctx))
	assert.Equal(t, int64(20), r.State().Watermark)
	clock.Advance(time.Second)
	require.NoError(t, r.autopilot(ctx))
	assert.Equal(t, int64(25), r.State().Watermark, "never past the last position")

	for range 10 {
		_, err := r.Join(ctx)
		require.NoError(t, err)
	}
	_, err := r.Update(ctx, Change{Paused: ptrTo(true)})
	require.NoError(t, err)
	clock.Advance(time.Second)
	require.NoError(t, r.autopilot(ctx))
	assert.Equal(t, int64(25), r.State().Watermark, "paused: no raise")

	_, err = r.Update(ctx, Change{Paused: ptrTo(false), SoldOut: ptrTo(true)})
	require.NoError(t, err)
	clock.Advance(time.Second)
	require.NoError(t, r.autopilot(ctx))
	assert.Equal(t, int64(25), r.State().Watermark, "sold out: no raise")
}

func TestRoomEstimateWait(t *testing.T) {
	clock := newClock()
	store := NewMemoryStore(clock.Now)
	r := NewRoom(store, 1, RoomOptions{Now: clock.Now})
	ctx := context.Background()
	_, err := r.Refresh(ctx)
	require.NoError(t, err)

	_, ok := r.EstimateWait(500)
	assert.False(t, ok, "no movement yet: nothing to estimate from")

	wait, ok := r.EstimateWait(0)
	assert.True(t, ok)
	assert.Zero(t, wait, "already admitted")

	// 100 positions every 10 s = 10/s.
	for range 3 {
		clock.Advance(10 * time.Second)
		_, err := r.Update(ctx, Change{RaiseBy: 100})
		require.NoError(t, err)
	}
	wait, ok = r.EstimateWait(600)
	require.True(t, ok)
	assert.InDelta(t, (30 * time.Second).Seconds(), wait.Seconds(), 1, "300 ahead at 10/s")

	// A stall slows the estimate down.
	clock.Advance(20 * time.Second)
	slower, ok := r.EstimateWait(600)
	require.True(t, ok)
	assert.Greater(t, slower, wait)
}

// TestRoomEstimateUnknownUntilObserved: a configured autopilot rate is no
// estimate (docs/api.md §3 "Honest estimate"), and a pause makes the
// observed one unknown again.
func TestRoomEstimateUnknownUntilObserved(t *testing.T) {
	clock := newClock()
	r := NewRoom(NewMemoryStore(clock.Now), 1, RoomOptions{Now: clock.Now, Autopilot: Autopilot{Step: 50, Interval: 10 * time.Second}})
	ctx := context.Background()
	_, err := r.Refresh(ctx)
	require.NoError(t, err)
	_, ok := r.EstimateWait(100)
	assert.False(t, ok, "nothing admitted yet")

	clock.Advance(10 * time.Second)
	_, err = r.Update(ctx, Change{RaiseBy: 50})
	require.NoError(t, err)
	wait, ok := r.EstimateWait(100)
	require.True(t, ok)
	assert.Equal(t, 10*time.Second, wait, "50 ahead at 5/s")

	_, err = r.Update(ctx, Change{Paused: ptrTo(true)})
	require.NoError(t, err)
	_, ok = r.EstimateWait(100)
	assert.False(t, ok, "paused: no rate is known")
	_, ok = r.EstimateWait(20)
	assert.False(t, ok, "paused: a place the watermark passed waits as long as the pause")
}

func TestRateMeterForgetsOldPace(t *testing.T) {
	clock := newClock()
	m := newRateMeter(clock.Now)
	m.observe(0)
	clock.Advance(time.Hour)
	m.observe(5000) // the first batch after a quiet hour says nothing yet
	assert.Zero(t, m.perSecond())
	clock.Advance(30 * time.Second)
	m.observe(5300)
	assert.InDelta(t, 10, m.perSecond(), 0.01)

	m.observe(100) // lowered by hand
	assert.Zero(t, m.perSecond())
}

func ptrTo[T any](v T) *T { return &v }

// lockedClock is a settable clock that goroutines may read while a test
// moves it.
type lockedClock struct {
	mu sync.Mutex
	t  time.Time
}

func newLockedClock() *lockedClock {
	return &lockedClock{t: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
}

func (c *lockedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *lockedClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestRoomRestoresStateTheStoreLost(t *testing.T) {
	srv := testenvRedis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb, err := NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	clock := newLockedClock()
	store := NewRedisStore(rdb, RedisOptions{Now: clock.Now})
	r := NewRoom(store, 9, RoomOptions{Defaults: Defaults{Watermark: 10, HardCap: 1000}, Now: clock.Now})
	follower := NewRoom(store, 9, RoomOptions{Follow: true, Now: clock.Now})

	_, err = r.Refresh(ctx)
	require.NoError(t, err)
	clock.Advance(DefaultRestoreWindow) // a new event waits as a lost one does
	for range 50 {
		_, err := r.Join(ctx)
		require.NoError(t, err)
	}
	_, err = r.Update(ctx, Change{RaiseBy: 30, SoldOut: ptrTo(true)})
	require.NoError(t, err)
	seen, err := follower.Refresh(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(40), seen.Watermark)
	fresh := NewRoom(store, 9, RoomOptions{Follow: true, Now: clock.Now})

	// Redis restarts empty.
	srv.Stop()
	srv.Start()
	st, err := follower.Refresh(ctx)
	require.NoError(t, err, "a missing state is not an outage")
	assert.Equal(t, seen, st, "a follower keeps what it saw until a leader restores the state")
	assert.True(t, st.Admits(40))
	st, err = fresh.Refresh(ctx)
	require.NoError(t, err)
	assert.Equal(t, State{Event: 9}, st, "one that saw nothing admits nobody")

	require.Eventually(t, func() bool { _, err := r.Refresh(ctx); return err == nil }, 10*time.Second, 50*time.Millisecond)
	st, err = store.State(ctx, 9)
	require.NoError(t, err)
	assert.True(t, st.Restoring(clock.Now()))
	st.RestoringUntil = time.Time{}
	assert.Equal(t, State{Event: 9, Watermark: 40, LastPosition: 50, HardCap: 1000, SoldOut: true}, st)
	_, err = r.Join(ctx)
	require.ErrorIs(t, err, ErrRestoring)
	clock.Advance(DefaultRestoreWindow)
	pos, err := r.Join(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(51), pos, "no position is handed out twice")
}

// gatewayRooms are rooms of one event on separate gateway nodes (each its
// own RedisStore, as separate processes have) sharing one Redis.
func gatewayRooms(t *testing.T, rdb redis.UniversalClient, clock *lockedClock, event int64, lease int64, n int) []*Room {
	var out []*Room
	for i := range n {
		store := NewRedisStore(rdb, RedisOptions{Lease: lease, Node: string(rune('a' + i)), Now: clock.Now})
		out = append(out, NewRoom(store, event, RoomOptions{Defaults: Defaults{Watermark: 0}, Now: clock.Now}))
	}
	return out
}

// TestLostStoreStateHoldsJoinsUntilRestored follows docs/api.md §3 "Lost store
// state": when Redis loses an event's state, no new arrival is admitted on
// that account and no position is handed out twice; joins are refused
// until the state is restored from what the gateways remember, then carry
// on after the highest position any of them handed out.
func TestLostStoreStateHoldsJoinsUntilRestored(t *testing.T) {
	for _, lease := range []int64{1, 10} {
		t.Run(fmt.Sprintf("lease %d", lease), func(t *testing.T) {
			srv := testenvRedis(t)
			rdb, err := NewRedisClient(srv.URL())
			require.NoError(t, err)
			defer rdb.Close()
			ctx := context.Background()
			clock := newLockedClock()
			const event = 77
			gws := gatewayRooms(t, rdb, clock, event, lease, 3)
			a, b, c := gws[0], gws[1], gws[2]
			for _, g := range gws {
				_, err := g.Refresh(ctx)
				require.NoError(t, err)
			}
			clock.Advance(DefaultRestoreWindow)

			issued := map[int64]string{}
			join := func(g *Room, name string) int64 {
				t.Helper()
				pos, err := g.Join(ctx)
				require.NoError(t, err)
				require.NotContains(t, issued, pos, "position %d handed out twice (by %s and %s)", pos, issued[pos], name)
				issued[pos] = name
				return pos
			}
			for range 5 {
				join(a, "a")
				join(b, "b")
			}
			_, err = a.Update(ctx, Change{SetWatermark: ptrTo[int64](4)})
			require.NoError(t, err)
			for _, g := range gws {
				_, err := g.Refresh(ctx)
				require.NoError(t, err)
			}
			// b hands out a few more that nobody else has read yet.
			for range 3 {
				join(b, "b")
			}
			var highest int64
			for p := range issued {
				highest = max(highest, p)
			}

			require.NoError(t, rdb.FlushAll(ctx).Err())

			// A join on the node that notices: refused, and it starts the
			// restore rather than restart the counter at 1. A node first
			// spends the block it leased before the loss: positions taken
			// from the old counter, handed out once.
			for {
				pos, err := a.Join(ctx)
				if err != nil {
					require.ErrorIs(t, err, ErrNoState)
					break
				}
				require.Greater(t, lease, int64(1), "only a leased block outlives the counter")
				require.NotContains(t, issued, pos)
				issued[pos] = "a"
			}
			_, err = a.Refresh(ctx)
			require.NoError(t, err)
			for _, g := range []*Room{a, c} {
				_, err := g.Join(ctx)
				require.ErrorIs(t, err, ErrRestoring, "joins wait while the gateways add what they remember")
				assert.True(t, g.State().Admits(4), "token holders are still judged by what was known")
				assert.False(t, g.State().Admits(5))
			}
			_, err = b.Refresh(ctx)
			require.NoError(t, err)
			_, err = b.Join(ctx)
			require.ErrorIs(t, err, ErrRestoring)

			clock.Advance(DefaultRestoreWindow)
			st, err := a.Refresh(ctx)
			require.NoError(t, err)
			assert.False(t, st.Restoring(clock.Now()))
			assert.Equal(t, int64(4), st.Watermark, "the watermark every gateway remembers")
			assert.GreaterOrEqual(t, st.LastPosition, highest)
			for range 4 {
				for i, g := range gws {
					pos := join(g, string(rune('a'+i)))
					assert.Greater(t, pos, int64(4), "a new arrival is never admitted because the counter restarted")
					if lease == 1 {
						assert.Greater(t, pos, highest, "after the highest position ever handed out")
					}
				}
			}
		})
	}
}

// TestLostCounterBelowWhatWasHandedOut covers a failover to a replica that
// missed the last increments: the state is there, the counter went back.
func TestLostCounterBelowWhatWasHandedOut(t *testing.T) {
	srv := testenvRedis(t)
	rdb, err := NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	ctx := context.Background()
	clock := newLockedClock()
	const event = 78
	gws := gatewayRooms(t, rdb, clock, event, 1, 2)
	a, b := gws[0], gws[1]
	for _, g := range gws {
		_, err := g.Refresh(ctx)
		require.NoError(t, err)
	}
	clock.Advance(DefaultRestoreWindow)
	for range 20 {
		_, err := a.Join(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, rdb.Set(ctx, positionsKey(event), 12, 0).Err())

	_, err = a.Join(ctx)
	require.ErrorIs(t, err, ErrNoState, "the counter is below what this node handed out")
	_, err = a.Refresh(ctx)
	require.NoError(t, err)
	_, err = b.Join(ctx)
	require.ErrorIs(t, err, ErrRestoring, "every node waits for the restore")
	clock.Advance(DefaultRestoreWindow)
	pos, err := b.Join(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(21), pos)

	// A node that took nothing itself, but read the counter at 25, finds
	// it gone back to 23 as lost too: its next join would give out 24.
	for range 4 {
		_, err := a.Join(ctx)
		require.NoError(t, err)
	}
	_, err = b.Refresh(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(25), b.State().LastPosition)
	require.NoError(t, rdb.Set(ctx, positionsKey(event), 23, 0).Err())
	_, err = b.Join(ctx)
	require.ErrorIs(t, err, ErrNoState, "the counter is below what this node read")
	_, err = b.Refresh(ctx)
	require.NoError(t, err)
	_, err = a.Refresh(ctx)
	require.NoError(t, err)
	clock.Advance(DefaultRestoreWindow)
	pos, err = b.Join(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(26), pos)
}

// TestFreshGatewayAfterLostStateWaitsForTheOthers: a gateway that starts
// with no memory while Redis is empty cannot tell a new event from a lost
// one, so it too holds joins back while the others add what they know.
func TestFreshGatewayAfterLostStateWaitsForTheOthers(t *testing.T) {
	srv := testenvRedis(t)
	rdb, err := NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	ctx := context.Background()
	clock := newLockedClock()
	const event = 79
	old := gatewayRooms(t, rdb, clock, event, 1, 1)[0]
	_, err = old.Refresh(ctx)
	require.NoError(t, err)
	clock.Advance(DefaultRestoreWindow)
	for range 30 {
		_, err := old.Join(ctx)
		require.NoError(t, err)
	}
	_, err = old.Update(ctx, Change{SetWatermark: ptrTo[int64](25)})
	require.NoError(t, err)

	require.NoError(t, rdb.FlushAll(ctx).Err())
	fresh := gatewayRooms(t, rdb, clock, event, 1, 1)[0]
	st, err := fresh.Refresh(ctx)
	require.NoError(t, err)
	assert.True(t, st.Restoring(clock.Now()))
	select {
	case <-fresh.Ready():
		t.Fatal("ready while new arrivals are held back")
	default:
	}
	_, err = fresh.Join(ctx)
	require.ErrorIs(t, err, ErrRestoring)
	// The old gateway sees the restore and adds what it remembers.
	_, err = old.Refresh(ctx)
	require.NoError(t, err)
	clock.Advance(DefaultRestoreWindow)
	st, err = fresh.Refresh(ctx)
	require.NoError(t, err)
	<-fresh.Ready()
	assert.Equal(t, int64(25), st.Watermark)
	pos, err := fresh.Join(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(31), pos)
}

// TestRoomSeenTokensRaiseTheRestoredCounter: a gateway that restarted
// remembers nothing, but the tokens it is shown prove how far the queue
// had gone. A token at or below the counter changes nothing.
func TestRoomSeenTokensRaiseTheRestoredCounter(t *testing.T) {
	srv := testenvRedis(t)
	rdb, err := NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	ctx := context.Background()
	clock := newLockedClock()
	g := gatewayRooms(t, rdb, clock, 80, 1, 1)[0]
	_, err = g.Refresh(ctx)
	require.NoError(t, err)
	clock.Advance(DefaultRestoreWindow)
	pos, err := g.Join(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), pos)
	g.Seen(1)
	_, err = g.Refresh(ctx)
	require.NoError(t, err)
	pos, err = g.Join(ctx)
	require.NoError(t, err, "no restore")
	assert.Equal(t, int64(2), pos)

	require.NoError(t, rdb.FlushAll(ctx).Err())
	g.Seen(500)
	_, err = g.Refresh(ctx)
	require.NoError(t, err)
	clock.Advance(DefaultRestoreWindow)
	pos, err = g.Join(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(501), pos)
}

// TestRestartedGatewayCarriesOnAfterTheTokensItSees: a gateway that
// restarted along with its store (one box running Caddy and Redis, or a
// memory store) remembers nothing, and the counter starts again. A token
// of the queue's earlier life proves how far it had gone: no position up
// to it is handed out again (docs/api.md §3, lost store state). Defect:
// the token only raised what a later loss would put back, and the next
// arrival got position 1.
func TestRestartedGatewayCarriesOnAfterTheTokensItSees(t *testing.T) {
	for name, store := range map[string]func(*fakeClock) Store{
		"memory": func(c *fakeClock) Store { return NewMemoryStore(c.Now) },
		"redis lease 1": func(c *fakeClock) Store {
			return NewRedisStore(testenv.Redis(t), RedisOptions{Now: c.Now})
		},
		"redis lease 10": func(c *fakeClock) Store {
			return NewRedisStore(testenv.Redis(t), RedisOptions{Lease: 10, Now: c.Now})
		},
	} {
		t.Run(name, func(t *testing.T) {
			clock := newClock()
			ctx := context.Background()
			r := readyRoom(t, store(clock), clock, RoomOptions{})
			// The gateway's first life handed out 1..10.
			r.Seen(10)
			join := func() int64 {
				t.Helper()
				if pos, ok := r.JoinAtHand(); ok {
					return pos
				}
				for range 5 {
					pos, err := r.Join(ctx)
					if err == nil {
						return pos
					}
					// Redis: a counter below a position handed out is
					// lost, and put back over a restore window.
					require.True(t, errors.Is(err, ErrNoState) || errors.Is(err, ErrRestoring), "%v", err)
					_, err = r.Refresh(ctx)
					require.NoError(t, err)
					clock.Advance(DefaultRestoreWindow)
					_, err = r.Refresh(ctx)
					require.NoError(t, err)
				}
				t.Fatal("no position handed out")
				return 0
			}
			assert.Equal(t, int64(11), join(), "after the token's position")
			// A token at or below the counter changes nothing.
			r.Seen(5)
			r.Seen(11)
			assert.Equal(t, int64(12), join())
		})
	}
}

// TestRoomJoinAccountExpires: an account's position lives for the TTL from
// its last claim, then the account queues anew.
func TestRoomJoinAccountExpires(t *testing.T) {
	clock := newClock()
	r := NewRoom(NewMemoryStore(clock.Now), 1, RoomOptions{Now: clock.Now})
	ctx := context.Background()
	_, err := r.Refresh(ctx)
	require.NoError(t, err)
	pos, _, again, err := r.JoinAccountAt(ctx, "alice", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int64(1), pos)
	assert.False(t, again)
	clock.Advance(50 * time.Second)
	require.NoError(t, r.KeepAccount(ctx, "alice", 1, time.Minute))
	clock.Advance(50 * time.Second)
	pos, _, again, err = r.JoinAccountAt(ctx, "alice", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int64(1), pos, "kept alive")
	assert.True(t, again)
	clock.Advance(2 * time.Minute)
	pos, _, again, err = r.JoinAccountAt(ctx, "alice", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int64(2), pos, "expired: a new place")
	assert.False(t, again)
}

// slowReadStore holds its first State answer until released, as a slow
// Redis would.
type slowReadStore struct {
	Store
	calls   atomic.Int32
	read    chan struct{}
	release chan struct{}
	updated chan struct{}
}

func (s *slowReadStore) State(ctx context.Context, event int64) (State, error) {
	st, err := s.Store.State(ctx, event)
	if s.calls.Add(1) == 1 {
		close(s.read)
		<-s.release
	}
	return st, err
}

func (s *slowReadStore) Update(ctx context.Context, event int64, c Change) (State, error) {
	st, err := s.Store.Update(ctx, event, c)
	close(s.updated)
	return st, err
}

// TestRoomReadBeforeAChangeNeverUndoesIt: a refresh that read the state
// before a change of this node's, and answers after it, leaves the change's
// state in memory (a stale sold-out once outlived its clearing).
func TestRoomReadBeforeAChangeNeverUndoesIt(t *testing.T) {
	ctx := context.Background()
	mem := NewMemoryStore(nil)
	_, err := mem.Ensure(ctx, 5, Defaults{})
	require.NoError(t, err)
	_, err = mem.Update(ctx, 5, Change{SoldOut: ptrTo(true)})
	require.NoError(t, err)
	store := &slowReadStore{Store: mem, read: make(chan struct{}), release: make(chan struct{}), updated: make(chan struct{})}
	r := NewRoom(store, 5, RoomOptions{Follow: true})

	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		_, _ = r.Refresh(ctx)
	}()
	<-store.read // the refresh has read sold out
	changed := make(chan struct{})
	go func() {
		defer close(changed)
		_, err := r.Update(ctx, Change{SoldOut: ptrTo(false)})
		assert.NoError(t, err)
	}()
	// Without ordering the change completes while the read is held; with
	// it, it waits for the read. Either way the read is then let go.
	select {
	case <-store.updated:
	case <-time.After(200 * time.Millisecond):
	}
	close(store.release)
	<-refreshed
	<-changed
	assert.False(t, r.State().SoldOut, "the change, made after the read, stands")
}

// TestRestoreWritesBackRevocations: a running gateway that remembers a
// revocation writes it back when the store lost it with the event's state,
// so a gateway started afterwards keeps the revoked visitor out too. Also
// when the store loses the state again right after the gateway put it
// back, at the same instant, so the new restore ends when the one it
// joined did: the revocations must go back with the state again. A
// take-over goes back as one, not as a purchase.
func TestRestoreWritesBackRevocations(t *testing.T) {
	for _, tt := range []struct {
		name   string
		event  int64
		losses int
	}{
		{"one loss", 83, 1},
		{"a second loss at the same instant", 84, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := testenvRedis(t)
			rdb, err := NewRedisClient(srv.URL())
			require.NoError(t, err)
			defer rdb.Close()
			ctx := context.Background()
			clock := newLockedClock()
			old := gatewayRooms(t, rdb, clock, tt.event, 1, 1)[0]
			_, err = old.Refresh(ctx)
			require.NoError(t, err)
			clock.Advance(DefaultRestoreWindow)
			_, err = old.Refresh(ctx)
			require.NoError(t, err)
			require.NoError(t, old.Revoke(ctx, "v_revoked", 1, time.Hour))
			require.NoError(t, old.Revoke(ctx, "alice", 2, time.Hour))
			require.NoError(t, old.TakeOver(ctx, "v_taken", 3, "bob", time.Hour))

			for range tt.losses {
				require.NoError(t, rdb.FlushAll(ctx).Err())
				_, err = old.Refresh(ctx) // finds the state lost and restores it
				require.NoError(t, err)
			}
			clock.Advance(DefaultRestoreWindow)
			fresh := gatewayRooms(t, rdb, clock, tt.event, 1, 1)[0]
			_, err = fresh.Refresh(ctx)
			require.NoError(t, err)
			assert.True(t, fresh.Revoked("v_revoked", 1), "the revocation the old gateway remembered")
			pos, ok := fresh.SubjectRevoked("alice")
			assert.True(t, ok, "the account's revocation the old gateway remembered")
			assert.Equal(t, int64(2), pos)
			by, ok := fresh.RevokedFor("v_taken", 3)
			assert.True(t, ok, "the take-over the old gateway remembered")
			assert.Equal(t, "bob", by, "still a take-over, not a purchase")
		})
	}
}

// TestRestoreKeepsWhoseSoldOutFlagItWas: the origin's sold-out flag (no seat
// left to hold) goes back as the origin's when the store lost the state, so
// a waiting visitor is still told every seat is held rather than 410 (docs/
// api.md §12 "All held is not sold out"); an operator's flag stays an
// operator's, and wins when the gateways restoring the state disagree.
func TestRestoreKeepsWhoseSoldOutFlagItWas(t *testing.T) {
	srv := testenvRedis(t)
	rdb, err := NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	ctx := context.Background()
	clock := newLockedClock()
	const event = 85
	gw := gatewayRooms(t, rdb, clock, event, 1, 1)[0]
	origin := NewRoom(NewRedisStore(rdb, RedisOptions{Node: "origin", Now: clock.Now}), event,
		RoomOptions{Follow: true, Now: clock.Now})
	_, err = gw.Refresh(ctx)
	require.NoError(t, err)
	clock.Advance(DefaultRestoreWindow)
	_, err = origin.Update(ctx, Change{SoldOut: ptrTo(true), Actor: ActorOrigin})
	require.NoError(t, err)
	_, err = gw.Refresh(ctx)
	require.NoError(t, err)
	held := Inventory{Remaining: 0, Held: 5}
	require.False(t, Judge(gw.State(), held, true).SoldOut, "all held: a waiting answer")

	require.NoError(t, rdb.FlushAll(ctx).Err())
	_, err = gw.Refresh(ctx)
	require.NoError(t, err)
	clock.Advance(DefaultRestoreWindow)
	fresh := gatewayRooms(t, rdb, clock, event, 1, 1)[0]
	for _, g := range []*Room{gw, fresh} {
		st, err := g.Refresh(ctx)
		require.NoError(t, err)
		assert.True(t, st.SoldOut)
		assert.Equal(t, ActorOrigin, st.SoldOutBy, "the origin's flag stays the origin's")
		assert.False(t, Judge(st, held, true).SoldOut, "all held after the restore: still a waiting answer")
	}

	// Gateways that disagree on whose flag it was: the operator's wins,
	// in whichever order they add what they remember.
	for i, order := range [][]string{{ActorOrigin, "admin"}, {"admin", ActorOrigin}} {
		evt := int64(event*10 + i)
		for _, by := range order {
			_, err := gw.Store().Ensure(ctx, evt, Defaults{SoldOut: true, SoldOutBy: by, Restore: true})
			require.NoError(t, err)
		}
		st, err := gw.Store().Ensure(ctx, evt, Defaults{Restore: true})
		require.NoError(t, err)
		assert.True(t, st.SoldOut)
		assert.Equal(t, "admin", st.SoldOutBy, "order %v", order)
		assert.True(t, Judge(st, held, true).SoldOut, "an operator's flag stands")
	}
}

// TestRestoreKeepsALoweredWatermark: the configured watermark is "used when
// the store has no watermark yet" (docs/api.md §6): a restore puts back
// the one the gateways remember, even below the configured one (staff
// lowered it), and uses the configured one only when nobody remembers any.
// Several gateways that remember one raise it to the highest of theirs;
// the position counter only goes up throughout.
func TestRestoreKeepsALoweredWatermark(t *testing.T) {
	srv := testenvRedis(t)
	rdb, err := NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	ctx := context.Background()
	clock := newLockedClock()
	const event = 86
	room := func(node string) *Room {
		store := NewRedisStore(rdb, RedisOptions{Node: node, Now: clock.Now})
		return NewRoom(store, event, RoomOptions{Defaults: Defaults{Watermark: 1000}, Now: clock.Now})
	}
	old := room("a")
	_, err = old.Refresh(ctx)
	require.NoError(t, err)
	clock.Advance(DefaultRestoreWindow)
	for range 30 {
		_, err := old.Join(ctx)
		require.NoError(t, err)
	}
	_, err = old.Update(ctx, Change{SetWatermark: ptrTo[int64](200), Actor: "admin"})
	require.NoError(t, err)

	require.NoError(t, rdb.FlushAll(ctx).Err())
	// A gateway that starts now remembers nothing: it sets the state up
	// with the configured watermark, and the old one replaces it.
	fresh := room("b")
	st, err := fresh.Refresh(ctx)
	require.NoError(t, err)
	require.True(t, st.Restoring(clock.Now()))
	_, err = old.Refresh(ctx)
	require.NoError(t, err)
	clock.Advance(DefaultRestoreWindow)
	for _, g := range []*Room{old, fresh} {
		st, err := g.Refresh(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(200), st.Watermark, "staff's watermark, not the configured one")
		assert.False(t, st.Admits(201))
	}
	pos, err := fresh.Join(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(31), pos)

	// In the store: a configured watermark gives way to the first that is
	// remembered, remembered ones only raise it, and a configured one
	// adds nothing to them; the counter only goes up.
	s := old.Store()
	const evt = event * 10
	st, err = s.Ensure(ctx, evt, Defaults{Watermark: 1000, WatermarkConfigured: true, LastPosition: 50, Restore: true})
	require.NoError(t, err)
	assert.Equal(t, int64(1000), st.Watermark)
	last := st.LastPosition
	for _, tt := range []struct {
		d    Defaults
		want int64
	}{
		{Defaults{Watermark: 200, LastPosition: 40, Restore: true}, 200},
		{Defaults{Watermark: 300, LastPosition: 60, Restore: true}, 300},
		{Defaults{Watermark: 250, Restore: true}, 300},
		{Defaults{Watermark: 5000, WatermarkConfigured: true, Restore: true}, 300},
	} {
		st, err = s.Ensure(ctx, evt, tt.d)
		require.NoError(t, err)
		assert.Equal(t, tt.want, st.Watermark, "after %+v", tt.d)
		assert.GreaterOrEqual(t, st.LastPosition, max(last, tt.d.LastPosition), "the counter only goes up")
		last = st.LastPosition
	}
	assert.Equal(t, int64(60), st.LastPosition)
	// Nobody remembers a watermark: the configured one stands.
	st, err = s.Ensure(ctx, evt+1, Defaults{Watermark: 1000, WatermarkConfigured: true, Restore: true})
	require.NoError(t, err)
	st, err = s.Ensure(ctx, evt+1, Defaults{Watermark: 7, WatermarkConfigured: true, Restore: true})
	require.NoError(t, err)
	assert.Equal(t, int64(1000), st.Watermark)
}

// refusingRevocations is a Redis store whose Revoke fails while refuse is
// set, as when Redis is unreachable or failing over.
type refusingRevocations struct {
	*RedisStore
	refuse atomic.Bool
}

func (s *refusingRevocations) Revoke(ctx context.Context, event int64, rv Revocation) error {
	if s.refuse.Load() {
		return errors.New("connection refused")
	}
	return s.RedisStore.Revoke(ctx, event, rv)
}

// TestRevocationTheStoreMissedIsSentAgain: a gateway revoked a token while
// the store was unreachable. It stops admitting the token at once; the
// other gateways learn it once the store answers again, from the gateway's
// next refresh, not never.
func TestRevocationTheStoreMissedIsSentAgain(t *testing.T) {
	srv := testenvRedis(t)
	rdb, err := NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	ctx := context.Background()
	clock := newLockedClock()
	const event = 91
	store := &refusingRevocations{RedisStore: NewRedisStore(rdb, RedisOptions{Node: "a", Now: clock.Now})}
	a := NewRoom(store, event, RoomOptions{Now: clock.Now})
	b := gatewayRooms(t, rdb, clock, event, 1, 1)[0]
	for _, r := range []*Room{a, b} {
		_, err = r.Refresh(ctx)
		require.NoError(t, err)
	}

	store.refuse.Store(true)
	require.Error(t, a.Revoke(ctx, "done", 7, time.Hour))
	require.Error(t, a.Revoke(ctx, "ended", 8, time.Minute))
	assert.True(t, a.Revoked("done", 7), "this node stops admitting it at once")
	_, err = a.Refresh(ctx)
	require.Error(t, err, "still refused: kept for the next refresh")

	store.refuse.Store(false)
	clock.Advance(2 * time.Minute)
	_, err = a.Refresh(ctx)
	require.NoError(t, err)
	_, err = b.Refresh(ctx)
	require.NoError(t, err)
	assert.True(t, b.Revoked("done", 7), "the other gateway learned it once the store answered")
	n, err := rdb.XLen(ctx, revokedKey(event)).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "sent once, and not the revocation that ended meanwhile")
}
