package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin"
)

// syncBuffer is a log sink the origin's goroutines write to while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestOriginWaitsForItsServers starts the origin before PostgreSQL and
// Redis answer: it must listen at once, say it is not ready, become ready by
// itself once both are up, and survive Redis going away and coming back.
func TestOriginWaitsForItsServers(t *testing.T) {
	pgURL, err := url.Parse(testenv.Postgres(t))
	require.NoError(t, err)
	pg := testenv.NewProxy(t, pgURL.Host)
	pg.Cut() // PostgreSQL refuses connections until Restore
	pgURL.Host = pg.Addr()
	rds := testenv.StartRedis(t)
	rds.Stop()

	cfg, err := loadConfig(nil, func(name string) string {
		return map[string]string{
			"DATABASE_URL":        pgURL.String(),
			"REDIS_URL":           rds.URL(),
			"WAITROOM_KEYS":       "k1:" + strings.Repeat("a", 32),
			"ORIGIN_ADMIN_TOKEN":  "secret",
			"ORIGIN_METRICS_ADDR": "127.0.0.1:0",
		}[name]
	}, io.Discard)
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- run(ctx, ln, cfg, slog.New(slog.NewTextHandler(logs, nil))) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-stopped:
			assert.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("the origin did not stop")
		}
	})

	get := func(path string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		obj, _ := body.(map[string]any) // a list for /v1/events
		return resp.StatusCode, obj
	}
	// waitFor polls until the origin reaches the state check wants; the
	// origin retries on its own backoff, so the test only waits, bounded.
	waitFor := func(what string, check func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !check() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s; logs:\n%s", what, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	code, body := get("/healthz")
	assert.Equal(t, http.StatusOK, code, "alive while it waits, so an orchestrator does not restart it")
	assert.Equal(t, "starting", body["status"])
	code, body = get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "unavailable", body["error"])
	assert.Equal(t, "starting: waiting for PostgreSQL and Redis", body["message"])
	code, _ = get("/v1/events")
	assert.Equal(t, http.StatusServiceUnavailable, code, "the API is not served before its servers are up")
	waitFor("both failures are logged", func() bool {
		out := logs.String()
		return strings.Contains(out, "waiting for PostgreSQL") && strings.Contains(out, "waiting for Redis")
	})

	rds.Start()
	waitFor("only PostgreSQL is waited for", func() bool {
		_, body := get("/readyz")
		msg, _ := body["message"].(string)
		return strings.HasSuffix(msg, "waiting for PostgreSQL")
	})

	pg.Restore()
	waitFor("the origin is ready", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK
	})
	code, _ = get("/v1/events")
	assert.Equal(t, http.StatusOK, code)

	out := logs.String()
	assert.Contains(t, out, "PostgreSQL is up")
	assert.Contains(t, out, "Redis is up")
	// The proxy's refusals come as a reset or an EOF: two kinds, however
	// many tries.
	assert.LessOrEqual(t, strings.Count(out, `msg="waiting for PostgreSQL"`), 2,
		"one line per kind of failure, not one per try:\n%s", out)

	// Later, a server going away makes the origin unready, never gone.
	rds.Stop()
	waitFor("Redis's loss is seen", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusServiceUnavailable
	})
	rds.Start()
	waitFor("the origin is ready again", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK
	})
}

// TestAwaitServerNamesASilentServer: a server that takes the connection and
// never answers (the wrong port, TLS on one side only) is logged with its
// address and as no answer, not as a bare "context deadline exceeded".
func TestAwaitServerNamesASilentServer(t *testing.T) {
	defer func(d time.Duration) { attemptTimeout = d }(attemptTimeout)
	attemptTimeout = 50 * time.Millisecond

	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := awaitServer(ctx, log, "PostgreSQL", "10.1.2.3:5432", func(ctx context.Context) (struct{}, error) {
			<-ctx.Done() // as a driver waiting for an answer that never comes
			return struct{}{}, fmt.Errorf("ping postgres: %w", ctx.Err())
		})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "waiting for PostgreSQL") {
		require.False(t, time.Now().After(deadline), "no line logged")
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	require.Error(t, <-done)
	out := logs.String()
	assert.Contains(t, out, "addr=10.1.2.3:5432")
	assert.Contains(t, out, "no answer in time: something listens at 10.1.2.3:5432 but does not answer as PostgreSQL")
}

