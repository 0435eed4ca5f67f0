package inventory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/inventory"
)

// TestScriptsOnRedisCluster runs events' whole lives on a Redis Cluster
// (scripts/cluster.sh): every key the scripts take hashes to the event's one
// slot, so hold, confirm, release, reclaim and rebuild run without a
// CROSSSLOT refusal, and the keys live on that slot's master. The events
// land on more than one master, as a cluster's events do.
func TestScriptsOnRedisCluster(t *testing.T) {
	c := testenv.RedisCluster(t)
	ctx := context.Background()
	inv := inventory.New(c)
	masters := map[string]bool{}
	for range 8 {
		event := testenv.EventID()
		k := inventory.KeysFor(event)
		keys := []string{k.Remaining, k.Users, k.Holds, k.Expiry, k.Frozen}
		slot, err := c.ClusterKeySlot(ctx, keys[0]).Result()
		require.NoError(t, err)
		for _, key := range keys[1:] {
			s, err := c.ClusterKeySlot(ctx, key).Result()
			require.NoError(t, err)
			require.Equal(t, slot, s, "%s is on another slot than %s", key, keys[0])
		}

		require.NoError(t, inv.Rebuild(ctx, event, func(context.Context) (inventory.Snapshot, error) {
			return inventory.Snapshot{Remaining: 3, Holds: []inventory.LiveHold{
				{ID: "kept", User: "zoe", Quantity: 1, ExpiresAt: t0.Add(time.Hour)}}}, nil
		}))
		a := hold(t, inv, event, "ann", 2, t0)
		require.Equal(t, inventory.Held, a.Outcome)
		b := hold(t, inv, event, "bob", 1, t0)
		require.Equal(t, inventory.Held, b.Outcome)
		assert.Equal(t, inventory.SoldOut, hold(t, inv, event, "cat", 1, t0).Outcome)

		out, err := inv.Confirm(ctx, event, a.HoldID, t0.Add(time.Minute))
		require.NoError(t, err)
		assert.Equal(t, inventory.Confirmed, out)
		rel, err := inv.Release(ctx, event, "kept", inventory.PendingOnly)
		require.NoError(t, err)
		assert.Equal(t, inventory.Released, rel.Outcome)
		left, seats, loaded, err := inv.Reclaim(ctx, event, t0.Add(time.Hour))
		require.NoError(t, err)
		require.True(t, loaded)
		assert.Equal(t, int64(1), seats, "bob's hold expired and comes back")
		assert.Equal(t, int64(2), left)

		node, err := c.MasterForKey(ctx, k.Remaining)
		require.NoError(t, err)
		n, err := node.Exists(ctx, k.Remaining, k.Users, k.Holds).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(3), n, "the event's keys are on its slot's master")
		masters[node.Options().Addr] = true
	}
	assert.Greater(t, len(masters), 1, "eight events all on one master")
}
