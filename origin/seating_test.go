package origin_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/waitroom"
)

// seating is a seat map of sections A (price 120000) and B (80000), each of
// rows rows of perRow seats.
func seating(rows, perRow int) map[string]any {
	section := func(id string, price int) map[string]any {
		rs := make([]map[string]any, rows)
		for i := range rs {
			rs[i] = map[string]any{"id": fmt.Sprint(i + 1), "seats": perRow}
		}
		return map[string]any{"id": id, "price": price, "rows": rs}
	}
	return map[string]any{"sections": []any{section("A", 120000), section("B", 80000)}}
}

// createSeated creates a reserved-seating event: no capacity, no price.
func (h *harness) createSeated(m map[string]any, fields map[string]any) eventJSON {
	h.t.Helper()
	body := map[string]any{"id": testenv.EventID(), "name": "Final", "currency": "inr", "hold_ttl_seconds": 600,
		"max_per_user": 4, "seating": m}
	for k, v := range fields {
		body[k] = v
	}
	res := h.do(http.MethodPost, "/v1/events", body, admin())
	require.Equal(h.t, http.StatusCreated, res.status, "create event: %s", res.body)
	var ev eventJSON
	res.json(h.t, &ev)
	h.admit(ev.ID, 1_000_000)
	return ev
}

// holdBody posts a hold request body as user.
func (h *harness) holdBody(event int64, user string, body any, key string) result {
	h.t.Helper()
	return h.do(http.MethodPost, fmt.Sprintf("/v1/events/%d/holds", event), body, map[string]string{
		waitroom.TokenHeader: h.token(user, event, 1),
		"Idempotency-Key":    key,
	})
}

type seatedHold struct {
	holdJSON
	Seats []string `json:"seats"`
}

