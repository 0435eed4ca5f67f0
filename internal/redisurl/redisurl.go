// Package redisurl is the one place a Redis URL becomes a client. A URL
// carrying one or more addr= query parameters is go-redis's cluster URL form
// and selects Redis Cluster (the URL's host and every addr are seed nodes);
// any other redis://, rediss:// or unix:// URL is one server. The gateway's
// store and the origin both build their clients here, so the two binaries
// read the same URL the same way (docs/api.md §14).
package redisurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults are what a client gets for the settings its URL leaves out; a
// zero field keeps go-redis's own default. A setting the URL names (say
// pool_size=64) always wins.
type Defaults struct {
	PoolSize     int
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	PoolTimeout  time.Duration
	MaxRetries   int
}

// Check parses u as New would, without making a client.
func Check(u string) error {
	_, _, err := parse(u, Defaults{})
	return err
}

// IsCluster reports whether u is the cluster form.
func IsCluster(u string) bool {
	parsed, err := url.Parse(u)
	return err == nil && parsed.Query().Has("addr")
}

// New parses u and returns a cluster client for the cluster form, a
// single-server client otherwise. It does no I/O: go-redis connects on first
// use.
func New(u string, d Defaults) (redis.UniversalClient, error) {
	single, cluster, err := parse(u, d)
	if err != nil {
		return nil, err
	}
	if cluster != nil {
		c := redis.NewClusterClient(cluster)
		c.AddHook(reloadOnLostNode{c})
		return c, nil
	}
	return redis.NewClient(single), nil
}

// reloadOnLostNode reloads a cluster client's slot map when a command could
// not reach its node. go-redis reloads the map on MOVED and otherwise once a
// minute, and a master that died answers no MOVED: after its replica took
// over, every command of its slots would keep dialling the dead address for
// up to a minute, each hold of those events failing. The reload runs in the
// background, one at a time.
type reloadOnLostNode struct{ c *redis.ClusterClient }

func (h reloadOnLostNode) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnLostNode) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if nodeLost(err) {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

func (h reloadOnLostNode) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if nodeLost(err) {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

// nodeLost reports whether err says the node was unreachable or dropped the
// connection (refused, reset, timed out, closed mid-reply), not that it
// answered with an error.
func nodeLost(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// parse returns the options of one server or, for the cluster form, of the
// cluster, with d filled in. Identity is off: go-redis names its library
// with two CLIENT SETINFO calls on every new connection, which Redis before
// 7.2 (Debian 12 ships 7.0) refuses, so each connection would add two
// errors to the server's error counters, the ones an operator alerts on.
// A URL's client_name still names the connection.
func parse(u string, d Defaults) (*redis.Options, *redis.ClusterOptions, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		// url.Error repeats the URL, and with it any password.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, nil, fmt.Errorf("redis url: %w", err)
	}
	q := parsed.Query()
	if IsCluster(u) {
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, nil, fmt.Errorf("redis cluster url: %w", err)
		}
		fill(q, d, &o.PoolSize, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries)
		o.DisableIdentity = true
		return nil, o, nil
	}
	o, err := redis.ParseURL(u)
	if err != nil {
		return nil, nil, fmt.Errorf("redis url: %w", err)
	}
	fill(q, d, &o.PoolSize, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries)
	o.DisableIdentity = true
	return o, nil, nil
}

// fill puts the defaults into the fields the URL did not name.
func fill(q url.Values, d Defaults, pool *int, dial, read, write, poolWait *time.Duration, retries *int) {
	set(q, "pool_size", pool, d.PoolSize)
	set(q, "dial_timeout", dial, d.DialTimeout)
	set(q, "read_timeout", read, d.ReadTimeout)
	set(q, "write_timeout", write, d.WriteTimeout)
	set(q, "pool_timeout", poolWait, d.PoolTimeout)
	set(q, "max_retries", retries, d.MaxRetries)
}

// set puts def into *field unless the URL named the setting or def is zero.
func set[T comparable](q url.Values, name string, field *T, def T) {
	var zero T
	if def != zero && !q.Has(name) {
		*field = def
	}
}

// Ping checks that c can serve every key: its one server answers, or every
// master of a cluster answers and the cluster reports all its slots served.
// A cluster client's own PING reaches one live node, so it passes while a
// master is down and every command of its slots fails.
func Ping(ctx context.Context, c redis.UniversalClient) error {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return c.Ping(ctx).Err()
	}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if err := m.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("master %s: %w", m.Options().Addr, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	info, err := cc.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	for line := range strings.Lines(info) {
		if state, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok && state != "ok" {
			return fmt.Errorf("cluster state %s: some slots are not served", state)
		}
	}
	return nil
}

// EachServer calls fn with a client of every server behind c: the one
// server, or every master of a cluster, at once. Counters (INFO) and key
// scans (SCAN) answer for one server, so a cluster is read master by master.
func EachServer(ctx context.Context, c redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	default:
		return fmt.Errorf("redis: no servers known behind a %T", c)
	}
}
