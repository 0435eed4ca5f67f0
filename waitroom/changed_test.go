package waitroom

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoomChangedSignalsChangesOnly(t *testing.T) {
	store := NewMemoryStore(nil)
	ctx := context.Background()
	r := NewRoom(store, 4, RoomOptions{Defaults: Defaults{Watermark: 5}})
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	first := r.Changed()
	_, err := r.Refresh(ctx)
	require.NoError(t, err)
	assert.False(t, closed(first), "the store confirmed the defaults: nothing changed")

	_, err = r.Update(ctx, Change{SoldOut: ptrTo(true)})
	require.NoError(t, err)
	assert.True(t, closed(first), "the room's own change")
	second := r.Changed()
	assert.False(t, closed(second), "a fresh channel for the next change")

	_, err = r.Refresh(ctx)
	require.NoError(t, err)
	assert.False(t, closed(second), "a read that finds the same state")

	// Another node's change, read by this one.
	other := NewRoom(store, 4, RoomOptions{})
	_, err = other.Update(ctx, Change{RaiseBy: 10})
	require.NoError(t, err)
	_, err = r.Refresh(ctx)
	require.NoError(t, err)
	assert.True(t, closed(second))
	assert.Equal(t, int64(15), r.State().Watermark)
}