type seatMapJSON struct {
	Sections []struct {
		ID    string `json:"id"`
		Price int64  `json:"price"`
		Seats []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"seats"`
	} `json:"sections"`
}

// seatStatuses reads the seat map: seat id → status.
func (h *harness) seatStatuses(event int64) map[string]string {
	h.t.Helper()
	res := h.do(http.MethodGet, fmt.Sprintf("/v1/events/%d/seats", event), nil, nil)
	require.Equal(h.t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(h.t, "public, max-age=1", res.header.Get("Cache-Control"))
	var m seatMapJSON
	res.json(h.t, &m)
	out := map[string]string{}
	for _, s := range m.Sections {
		for _, seat := range s.Seats {
			out[seat.ID] = seat.Status
		}
	}
	return out
}

// notFree is the seats of a seat map that are not free.
func notFree(st map[string]string) map[string]string {
	out := map[string]string{}
	for id, s := range st {
		if s != "free" {
			out[id] = s
		}
	}
	return out
}

func (h *harness) requireNoSeatDrift(event int64) origin.Invariant {
	h.t.Helper()
	inv := h.invariant(event)
	require.Zero(h.t, inv.Drift, "%+v", inv)
	require.NotNil(h.t, inv.SeatDrift, "%+v", inv)
	require.Zero(h.t, *inv.SeatDrift, "%+v", inv)
	for _, s := range inv.Sections {
		require.Zero(h.t, s.Seats, "section %s: %+v", s.Section, inv)
	}
	return inv
}

func freshViews(c *origin.Config) { c.SeatMapMaxAge = time.Nanosecond }

func TestCreateSeatedEvent(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createSeated(seating(2, 5), nil)
	assert.Equal(t, int64(20), ev.Capacity, "capacity is the number of seats")
	assert.Equal(t, int64(20), ev.Sellable, "no overflow reserve")
	assert.Zero(t, ev.OverflowReserve)
	assert.Equal(t, int64(80000), ev.Price, "the lowest section price")
	assert.Len(t, h.seatStatuses(ev.ID), 20)

	for name, fields := range map[string]map[string]any{
		"capacity is not the seats":     {"capacity": 21},
		"overflow reserve":              {"overflow_pct": 2},
		"row without seats":             {"seating": map[string]any{"sections": []any{map[string]any{"id": "A", "price": 1, "rows": []any{map[string]any{"id": "1", "seats": 0}}}}}},
		"unknown field in the seat map": {"seating": map[string]any{"sections": []any{}, "stands": 1}},
		"no sections":                   {"seating": map[string]any{"sections": []any{}}},
		"section without a price":       {"seating": map[string]any{"sections": []any{map[string]any{"id": "A", "rows": []any{map[string]any{"id": "1", "seats": 2}}}}}},
		"rows and a capacity of 0":      {"seating": map[string]any{"sections": []any{map[string]any{"id": "A", "price": 1, "capacity": 0, "rows": []any{map[string]any{"id": "1", "seats": 2}}}}}},
		"unknown field in a section":    {"seating": map[string]any{"sections": []any{map[string]any{"id": "A", "price": 1, "aisle": 1, "rows": []any{map[string]any{"id": "1", "seats": 2}}}}}},
		"section named as a seat": {"seating": map[string]any{"sections": []any{
			map[string]any{"id": "A", "price": 1, "rows": []any{map[string]any{"id": "1", "seats": 2}}},
			map[string]any{"id": "A-1-2", "price": 1, "capacity": 5}}}},
	} {
		body := map[string]any{"name": "Final", "currency": "inr", "seating": seating(1, 1)}
		for k, v := range fields {
			body[k] = v
		}
		res := h.do(http.MethodPost, "/v1/events", body, admin())
		assert.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
	}

	// Names inside the map match exactly, as everywhere in a body, and an
	// error names the field by its whole path.
	for raw, message := range map[string]string{
		`{"id":"A","Price":1,"rows":[{"id":"1","seats":5}]}`:           `unknown field \"seating.sections[0].Price\": names are case-sensitive (\"seating.sections[0].price\")`,
		`{"ID":"A","price":1,"rows":[{"id":"1","seats":5}]}`:           `unknown field \"seating.sections[0].ID\"`,
		`{"id":"A","price":1,"rows":[{"id":"1","Seats":5}]}`:           `unknown field \"seating.sections[0].rows[0].Seats\": names are case-sensitive (\"seating.sections[0].rows[0].seats\")`,
		`{"id":"A","price":1,"rows":[{"id":"1","seats":5,"extra":1}]}`: `unknown field \"seating.sections[0].rows[0].extra\"`,
		`{"id":"A","price":1,"rows":[{"id":"1","seats":"5"}]}`:         `\"seating.sections[0].rows[0].seats\" must be a whole number`,
	} {
		body := `{"name":"Final","currency":"inr","seating":{"sections":[` + raw + `]}}`
		res := h.do(http.MethodPost, "/v1/events", body, admin())
		assert.Equal(t, http.StatusBadRequest, res.status, "%s: %s", raw, res.body)
		assert.Contains(t, string(res.body), message, raw)
	}

	ga := h.createEvent(nil)
	res := h.do(http.MethodGet, fmt.Sprintf("/v1/events/%d/seats", ga.ID), nil, nil)
	assert.Equal(t, http.StatusNotFound, res.status, "a general-admission event has no seat map")
}

