package waitroom

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

func TestRoomInventoryIsFreshOrUnknown(t *testing.T) {
	for name, store := range map[string]func(*fakeClock) Store{
		"memory": func(c *fakeClock) Store { return NewMemoryStore(c.Now) },
		"redis": func(c *fakeClock) Store {
			return NewRedisStore(testenv.Redis(t), RedisOptions{Now: c.Now})
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			evt := testenv.EventID()
			clock := newClock()
			s := store(clock)
			origin := NewRoom(s, evt, RoomOptions{Follow: true, Now: clock.Now})
			gateway := NewRoom(s, evt, RoomOptions{Now: clock.Now})

			_, err := gateway.Refresh(ctx)
			require.NoError(t, err)
			_, ok := gateway.Inventory()
			assert.False(t, ok, "nothing published yet")

			require.NoError(t, origin.PublishInventory(ctx, Inventory{Sellable: 100, Remaining: 40, Healthy: true}))
			_, ok = gateway.Inventory()
			assert.False(t, ok, "not read yet: a gateway reads the figures when it refreshes")
			_, err = gateway.Refresh(ctx)
			require.NoError(t, err)
			inv, ok := gateway.Inventory()
			require.True(t, ok)
			assert.Equal(t, int64(40), inv.Remaining)
			assert.True(t, inv.At.Equal(clock.Now()), "stamped with the publisher's clock")

			clock.Advance(InventoryFresh + time.Millisecond)
			inv, ok = gateway.Inventory()
			assert.False(t, ok, "stale: the origin stopped publishing")
			assert.Equal(t, int64(40), inv.Remaining, "the last figures are still told")
		})
	}
}
