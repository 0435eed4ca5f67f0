package origin_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/waitroom"
)

// The admission check a request shares with the others asking at once does
// not run on the first caller's context: that client hanging up does not
// fail the read everyone waiting on it gets.
func TestAdmissionCheckOutlivesTheFirstCaller(t *testing.T) {
	h := newHarness(t, harnessOptions{config: func(c *origin.Config) { c.RoomPollInterval = time.Hour }})
	ev := h.createEvent(nil)
	ctx := context.Background()
	// The room's own first read comes when its loop starts, after this on a
	// loaded machine, and may even come after the raise below and find it:
	// the round is then played again above it. That read happens once, so
	// a second round is the test's.
	state := "waitroom:" + hashtag.Event(ev.ID) + ":state"
	stored, err := h.rdb.HGet(ctx, state, "watermark").Int64()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return h.srv.AdmissionState(ev.ID).Watermark == stored },
		10*time.Second, 5*time.Millisecond, "the room read the store")
	var pos, raised int64
	hungUp := false
	for round := 0; round < 3 && !hungUp; round++ {
		pos = h.srv.AdmissionState(ev.ID).Watermark + 1
		require.False(t, h.srv.Admitted(ctx, ev.ID, pos))
		// Staff raise the watermark; the change notice is lost.
		raised = pos + 1_000_000
		require.NoError(t, h.rdb.HSet(ctx, state, "watermark", raised).Err())

		gone, cancel := context.WithCancel(ctx)
		cancel()
		hungUp = !h.srv.Admitted(gone, ev.ID, pos)
		if !hungUp {
			require.Equal(t, raised, h.srv.AdmissionState(ev.ID).Watermark, "admitted only by a read that found the raise")
		}
	}
	require.True(t, hungUp, "the client hung up: refused at once")
	assert.Eventually(t, func() bool { return h.srv.AdmissionState(ev.ID).Watermark == raised },
		5*time.Second, 5*time.Millisecond, "the shared read went on without it")
	assert.True(t, h.srv.Admitted(ctx, ev.ID, pos))
}

// An operator's sold-out flag stays until the operator lifts it; the
// origin's own flag follows the seats.
func TestOperatorSoldOutWins(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 1})
	ctx := context.Background()
	set := func(v bool) {
		t.Helper()
		_, err := h.store.Update(ctx, ev.ID, waitroom.Change{SoldOut: &v})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return h.srv.AdmissionState(ev.ID).SoldOut == v }, 10*time.Second, 5*time.Millisecond)
	}
	set(true)
	require.NoError(t, h.srv.ReconcileOnce(ctx))
	assert.True(t, h.state(ev.ID).SoldOut, "the operator stopped the sale with seats left")
	set(false)
	require.NoError(t, h.srv.ReconcileOnce(ctx))
	assert.False(t, h.state(ev.ID).SoldOut)

	id := h.holdID(ev.ID, "ann", "a", 1)
	assert.True(t, h.state(ev.ID).SoldOut, "the origin's flag: the last seat went")
	// Its mark lost, as after Redis lost the event and a restore put the
	// state back: the state still says whose flag it is.
	require.NoError(t, h.rdb.Del(ctx, "origin:"+hashtag.Event(ev.ID)+":sold_out_set").Err())
	hold, err := h.ledger.Hold(ctx, id)
	require.NoError(t, err)
	require.NoError(t, h.srv.ReleaseHold(ctx, hold))
	require.NoError(t, h.srv.ReconcileOnce(ctx))
	assert.False(t, h.state(ev.ID).SoldOut, "and it is lifted when the seat comes back")

	// The event's change log names who moved the flag each time.
	log, err := h.store.ChangeLog(ctx, ev.ID, 10)
	require.NoError(t, err)
	var actors []string
	for _, e := range log {
		if e.Field == "sold_out" {
			actors = append(actors, e.Actor)
		}
	}
	assert.Equal(t, []string{"origin", "origin", "unnamed", "unnamed"}, actors, "newest first")
}

// A rebuild never touches the admission state: its own pause is the fence
// on the inventory, which lapses by itself if the rebuild dies.
func TestRebuildLeavesThePausedFlagAlone(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(nil)
	ctx := context.Background()
	var during []bool
	operatorPauses := false
	h.srv.DuringRebuild(func() {
		during = append(during, h.state(ev.ID).Paused)
		if operatorPauses {
			paused := true
			_, err := h.store.Update(ctx, ev.ID, waitroom.Change{Paused: &paused})
			assert.NoError(t, err)
		}
	})
	_, err := h.srv.Rebuild(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, during, "a rebuild that dies mid-way leaves no pause behind")

	operatorPauses = true
	_, err = h.srv.Rebuild(ctx, ev.ID)
	require.NoError(t, err)
	assert.True(t, h.state(ev.ID).Paused, "the operator's pause made during a rebuild stands")
}

