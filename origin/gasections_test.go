package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/payment"
)

// General-admission sections inside a seat map (docs/api.md §15).

// gaSeating is a seat map of the reserved section A (rows rows of perRow
// seats, price 120000) and the general-admission section GA-East of
// capacity places (price 4500).
func gaSeating(rows, perRow int, capacity int64) map[string]any {
	rs := make([]map[string]any, rows)
	for i := range rs {
		rs[i] = map[string]any{"id": fmt.Sprint(i + 1), "seats": perRow}
	}
	return map[string]any{"sections": []any{
		map[string]any{"id": "A", "price": 120000, "rows": rs},
		map[string]any{"id": "GA-East", "price": 4500, "capacity": capacity},
	}}
}

type sectionHold struct {
	holdJSON
	Section string `json:"section"`
}

func places(n int) map[string]any { return map[string]any{"section": "GA-East", "quantity": n} }

// gaSection reads GA-East of the seat map.
func (h *harness) gaSection(event int64) (capacity, free int64) {
	h.t.Helper()
	res := h.do(http.MethodGet, fmt.Sprintf("/v1/events/%d/seats", event), nil, nil)
	require.Equal(h.t, http.StatusOK, res.status, "%s", res.body)
	var m struct {
		Sections []struct {
			ID       string `json:"id"`
			Price    int64  `json:"price"`
			Capacity *int64 `json:"capacity"`
			Free     *int64 `json:"free"`
			Seats    *[]any `json:"seats"`
		} `json:"sections"`
	}
	res.json(h.t, &m)
	for _, s := range m.Sections {
		if s.ID == "GA-East" {
			require.NotNil(h.t, s.Capacity, "%s", res.body)
			require.NotNil(h.t, s.Free, "%s", res.body)
			assert.Equal(h.t, int64(4500), s.Price)
			// Every section carries its seats (docs/api.md §15): a
			// general-admission section's list is there, and empty.
			require.NotNil(h.t, s.Seats, "seats dropped: %s", res.body)
			assert.Empty(h.t, *s.Seats, "a general-admission section lists no seats")
			return *s.Capacity, *s.Free
		}
		assert.Nil(h.t, s.Capacity, "a reserved section has seats, not a capacity")
	}
	h.t.Fatalf("no section GA-East in %s", res.body)
	return 0, 0
}

// ledgerSection is the ledger's account of GA-East: places left in its
// buckets, and those of holds not ended.
func (h *harness) ledgerSection(event int64) (remaining, taken int64) {
	h.t.Helper()
	require.NoError(h.t, h.ledger.Pool().QueryRow(context.Background(), `SELECT
			(SELECT sum(remaining) FROM ga_inventory WHERE event_id = $1 AND section = 'GA-East'),
			(SELECT coalesce(sum(quantity), 0) FROM holds WHERE event_id = $1 AND ga_section = 'GA-East'
				AND status IN ('pending', 'confirmed'))`, event).Scan(&remaining, &taken))
	return remaining, taken
}

func (h *harness) gaDrift(event int64) origin.SectionDrift {
	h.t.Helper()
	for _, s := range h.invariant(event).Sections {
		if s.Section == "GA-East" {
			return s
		}
	}
	h.t.Fatal("no section GA-East in the invariant")
	return origin.SectionDrift{}
}

