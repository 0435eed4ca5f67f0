// Package testenv gives tests real Redis and PostgreSQL servers.
//
// Servers named by REDIS_URL and DATABASE_URL (scripts/services.sh sets both)
// are shared: tests keep apart by using their own event ids (EventID) and
// their own databases (Postgres creates one per test), and never flush them.
// Without REDIS_URL, a private redis-server is started for the test. A test
// that needs a server it cannot get fails when CI=true and skips otherwise.
package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/internal/freeport"
	"github.com/waitroom/waitroom/internal/redisurl"
)

// unavailable fails the test in CI, where a missing server is a broken
// pipeline, and skips it elsewhere.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: tests that need a server fail without it)", msg)
	}
	t.Skipf("%s; run the tests with `make test`", msg)
}

var nextID atomic.Int64

func init() {
	// Ids unique across the test processes sharing one server.
	nextID.Store(rand.Int64N(1<<40) * 1000)
}

// EventID returns an event id no other test uses.
func EventID() int64 { return nextID.Add(1) }

// RedisURL returns the URL of a Redis the test may use: REDIS_URL, or a
// private server started for this test.
func RedisURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return StartRedis(t).URL()
}

// Redis returns a client of RedisURL, closed when the test ends: a Redis
// Cluster client when the URL is the cluster form (internal/redisurl), so
// `make test-cluster` runs the same tests on a cluster.
func Redis(t testing.TB) redis.UniversalClient {
	t.Helper()
	return redisClient(t, RedisURL(t))
}

// RedisCluster returns a client of the Redis Cluster named by
// REDIS_CLUSTER_URL (scripts/cluster.sh sets it), closed when the test ends.
func RedisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	u := os.Getenv("REDIS_CLUSTER_URL")
	if u == "" {
		unavailable(t, "REDIS_CLUSTER_URL is not set")
	}
	c, ok := redisClient(t, u).(*redis.ClusterClient)
	if !ok {
		t.Fatalf("REDIS_CLUSTER_URL %s is not a cluster URL (it needs addr=…)", u)
	}
	return c
}

func redisClient(t testing.TB, u string) redis.UniversalClient {
	t.Helper()
	rdb, err := redisurl.New(u, redisurl.Defaults{})
	if err != nil {
		t.Fatalf("redis url: %v", err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		unavailable(t, "redis at %s: %v", u, err)
	}
	return rdb
}

// RedisServer is a redis-server process owned by one test, which the test may
// stop and start again (same port) to simulate an outage.
type RedisServer struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// StartRedis starts a private redis-server for the test on a free port; it
// is stopped when the test ends.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server is not installed")
	}
	s := &RedisServer{t: t, bin: bin, dir: t.TempDir(), port: FreePort(t)}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's redis:// URL.
func (s *RedisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// Addr is the server's host:port.
func (s *RedisServer) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// Start starts the server (again) and waits until it answers.
func (s *RedisServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command(s.bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--dir", s.dir, "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	WaitForPort(s.t, s.Addr())
}

// Stop stops the server; its data is gone.
func (s *RedisServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Postgres creates a database of its own for the test on the server named by
// DATABASE_URL, dropped when the test ends, and returns its URL.
func Postgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		unavailable(t, "DATABASE_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		unavailable(t, "postgres: %v", err)
	}
	defer admin.Close(context.Background())
	name := fmt.Sprintf("waitroom_test_%d_%d", os.Getpid(), EventID())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("drop test database: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("drop test database: %v", err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// FreePort returns a loopback TCP port nobody listens on right now and that
// no earlier call in this process returned.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.Take()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// WaitForPort waits up to 10 s for addr to accept connections.
func WaitForPort(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come up: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
