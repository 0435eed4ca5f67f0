package origin_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin"
)

func TestConflictInAHoldBatchIsCompensatedAlone(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 30})
	res := h.hold(ev.ID, "ann", 1, "first")
	require.Equal(t, http.StatusCreated, res.status)
	var annHold holdJSON
	res.json(t, &annHold)
	// Redis forgets that ann holds seats (her seat stays counted): only the
	// ledger can refuse her a second hold.
	require.NoError(t, h.rdb.HDel(context.Background(), inventory.KeysFor(ev.ID).Users, "ann").Err())

	// Ann's request and nine others are written in one batch, behind a
	// first one held back.
	gate := origin.GateHoldBatches(h.srv)
	var wg sync.WaitGroup
	wg.Go(func() {
		res := h.hold(ev.ID, "first", 1, "k")
		assert.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	})
	gate.WaitQueued(t, 0)
	results := make([]result, 10)
	for i := range results {
		user := fmt.Sprintf("b-%d", i)
		if i == 0 {
			user = "ann"
		}
		wg.Go(func() { results[i] = h.hold(ev.ID, user, 1, "again") })
	}
	gate.WaitQueued(t, len(results))
	gate.Open()
	wg.Wait()
	require.Equal(t, []int{1, len(results)}, gate.Sizes(), "the holds' rows went in one batch")

	require.Equal(t, http.StatusOK, results[0].status, "%s", results[0].body)
	var again holdJSON
	results[0].json(t, &again)
	assert.Equal(t, annHold.HoldID, again.HoldID, "ann is answered with the hold the ledger has")
	for _, r := range results[1:] {
		assert.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	}
	inv := h.requireInvariant(ev.ID, 11)
	assert.Equal(t, int64(19), inv.Remaining, "ann's second seat went back, no other")
	assert.Equal(t, 1, h.liveHoldsPerUser(ev.ID))
}

func TestShutdownWaitsForQueuedHoldRows(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 30})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := origin.NewHTTPServer(ln.Addr().String(), h.srv.Handler())
	go func() { _ = srv.Serve(ln) }()
	h = h.with(t)
	h.url = "http://" + ln.Addr().String()

	gate := origin.GateHoldBatches(h.srv)
	var wg sync.WaitGroup
	var first result
	wg.Go(func() { first = h.hold(ev.ID, "first", 1, "k") })
	gate.WaitQueued(t, 0)
	results := make([]result, 20)
	for i := range results {
		wg.Go(func() { results[i] = h.hold(ev.ID, fmt.Sprintf("b-%d", i), 1, "k") })
	}
	gate.WaitQueued(t, len(results))

	// The server shuts down while every row is still queued or held back.
	shuttingDown := make(chan struct{})
	srv.RegisterOnShutdown(func() { close(shuttingDown) })
	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shutdown <- srv.Shutdown(ctx)
	}()
	<-shuttingDown
	gate.Open()
	require.NoError(t, <-shutdown, "the server drained")
	wg.Wait()

	assert.Equal(t, http.StatusCreated, first.status, "%s", first.body)
	for _, r := range results {
		assert.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	}
	h.requireInvariant(ev.ID, 21)
}