func TestCreateSeatMapWithGASection(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createSeated(gaSeating(1, 4, 2000), nil)
	assert.Equal(t, int64(2004), ev.Capacity, "the seats and the section's places")
	assert.Equal(t, int64(2004), ev.Sellable)
	assert.Equal(t, int64(4500), ev.Price, "the lowest section price")
	res := h.do(http.MethodGet, fmt.Sprintf("/v1/events/%d", ev.ID), nil, nil)
	assert.Contains(t, string(res.body), `{"id":"GA-East","price":4500,"capacity":2000}`, "the map is echoed")
	capacity, free := h.gaSection(ev.ID)
	assert.Equal(t, int64(2000), capacity)
	assert.Equal(t, int64(2000), free)
	res = h.do(http.MethodGet, fmt.Sprintf("/v1/events/%d/seats", ev.ID), nil, nil)
	assert.Contains(t, string(res.body), `{"id":"GA-East","price":4500,"seats":[],"capacity":2000,"free":2000}`)

	for name, section := range map[string]map[string]any{
		"capacity and rows":  {"id": "GA", "price": 1, "capacity": 10, "rows": []any{map[string]any{"id": "1", "seats": 1}}},
		"no capacity":        {"id": "GA-West", "price": 1},
		"zero capacity":      {"id": "GA", "price": 1, "capacity": 0},
		"negative capacity":  {"id": "GA", "price": 1, "capacity": -5},
		"capacity too large": {"id": "GA", "price": 1, "capacity": 200_001},
		"id begins with -":   {"id": "-GA", "price": 1, "capacity": 10},
		"id with a space":    {"id": "GA East", "price": 1, "capacity": 10},
		"reserved with '-'":  {"id": "GA-1", "price": 1, "rows": []any{map[string]any{"id": "1", "seats": 1}}},
	} {
		m := gaSeating(1, 1, 10)
		m["sections"] = append(m["sections"].([]any), section)
		res := h.do(http.MethodPost, "/v1/events", map[string]any{"name": "Final", "currency": "inr", "seating": m}, admin())
		assert.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
	}
	res = h.do(http.MethodPost, "/v1/events", map[string]any{"name": "Final", "currency": "inr", "capacity": 11,
		"seating": gaSeating(1, 1, 9)}, admin())
	assert.Equal(t, http.StatusBadRequest, res.status, "capacity must be the seats and places: %s", res.body)
}

func TestGASectionHoldIsAllOrNothing(t *testing.T) {
	h := newHarness(t, harnessOptions{config: freshViews})
	ev := h.createSeated(gaSeating(1, 4, 6), nil)

	res := h.holdBody(ev.ID, "ann", places(4), "k1")
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	var ann sectionHold
	res.json(t, &ann)
	assert.Equal(t, "GA-East", ann.Section)
	assert.Equal(t, int64(4), ann.Quantity)
	assert.Equal(t, int64(18000), ann.Amount, "the section's price per place")
	again := h.holdBody(ev.ID, "ann", map[string]any{"quantity": 4, "section": "GA-East"}, "k1")
	assert.Equal(t, http.StatusCreated, again.status)
	assert.Equal(t, res.body, again.body, "a retry is answered byte for byte")
	assert.Equal(t, http.StatusOK, h.holdBody(ev.ID, "ann", places(1), "k2").status, "one live hold per user")

	res = h.holdBody(ev.ID, "bob", places(3), "k1")
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	assert.Equal(t, "sold_out", res.errorCode(t))
	assert.Contains(t, string(res.body), "only 2")
	_, free := h.gaSection(ev.ID)
	assert.Equal(t, int64(2), free, "bob took nothing")
	left, taken := h.ledgerSection(ev.ID)
	assert.Equal(t, [2]int64{2, 4}, [2]int64{left, taken}, "nor in the ledger")

	res = h.holdBody(ev.ID, "cat", map[string]any{"best_available": map[string]any{"section": "GA-East", "quantity": 2}}, "k1")
	require.Equal(t, http.StatusCreated, res.status, "the last two places, by best_available: %s", res.body)
	res = h.holdBody(ev.ID, "dan", places(1), "k1")
	assert.Equal(t, "sold_out", res.errorCode(t))
	assert.Contains(t, string(res.body), "section GA-East is sold out", "not the event: A has seats")

	// A bare quantity takes the first section in the map that has them:
	// A (4 seats) before GA-East.
	res = h.holdBody(ev.ID, "eve", map[string]any{"quantity": 3}, "k1")
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	var eve seatedHold
	res.json(t, &eve)
	assert.Len(t, eve.Seats, 3)

	for name, tc := range map[string]struct {
		body   any
		status int
	}{
		"seat_ids naming the section": {map[string]any{"seat_ids": []string{"GA-East"}}, http.StatusBadRequest},
		"seat_ids naming a place":     {map[string]any{"seat_ids": []string{"GA-East/1"}}, http.StatusBadRequest},
		"a reserved section":          {map[string]any{"section": "A", "quantity": 1}, http.StatusBadRequest},
		"an unknown section":          {map[string]any{"section": "GA-West", "quantity": 1}, http.StatusBadRequest},
		"no quantity":                 {map[string]any{"section": "GA-East"}, http.StatusBadRequest},
		"section and seats":           {map[string]any{"section": "GA-East", "seat_ids": []string{"A-1-1"}}, http.StatusBadRequest},
		"over the limit":              {places(5), http.StatusUnprocessableEntity},
	} {
		res := h.holdBody(ev.ID, "fay", tc.body, "k-"+name)
		assert.Equal(t, tc.status, res.status, "%s: %s", name, res.body)
		if tc.status == http.StatusBadRequest && strings.HasPrefix(name, "seat_ids") {
			assert.Contains(t, string(res.body), "general-admission section", name)
		}
	}
	ga := h.createEvent(nil)
	assert.Equal(t, http.StatusBadRequest, h.holdBody(ga.ID, "ann", places(1), "k").status, "no seat map, no sections")

	h.requireNoSeatDrift(ev.ID)
	h.requireInvariant(ev.ID, 9)
}

