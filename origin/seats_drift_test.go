package origin_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/waitroom"
)

// Drift is corrected while holds keep coming: Redis selling seats the ledger
// has given away (remaining raised, a hold's record lost as a failover
// loses acknowledged writes) is set right by one reconcile pass, and the
// sale ends with exactly the sellable seats held.
func TestDriftCorrectedUnderLoad(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 3000})
	ctx := context.Background()
	keys := inventory.KeysFor(ev.ID)
	lost := h.holdID(ev.ID, "lost", "k", 2)

	var held, soldOut atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				user := fmt.Sprintf("w%d-%d", w, i)
				res := h.hold(ev.ID, user, 1, "k")
				switch res.status {
				case http.StatusCreated:
					if i%7 != 3 {
						held.Add(1)
						break
					}
					// Some buyers give their seat back at once: releases run
					// alongside the holds.
					var hj holdJSON
					res.json(t, &hj)
					del := h.do(http.MethodDelete, "/v1/holds/"+hj.HoldID, nil, map[string]string{waitroom.TokenHeader: h.token(user, ev.ID, 1)})
					if del.status != http.StatusNoContent {
						t.Errorf("release: %d %s", del.status, del.body)
						return
					}
				case http.StatusConflict:
					if soldOut.Add(1) > 50 {
						return
					}
				default:
					t.Errorf("hold: %d %s", res.status, res.body)
					return
				}
			}
		})
	}
	for held.Load() < 200 {
		runtime.Gosched()
	}
	// Mid-sale: Redis loses "lost"'s hold (its seats come back with it) and
	// gains 5 seats from nowhere.
	_, err := h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, keys.Holds, lost)
		p.HDel(ctx, keys.Users, "lost")
		p.ZRem(ctx, keys.Expiry, lost)
		p.IncrBy(ctx, keys.Remaining, 2+5)
		return nil
	})
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, h.srv.ReconcileOnce(ctx))
	}
	left, _, err := h.srv.Inventory().Remaining(ctx, ev.ID)
	require.NoError(t, err)
	require.Positive(t, left, "the sale was still on when the reconciler ran")

	wg.Wait()
	close(stop)
	// Settled: nothing in flight. A pass now finds nothing to correct, or
	// only a seat a release made stuck for a moment (the safe side).
	require.NoError(t, h.srv.ReconcileOnce(ctx))
	inv := h.requireInvariant(ev.ID, 3000)
	assert.Zero(t, inv.Remaining)
	assert.Equal(t, int64(3000-2), held.Load(), "never oversold")
	assert.Equal(t, http.StatusOK, h.hold(ev.ID, "lost", 1, "k2").status, "lost's hold is back in the guard")
}

// A hold the correction read live in the ledger, but which its buyer gave
// back before the correction's script ran, is not left holding seats: the
// script puts its lost record back, and the same pass drops it again once
// the ledger says it ended.
func TestCorrectionDropsAHoldReleasedMeanwhile(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10})
	ctx := context.Background()
	keys := inventory.KeysFor(ev.ID)
	h.holdID(ev.ID, "stays", "k", 1)
	gone := h.holdID(ev.ID, "gone", "k", 2)

	// Redis loses gone's record (a failover), so the correction reads it
	// live in the ledger and means to put it back; the buyer gives it back
	// in between.
	_, err := h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, keys.Holds, gone)
		p.HDel(ctx, keys.Users, "gone")
		p.ZRem(ctx, keys.Expiry, gone)
		p.IncrBy(ctx, keys.Remaining, 2)
		return nil
	})
	require.NoError(t, err)
	var once sync.Once
	h.srv.BeforeCorrect(func() {
		once.Do(func() {
			del := h.do(http.MethodDelete, "/v1/holds/"+gone, nil, map[string]string{waitroom.TokenHeader: h.token("gone", ev.ID, 1)})
			assert.Equal(t, http.StatusNoContent, del.status, "%s", del.body)
		})
	})
	require.NoError(t, h.srv.ReconcileOnce(ctx))

	inv := h.requireInvariant(ev.ID, 1)
	assert.Equal(t, inv.Sellable-1, inv.Remaining)
	assert.Equal(t, http.StatusCreated, h.hold(ev.ID, "gone", 1, "k2").status, "gone holds again")
}

// Counting every hold record again blocks Redis while it reads them, so a
// busy event's pass leaves drift on the safe side (Redis offering fewer
// seats than the ledger has left, which is what writes in flight look
// like) for a quiet pass to set right; drift on the side that oversells is
// set right at once, busy or not.
func TestDriftCountedAgainWhenQuietOrOverselling(t *testing.T) {
	warned := &driftWarnings{}
	h := newHarness(t, harnessOptions{config: func(c *origin.Config) {
		c.Logger = slog.New(slog.NewTextHandler(warned, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}})
	ev := h.createEvent(map[string]any{"capacity": 10})
	ctx := context.Background()
	keys := inventory.KeysFor(ev.ID)
	sellable := h.invariant(ev.ID).Sellable
	h.holdID(ev.ID, "ann", "k", 1)
	remaining := func() int64 {
		n, _, err := h.srv.Inventory().Remaining(ctx, ev.ID)
		require.NoError(t, err)
		return n
	}

	// busy holds a hold of user between its Redis step and its ledger
	// write while during runs.
	inRedis, proceed := make(chan struct{}), make(chan struct{})
	h.srv.AfterRedisStep(func() {
		inRedis <- struct{}{}
		<-proceed
	})
	busy := func(user string, during func()) {
		done := make(chan result, 1)
		go func() { done <- h.hold(ev.ID, user, 1, "k") }()
		<-inRedis
		require.Positive(t, h.srv.InFlight(ev.ID))
		during()
		proceed <- struct{}{}
		res := <-done
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	}

	// Redis loses two seats: nothing is oversold, and the busy pass leaves
	// them lost.
	// Drift on that side while busy is what writes in flight show at every
	// check of a sale: it is not worth an operator's warning until quiet.
	require.NoError(t, h.rdb.DecrBy(ctx, keys.Remaining, 2).Err())
	busy("bob", func() {
		require.NoError(t, h.srv.ReconcileOnce(ctx))
		assert.Equal(t, sellable-2-2, remaining(), "counted again while busy")
		assert.Zero(t, warned.count(), "warned of drift writes in flight can explain:\n%s", warned)
	})
	require.NoError(t, h.srv.ReconcileOnce(ctx))
	assert.Equal(t, sellable-2, remaining(), "the quiet pass gives the lost seats back")
	assert.Equal(t, 1, warned.count(), "the quiet pass warns of the drift it found:\n%s", warned)

	// Redis offers three seats it does not have: set right while busy, and
	// warned of at once.
	require.NoError(t, h.rdb.IncrBy(ctx, keys.Remaining, 3).Err())
	busy("cat", func() {
		require.NoError(t, h.srv.ReconcileOnce(ctx))
		assert.Equal(t, sellable-3, remaining(), "oversold until the event is quiet")
		assert.Equal(t, 2, warned.count(), "the overselling side is warned of while busy:\n%s", warned)
	})
	h.requireInvariant(ev.ID, 3)
}

// driftWarnings keeps the origin's warnings and counts the drift
// corrector's.
type driftWarnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *driftWarnings) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, string(p))
	return len(p), nil
}

func (w *driftWarnings) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.lines {
		if strings.Contains(l, "inventory drift:") {
			n++
		}
	}
	return n
}

func (w *driftWarnings) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "")
}
