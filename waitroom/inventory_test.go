package waitroom_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

func TestStoreInventory(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		is := s.(waitroom.InventoryStore)
		_, err := is.Inventory(ctx, evt)
		require.ErrorIs(t, err, waitroom.ErrNoInventory)

		at := time.Now().UTC().Truncate(time.Millisecond)
		want := waitroom.Inventory{Sellable: 490, Held: 30, Confirmed: 400, Remaining: 60, ExpiringSoon: 4,
			Healthy: true, ErrorRate: 0.01, At: at}
		require.NoError(t, is.PublishInventory(ctx, evt, want))
		got, err := is.Inventory(ctx, evt)
		require.NoError(t, err)
		assert.Equal(t, want, got)

		// The newest figures replace the last ones.
		want.Remaining, want.At = 59, at.Add(time.Second)
		require.NoError(t, is.PublishInventory(ctx, evt, want))
		got, err = is.Inventory(ctx, evt)
		require.NoError(t, err)
		assert.Equal(t, int64(59), got.Remaining)
	})
}
