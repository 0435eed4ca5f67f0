package redisurl

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	d := Defaults{PoolSize: 256, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: 1}
	tests := []struct {
		name    string
		url     string
		cluster []string // seed nodes; nil for one server
		addr    string   // the one server
		pool    int
		read    time.Duration
		wantErr string
	}{
		{name: "one server", url: "redis://127.0.0.1:6379/0", addr: "127.0.0.1:6379", pool: 256, read: time.Second},
		{name: "the URL's settings win", url: "redis://127.0.0.1:6379/2?pool_size=8&read_timeout=3s",
			addr: "127.0.0.1:6379", pool: 8, read: 3 * time.Second},
		{name: "unix socket", url: "unix:///run/redis.sock", addr: "/run/redis.sock", pool: 256, read: time.Second},
		{name: "cluster, one addr", url: "redis://127.0.0.1:7000?addr=127.0.0.1:7001",
			cluster: []string{"127.0.0.1:7000", "127.0.0.1:7001"}, pool: 256, read: time.Second},
		{name: "cluster, many addrs and settings", url: "redis://u:p@10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000&pool_size=16",
			cluster: []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}, pool: 16, read: time.Second},
		{name: "cluster, bad addr", url: "redis://127.0.0.1:7000?addr=nohost", wantErr: "unable to parse addr"},
		{name: "cluster, unknown option", url: "redis://127.0.0.1:7000?addr=127.0.0.1:7001&colour=red", wantErr: "unexpected option"},
		{name: "unknown option", url: "redis://127.0.0.1:6379?colour=red", wantErr: "unexpected option"},
		{name: "not redis", url: "http://127.0.0.1:6379", wantErr: "invalid URL scheme"},
		{name: "cluster, not redis", url: "http://127.0.0.1:7000?addr=127.0.0.1:7001", wantErr: "invalid URL scheme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			single, cluster, err := parse(tt.url, d)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.ErrorContains(t, Check(tt.url), tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.NoError(t, Check(tt.url))
			if tt.cluster != nil {
				require.Nil(t, single)
				assert.Equal(t, tt.cluster, cluster.Addrs)
				assert.Equal(t, tt.pool, cluster.PoolSize)
				assert.Equal(t, tt.read, cluster.ReadTimeout)
				assert.Equal(t, 1, cluster.MaxRetries)
			} else {
				require.Nil(t, cluster)
				assert.Equal(t, tt.addr, single.Addr)
				assert.Equal(t, tt.pool, single.PoolSize)
				assert.Equal(t, tt.read, single.ReadTimeout)
				assert.Equal(t, 1, single.MaxRetries)
			}
			c, err := New(tt.url, d)
			require.NoError(t, err)
			defer c.Close()
			_, isCluster := c.(*redis.ClusterClient)
			assert.Equal(t, tt.cluster != nil, isCluster)
			assert.Equal(t, tt.cluster != nil, IsCluster(tt.url))
		})
	}
}

// A URL that does not parse is not repeated in the error, which is logged
// and answered by Caddy's admin endpoint: it may carry a password.
func TestParseErrorKeepsThePasswordOut(t *testing.T) {
	for _, u := range []string{
		"redis://u:s3cretpw@127.0.0.1:notaport/0",
		"redis://:s3cretpw@[::1/0",
		"redis://:s3cretpw@127.0.0.1:notaport/0?addr=127.0.0.1:7001",
	} {
		err := Check(u)
		require.Error(t, err, u)
		assert.NotContains(t, err.Error(), "s3cretpw")
		assert.Contains(t, err.Error(), "redis url")
	}
}