func TestSeatHoldIsAllOrNothing(t *testing.T) {
	h := newHarness(t, harnessOptions{config: freshViews})
	ev := h.createSeated(seating(2, 5), nil)

	res := h.holdBody(ev.ID, "ann", map[string]any{"seat_ids": []string{"A-1-2", "A-1-1"}}, "k1")
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	var ann seatedHold
	res.json(t, &ann)
	assert.Equal(t, []string{"A-1-1", "A-1-2"}, ann.Seats)
	assert.Equal(t, int64(2), ann.Quantity)
	assert.Equal(t, int64(240000), ann.Amount, "the section's price per seat")

	again := h.holdBody(ev.ID, "ann", map[string]any{"seat_ids": []string{"A-1-1", "A-1-2"}}, "k1")
	assert.Equal(t, http.StatusCreated, again.status)
	assert.Equal(t, res.body, again.body, "a retry is answered byte for byte")
	other := h.holdBody(ev.ID, "ann", map[string]any{"seat_ids": []string{"B-1-1"}}, "k2")
	assert.Equal(t, http.StatusOK, other.status, "one live hold per user: %s", other.body)

	res = h.holdBody(ev.ID, "bob", map[string]any{"seat_ids": []string{"A-1-3", "A-1-2", "A-1-1"}}, "k1")
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	var conflict struct {
		Error string   `json:"error"`
		Seats []string `json:"seats"`
	}
	res.json(t, &conflict)
	assert.Equal(t, "seats_unavailable", conflict.Error)
	assert.Equal(t, []string{"A-1-1", "A-1-2"}, conflict.Seats, "exactly the seats taken")

	res = h.holdBody(ev.ID, "cat", map[string]any{"seat_ids": []string{"A-1-3"}}, "k1")
	require.Equal(t, http.StatusCreated, res.status, "bob took nothing: %s", res.body)
	assert.Equal(t, map[string]string{"A-1-1": "held", "A-1-2": "held", "A-1-3": "held"}, notFree(h.seatStatuses(ev.ID)))

	for name, tc := range map[string]struct {
		body   any
		status int
	}{
		"unknown seat":        {map[string]any{"seat_ids": []string{"A-9-1"}}, http.StatusBadRequest},
		"seat named twice":    {map[string]any{"seat_ids": []string{"A-2-1", "A-2-1"}}, http.StatusBadRequest},
		"no seats":            {map[string]any{"seat_ids": []string{}}, http.StatusBadRequest},
		"two asks":            {map[string]any{"seat_ids": []string{"A-2-1"}, "quantity": 1}, http.StatusBadRequest},
		"over the limit":      {map[string]any{"seat_ids": []string{"B-2-1", "B-2-2", "B-2-3", "B-2-4", "B-2-5"}}, http.StatusUnprocessableEntity},
		"unknown section":     {map[string]any{"best_available": map[string]any{"section": "Z", "quantity": 2}}, http.StatusBadRequest},
		"best over the limit": {map[string]any{"best_available": map[string]any{"section": "A", "quantity": 5}}, http.StatusUnprocessableEntity},

		// The seats are checked before their count (docs/api.md §7, §15).
		"five unknown seats":        {map[string]any{"seat_ids": []string{"A-9-1", "A-9-2", "A-9-3", "A-9-4", "A-9-5"}}, http.StatusBadRequest},
		"one seat named five times": {map[string]any{"seat_ids": []string{"A-2-1", "A-2-1", "A-2-1", "A-2-1", "A-2-1"}}, http.StatusBadRequest},
		"four good, one not on map": {map[string]any{"seat_ids": []string{"B-2-1", "B-2-2", "B-2-3", "B-2-4", "Z-1-1"}}, http.StatusBadRequest},
	} {
		res := h.holdBody(ev.ID, "dan", tc.body, "k-"+name)
		assert.Equal(t, tc.status, res.status, "%s: %s", name, res.body)
		want := map[int]string{http.StatusBadRequest: "invalid_request", http.StatusUnprocessableEntity: "exceeds_per_user_limit"}[tc.status]
		assert.Equal(t, want, res.errorCode(t), name)
	}
	h.requireNoSeatDrift(ev.ID)
	h.requireInvariant(ev.ID, 3)
}

