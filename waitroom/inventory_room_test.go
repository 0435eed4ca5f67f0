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
	for name, store := range clockedStores(t) {
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

// TestRoomInventoryFromTheFutureIsNotBelieved: figures dated ahead of the
// gateway's clock (an origin whose clock runs fast) are neither fresh nor
// kept, so they cannot shut out the figures published after them.
func TestRoomInventoryFromTheFutureIsNotBelieved(t *testing.T) {
	for name, store := range clockedStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			evt := testenv.EventID()
			clock := newClock()
			s := store(clock)
			origin := NewRoom(s, evt, RoomOptions{Follow: true, Now: clock.Now})
			gateway := NewRoom(s, evt, RoomOptions{Now: clock.Now})

			require.NoError(t, origin.PublishInventory(ctx, Inventory{Remaining: 1, At: clock.Now().Add(time.Hour)}))
			_, err := gateway.Refresh(ctx)
			require.NoError(t, err)
			_, ok := gateway.Inventory()
			assert.False(t, ok, "an hour ahead: not fresh")

			// Within the freshness of the clock ahead is a clock's skew.
			require.NoError(t, origin.PublishInventory(ctx, Inventory{Remaining: 2, At: clock.Now().Add(InventoryFresh)}))
			_, err = gateway.Refresh(ctx)
			require.NoError(t, err)
			inv, ok := gateway.Inventory()
			assert.True(t, ok)
			assert.Equal(t, int64(2), inv.Remaining)

			// A far-future record read by the gateway does not hide the
			// figures published after it.
			require.NoError(t, origin.PublishInventory(ctx, Inventory{Remaining: 3, At: clock.Now().Add(time.Hour)}))
			_, err = gateway.Refresh(ctx)
			require.NoError(t, err)
			clock.Advance(InventoryFresh + time.Second)
			require.NoError(t, origin.PublishInventory(ctx, Inventory{Remaining: 4}))
			_, err = gateway.Refresh(ctx)
			require.NoError(t, err)
			inv, ok = gateway.Inventory()
			assert.True(t, ok, "the figures published now are fresh")
			assert.Equal(t, int64(4), inv.Remaining)
		})
	}
}

// TestRoomDerivesHardCap: with a hard cap per seat remaining, the room
// keeps the hard cap at the watermark plus k positions per seat the origin
// says remain, logged with why; a fixed hard cap ends it.
func TestRoomDerivesHardCap(t *testing.T) {
	for name, store := range map[string]func(*fakeClock) (Store, func(int64)){
		"memory": func(c *fakeClock) (Store, func(int64)) { return NewMemoryStore(c.Now), func(int64) {} },
		"redis": func(c *fakeClock) (Store, func(int64)) {
			rdb := testenv.Redis(t)
			return NewRedisStore(rdb, RedisOptions{Now: c.Now}), func(event int64) {
				require.NoError(t, rdb.Del(context.Background(), leaseKey(event, "hard_cap")).Err())
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			s, endLease := store(clock)
			evt := testenv.EventID()
			gw := NewRoom(s, evt, RoomOptions{Now: clock.Now, Defaults: Defaults{Watermark: 5, HardCapPerRemaining: 2.5}})
			origin := NewRoom(s, evt, RoomOptions{Follow: true, Now: clock.Now})
			st, err := gw.Refresh(ctx)
			require.NoError(t, err)
			assert.Equal(t, 2.5, st.HardCapPerRemaining)

			require.NoError(t, gw.deriveHardCap(ctx))
			assert.Zero(t, gw.State().HardCap, "no figures yet")

			require.NoError(t, origin.PublishInventory(ctx, Inventory{Sellable: 20, Remaining: 10, Healthy: true}))
			_, err = gw.Refresh(ctx)
			require.NoError(t, err)
			require.NoError(t, gw.deriveHardCap(ctx))
			assert.Equal(t, int64(30), gw.State().HardCap, "5 admitted + 2.5 × 10 remaining")
			log, err := gw.ChangeLog(ctx, 1)
			require.NoError(t, err)
			assert.Equal(t, LogEntry{Time: clock.Now(), Actor: ActorAutopilot, Field: "hard_cap", From: []byte("0"), To: []byte("30"),
				Reason: "derived: 5 admitted + 2.5 × 10 remaining"}, log[0])

			clock.Advance(time.Second)
			endLease(evt)
			require.NoError(t, origin.PublishInventory(ctx, Inventory{Sellable: 20, Remaining: 3, Healthy: true}))
			_, err = gw.Update(ctx, Change{RaiseBy: 5})
			require.NoError(t, err)
			require.NoError(t, gw.deriveHardCap(ctx))
			assert.Equal(t, int64(18), gw.State().HardCap, "10 admitted + 2.5 × 3 remaining, rounded up")

			clock.Advance(InventoryFresh + time.Millisecond)
			endLease(evt)
			_, err = gw.Update(ctx, Change{RaiseBy: 5})
			require.NoError(t, err)
			require.NoError(t, gw.deriveHardCap(ctx))
			assert.Equal(t, int64(18), gw.State().HardCap, "stale figures change nothing")

			st, err = gw.Update(ctx, Change{HardCap: ptrTo(int64(100))})
			require.NoError(t, err)
			assert.Zero(t, st.HardCapPerRemaining, "a fixed hard cap ends the derivation")
			require.NoError(t, origin.PublishInventory(ctx, Inventory{Sellable: 20, Remaining: 3, Healthy: true}))
			_, err = gw.Refresh(ctx)
			require.NoError(t, err)
			endLease(evt)
			require.NoError(t, gw.deriveHardCap(ctx))
			assert.Equal(t, int64(100), gw.State().HardCap)

			// Asked for live, it outlives the configuration as a live cap does.
			_, err = gw.Update(ctx, Change{HardCapPerRemaining: ptrTo(1.0)})
			require.NoError(t, err)
			st, err = s.Ensure(ctx, evt, Defaults{HardCap: 7})
			require.NoError(t, err)
			assert.Equal(t, 1.0, st.HardCapPerRemaining)
			endLease(evt)
			_, err = gw.Refresh(ctx)
			require.NoError(t, err)
			require.NoError(t, gw.deriveHardCap(ctx))
			assert.Equal(t, int64(18), gw.State().HardCap, "15 admitted + 1 × 3 remaining")
		})
	}
}
