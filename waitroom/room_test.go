package waitroom

import (
	"context"
	"testing"
	"time"

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

func TestRoomEstimateFallsBackToTheAutopilotRate(t *testing.T) {
	r := NewRoom(NewMemoryStore(nil), 1, RoomOptions{Autopilot: Autopilot{Step: 50, Interval: 10 * time.Second}})
	wait, ok := r.EstimateWait(100)
	require.True(t, ok)
	assert.Equal(t, 20*time.Second, wait)
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

func TestRoomRestoresStateTheStoreLost(t *testing.T) {
	srv := testenvRedis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb, err := NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	store := NewRedisStore(rdb, RedisOptions{})
	r := NewRoom(store, 9, RoomOptions{Defaults: Defaults{Watermark: 10, HardCap: 1000}})
	follower := NewRoom(store, 9, RoomOptions{Follow: true})

	_, err = r.Refresh(ctx)
	require.NoError(t, err)
	for range 50 {
		_, err := r.Join(ctx)
		require.NoError(t, err)
	}
	_, err = r.Update(ctx, Change{RaiseBy: 30, SoldOut: ptrTo(true)})
	require.NoError(t, err)
	seen, err := follower.Refresh(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(40), seen.Watermark)
	fresh := NewRoom(store, 9, RoomOptions{Follow: true})

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
	assert.Equal(t, State{Event: 9, Watermark: 40, LastPosition: 50, HardCap: 1000, SoldOut: true}, st)
	pos, err := r.Join(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(51), pos, "no position is handed out twice")
}
