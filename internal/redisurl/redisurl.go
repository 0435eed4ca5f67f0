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
	"net/url"
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
		return redis.NewClusterClient(cluster), nil
	}
	return redis.NewClient(single), nil
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
