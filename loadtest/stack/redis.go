package stack

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/internal/freeport"
	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/inventory"
)

// Redis is a redis-server of our own, which a fault run may restart: the
// servers we are given are never touched.
type Redis struct {
	dir  string
	port int
	bin  string
	proc *Proc
	// Restarts counts the restarts so far.
	Restarts int
}

// StartRedis starts redis-server on a free loopback port, keeping nothing
// on disk: a restart loses every key, as a crashed cache node does.
func StartRedis(ctx context.Context, dir string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (Debian package redis-server): %w", err)
	}
	port, err := freeport.Take()
	if err != nil {
		return nil, err
	}
	r := &Redis{dir: dir, port: port, bin: bin}
	return r, r.start(ctx)
}

// URL is the server's redis:// URL.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

func (r *Redis) start(ctx context.Context) error {
	p, err := StartProc("redis-server", r.bin, []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(r.port), "--dir", r.dir,
		"--save", "", "--appendonly", "no",
		// An evicted seat counter is an oversell.
		"--maxmemory-policy", "noeviction",
	}, nil, filepath.Join(r.dir, fmt.Sprintf("redis-%d.log", r.Restarts)))
	if err != nil {
		return err
	}
	r.proc = p
	client, err := redisurl.New(r.URL(), redisurl.Defaults{})
	if err != nil {
		return err
	}
	defer client.Close()
	return waitUntil(ctx, p, 10*time.Second, func(ctx context.Context) error {
		return client.Ping(ctx).Err()
	})
}

// Restart kills the server and starts it again on the same port, empty.
func (r *Redis) Restart(ctx context.Context) error {
	r.proc.Kill()
	r.Restarts++
	return r.start(ctx)
}

// Stop ends the server.
func (r *Redis) Stop() error { return r.proc.Stop(5 * time.Second) }

// eachRedisServer calls fn with every server of the Redis at url: the one
// server, or each master of a cluster (the cluster URL form, internal/
// redisurl), one at a time.
func eachRedisServer(ctx context.Context, url string, fn func(context.Context, *redis.Client) error) error {
	rdb, err := redisurl.New(url, redisurl.Defaults{})
	if err != nil {
		return err
	}
	defer rdb.Close()
	var mu sync.Mutex
	return redisurl.EachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		return fn(ctx, c)
	})
}

// infoValues are the key:value lines of an INFO answer.
func infoValues(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// RedisCommands reads the count of commands processed, added up over the
// servers of a cluster.
func RedisCommands(ctx context.Context, url string) (int64, error) {
	var total int64
	err := eachRedisServer(ctx, url, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "stats").Result()
		if err != nil {
			return err
		}
		v, ok := infoValues(info)["total_commands_processed"]
		if !ok {
			return fmt.Errorf("redis INFO has no total_commands_processed")
		}
		n, err := strconv.ParseInt(v, 10, 64)
		total += n
		return err
	})
	return total, err
}

// RedisErrors reads the error answers the servers gave so far, by error
// code (INFO errorstats: CROSSSLOT, MOVED, NOSCRIPT…), added up over the
// servers of a cluster.
func RedisErrors(ctx context.Context, url string) (map[string]int64, error) {
	out := map[string]int64{}
	err := eachRedisServer(ctx, url, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "errorstats").Result()
		if err != nil {
			return err
		}
		for k, v := range infoValues(info) {
			code, ok := strings.CutPrefix(k, "errorstat_")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimPrefix(v, "count="), 10, 64)
			if err != nil {
				return fmt.Errorf("redis INFO errorstats %s: %w", k, err)
			}
			out[code] += n
		}
		return nil
	})
	return out, err
}

// RedisKeyExists reports whether an event's inventory is loaded.
func RedisKeyExists(ctx context.Context, url string, event int64) (bool, error) {
	rdb, err := redisurl.New(url, redisurl.Defaults{})
	if err != nil {
		return false, err
	}
	defer rdb.Close()
	n, err := rdb.Exists(ctx, inventory.KeysFor(event).Remaining).Result()
	return n == 1, err
}
