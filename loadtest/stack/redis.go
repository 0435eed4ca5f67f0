package stack

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

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
	port, err := FreePort()
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
	opts, _ := redis.ParseURL(r.URL())
	client := redis.NewClient(opts)
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

// RedisCommands reads the server's count of commands processed.
func RedisCommands(ctx context.Context, url string) (int64, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return 0, err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("redis INFO has no total_commands_processed")
}

// RedisKeyExists reports whether an event's inventory is loaded.
func RedisKeyExists(ctx context.Context, url string, event int64) (bool, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return false, err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	n, err := rdb.Exists(ctx, inventory.KeysFor(event).Remaining).Result()
	return n == 1, err
}
