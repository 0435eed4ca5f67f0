package origin_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/waitroom"
)

// holdAll makes one hold of one seat for each of n users and returns the
// hold ids.
func (h *harness) holdAll(event int64, n int, prefix string) []string {
	h.t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res := h.hold(event, fmt.Sprintf("%s-%d", prefix, i), 1, "k")
			if assert.Equal(h.t, http.StatusCreated, res.status, "%s", res.body) {
				var hj holdJSON
				res.json(h.t, &hj)
				ids[i] = hj.HoldID
			}
		})
	}
	wg.Wait()
	return ids
}

func TestReaperReturnsEachSeatOnce(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 300})
	ids := h.holdAll(ev.ID, 250, "r")
	h.requireInvariant(ev.ID, 250)

	n, err := h.srv.ReapOnce(context.Background())
	require.NoError(t, err)
	assert.Zero(t, n, "nothing has expired yet")

	h.clock.Advance(600 * time.Second)
	n, err = h.srv.ReapOnce(context.Background())
	require.NoError(t, err)
	assert.Zero(t, n, "a hold is live up to and including expires_at")

	h.clock.Advance(time.Second)
	n, err = h.srv.ReapOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 250, n, "all of them, in batches of 100")
	n, err = h.srv.ReapOnce(context.Background())
	require.NoError(t, err)
	assert.Zero(t, n, "each hold is reaped once")

	inv := h.requireInvariant(ev.ID, 0)
	assert.Equal(t, int64(300), inv.Remaining, "every seat back, none twice")
	res := h.do(http.MethodGet, "/v1/holds/"+ids[0], nil, map[string]string{waitroom.TokenHeader: h.token("r-0", ev.ID, 1)})
	require.Equal(t, http.StatusOK, res.status)
	var hj holdJSON
	res.json(t, &hj)
	assert.Equal(t, "expired", hj.Status)
}

func TestFourReapersRacing(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 400})
	h.holdAll(ev.ID, 350, "race")
	h.clock.Advance(601 * time.Second)

	reapers := []*origin.Server{h.srv}
	for range 3 {
		reapers = append(reapers, h.newServer(h.clock, nil))
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	for _, r := range reapers {
		wg.Go(func() {
			n, err := r.ReapOnce(context.Background())
			assert.NoError(t, err)
			total.Add(int64(n))
		})
	}
	wg.Wait()
	assert.Equal(t, int64(350), total.Load(), "every hold expired by exactly one reaper")
	inv := h.requireInvariant(ev.ID, 0)
	assert.Equal(t, int64(400), inv.Remaining, "each seat returned once")
}

