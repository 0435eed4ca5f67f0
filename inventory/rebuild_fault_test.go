package inventory_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/inventory"
)

// lossyRedis is a client of testenv's Redis (a cluster's every node too)
// that goes through a fault proxy per server, so a test can lose the reply
// to one command: the server acts on it, the client times out and go-redis
// sends it again on a new connection, as it does on a real network.
type lossyRedis struct {
	t      *testing.T
	mu     sync.Mutex
	byAddr map[string]*testenv.Proxy
	// match picks the command whose reply is lost; lost is set once it was.
	match func([]byte) bool
	lost  atomic.Bool
}

func newLossyRedis(t *testing.T) (*lossyRedis, redis.UniversalClient) {
	t.Helper()
	testenv.Redis(t) // skips or fails as every test does without a Redis
	l := &lossyRedis{t: t, byAddr: map[string]*testenv.Proxy{}}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, l.proxy(addr).Addr())
	}
	// Short timeouts: a lost reply costs a fraction of a second.
	const timeout = 250 * time.Millisecond
	var rdb redis.UniversalClient
	if u := testenv.RedisURL(t); redisurl.IsCluster(u) {
		o, err := redis.ParseClusterURL(u)
		require.NoError(t, err)
		o.Dialer, o.ReadTimeout, o.WriteTimeout, o.MaxRetries = dial, timeout, timeout, 2
		rdb = redis.NewClusterClient(o)
	} else {
		o, err := redis.ParseURL(u)
		require.NoError(t, err)
		o.Dialer, o.ReadTimeout, o.WriteTimeout, o.MaxRetries = dial, timeout, timeout, 2
		rdb = redis.NewClient(o)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return l, rdb
}

// proxy is the proxy in front of the server at addr.
func (l *lossyRedis) proxy(addr string) *testenv.Proxy {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.byAddr[addr]; ok {
		return p
	}
	p := testenv.NewProxy(l.t, addr)
	p.OnSend(func(b []byte) {
		l.mu.Lock()
		match := l.match
		l.mu.Unlock()
		if match != nil && match(b) && l.lost.CompareAndSwap(false, true) {
			// Before the command goes on: its reply is the first held.
			p.StallReplies()
		}
	})
	l.byAddr[addr] = p
	return p
}

// loseReply loses the reply to the first command match picks.
func (l *lossyRedis) loseReply(match func([]byte) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.match = match
}

// heal lets every held reply through (to connections the client has
// abandoned by then).
func (l *lossyRedis) heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.byAddr {
		p.Resume()
	}
}

// containsAll reports whether b has every one of parts.
func containsAll(b []byte, parts ...string) bool {
	for _, p := range parts {
		if !bytes.Contains(b, []byte(p)) {
			return false
		}
	}
	return true
}

// scriptSHA is the SHA1 go-redis calls the script in file by.
func scriptSHA(t *testing.T, file string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	require.NoError(t, err)
	sum := sha1.Sum(src)
	return hex.EncodeToString(sum[:])
}

// TestRebuildFenceReplyLost: the reply to the SET NX that takes the fence
// is lost and go-redis sends it again; the retry finds the fence set, by
// the first try, with this rebuild's own token. The fence is the rebuild's:
// it loads the event and lifts it, rather than giving up with ErrRebuilding
// and leaving the event frozen for FenceTTL.
func TestRebuildFenceReplyLost(t *testing.T) {
	l, rdb := newLossyRedis(t)
	inv := inventory.New(rdb)
	ctx := context.Background()
	event := testenv.EventID()
	k := inventory.KeysFor(event)
	l.loseReply(func(b []byte) bool {
		return containsAll(bytes.ToLower(b), "\r\nset\r\n", k.Frozen, "\r\nnx\r\n")
	})

	err := inv.Rebuild(ctx, event, func(context.Context) (inventory.Snapshot, error) {
		return inventory.Snapshot{Remaining: 4, Holds: []inventory.LiveHold{
			{ID: "kept", User: "zoe", Quantity: 1, ExpiresAt: t0.Add(time.Hour)}}}, nil
	})
	l.heal()
	require.True(t, l.lost.Load(), "no SET NX of the fence was seen")
	require.NoError(t, err)
	assertRebuilt(t, inv, event)
}

// TestRebuildFinishReplyLost: the reply to the script that sets remaining
// and lifts the fence is lost and go-redis runs it again; the retry finds
// the fence gone, lifted by the first run. The rebuild loaded the event and
// says so, rather than failing as if another rebuild had taken the fence.
func TestRebuildFinishReplyLost(t *testing.T) {
	l, rdb := newLossyRedis(t)
	inv := inventory.New(rdb)
	ctx := context.Background()
	event := testenv.EventID()
	k := inventory.KeysFor(event)
	sha := scriptSHA(t, "rebuild_finish.lua")
	// A rebuild of the event first, on the server that has it: the scripts
	// are cached there, so the reply lost is the one to a run, not to a
	// NOSCRIPT refusal. Then the keys go, as after a flush.
	require.NoError(t, inv.Rebuild(ctx, event, func(context.Context) (inventory.Snapshot, error) {
		return inventory.Snapshot{Remaining: 1}, nil
	}))
	require.NoError(t, rdb.Del(ctx, k.Remaining, k.Users, k.Holds, k.Expiry).Err())
	l.loseReply(func(b []byte) bool { return containsAll(b, sha, k.Frozen) })

	loaded, err := inv.Reload(ctx, event, func(context.Context) (inventory.Snapshot, error) {
		return inventory.Snapshot{Remaining: 4, Holds: []inventory.LiveHold{
			{ID: "kept", User: "zoe", Quantity: 1, ExpiresAt: t0.Add(time.Hour)}}}, nil
	})
	l.heal()
	require.True(t, l.lost.Load(), "the finish script was not seen")
	require.NoError(t, err)
	assert.True(t, loaded)
	assertRebuilt(t, inv, event)
}

// assertRebuilt checks that event is loaded as the tests' snapshot has it
// and open for holds.
func assertRebuilt(t *testing.T, inv *inventory.Inventory, event int64) {
	t.Helper()
	frozen, err := inv.Frozen(context.Background(), event)
	require.NoError(t, err)
	assert.False(t, frozen, "the rebuild left its fence")
	assert.Equal(t, int64(4), remaining(t, inv, event))
	assert.Equal(t, inventory.AlreadyHeld, hold(t, inv, event, "zoe", 1, t0).Outcome)
	assert.Equal(t, inventory.Held, hold(t, inv, event, "ann", 1, t0).Outcome)
}