// TestReadyzSaysTheEventsAreLoading: an origin whose Redis lost its events
// loads them from the ledger before it is ready, seconds an event; its 503
// says so rather than "waiting for the service to start".
func TestReadyzSaysTheEventsAreLoading(t *testing.T) {
	pgURL := testenv.Postgres(t)
	rds := testenv.StartRedis(t)
	cfg, err := loadConfig(nil, func(name string) string {
		return map[string]string{
			"DATABASE_URL":       pgURL,
			"REDIS_URL":          rds.URL(),
			"WAITROOM_KEYS":      "k1:" + strings.Repeat("a", 32),
			"ORIGIN_ADMIN_TOKEN": "secret",
		}[name]
	}, io.Discard)
	require.NoError(t, err)

	start := func() (base string, stop func()) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- run(ctx, ln, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
		return "http://" + ln.Addr().String(), func() {
			cancel()
			select {
			case err := <-stopped:
				assert.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("the origin did not stop")
			}
		}
	}
	readyz := func(base string) (int, string) {
		resp, err := http.Get(base + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		var body struct{ Message string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body.Message
	}
	until := func(what string, check func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !check() {
			require.False(t, time.Now().After(deadline), "timed out waiting until %s", what)
			time.Sleep(10 * time.Millisecond)
		}
	}

	base, stop := start()
	until("the first origin is ready", func() bool { code, _ := readyz(base); return code == http.StatusOK })
	req, err := http.NewRequest(http.MethodPost, base+"/v1/events",
		strings.NewReader(`{"id":7,"name":"Seven","capacity":10,"price":100,"currency":"eur"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	stop()

	rds.Stop()
	rds.Start() // empty: the event must be loaded from the ledger again
	base, stop = start()
	defer stop()
	var seen []string
	until("the origin is ready", func() bool {
		code, msg := readyz(base)
		if code == http.StatusOK {
			return true
		}
		if len(seen) == 0 || seen[len(seen)-1] != msg {
			seen = append(seen, msg)
		}
		return false
	})
	assert.Contains(t, seen, "starting: waiting for the events to be loaded into Redis from the ledger (0 of 1)")
}

// TestOriginRetriesLoadingTheEvents: a failure while the events are loaded
// into Redis (a server gone for a moment just after it answered) is tried
// again, as the wait for the servers is, rather than stopping the origin.
func TestOriginRetriesLoadingTheEvents(t *testing.T) {
	cfg := originConfig(t)
	tries := 0
	startServer = func(srv *origin.Server, ctx context.Context) error {
		if tries++; tries == 1 {
			return errors.New("load event 7: redis: connection refused")
		}
		return srv.Start(ctx)
	}
	t.Cleanup(func() { startServer = (*origin.Server).Start })

	_, logs := startOriginUntilReady(t, cfg)
	assert.Equal(t, 2, tries)
	assert.Contains(t, logs.String(), "loading the events into Redis failed")
}

// TestOriginServesPastAnEventThatNeverLoads: one event whose loading keeps
// failing while both servers answer holds the origin back only for
// loadPatience; then the origin serves (its other events, webhooks and
// gates), and says which event it left to the drift corrector.
func TestOriginServesPastAnEventThatNeverLoads(t *testing.T) {
	cfg := originConfig(t)
	tries := 0
	startServer = func(srv *origin.Server, ctx context.Context) error {
		tries++
		if err := srv.Start(ctx); err != nil {
			return err
		}
		return errors.New("load event 7: the rebuild cannot take its seat map")
	}
	loadPatience = 0
	t.Cleanup(func() { startServer, loadPatience = (*origin.Server).Start, time.Minute })

	base, logs := startOriginUntilReady(t, cfg)
	assert.Equal(t, 1, tries, "with the servers answering, not tried again past its patience")
	assert.Contains(t, logs.String(), "serving without the events that did not load")
	assert.Contains(t, logs.String(), "load event 7: the rebuild cannot take its seat map")

	req, err := http.NewRequest(http.MethodPost, base+"/v1/events",
		strings.NewReader(`{"id":8,"name":"Eight","capacity":10,"price":100,"currency":"eur"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode, "the origin serves")
}

// originConfig is an origin's configuration on the test's own Redis and
// PostgreSQL.
func originConfig(t *testing.T) config {
	t.Helper()
	cfg, err := loadConfig(nil, func(name string) string {
		return map[string]string{
			"DATABASE_URL":       testenv.Postgres(t),
			"REDIS_URL":          testenv.StartRedis(t).URL(),
			"WAITROOM_KEYS":      "k1:" + strings.Repeat("a", 32),
			"ORIGIN_ADMIN_TOKEN": "secret",
		}[name]
	}, io.Discard)
	require.NoError(t, err)
	return cfg
}

// startOriginUntilReady runs the origin with cfg until the test ends, and
// returns once its /readyz answers 200 (failing the test should it stop
// first, or take 30 s): its base URL and its logs.
func startOriginUntilReady(t *testing.T, cfg config) (string, *syncBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- run(ctx, ln, cfg, slog.New(slog.NewTextHandler(logs, nil))) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-stopped)
	})
	base := "http://" + ln.Addr().String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-stopped:
			stopped <- err
			t.Fatalf("the origin stopped: %v", err)
		default:
		}
		resp, err := http.Get(base + "/readyz")
		require.NoError(t, err)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return base, logs
		}
		require.False(t, time.Now().After(deadline), "timed out waiting until the origin is ready; logs:\n%s", logs.String())
		time.Sleep(10 * time.Millisecond)
	}
}
