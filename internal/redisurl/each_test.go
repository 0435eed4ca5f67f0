package redisurl_test

import (
	"context"
	"regexp"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/internal/testenv"
)

// EachServer visits the one server, or every master of a cluster
// (REDIS_URL in the cluster form, as make test-cluster sets it), each once.
func TestEachServer(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	want := 1
	if c, ok := rdb.(*redis.ClusterClient); ok {
		shards, err := c.ClusterShards(ctx).Result()
		require.NoError(t, err)
		want = len(shards)
	}
	runID := regexp.MustCompile(`run_id:(\w+)`)
	var mu sync.Mutex
	seen := map[string]int{}
	require.NoError(t, redisurl.EachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "server").Result()
		m := runID.FindStringSubmatch(info)
		require.NotNil(t, m, info)
		mu.Lock()
		seen[m[1]]++
		mu.Unlock()
		return err
	}))
	assert.Len(t, seen, want)
	for id, n := range seen {
		assert.Equal(t, 1, n, id)
	}
}

// A new connection sends the server nothing it may refuse: go-redis's
// CLIENT SETINFO, which Redis before 7.2 answers with an error, would add to
// the error counters operators alert on with every connection the pool
// opens. (RESP2, so go-redis's probe for maintenance notifications, sent
// once per client, stays out of the count.)
func TestNewConnectionsAddNoServerErrors(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := context.Background()
	rdb, err := redisurl.New(srv.URL()+"?protocol=2&pool_size=8", redisurl.Defaults{})
	require.NoError(t, err)
	defer rdb.Close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { assert.NoError(t, rdb.Ping(ctx).Err()) })
	}
	wg.Wait()
	require.Positive(t, rdb.PoolStats().TotalConns)

	stats, err := rdb.Info(ctx, "errorstats", "commandstats").Result()
	require.NoError(t, err)
	assert.NotContains(t, stats, "errorstat_")
	assert.NotContains(t, stats, "setinfo")
}
