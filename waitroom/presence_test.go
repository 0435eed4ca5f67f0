package waitroom

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// TestRoomAheadSkipsAbandoners: a waiting position not polled within
// abandon_after stops counting in ahead and in the estimate, on the memory
// store and on Redis (docs/api.md §3, abandoners).
func TestRoomAheadSkipsAbandoners(t *testing.T) {
	for name, store := range clockedStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := newClock()
			ctx := context.Background()
			r := readyRoom(t, store(clock), clock, RoomOptions{AbandonAfter: 8 * time.Second})
			for want := int64(1); want <= 6; want++ {
				pos, err := r.Join(ctx)
				require.NoError(t, err)
				require.Equal(t, want, pos)
				r.Polled(pos)
			}
			require.NoError(t, r.syncPresence(ctx))
			assert.Equal(t, int64(5), r.Ahead(6), "too early to tell anyone gave up")

			// 2, 4 and 6 keep polling; 1, 3 and 5 are gone.
			for range 4 {
				clock.Advance(3 * time.Second)
				for _, p := range []int64{2, 4, 6} {
					r.Polled(p)
				}
				require.NoError(t, r.syncPresence(ctx))
			}
			assert.Equal(t, int64(2), r.Ahead(6), "2 and 4")
			assert.Equal(t, int64(1), r.Ahead(4), "2")
			assert.Equal(t, int64(0), r.Ahead(2))

			// Two admitted in the 17 s the room has watched: 2 still
			// waiting (4 and this one) take 17 s, not the 34 s of 4.
			_, err := r.Update(ctx, Change{RaiseBy: 1})
			require.NoError(t, err)
			clock.Advance(3 * time.Second)
			_, err = r.Update(ctx, Change{RaiseBy: 1})
			require.NoError(t, err)
			require.NoError(t, r.syncPresence(ctx))
			assert.Equal(t, int64(1), r.Ahead(6), "4")
			wait, ok := r.EstimateWait(6)
			require.True(t, ok)
			assert.Equal(t, 17*time.Second, wait)
		})
	}
}

// TestAutopilotIdlesWhenOnlyAbandonersWait: the autopilot does not raise
// the watermark for positions whose holders all gave up.
func TestAutopilotIdlesWhenOnlyAbandonersWait(t *testing.T) {
	clock := newClock()
	ctx := context.Background()
	r := NewRoom(NewMemoryStore(clock.Now), testenv.EventID(), RoomOptions{Now: clock.Now,
		AbandonAfter: 8 * time.Second, Autopilot: Autopilot{Step: 1, Interval: time.Second}})
	_, err := r.Refresh(ctx)
	require.NoError(t, err)
	for range 3 {
		pos, err := r.Join(ctx)
		require.NoError(t, err)
		r.Polled(pos)
	}
	require.NoError(t, r.syncPresence(ctx))
	clock.Advance(time.Second)
	require.NoError(t, r.autopilot(ctx))
	assert.Equal(t, int64(1), r.State().Watermark, "too early to tell: everyone counts")

	clock.Advance(12 * time.Second)
	require.NoError(t, r.syncPresence(ctx))
	require.NoError(t, r.autopilot(ctx))
	assert.Equal(t, int64(1), r.State().Watermark, "2 and 3 gave up")

	r.Polled(3)
	require.NoError(t, r.syncPresence(ctx))
	clock.Advance(time.Second)
	require.NoError(t, r.autopilot(ctx))
	assert.Equal(t, int64(2), r.State().Watermark, "3 is back")
}

// TestMarkPolledRuns: Redis marks positions in runs of one BITFIELD, and
// its bitmap is the memory store's bit for bit: runs longer than a field,
// repeats, single positions, bytes crossed, in any order.
func TestMarkPolledRuns(t *testing.T) {
	ctx := context.Background()
	positions := []int64{700, 3, 1, 2, 2, 9, 64, 65, 66}
	for p := int64(100); p < 100+63*2+5; p++ {
		positions = append(positions, p)
	}
	for p := int64(400); p < 463; p++ { // exactly one field
		positions = append(positions, p, p)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(positions), func(i, j int) {
		positions[i], positions[j] = positions[j], positions[i]
	})
	want := map[int64]bool{}
	for _, p := range positions {
		want[p] = true
	}
	for name, store := range clockedStores(t) {
		t.Run(name, func(t *testing.T) {
			ps := store(newClock()).(PresenceStore)
			ev := testenv.EventID()
			require.NoError(t, ps.MarkPolled(ctx, ev, 7, slices.Clone(positions), time.Minute))
			bits, err := ps.PolledBits(ctx, ev, []int64{7}, 0, 100)
			require.NoError(t, err)
			for p := int64(0); p < 800; p++ {
				got := p/8 < int64(len(bits)) && bits[p/8]&(0x80>>(p%8)) != 0
				assert.Equal(t, want[p], got, "position %d", p)
			}
		})
	}
}

func TestBitRuns(t *testing.T) {
	got := bitRuns([]int64{5, 3, 4, 4, 10})
	assert.Equal(t, []any{"SET", "u3", int64(3), uint64(7), "SET", "u1", int64(10), uint64(1)}, got)
	long := make([]int64, 70)
	for i := range long {
		long[i] = int64(i)
	}
	got = bitRuns(long)
	assert.Equal(t, []any{"SET", "u63", int64(0), uint64(1)<<63 - 1, "SET", "u7", int64(63), uint64(127)}, got)
}

// TestPolledBound: a poll is an append, and repeats are folded away when
// the buffer fills, so a position polled again and again crowds out no
// other; polls are dropped only past maxPendingPolls distinct positions,
// until the flush.
func TestPolledBound(t *testing.T) {
	clock := newClock()
	r := NewRoom(NewMemoryStore(clock.Now), testenv.EventID(), RoomOptions{Now: clock.Now, AbandonAfter: 8 * time.Second})
	p := &r.presence
	for range 3 * maxPendingPolls {
		r.Polled(7)
	}
	r.Polled(9)
	require.False(t, p.full)
	assert.Contains(t, p.pending, int64(9))

	for i := range int64(2 * maxPendingPolls) {
		r.Polled(100 + i)
	}
	require.True(t, p.full)
	r.Polled(5)
	assert.NotContains(t, p.pending, int64(5), "dropped while full")

	require.NoError(t, r.syncPresence(context.Background()))
	assert.False(t, p.full)
	r.Polled(5)
	assert.Equal(t, []int64{5}, p.pending)
}