// While the sale is paused an admitted buyer is told to retry, not refused.
func TestHoldWhilePausedIsRetryLater(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(nil)
	paused := true
	_, err := h.store.Update(context.Background(), ev.ID, waitroom.Change{Paused: &paused})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return h.srv.AdmissionState(ev.ID).Paused }, 10*time.Second, 5*time.Millisecond)

	res := h.hold(ev.ID, "ann", 1, "a")
	assert.Equal(t, http.StatusServiceUnavailable, res.status, "%s", res.body)
	assert.Equal(t, "unavailable", res.errorCode(t))
	assert.Equal(t, "5", res.header.Get("Retry-After"))
	res = h.do(http.MethodPost, "/v1/events/"+itoa(ev.ID)+"/holds", map[string]any{"quantity": 1},
		map[string]string{waitroom.TokenHeader: h.token("bob", ev.ID, 2_000_000), "Idempotency-Key": "b"})
	assert.Equal(t, http.StatusForbidden, res.status, "a position not admitted yet is still refused")
	assert.Equal(t, "not_admitted", res.errorCode(t))
}

// Loading a new event never undoes a hold another node made on it first.
func TestNewEventLoadKeepsAnotherNodesFirstHold(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ctx := context.Background()
	created, err := h.ledger.CreateEvent(ctx, ledger.Event{ID: nextEventID(), Name: "Final", Capacity: 10, Sellable: 10,
		Price: 100, Currency: "inr", HoldTTLSeconds: 600, MaxPerUser: 4, CreatedAt: h.clock.Now()})
	require.NoError(t, err)
	h.admit(created.ID, 1_000_000)

	// This node sees the event first and holds on it; the row is still
	// being written when the creating node loads the event.
	gate := origin.GateHoldBatches(h.srv)
	var wg sync.WaitGroup
	wg.Go(func() { assert.Equal(t, http.StatusCreated, h.hold(created.ID, "ann", 3, "a").status) })
	gate.WaitQueued(t, 0)
	creator := h.newServer(h.clock, nil)
	require.NoError(t, creator.LoadNewEvent(ctx, created.ID))
	gate.Open()
	wg.Wait()
	inv := h.requireInvariant(created.ID, 3)
	assert.Equal(t, int64(7), inv.Remaining)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func nextEventID() int64 { return testenv.EventID() }

// An origin that has never found the event's admission state in its Redis
// says so, with what to fix, rather than refusing every buyer as not
// admitted: its gateway keeps the queue elsewhere (store memory, another
// Redis), and the buyers it admitted would never get in.
func TestAdmissionUnknownWhenTheGatewayKeepsItsQueueElsewhere(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	res := h.do(http.MethodPost, "/v1/events", map[string]any{"id": testenv.EventID(), "name": "Final", "capacity": 10,
		"price": 1000, "currency": "inr", "max_per_user": 4}, admin())
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	var ev eventJSON
	res.json(t, &ev)

	res = h.hold(ev.ID, "ann", 1, "a")
	assert.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
	assert.Equal(t, "admission_unknown", res.errorCode(t))
	assert.Contains(t, string(res.body), "store redis://")

	// Once a gateway keeps the queue in this Redis, the usual answers.
	h.admit(ev.ID, 1)
	res = h.do(http.MethodPost, "/v1/events/"+itoa(ev.ID)+"/holds", map[string]any{"quantity": 1},
		map[string]string{waitroom.TokenHeader: h.token("bob", ev.ID, 5), "Idempotency-Key": "b"})
	assert.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
	assert.Equal(t, "not_admitted", res.errorCode(t))
	assert.Equal(t, http.StatusCreated, h.hold(ev.ID, "ann", 1, "a2").status)
}

// A buyer who holds seats pays while the sale is paused, and is refused
// once the staff set the watermark back below their place (docs/gateway.md
// says so), with a message that does not tell an admitted buyer they were
// never admitted. Raised again, they pay.
func TestHolderPaysThroughAPauseNotBelowTheWatermark(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(nil)
	ann, bob := h.holdOne(ev.ID, "ann", 1), h.holdOne(ev.ID, "bob", 1)

	paused := true
	_, err := h.store.Update(context.Background(), ev.ID, waitroom.Change{Paused: &paused})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return h.srv.AdmissionState(ev.ID).Paused }, 10*time.Second, 5*time.Millisecond)
	res := h.book(ev.ID, "ann", ann.HoldID, payment.MethodVisa, "pay-paused")
	assert.Equal(t, http.StatusAccepted, res.status, "paused: %s", res.body)

	h.admit(ev.ID, 0)
	require.Eventually(t, func() bool { return h.srv.AdmissionState(ev.ID).Watermark == 0 }, 10*time.Second, 5*time.Millisecond)
	res = h.book(ev.ID, "bob", bob.HoldID, payment.MethodVisa, "pay-lowered")
	require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
	var e struct{ Error, Message string }
	res.json(t, &e)
	assert.Equal(t, "not_admitted", e.Error)
	assert.NotContains(t, e.Message, "yet", "bob was admitted, and holds seats")
	assert.Contains(t, e.Message, "watermark")

	h.admit(ev.ID, 1_000_000)
	res = h.book(ev.ID, "bob", bob.HoldID, payment.MethodVisa, "pay-raised")
	assert.Equal(t, http.StatusAccepted, res.status, "raised again: %s", res.body)
}
