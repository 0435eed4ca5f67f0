package waitroom

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// With a control client, a room's reads and writes of the state, its
// change notices and leases go through it, never through the main client
// the request path's joins share: here the main one reaches no server.
func TestRedisStoreControlClient(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctl := testenv.Redis(t)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer dead.Close()
	store := NewRedisStore(dead, RedisOptions{Control: ctl})
	other := NewRedisStore(ctl, RedisOptions{})
	ev := testenv.EventID()

	notices := store.Watch(ctx, ev)
	_, err := store.Ensure(ctx, ev, Defaults{Watermark: 1})
	require.NoError(t, err)
	s, err := store.Update(ctx, ev, Change{SetWatermark: ptrTo(int64(7))})
	require.NoError(t, err)
	assert.Equal(t, int64(7), s.Watermark)
	s, err = store.State(ctx, ev)
	require.NoError(t, err)
	assert.Equal(t, int64(7), s.Watermark)
	lead, err := store.Lead(ctx, ev, "autopilot", time.Minute)
	require.NoError(t, err)
	assert.True(t, lead)

	// Subscribed on the control client: another node's change arrives.
	_, err = other.Update(ctx, ev, Change{RaiseBy: 1})
	require.NoError(t, err)
	select {
	case <-notices:
	case <-time.After(10 * time.Second):
		t.Fatal("no change notice on the control client")
	}

	_, err = store.NextPosition(ctx, ev)
	assert.ErrorIs(t, err, ErrUnavailable, "positions still go through the main client")
}

// Watch returns subscribed: a change published as soon as it returns is
// signalled, even when Redis reads the SUBSCRIBE late.
func TestRedisWatchReturnsSubscribed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	server := testenv.RedisURL(t)
	u, proxy := testenv.Proxied(t, server)
	ctl, err := NewRedisClient(u)
	require.NoError(t, err)
	defer ctl.Close()
	var once sync.Once
	proxy.OnSend(func(b []byte) {
		if bytes.Contains(bytes.ToLower(b), []byte("subscribe")) {
			once.Do(func() { proxy.PauseFor(200 * time.Millisecond) })
		}
	})
	watcher := NewRedisStore(ctl, RedisOptions{})
	direct, err := NewRedisClient(server)
	require.NoError(t, err)
	defer direct.Close()
	other := NewRedisStore(direct, RedisOptions{})
	ev := testenv.EventID()

	notices := watcher.Watch(ctx, ev)
	_, err = other.Update(ctx, ev, Change{RaiseBy: 1})
	require.NoError(t, err)
	select {
	case <-notices:
	case <-time.After(10 * time.Second):
		t.Fatal("a change published after Watch returned was not signalled")
	}
}
