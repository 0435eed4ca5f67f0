package waitroom

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A room records each watermark it takes into memory, by its own change or
// another node's, at the moment it does by its clock; a refresh that
// brings nothing new records nothing.
func TestRoomRecordsAppliedWatermarks(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	store := NewMemoryStore(clock)
	a := NewRoom(store, 1, RoomOptions{Defaults: Defaults{Watermark: 5}, Now: clock})
	b := NewRoom(store, 1, RoomOptions{Defaults: Defaults{Watermark: 5}, Now: clock})
	_, err := a.Refresh(ctx)
	require.NoError(t, err)
	_, err = b.Refresh(ctx)
	require.NoError(t, err)
	marks, dropped := a.AppliedWatermarks()
	assert.Empty(t, marks, "the defaults it started from are no change")
	assert.Zero(t, dropped)

	now = now.Add(time.Second)
	_, err = a.Update(ctx, Change{SetWatermark: ptrTo(int64(10))})
	require.NoError(t, err)
	now = now.Add(time.Second)
	_, err = b.Update(ctx, Change{RaiseBy: 10})
	require.NoError(t, err)
	now = now.Add(300 * time.Millisecond)
	_, err = a.Refresh(ctx)
	require.NoError(t, err)
	now = now.Add(time.Second)
	_, err = a.Refresh(ctx)
	require.NoError(t, err)

	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	marks, _ = a.AppliedWatermarks()
	assert.Equal(t, []AppliedWatermark{{10, t0.Add(time.Second)}, {20, t0.Add(2300 * time.Millisecond)}}, marks)
	marks, _ = b.AppliedWatermarks()
	assert.Equal(t, []AppliedWatermark{{10, t0.Add(2 * time.Second)}, {20, t0.Add(2 * time.Second)}}, marks,
		"b read 10 as its raise began")
}

// Past MaxAppliedWatermarks the older half is forgotten, and counted.
func TestAppliedWatermarksForgetTheOldest(t *testing.T) {
	r := NewRoom(NewMemoryStore(nil), 1, RoomOptions{})
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	for i := range MaxAppliedWatermarks + 1 {
		r.applied.add(int64(i+1), t0.Add(time.Duration(i)*time.Millisecond))
	}
	marks, dropped := r.AppliedWatermarks()
	assert.EqualValues(t, MaxAppliedWatermarks/2, dropped)
	require.Len(t, marks, MaxAppliedWatermarks/2+1)
	assert.EqualValues(t, MaxAppliedWatermarks/2+1, marks[0].Watermark)
	assert.EqualValues(t, MaxAppliedWatermarks+1, marks[len(marks)-1].Watermark)
}
