package seats

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seatmap"
)

// TestChooseSeesChangesSinceTheView: the choice passes the rows the view has
// sold without reading them, but not a sold row in which this node saw a
// seat given back since the view was read.
func TestChooseSeesChangesSinceTheView(t *testing.T) {
	m := seatmap.Map{Sections: []seatmap.Section{{ID: "S", Price: 1, Rows: []seatmap.Row{{ID: "1", Seats: 4}, {ID: "2", Seats: 4}, {ID: "3", Seats: 4}}}}}
	ev := &Event{Event: ledger.Event{Seating: &m}}
	states := map[string]inventory.SeatState{}
	for _, r := range []string{"1", "2"} {
		for k := 1; k <= 4; k++ {
			states[seatmap.SeatID("S", r, k)] = inventory.SeatSold
		}
	}
	v := &SeatView{At: time.Now(), states: states}

	ids, _, free := ev.choose(v, "S", 4, nil)
	assert.Equal(t, []string{"S-3-1", "S-3-2", "S-3-3", "S-3-4"}, ids)
	assert.Equal(t, 4, free)
	ids, _, free = ev.choose(v, "S", 1, nil)
	assert.Nil(t, ids, "the seats just chosen are not chosen again")
	assert.Zero(t, free)

	ev.seatsTaken([]string{"S-1-2", "S-1-3"}, false)
	ids, _, free = ev.choose(v, "S", 2, nil)
	assert.Equal(t, []string{"S-1-2", "S-1-3"}, ids, "given back in a row the view has sold")
	assert.Equal(t, 2, free)

	ev.seats.mu.Lock()
	for id := range ev.seats.since {
		ev.forgetSeat(id)
	}
	ev.seats.mu.Unlock()
	assert.Equal(t, []int32{0, 0, 0}, ev.seats.changed["S"], "rows with changes once they are forgotten")
}

// TestChooseAsByID: on random views and random changes since, the choice
// on the view's bitmaps is the one asking each seat's state by id made.
func TestChooseAsByID(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for trial := range 500 {
		rows := make([]seatmap.Row, 1+rng.IntN(8))
		for i := range rows {
			rows[i] = seatmap.Row{ID: fmt.Sprint(i + 1), Seats: 1 + rng.IntN(12)}
		}
		m := seatmap.Map{Sections: []seatmap.Section{{ID: "A", Price: 1, Rows: rows}, {ID: "B", Price: 1, Rows: rows}}}
		ev := &Event{Event: ledger.Event{Seating: &m}}
		states := map[string]inventory.SeatState{}
		var all []string
		for _, s := range m.Sections {
			for _, r := range rows {
				full := rng.IntN(3) == 0
				for k := 1; k <= r.Seats; k++ {
					id := seatmap.SeatID(s.ID, r.ID, k)
					all = append(all, id)
					if full || rng.IntN(2) == 0 {
						states[id] = []inventory.SeatState{inventory.SeatHeld, inventory.SeatSold}[rng.IntN(2)]
					}
				}
			}
		}
		v := &SeatView{At: time.Now(), states: states}
		for range rng.IntN(6) {
			ev.seatsTaken([]string{all[rng.IntN(len(all))]}, rng.IntN(2) == 0)
		}
		n := 1 + rng.IntN(5)
		for _, section := range []string{"A", ""} {
			var want []string
			wantFree := 0
			for _, s := range m.Sections {
				if section != "" && s.ID != section {
					continue
				}
				got, f := m.Best(s.ID, n, func(id string) bool {
					if c, ok := ev.seats.since[id]; ok {
						return c.taken
					}
					return v.State(id) != inventory.SeatFree
				})
				wantFree += f
				if got != nil {
					want = got
					break
				}
			}
			ids, _, free := ev.choose(v, section, n, nil)
			require.Equal(t, want, ids, "trial %d, section %q, party of %d", trial, section, n)
			require.Equal(t, wantFree, free, "trial %d, section %q, party of %d", trial, section, n)
			ev.unchoose(ids)
		}
	}
}