func TestConcurrentGAHoldsNeverOversell(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createSeated(gaSeating(1, 2, 50), nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var held int64
	for i := range 40 {
		wg.Go(func() {
			q := 1 + i%4
			res := retryWhileUnavailable(h, func() result { return h.holdBody(ev.ID, fmt.Sprintf("p%d", i), places(q), "k") })
			mu.Lock()
			defer mu.Unlock()
			statuses[res.status]++
			if res.status == http.StatusCreated {
				held += int64(q)
			} else {
				assert.Equal(t, "sold_out", res.errorCode(t), "%s", res.body)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 40, statuses[http.StatusCreated]+statuses[http.StatusConflict], "%v", statuses)
	assert.Greater(t, statuses[http.StatusConflict], 0, "100 places asked for, 50 to sell")
	assert.LessOrEqual(t, held, int64(50))
	assert.Greater(t, held, int64(46), "refused only when fewer than asked for were left")
	left, taken := h.ledgerSection(ev.ID)
	assert.Equal(t, held, taken, "the ledger has every hold the buyers were given")
	assert.Equal(t, int64(50), left+taken, "and every place is in a bucket or a hold")
	_, free := h.gaSection(ev.ID)
	assert.Equal(t, 50-held, free)
	h.requireNoSeatDrift(ev.ID)
	h.requireInvariant(ev.ID, held)
}

func TestGAPlacesOfLapsedHoldsAndTheReaper(t *testing.T) {
	h := newHarness(t, harnessOptions{config: freshViews})
	ev := h.createSeated(gaSeating(1, 2, 8), nil)
	require.Equal(t, http.StatusCreated, h.holdBody(ev.ID, "ann", places(4), "k").status)
	require.Equal(t, http.StatusCreated, h.holdBody(ev.ID, "bob", places(3), "k").status)

	// Past the expiry, before any reaper: free in Redis, and in the
	// ledger's buckets once a hold needs them (lazy expiry).
	h.clock.Advance(601 * time.Second)
	_, free := h.gaSection(ev.ID)
	assert.Equal(t, int64(8), free)
	res := h.holdBody(ev.ID, "cat", places(4), "k")
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	left, taken := h.ledgerSection(ev.ID)
	assert.Equal(t, int64(8), left+taken, "%d left, %d taken", left, taken)

	reaped, err := h.srv.ReapOnce(context.Background())
	require.NoError(t, err)
	assert.LessOrEqual(t, reaped, 2, "ann's and bob's holds, unless cat's hold marked them")
	left, taken = h.ledgerSection(ev.ID)
	assert.Equal(t, [2]int64{4, 4}, [2]int64{left, taken}, "the reaped places are back in the buckets")
	_, free = h.gaSection(ev.ID)
	assert.Equal(t, int64(4), free)

	// A released hold's places come back at once, in Redis and the ledger.
	var cat sectionHold
	res.json(t, &cat)
	del := h.do(http.MethodDelete, "/v1/holds/"+cat.HoldID, nil, map[string]string{"X-Waitroom-Token": h.token("cat", ev.ID, 1)})
	require.Equal(t, http.StatusNoContent, del.status, "%s", del.body)
	left, taken = h.ledgerSection(ev.ID)
	assert.Equal(t, [2]int64{8, 0}, [2]int64{left, taken})
	_, free = h.gaSection(ev.ID)
	assert.Equal(t, int64(8), free)
	h.requireNoSeatDrift(ev.ID)
	h.requireInvariant(ev.ID, 0)
}

func TestGASectionAfterFlushAll(t *testing.T) {
	redisServer := testenv.StartRedis(t)
	h := newHarness(t, harnessOptions{redisURL: redisServer.URL(), config: freshViews})
	ev := h.createSeated(gaSeating(1, 3, 10), nil)
	for i, q := range []int{4, 3} {
		res := h.holdBody(ev.ID, fmt.Sprintf("u%d", i), places(q), "k")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	}
	require.Equal(t, http.StatusCreated, h.holdBody(ev.ID, "s", map[string]any{"seat_ids": []string{"A-1-1"}}, "k").status)

	require.NoError(t, h.rdb.FlushAll(context.Background()).Err())
	h.admit(ev.ID, 1_000_000)
	res := h.do(http.MethodPost, fmt.Sprintf("/v1/admin/events/%d/rebuild", ev.ID), nil, admin())
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	_, free := h.gaSection(ev.ID)
	assert.Equal(t, int64(3), free, "the section's count is rebuilt from the ledger")
	assert.Equal(t, "sold_out", h.holdBody(ev.ID, "new", places(4), "k").errorCode(t))
	assert.Equal(t, http.StatusOK, h.holdBody(ev.ID, "u1", places(1), "again").status, "the one-hold-per-user guard survived")
	require.Equal(t, http.StatusCreated, h.holdBody(ev.ID, "new", places(3), "k2").status)
	h.requireNoSeatDrift(ev.ID)
	h.requireInvariant(ev.ID, 11)
}

func TestGASectionDriftIsCorrected(t *testing.T) {
	h := newHarness(t, harnessOptions{config: freshViews})
	ev := h.createSeated(gaSeating(1, 3, 10), nil)
	require.Equal(t, http.StatusCreated, h.holdBody(ev.ID, "ann", places(4), "k").status)

	// Redis's count of the section's places goes wrong, the event's not.
	key := fmt.Sprintf("inv:{evt:%d}:sections", ev.ID)
	require.NoError(t, h.rdb.HSet(context.Background(), key, "GA-East", 9).Err())
	d := h.gaDrift(ev.ID)
	assert.Equal(t, int64(3), d.Seats, "9 where the ledger says 6: %+v", d)
	require.NotNil(t, d.Remaining)
	assert.Equal(t, [3]int64{10, 9, 4}, [3]int64{*d.Capacity, *d.Remaining, *d.Active})
	inv := h.invariant(ev.ID)
	require.NotNil(t, inv.SeatDrift)
	assert.Equal(t, int64(3), *inv.SeatDrift)

	require.NoError(t, h.srv.ReconcileOnce(context.Background()))
	h.requireNoSeatDrift(ev.ID)
	_, free := h.gaSection(ev.ID)
	assert.Equal(t, int64(6), free)
	require.Equal(t, http.StatusCreated, h.holdBody(ev.ID, "bob", places(4), "k").status)
	assert.Equal(t, "sold_out", h.holdBody(ev.ID, "cat", places(3), "k").errorCode(t), "Redis had 9: 5 were left, 2 are")
	h.requireInvariant(ev.ID, 8)
}

func TestGATicketsNumberTheirPlaces(t *testing.T) {
	h := newPayHarness(t, payOptions{config: freshViews})
	ev := h.createSeated(gaSeating(1, 4, 5), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bookings := map[string]string{}
	buy := func(user string, body any) []any {
		res := h.holdBody(ev.ID, user, body, "k")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		var hj sectionHold
		res.json(t, &hj)
		b := h.mustBook(ev.ID, user, hj.HoldID, "pm_card_visa")
		bookings[user] = b.BookingID
		require.NoError(t, h.fp.WaitIdle(ctx))
		res = h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, h.auth(user, ev.ID))
		var got struct {
			Status  string `json:"status"`
			Tickets []struct {
				Code string `json:"code"`
				Seat any    `json:"seat"`
			} `json:"tickets"`
		}
		res.json(t, &got)
		require.Equal(t, "confirmed", got.Status, "%s", res.body)
		v := ticketVerifier(t, ticketKey)
		var seats []any
		for _, tk := range got.Tickets {
			c, err := v.Verify(tk.Code, h.clock.Now())
			require.NoError(t, err, "the code verifies")
			assert.Equal(t, tk.Seat, c.Seat, "and names the ticket's seat")
			seats = append(seats, tk.Seat)
		}
		return seats
	}
	assert.Equal(t, []any{"GA-East/1", "GA-East/2", "GA-East/3"}, buy("ann", places(3)))
	assert.Equal(t, []any{"A-1-1"}, buy("bob", map[string]any{"seat_ids": []string{"A-1-1"}}))
	assert.Equal(t, []any{"GA-East/4", "GA-East/5"}, buy("cat", places(2)))

	var n, distinct int
	require.NoError(t, h.ledger.Pool().QueryRow(ctx, `SELECT count(*), count(DISTINCT seat) FROM tickets WHERE event_id = $1 AND valid`, ev.ID).Scan(&n, &distinct))
	assert.Equal(t, [2]int{6, 6}, [2]int{n, distinct}, "every ticket's number is its own in the event")
	_, free := h.gaSection(ev.ID)
	assert.Zero(t, free)
	inv := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(6), inv.Tickets)
	h.requireNoSeatDrift(ev.ID)

	// A cancelled booking's places go back, to Redis, the buckets and the
	// numbers: the next buyer gets them.
	res := h.do(http.MethodPost, "/v1/bookings/"+bookings["ann"]+"/cancellation", nil, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.NoError(t, h.fp.WaitIdle(ctx))
	_, free = h.gaSection(ev.ID)
	assert.Equal(t, int64(3), free)
	left, taken := h.ledgerSection(ev.ID)
	assert.Equal(t, [2]int64{3, 2}, [2]int64{left, taken})
	assert.Equal(t, []any{"GA-East/1", "GA-East/2"}, buy("dan", places(2)))
	h.requireNoSeatDrift(ev.ID)
	assert.Equal(t, int64(5), h.requireSeatsOnce(ev.ID).Tickets)
}

func TestGALatePaymentIsRefunded(t *testing.T) {
	h := newPayHarness(t, payOptions{config: freshViews})
	ev := h.createSeated(gaSeating(1, 1, 4), map[string]any{"hold_ttl_seconds": 60})
	ctx := context.Background()

	// ann pays; the success lands after her hold expired, when bob has
	// taken her places: a seat map keeps no overflow reserve.
	res := h.holdBody(ev.ID, "ann", places(3), "k")
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	var ann sectionHold
	res.json(t, &ann)
	ab := h.mustBook(ev.ID, "ann", ann.HoldID, payment.MethodSilent)
	h.expireHold(ev.ID, "ann", ann.HoldID)
	require.Equal(t, http.StatusCreated, h.holdBody(ev.ID, "bob", places(4), "k").status, "ann's places are free")
	require.NoError(t, h.fp.Redeliver(ctx, ab.PaymentID))

	got := h.booking(ev.ID, "ann", ab.BookingID)
	assert.Equal(t, "refunded", got.Status, "%+v", got)
	assert.Empty(t, got.Tickets, "no ticket without a place")
	left, taken := h.ledgerSection(ev.ID)
	assert.Equal(t, [2]int64{0, 4}, [2]int64{left, taken}, "bob's places, and none given twice")
	_, free := h.gaSection(ev.ID)
	assert.Zero(t, free)
	h.requireNoSeatDrift(ev.ID)
	h.requireInvariant(ev.ID, 4)
}
