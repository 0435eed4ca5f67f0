package waitroom

import (
	"context"
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
			ev := testenv.EventID()
			r := NewRoom(store(clock), ev, RoomOptions{Now: clock.Now, AbandonAfter: 8 * time.Second})
			_, err := r.Refresh(ctx)
			require.NoError(t, err)
			clock.Advance(2 * time.Second) // past a new event's restore window
			_, err = r.Refresh(ctx)
			require.NoError(t, err)
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
			_, err = r.Update(ctx, Change{RaiseBy: 1})
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
