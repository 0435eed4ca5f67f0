package origin_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConcurrentBuyersNeverOversell(t *testing.T) {
	tests := []struct {
		name     string
		capacity int64
		qty      func(i int) int
	}{
		{"500 buyers, 100 seats, one each", 100, func(int) int { return 1 }},
		{"500 buyers, 101 seats, one to four each", 101, func(i int) int { return i%4 + 1 }},
	}
	hp := newHarness(t, harnessOptions{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hp.with(t)
			ev := h.createEvent(map[string]any{"capacity": tt.capacity})
			require.Equal(t, tt.capacity, ev.Sellable, "overflow_pct 0 keeps no reserve")

			var mu sync.Mutex
			statuses := map[int]int{}
			var sold int64
			var wg sync.WaitGroup
			for i := range 500 {
				wg.Go(func() {
					res := h.hold(ev.ID, fmt.Sprintf("buyer-%d", i), tt.qty(i), fmt.Sprintf("key-%d", i))
					mu.Lock()
					defer mu.Unlock()
					statuses[res.status]++
					if res.status == http.StatusCreated {
						var hj holdJSON
						res.json(t, &hj)
						sold += hj.Quantity
					}
				})
			}
			wg.Wait()

			assert.Equal(t, []int{http.StatusCreated, http.StatusConflict}, keys(statuses), "only holds and sold_out: %v", statuses)
			inv := h.requireInvariant(ev.ID, sold)
			assert.Equal(t, tt.capacity, sold+inv.Remaining, "every seat sold or remaining, none twice")
			assert.Less(t, inv.Remaining, int64(tt.qty(0)+3), "sold down to less than the largest request")
			if tt.name[len(tt.name)-8:] == "one each" {
				assert.Equal(t, 100, statuses[http.StatusCreated])
				assert.Equal(t, int64(0), inv.Remaining)
				assert.True(t, h.state(ev.ID).SoldOut, "the gateways are told the event is sold out")
			}
			assert.Equal(t, 1, h.liveHoldsPerUser(ev.ID))
		})
	}
}

func keys(m map[int]int) []int {
	var out []int
	for _, k := range []int{200, 201, 400, 401, 403, 404, 409, 413, 422, 500, 503} {
		if m[k] > 0 {
			out = append(out, k)
		}
	}
	return out
}

func TestOneUserManyRequestsGetsOneHold(t *testing.T) {
	hp := newHarness(t, harnessOptions{})
	tests := []struct {
		name    string
		sameKey bool
	}{
		{"a new key per request", false},
		{"the same key every time", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hp.with(t)
			ev := h.createEvent(map[string]any{"capacity": 10})
			var mu sync.Mutex
			ids := map[string]int{}
			statuses := map[int]int{}
			var wg sync.WaitGroup
			for i := range 200 {
				wg.Go(func() {
					key := fmt.Sprintf("click-%d", i)
					if tt.sameKey {
						key = "click"
					}
					res := h.hold(ev.ID, "eager", 2, key)
					mu.Lock()
					defer mu.Unlock()
					statuses[res.status]++
					if res.status == http.StatusOK || res.status == http.StatusCreated {
						var hj holdJSON
						res.json(t, &hj)
						ids[hj.HoldID]++
					} else {
						assert.Equal(t, http.StatusConflict, res.status)
						assert.Equal(t, "request_in_progress", res.errorCode(t))
					}
				})
			}
			wg.Wait()
			assert.Len(t, ids, 1, "every answer names the same hold: %v", ids)
			if !tt.sameKey {
				assert.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusOK: 199}, statuses)
			}
			assert.GreaterOrEqual(t, statuses[http.StatusCreated], 1)
			h.requireInvariant(ev.ID, 2)
			assert.Equal(t, 1, h.liveHoldsPerUser(ev.ID))
		})
	}
}