func TestConfirmRacingTheReaper(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 100})
	early := h.holdAll(ev.ID, 20, "paid-early")
	racing := h.holdAll(ev.ID, 60, "paid-late")
	ctx := context.Background()
	for _, id := range early {
		_, err := h.srv.ConfirmHold(ctx, id, nil)
		require.NoError(t, err)
	}

	// The buyer's confirmation runs at the very last instant of the holds;
	// the reaper, on a node whose clock is a second ahead, sees them expired.
	h.clock.Advance(600 * time.Second)
	ahead := newClock()
	ahead.t = h.clock.Now().Add(time.Second)
	reaper := h.newServer(ahead, func(c *origin.Config) { c.Reaper.Batch = 7 })

	var wg sync.WaitGroup
	confirmed := make(map[string]bool)
	var mu sync.Mutex
	for _, id := range racing {
		wg.Go(func() {
			_, err := h.srv.ConfirmHold(ctx, id, nil)
			if err == nil {
				mu.Lock()
				confirmed[id] = true
				mu.Unlock()
				return
			}
			assert.True(t, errors.Is(err, origin.ErrHoldExpired) || errors.Is(err, ledger.ErrHoldNotActive), "%v", err)
		})
	}
	wg.Go(func() {
		for range 3 {
			_, err := reaper.ReapOnce(ctx)
			assert.NoError(t, err)
		}
	})
	wg.Wait()
	_, err := reaper.ReapOnce(ctx)
	require.NoError(t, err)

	for _, id := range append(early, racing...) {
		row, err := h.ledger.Hold(ctx, id)
		require.NoError(t, err)
		if confirmed[id] || contains(early, id) {
			assert.Equal(t, ledger.StatusConfirmed, row.Status, "a confirmed hold is never released")
		} else {
			assert.Equal(t, ledger.StatusExpired, row.Status)
		}
	}
	// Judged at the reaper's clock: every unconfirmed hold has expired.
	inv, err := reaper.CheckInvariant(ctx, ev.ID)
	require.NoError(t, err)
	assert.Zero(t, inv.Drift, "%+v", inv)
	assert.Equal(t, int64(20+len(confirmed)), inv.Confirmed)
	assert.Equal(t, int64(100-20-len(confirmed)), inv.Remaining)
	t.Logf("%d of %d racing confirmations won", len(confirmed), len(racing))
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func TestExpiredHoldIsFreeBeforeTheReaper(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 1})
	ann := h.hold(ev.ID, "ann", 1, "a1")
	require.Equal(t, http.StatusCreated, ann.status)
	var first holdJSON
	ann.json(t, &first)
	assert.Equal(t, http.StatusConflict, h.hold(ev.ID, "bob", 1, "b1").status)

	h.clock.Advance(601 * time.Second)
	inv := h.requireInvariant(ev.ID, 0)
	assert.Equal(t, int64(1), inv.Remaining, "the lapsed hold counts as free in Redis and in the ledger")

	// ann may hold again: the lapsed row is marked expired with the insert.
	again := h.hold(ev.ID, "ann", 1, "a2")
	require.Equal(t, http.StatusCreated, again.status, "%s", again.body)
	var second holdJSON
	again.json(t, &second)
	assert.NotEqual(t, first.HoldID, second.HoldID)
	row, err := h.ledger.Hold(context.Background(), first.HoldID)
	require.NoError(t, err)
	assert.Equal(t, ledger.StatusExpired, row.Status)
	assert.Equal(t, http.StatusConflict, h.hold(ev.ID, "bob", 1, "b2").status)

	n, err := h.srv.ReapOnce(context.Background())
	require.NoError(t, err)
	assert.Zero(t, n)
	h.requireInvariant(ev.ID, 1)
}

func TestLapsedHoldTakenByAnotherBuyer(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 1})
	require.Equal(t, http.StatusCreated, h.hold(ev.ID, "ann", 1, "a").status)
	h.clock.Advance(601 * time.Second)
	require.Equal(t, http.StatusCreated, h.hold(ev.ID, "cat", 1, "c").status)

	n, err := h.srv.ReapOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the reaper marks ann's row")
	inv := h.requireInvariant(ev.ID, 1)
	assert.Zero(t, inv.Remaining, "and returns nothing: her seat is cat's now")
}

func TestExtendThenConfirm(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 1})
	ctx := context.Background()
	res := h.hold(ev.ID, "ann", 1, "a")
	require.Equal(t, http.StatusCreated, res.status)
	var hj holdJSON
	res.json(t, &hj)

	until := h.clock.Now().Add(20 * time.Minute)
	ext, err := h.srv.ExtendHold(ctx, hj.HoldID, until, nil)
	require.NoError(t, err)
	assert.True(t, until.Equal(ext.ExpiresAt), "%v", ext.ExpiresAt)

	h.clock.Advance(15 * time.Minute) // past the first expiry, not the new one
	n, err := h.srv.ReapOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Equal(t, http.StatusConflict, h.hold(ev.ID, "bob", 1, "b").status, "the seat is still ann's")
	h.requireInvariant(ev.ID, 1)

	// A failure inside the transaction leaves the hold pending; the retry
	// completes it.
	_, err = h.srv.ConfirmHold(ctx, hj.HoldID, func(ledger.Tx, ledger.Hold) error { return errors.New("booking insert failed") })
	require.Error(t, err)
	row, err := h.ledger.Hold(ctx, hj.HoldID)
	require.NoError(t, err)
	assert.Equal(t, ledger.StatusPending, row.Status)
	var inTx bool
	confirmed, err := h.srv.ConfirmHold(ctx, hj.HoldID, func(_ ledger.Tx, hold ledger.Hold) error {
		inTx = hold.Status == ledger.StatusConfirmed
		return nil
	})
	require.NoError(t, err)
	assert.True(t, inTx)
	assert.Equal(t, ledger.StatusConfirmed, confirmed.Status)

	h.clock.Advance(24 * time.Hour)
	n, err = h.srv.ReapOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "a confirmed hold never expires")
	inv := h.requireInvariant(ev.ID, 1)
	assert.Equal(t, int64(1), inv.Confirmed)

	del := h.do(http.MethodDelete, "/v1/holds/"+hj.HoldID, nil, map[string]string{waitroom.TokenHeader: h.token("ann", ev.ID, 1)})
	assert.Equal(t, http.StatusConflict, del.status)
	assert.Equal(t, "hold_not_active", del.errorCode(t))
	again := h.hold(ev.ID, "ann", 1, "a-again")
	require.Equal(t, http.StatusOK, again.status, "%s", again.body)
	var same holdJSON
	again.json(t, &same)
	assert.Equal(t, hj.HoldID, same.HoldID)
	assert.Equal(t, "confirmed", same.Status)
}

