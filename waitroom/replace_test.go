package waitroom

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// TestReplacingRoomKeepsRevocations: a reload that changes the room's
// configuration while Redis is unreachable builds a room that takes over
// the old one's revocations, those Redis did not take included: the
// revoked tokens stay out, and Redis gets the revocation once it answers
// again (docs/api.md §3, revocation; docs/gateway.md, reloads). Defect:
// they went with the old room, so the revoked token was admitted again and
// the other gateways never learned the revocation.
func TestReplacingRoomKeepsRevocations(t *testing.T) {
	srv := testenvRedis(t)
	url, proxy := testenv.Proxied(t, srv.URL())
	cut, err := NewRedisClient(url)
	require.NoError(t, err)
	defer cut.Close()
	rdb, err := NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	ctx := context.Background()
	clock := newLockedClock()
	const event = 93
	store := NewRedisStore(cut, RedisOptions{Node: "a", Now: clock.Now})
	old := NewRoom(store, event, RoomOptions{Defaults: Defaults{HardCap: 100}, Now: clock.Now})
	other := gatewayRooms(t, rdb, clock, event, 1, 1)[0]
	for range 2 {
		for _, r := range []*Room{old, other} {
			_, err = r.Refresh(ctx)
			require.NoError(t, err)
		}
		clock.Advance(DefaultRestoreWindow)
	}
	require.NoError(t, other.Revoke(ctx, "read", 3, time.Hour))
	_, err = old.Refresh(ctx)
	require.NoError(t, err)
	require.True(t, old.Revoked("read", 3))

	proxy.Cut()
	require.Error(t, old.Revoke(ctx, "unsent", 7, time.Hour))
	r := NewRoom(store, event, RoomOptions{Defaults: Defaults{HardCap: 200}, Replaces: old, Now: clock.Now})
	_, err = r.Refresh(ctx)
	require.Error(t, err, "Redis still unreachable")
	assert.True(t, r.Revoked("read", 3), "the revocation the old room read from Redis")
	assert.True(t, r.Revoked("unsent", 7), "the revocation Redis did not take")

	proxy.Restore()
	_, err = r.Refresh(ctx)
	require.NoError(t, err)
	_, err = other.Refresh(ctx)
	require.NoError(t, err)
	assert.True(t, other.Revoked("unsent", 7), "sent by the new room once Redis answered")
}

// TestReplacingRoomKeepsPreQueueYields: the positions pre-queue tokens
// yielded, which a room writes back when Redis loses them with the state,
// are written back by the room that replaced it at a reload that changed
// the room's configuration.
func TestReplacingRoomKeepsPreQueueYields(t *testing.T) {
	srv := testenvRedis(t)
	rdb, err := NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	ctx := context.Background()
	clock := newLockedClock()
	const event = 94
	old := gatewayRooms(t, rdb, clock, event, 1, 1)[0]
	_, err = old.Refresh(ctx)
	require.NoError(t, err)
	clock.Advance(DefaultRestoreWindow)
	_, err = old.Refresh(ctx)
	require.NoError(t, err)
	pos, _, err := old.PlacePreQueue(ctx, "v_prequeued", false, time.Hour)
	require.NoError(t, err)

	r := NewRoom(old.Store(), event, RoomOptions{Defaults: Defaults{HardCap: 200}, Replaces: old, Now: clock.Now})
	_, err = r.Refresh(ctx)
	require.NoError(t, err)
	require.NoError(t, rdb.FlushAll(ctx).Err())
	_, err = r.Refresh(ctx) // finds the state lost and restores it
	require.NoError(t, err)
	got, _, ok, err := r.PreQueuePlaced(ctx, "v_prequeued")
	require.NoError(t, err)
	assert.True(t, ok, "the position the token yielded, written back")
	assert.Equal(t, pos, got)
}
