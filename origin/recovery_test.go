package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/waitroom"
)

func TestRedisFlushedMidSale(t *testing.T) {
	for _, how := range []string{"rebuilt by the first request", "rebuilt by an admin"} {
		t.Run(how, func(t *testing.T) {
			redisServer := testenv.StartRedis(t)
			h := newHarness(t, harnessOptions{redisURL: redisServer.URL()})
			ev := h.createEvent(map[string]any{"capacity": 50})
			first := h.holdAll(ev.ID, 30, "early")
			h.requireInvariant(ev.ID, 30)

			require.NoError(t, h.rdb.FlushAll(context.Background()).Err())
			h.admit(ev.ID, 1_000_000) // the gateways restore their own state

			if how == "rebuilt by an admin" {
				res := h.do(http.MethodPost, fmt.Sprintf("/v1/admin/events/%d/rebuild", ev.ID), nil, admin())
				require.Equal(t, http.StatusOK, res.status, "%s", res.body)
				var inv origin.Invariant
				res.json(t, &inv)
				assert.Equal(t, int64(20), inv.Remaining)
				assert.Zero(t, inv.Drift)
			}
			// The earlier buyers come back with new keys; newcomers compete
			// for the 20 seats left.
			var mu sync.Mutex
			statuses := map[int]int{}
			var wg sync.WaitGroup
			for i := range 30 {
				wg.Go(func() {
					res := retryWhileUnavailable(h, func() result { return h.hold(ev.ID, fmt.Sprintf("early-%d", i), 1, "again") })
					if assert.Equal(t, http.StatusOK, res.status, "%s", res.body) {
						var hj holdJSON
						res.json(t, &hj)
						assert.Equal(t, first[i], hj.HoldID, "the one-hold-per-user guard survived the flush")
					}
				})
			}
			for i := range 40 {
				wg.Go(func() {
					res := retryWhileUnavailable(h, func() result { return h.hold(ev.ID, fmt.Sprintf("late-%d", i), 1, "k") })
					mu.Lock()
					statuses[res.status]++
					mu.Unlock()
				})
			}
			wg.Wait()
			assert.Equal(t, map[int]int{http.StatusCreated: 20, http.StatusConflict: 20}, statuses)
			inv := h.requireInvariant(ev.ID, 50)
			assert.Zero(t, inv.Remaining)
			assert.Equal(t, 1, h.liveHoldsPerUser(ev.ID), "nobody has a second hold")
			assert.False(t, h.state(ev.ID).Paused, "admission resumed after the rebuild")
		})
	}
}

// retryWhileUnavailable retries a request the way a client does while the
// origin asks it to retry (503: a rebuild, a pause) or the event is not
// admitting it yet (403).
func retryWhileUnavailable(h *harness, do func() result) result {
	for range 200 {
		res := do()
		if res.status != http.StatusForbidden && res.status != http.StatusServiceUnavailable {
			return res
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Fatalf("still unavailable after retries")
	return result{}
}

func TestStartLoadsMissingKeys(t *testing.T) {
	redisServer := testenv.StartRedis(t)
	h := newHarness(t, harnessOptions{redisURL: redisServer.URL()})
	ev := h.createEvent(map[string]any{"capacity": 10})
	h.holdAll(ev.ID, 4, "u")

	// Redis restarts empty; a new origin node starts.
	redisServer.Stop()
	redisServer.Start()
	srv := h.newServer(h.clock, nil)
	n, loaded, err := srv.Inventory().Remaining(context.Background(), ev.ID)
	require.NoError(t, err)
	assert.True(t, loaded)
	assert.Equal(t, int64(6), n)
	h.admit(ev.ID, 1_000_000)
	assert.Equal(t, http.StatusOK, h.hold(ev.ID, "u-1", 1, "again").status)
}

func TestRebuildKeepsThePausedFlag(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(nil)
	for _, paused := range []bool{true, false} {
		_, err := h.store.Update(context.Background(), ev.ID, waitroom.Change{Paused: &paused})
		require.NoError(t, err)
		res := h.do(http.MethodPost, fmt.Sprintf("/v1/admin/events/%d/rebuild", ev.ID), nil, admin())
		require.Equal(t, http.StatusOK, res.status)
		assert.Equal(t, paused, h.state(ev.ID).Paused)
	}
}

func TestPostgresOutageDuringHolds(t *testing.T) {
	dbURL, proxy := testenv.Proxied(t, testenv.Postgres(t))
	h := newHarness(t, harnessOptions{dbURL: dbURL, config: func(c *origin.Config) {
		c.HoldWriteTimeout = time.Second
	}})
	ev := h.createEvent(map[string]any{"capacity": 100})
	h.holdAll(ev.ID, 20, "before")

	proxy.Cut()
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			res := h.hold(ev.ID, fmt.Sprintf("during-%d", i), 2, "k")
			assert.Equal(t, http.StatusServiceUnavailable, res.status, "%s", res.body)
			assert.Equal(t, "unavailable", res.errorCode(t))
			assert.NotEmpty(t, res.header.Get("Retry-After"))
		})
	}
	wg.Wait()
	assert.Equal(t, http.StatusServiceUnavailable, h.do(http.MethodGet, "/readyz", nil, nil).status)

	proxy.Restore()
	// Writes whose outcome was unknown are settled once the server can no
	// longer commit them.
	h.srv.WaitUncertainFinal()
	_, err := h.srv.ResolveUncertain(context.Background())
	require.NoError(t, err)

	inv := h.requireInvariant(ev.ID, 20)
	assert.Equal(t, int64(80), inv.Remaining, "no seat lost to the outage")
	assert.Equal(t, http.StatusOK, h.do(http.MethodGet, "/readyz", nil, nil).status)

	// The same requests succeed now.
	for i := range 30 {
		res := h.hold(ev.ID, fmt.Sprintf("during-%d", i), 2, "k")
		assert.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	}
	h.requireInvariant(ev.ID, 80)
}