func TestExtendOrConfirmTooLate(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 2})
	ctx := context.Background()
	var ids []string
	for _, u := range []string{"ann", "bob"} {
		res := h.hold(ev.ID, u, 1, "k")
		require.Equal(t, http.StatusCreated, res.status)
		var hj holdJSON
		res.json(t, &hj)
		ids = append(ids, hj.HoldID)
	}
	h.clock.Advance(601 * time.Second)
	_, err := h.srv.ExtendHold(ctx, ids[0], h.clock.Now().Add(time.Hour), nil)
	assert.ErrorIs(t, err, origin.ErrHoldExpired)
	_, err = h.srv.ConfirmHold(ctx, ids[1], nil)
	assert.ErrorIs(t, err, origin.ErrHoldExpired)
	h.requireInvariant(ev.ID, 0)

	// Once the reaper has marked the rows, an extension still says expired
	// (a booking answers 410 hold_expired, not 409 hold_not_active).
	n, err := h.srv.ReapOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = h.srv.ExtendHold(ctx, ids[0], h.clock.Now().Add(time.Hour), nil)
	assert.ErrorIs(t, err, origin.ErrHoldExpired)
	assert.NotErrorIs(t, err, ledger.ErrHoldNotActive)
}

// The reaper walks from past the holds it has seen lapse (sold holds stay
// pending behind them, migration 021); a hold's row that went in behind
// that point, late, is still ended by a later pass, which looks for its
// start from the beginning now and then.
func TestReaperEndsARowWrittenBehindItsWalk(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10, "hold_ttl_seconds": 60})
	ctx := context.Background()
	h.holdAll(ev.ID, 1, "early")
	h.clock.Advance(10 * time.Minute)
	n, err := h.srv.ReapOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// A row that lapsed 5 minutes before the pass above, written only now.
	now := h.clock.Now().UTC().Truncate(time.Millisecond)
	late := ledger.Hold{ID: uuid.NewString(), EventID: ev.ID, UserID: "late", Quantity: 1, Amount: 100,
		ExpiresAt: now.Add(-15 * time.Minute), CreatedAt: now.Add(-16 * time.Minute),
		IdempotencyKey: "k", RequestDigest: "d", Response: []byte("{}\n")}
	_, err = h.ledger.InsertHold(ctx, late, now)
	require.NoError(t, err)

	passes := 0
	for ; passes < 100; passes++ {
		h.clock.Advance(10 * time.Second)
		n, err := h.srv.ReapOnce(ctx)
		require.NoError(t, err)
		if n > 0 {
			break
		}
	}
	got, err := h.ledger.Hold(ctx, late.ID)
	require.NoError(t, err)
	assert.Equal(t, ledger.StatusExpired, got.Status, "after %d passes", passes)
	assert.Greater(t, passes, 0, "the pass after the first walks from past the row")
	t.Logf("ended by pass %d", passes+1)
}