func TestSeatsOfLapsedHoldsAndTheReaper(t *testing.T) {
	h := newHarness(t, harnessOptions{config: freshViews})
	ev := h.createSeated(seating(1, 4), nil)
	seats := map[string]any{"seat_ids": []string{"A-1-1", "A-1-2"}}
	require.Equal(t, http.StatusCreated, h.holdBody(ev.ID, "ann", seats, "k").status)
	require.Equal(t, http.StatusCreated, h.holdBody(ev.ID, "cat", map[string]any{"seat_ids": []string{"B-1-1"}}, "k").status)

	// Past the expiry and before any reaper: the seats are free everywhere
	// (lazy expiry), in Redis and in the ledger's conditional claim.
	h.clock.Advance(601 * time.Second)
	assert.Empty(t, notFree(h.seatStatuses(ev.ID)))
	res := h.holdBody(ev.ID, "bob", map[string]any{"seat_ids": []string{"A-1-2", "A-1-3"}}, "k")
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)

	reaped, err := h.srv.ReapOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, reaped, "ann's and cat's holds")
	assert.Equal(t, map[string]string{"A-1-2": "held", "A-1-3": "held"}, notFree(h.seatStatuses(ev.ID)),
		"the reaper leaves alone a seat another hold took since")
	var free int
	require.NoError(t, h.ledger.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM event_seats WHERE event_id = $1 AND status = 'free'`, ev.ID).Scan(&free))
	assert.Equal(t, 6, free, "the reaped holds' seats are free in the ledger")
	h.requireNoSeatDrift(ev.ID)
	h.requireInvariant(ev.ID, 2)
}

func TestSeatsAfterFlushAll(t *testing.T) {
	redisServer := testenv.StartRedis(t)
	h := newHarness(t, harnessOptions{redisURL: redisServer.URL(), config: freshViews})
	ev := h.createSeated(seating(2, 5), nil)
	for i, seats := range [][]string{{"A-1-1", "A-1-2"}, {"A-2-5"}, {"B-1-1", "B-1-2", "B-1-3"}} {
		res := h.holdBody(ev.ID, fmt.Sprintf("u%d", i), map[string]any{"seat_ids": seats}, "k")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	}
	before := notFree(h.seatStatuses(ev.ID))
	require.Len(t, before, 6)

	require.NoError(t, h.rdb.FlushAll(context.Background()).Err())
	h.admit(ev.ID, 1_000_000)
	res := h.do(http.MethodPost, fmt.Sprintf("/v1/admin/events/%d/rebuild", ev.ID), nil, admin())
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	assert.Equal(t, before, notFree(h.seatStatuses(ev.ID)), "every seat's holder is back")

	res = h.holdBody(ev.ID, "new", map[string]any{"seat_ids": []string{"A-2-5", "A-2-4"}}, "k")
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	assert.Contains(t, string(res.body), `"seats":["A-2-5"]`)
	res = h.holdBody(ev.ID, "u1", map[string]any{"seat_ids": []string{"A-2-4"}}, "again")
	assert.Equal(t, http.StatusOK, res.status, "the one-hold-per-user guard survived: %s", res.body)
	h.requireNoSeatDrift(ev.ID)
	h.requireInvariant(ev.ID, 6)
}

func TestSeatDriftIsCorrected(t *testing.T) {
	h := newHarness(t, harnessOptions{config: freshViews})
	ev := h.createSeated(seating(1, 5), nil)
	require.Equal(t, http.StatusCreated, h.holdBody(ev.ID, "ann", map[string]any{"seat_ids": []string{"A-1-1", "A-1-2"}}, "k").status)

	// Redis forgets who has A-1-1 and grows a stray owner of B-1-5.
	key := fmt.Sprintf("inv:{evt:%d}:seats", ev.ID)
	require.NoError(t, h.rdb.HDel(context.Background(), key, "A-1-1").Err())
	require.NoError(t, h.rdb.HSet(context.Background(), key, "B-1-5", "nobody").Err())
	inv := h.invariant(ev.ID)
	require.NotNil(t, inv.SeatDrift)
	assert.Equal(t, int64(1), *inv.SeatDrift, "the stray owner holds nothing live; A-1-1 shows free: %+v", inv)
	assert.Contains(t, inv.Sections, origin.SectionDrift{Section: "A", Seats: 1})

	require.NoError(t, h.srv.ReconcileOnce(context.Background()))
	h.requireNoSeatDrift(ev.ID)
	res := h.holdBody(ev.ID, "bob", map[string]any{"seat_ids": []string{"A-1-1"}}, "k")
	assert.Equal(t, http.StatusConflict, res.status, "A-1-1 is ann's again: %s", res.body)
}

func TestBestAvailableStorm(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	// Section A: 3 rows of 10; 20 parties of 4 want A at once: 7 of
	// them get seats, the others are told it is sold out.
	ev := h.createSeated(seating(3, 10), nil)
	var mu sync.Mutex
	statuses := map[int]int{}
	var holds []seatedHold
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			res := retryWhileUnavailable(h, func() result {
				return h.holdBody(ev.ID, fmt.Sprintf("p%d", i), map[string]any{"best_available": map[string]any{"section": "A", "quantity": 4}}, "k")
			})
			mu.Lock()
			defer mu.Unlock()
			statuses[res.status]++
			if res.status == http.StatusCreated {
				var hj seatedHold
				res.json(t, &hj)
				holds = append(holds, hj)
			} else {
				assert.Equal(t, "sold_out", res.errorCode(t))
			}
		})
	}
	wg.Wait()
	assert.Equal(t, map[int]int{http.StatusCreated: 7, http.StatusConflict: 13}, statuses)
	res := h.holdBody(ev.ID, "late", map[string]any{"best_available": map[string]any{"section": "A", "quantity": 4}}, "k")
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	assert.Contains(t, string(res.body), "only 2 seats are left in section A", "the section's seats, not the event's")
	seen := map[string]bool{}
	together, rows := 0, 0
	for _, hj := range holds {
		require.Len(t, hj.Seats, 4)
		for _, s := range hj.Seats {
			require.False(t, seen[s], "seat %s held twice", s)
			require.True(t, strings.HasPrefix(s, "A-"), s)
			seen[s] = true
		}
		if adjacent(hj.Seats) {
			together++
		}
		if oneRow(hj.Seats) {
			rows++
		}
	}
	// Each row's middle block first; then the narrowest group in a row
	// while one has 4 free; the last party across two rows.
	assert.Equal(t, 3, together, "parties sit together while a row has room: %v", holds)
	assert.Equal(t, 6, rows, "then in one row while one has room: %v", holds)
	h.requireNoSeatDrift(ev.ID)
	h.requireInvariant(ev.ID, 28)
}

// oneRow: the seats are in one row.
func oneRow(ids []string) bool {
	return !slices.ContainsFunc(ids, func(id string) bool { return strings.Split(id, "-")[1] != strings.Split(ids[0], "-")[1] })
}

// adjacent: the seats are side by side in one row.
func adjacent(ids []string) bool {
	var row string
	var nums []int
	for _, id := range ids {
		parts := strings.Split(id, "-")
		if row != "" && parts[1] != row {
			return false
		}
		row = parts[1]
		var n int
		fmt.Sscan(parts[2], &n)
		nums = append(nums, n)
	}
	slices.Sort(nums)
	return nums[len(nums)-1]-nums[0] == len(nums)-1
}

func TestTicketsCarryTheirSeats(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createSeated(seating(1, 4), nil)
	res := h.holdBody(ev.ID, "ann", map[string]any{"seat_ids": []string{"B-1-4", "A-1-2"}}, "k")
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	var hj seatedHold
	res.json(t, &hj)
	b := h.mustBook(ev.ID, "ann", hj.HoldID, "pm_card_visa")
	assert.Equal(t, int64(200000), b.Amount)
	res = h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, h.auth("ann", ev.ID))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, h.fp.WaitIdle(ctx))
	res = h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusOK, res.status)
	var got struct {
		Status  string `json:"status"`
		Tickets []struct {
			Seat any `json:"seat"`
		} `json:"tickets"`
	}
	res.json(t, &got)
	require.Equal(t, "confirmed", got.Status, "%s", res.body)
	var seats []any
	for _, tk := range got.Tickets {
		seats = append(seats, tk.Seat)
	}
	assert.ElementsMatch(t, []any{"A-1-2", "B-1-4"}, seats)
	assert.Equal(t, map[string]string{"A-1-2": "sold", "B-1-4": "sold"}, notFree(h.seatStatuses(ev.ID)))
	h.requireNoSeatDrift(ev.ID)
	inv := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(2), inv.Tickets)
}

func TestSeatMapGzipOnlyWhenAccepted(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createSeated(seating(2, 5), nil)
	want := h.do(http.MethodGet, fmt.Sprintf("/v1/events/%d/seats", ev.ID), nil, nil).body
	// Not the harness's client, whose schema check reads no gzip.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	for accept, gz := range map[string]bool{
		"gzip":                   true,
		"br, gzip;q=0.5":         true,
		"*":                      true,
		"gzip;q=0":               false,
		"gzip; q=0.0, br":        false,
		"*, gzip;q=0":            false,
		"identity":               false,
		"br;q=1, identity;q=0.5": false,
	} {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1/events/%d/seats", h.url, ev.ID), nil)
		require.NoError(t, err)
		req.Header.Set("Accept-Encoding", accept)
		resp, err := client.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, accept)
		assert.Equal(t, "Accept-Encoding", resp.Header.Get("Vary"), accept)
		if !gz {
			assert.Empty(t, resp.Header.Get("Content-Encoding"), accept)
			assert.Equal(t, string(want), string(body), accept)
			continue
		}
		assert.Equal(t, "gzip", resp.Header.Get("Content-Encoding"), accept)
		zr, err := gzip.NewReader(bytes.NewReader(body))
		require.NoError(t, err, accept)
		plain, err := io.ReadAll(zr)
		require.NoError(t, err, accept)
		assert.Equal(t, string(want), string(plain), accept)
	}
}
