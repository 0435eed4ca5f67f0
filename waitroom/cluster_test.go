package waitroom

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// TestRedisStoreOnCluster runs two gateways' stores on a Redis Cluster
// (scripts/cluster.sh), each with its own client: every key of an event's
// queue is on the event's one slot (the scripts and MULTIs run without a
// CROSSSLOT refusal), positions are unique across the two, and a change
// made through one reaches the other's Watch (classic pub/sub, which the
// cluster carries to every node).
func TestRedisStoreOnCluster(t *testing.T) {
	a := NewRedisStore(testenv.RedisCluster(t), RedisOptions{Node: "a", Lease: 5})
	b := NewRedisStore(testenv.RedisCluster(t), RedisOptions{Node: "b", Lease: 5})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	event := testenv.EventID()

	keys := []string{stateKey(event), positionsKey(event), changedChannel(event), logKey(event),
		leaseKey(event, "pilot"), accountKey(event, "sub"), lotteryKey(event), entrantsKey(event),
		drawnKey(event), nonceStoreKey(event, "n"), revokedKey(event), polledKey(event, 3), extendedKey(event, "sub")}
	c := testenv.RedisCluster(t)
	slot, err := c.ClusterKeySlot(ctx, keys[0]).Result()
	require.NoError(t, err)
	for _, k := range keys[1:] {
		s, err := c.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		require.Equal(t, slot, s, "%s is on another slot than %s", k, keys[0])
	}

	for _, s := range []*RedisStore{a, b} {
		_, err := s.Ensure(ctx, event, Defaults{Watermark: 10})
		require.NoError(t, err)
	}
	seen := map[int64]bool{}
	for i := range 40 {
		s := a
		if i%2 == 1 {
			s = b
		}
		pos, err := s.NextPosition(ctx, event)
		require.NoError(t, err)
		require.False(t, seen[pos], "position %d handed out twice", pos)
		seen[pos] = true
	}

	// The presence script takes a node's key and the slots' keys at once.
	require.NoError(t, a.MarkPolled(ctx, event, 0, []int64{3, 9}, time.Minute))
	bits, err := b.PolledBits(ctx, event, []int64{0}, 0, 1)
	require.NoError(t, err)
	assert.Equal(t, []byte{0b00010000, 0b01000000}, bits)

	changed := b.Watch(ctx, event)
	// Pub/sub subscribes asynchronously: keep changing until a signal
	// arrives rather than assuming the subscription is live.
	require.Eventually(t, func() bool {
		_, err := a.Update(ctx, event, Change{RaiseBy: 1, Actor: "test"})
		require.NoError(t, err)
		select {
		case <-changed:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	}, 10*time.Second, time.Millisecond)
	st, err := b.State(ctx, event)
	require.NoError(t, err)
	assert.Greater(t, st.Watermark, int64(10))
	assert.GreaterOrEqual(t, st.LastPosition, int64(40))
}
