package seatmap_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/seatmap"
)

// bowl is a section of the largest size a map takes: 400 rows of 500.
func bowl() seatmap.Map {
	rows := make([]seatmap.Row, 400)
	for i := range rows {
		rows[i] = seatmap.Row{ID: fmt.Sprint(i + 1), Seats: 500}
	}
	return seatmap.Map{Sections: []seatmap.Section{{ID: "S", Price: 5000, Rows: rows}}}
}

// soldRows is the set of the seats of the first rows of bowl, as a sale
// that fills the best rows first leaves them.
func soldRows(rows int) func(string) bool {
	set := map[string]bool{}
	for r := 1; r <= rows; r++ {
		for k := 1; k <= 500; k++ {
			set[seatmap.SeatID("S", fmt.Sprint(r), k)] = true
		}
	}
	return func(id string) bool { return set[id] }
}

// TestBestReadsWhatItNeeds: a party seated together in the first row that
// has them needs no look at the rest of a 200,000-seat section; each best
// available hold read every seat of it (20-50 ms).
func TestBestReadsWhatItNeeds(t *testing.T) {
	m := bowl()
	for _, sold := range []int{0, 10} {
		asked := 0
		taken := soldRows(sold)
		ids, _ := m.Best("S", 4, func(id string) bool { asked++; return taken(id) })
		assert.Equal(t, []string{
			seatmap.SeatID("S", fmt.Sprint(sold+1), 249), seatmap.SeatID("S", fmt.Sprint(sold+1), 250),
			seatmap.SeatID("S", fmt.Sprint(sold+1), 251), seatmap.SeatID("S", fmt.Sprint(sold+1), 252),
		}, ids)
		assert.Equal(t, (sold+1)*500, asked, "seats looked at with %d rows sold", sold)
	}
	// Not there: the whole section is read for the count of what is free.
	ids, free := m.Best("S", 4, soldRows(400))
	assert.Nil(t, ids)
	assert.Zero(t, free)
}

// BenchmarkBest is the choice as the origin makes it, on the view's
// bitmap of the taken seats.
func BenchmarkBest(b *testing.B) {
	m := bowl()
	for _, sold := range []int{0, 100, 399} {
		taken := soldTaken(m, sold)
		b.Run(fmt.Sprintf("sold_rows=%d", sold), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ids, _ := m.BestOf("S", 4, taken); len(ids) != 4 {
					b.Fatal(ids)
				}
			}
		})
	}
}

// BenchmarkTakenOfView is what a seat map view read costs before its first
// choice: the bitmap of its taken seats, from their ids.
func BenchmarkTakenOfView(b *testing.B) {
	m := bowl()
	s, _ := m.Section("S")
	var ids []string
	for r := 1; r <= 399; r++ {
		for k := 1; k <= 500; k++ {
			ids = append(ids, seatmap.SeatID("S", fmt.Sprint(r), k))
		}
	}
	x := m.Index()
	b.ReportAllocs()
	for b.Loop() {
		t := seatmap.NewTaken(s)
		for _, id := range ids {
			if _, row, k, ok := x.Locate(id); ok {
				t.Take(row, k)
			}
		}
	}
}

// soldTaken is bowl with its first rows sold.
func soldTaken(m seatmap.Map, rows int) *seatmap.Taken {
	s, _ := m.Section("S")
	t := seatmap.NewTaken(s)
	for r := range rows {
		for k := 1; k <= 500; k++ {
			t.Take(r, k)
		}
	}
	return t
}

// countingTaken is a section's taken seats that counts the seats asked of
// it.
type countingTaken struct {
	t     *seatmap.Taken
	asked int
}

func (c *countingTaken) Full(row int) bool { return c.t.Full(row) }

func (c *countingTaken) Taken(row, k int) bool { c.asked++; return c.t.Taken(row, k) }

// TestBestOfPassesSoldRows: with 399 of 400 rows sold, only the free row's
// seats are read; each request read the 199,500 sold ones too (95-163 ms of
// CPU).
func TestBestOfPassesSoldRows(t *testing.T) {
	m := bowl()
	for _, sold := range []int{0, 10, 399} {
		occ := &countingTaken{t: soldTaken(m, sold)}
		ids, free := m.BestOf("S", 4, occ)
		row := fmt.Sprint(sold + 1)
		assert.Equal(t, []string{seatmap.SeatID("S", row, 249), seatmap.SeatID("S", row, 250), seatmap.SeatID("S", row, 251), seatmap.SeatID("S", row, 252)}, ids)
		assert.Equal(t, 500, free)
		assert.Equal(t, 500, occ.asked, "seats read with %d rows sold", sold)
	}
}

// TestBestOfAsBefore: on random sections, random parties and random sales
// (whole rows sold among them), BestOf on a bitmap and Best on ids choose
// the seats, in the order, and count the free seats the reading of every
// seat by id did.
func TestBestOfAsBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 3000 {
		rows := make([]seatmap.Row, 1+rng.IntN(12))
		for i := range rows {
			rows[i] = seatmap.Row{ID: fmt.Sprint("r", i), Seats: 1 + rng.IntN(30)}
		}
		m := seatmap.Map{Sections: []seatmap.Section{{ID: "A", Price: 1, Rows: rows}}}
		s := m.Sections[0]
		set := map[string]bool{}
		occ := seatmap.NewTaken(s)
		density := rng.Float64()
		for i, r := range rows {
			full := rng.IntN(3) == 0
			for k := 1; k <= r.Seats; k++ {
				if full || rng.Float64() < density {
					set[seatmap.SeatID("A", r.ID, k)] = true
					occ.Take(i, k)
				}
			}
		}
		taken := func(id string) bool { return set[id] }
		for n := 1; n <= 8; n++ {
			wantIDs, wantFree := bestBefore(m, "A", n, taken)
			ids, free := m.BestOf("A", n, occ)
			require.Equal(t, wantIDs, ids, "trial %d, party of %d: bitmap", trial, n)
			require.Equal(t, wantFree, free, "trial %d, party of %d: bitmap's free", trial, n)
			ids, free = m.Best("A", n, taken)
			require.Equal(t, wantIDs, ids, "trial %d, party of %d: ids", trial, n)
			require.Equal(t, wantFree, free, "trial %d, party of %d: ids' free", trial, n)
		}
	}
}

// TestIndexLocatesAsMap: Index.Locate finds what Map.Locate does, and
// refuses what it refuses.
func TestIndexLocatesAsMap(t *testing.T) {
	m := seatmap.Map{Sections: []seatmap.Section{
		{ID: "A", Price: 1, Rows: []seatmap.Row{{ID: "1", Seats: 3}, {ID: "B", Seats: 70}}},
		{ID: "GA-East", Capacity: 10},
		{ID: "C", Price: 1, Rows: []seatmap.Row{{ID: "1", Seats: 1}}},
	}}
	x := m.Index()
	for _, id := range []string{"A-1-1", "A-1-3", "A-B-70", "C-1-1", "A-1-0", "A-1-4", "A-1-01", "A-1-+1", "A-1-", "A-1", "A", "", "-1-1",
		"GA-East-1", "GA-East", "A-1-1-1", "C-B-1", "Z-1-1", "A-B-65"} {
		sec, row, n, ok := m.Locate(id)
		gotSec, gotRow, gotN, gotOK := x.Locate(id)
		assert.Equal(t, ok, gotOK, id)
		if ok {
			assert.Equal(t, []any{sec.ID, row, n}, []any{gotSec, gotRow, gotN}, id)
		}
	}
}

// bestBefore is Best as it was, every seat read by id: the reference the
// choices must stay the same as.
func bestBefore(m seatmap.Map, section string, n int, taken func(id string) bool) (ids []string, free int) {
	s, ok := m.Section(section)
	if !ok || n < 1 {
		return nil, 0
	}
	pick := func(row int, nums []int) []string {
		out := make([]string, len(nums))
		for i, k := range nums {
			out[i] = seatmap.SeatID(s.ID, s.Rows[row].ID, k)
		}
		return out
	}
	rows := make([][]int, len(s.Rows))
	for i, r := range s.Rows {
		for k := 1; k <= r.Seats; k++ {
			if !taken(seatmap.SeatID(s.ID, r.ID, k)) {
				rows[i] = append(rows[i], k)
			}
		}
		free += len(rows[i])
		if w, span := narrowestBefore(rows[i], n, r.Seats); w >= 0 && span == n {
			return pick(i, rows[i][w:w+n]), free
		}
	}
	if free < n {
		return nil, free
	}
	bestRow, bestW, bestSpan := -1, 0, 0
	for i, nums := range rows {
		if w, span := narrowestBefore(nums, n, s.Rows[i].Seats); w >= 0 && (bestRow < 0 || span < bestSpan) {
			bestRow, bestW, bestSpan = i, w, span
		}
	}
	if bestRow >= 0 {
		return pick(bestRow, rows[bestRow][bestW:bestW+n]), free
	}
	first, count := 0, len(rows)+1
	for i := range rows {
		got := 0
		for j := i; j < len(rows); j++ {
			got += len(rows[j])
			if got >= n {
				if j-i+1 < count {
					first, count = i, j-i+1
				}
				break
			}
		}
	}
	for j := first; j < first+count && len(ids) < n; j++ {
		mid := float64(s.Rows[j].Seats+1) / 2
		nums := slices.Clone(rows[j])
		sort.SliceStable(nums, func(a, b int) bool { return math.Abs(float64(nums[a])-mid) < math.Abs(float64(nums[b])-mid) })
		nums = nums[:min(len(nums), n-len(ids))]
		slices.Sort(nums)
		ids = append(ids, pick(j, nums)...)
	}
	return ids, free
}

func narrowestBefore(nums []int, n, seats int) (start, span int) {
	start = -1
	mid := float64(seats+1) / 2
	var dist float64
	for w := 0; w+n <= len(nums); w++ {
		sp := nums[w+n-1] - nums[w] + 1
		d := math.Abs(float64(nums[w]+nums[w+n-1])/2 - mid)
		if start < 0 || sp < span || (sp == span && d < dist) {
			start, span, dist = w, sp, d
		}
	}
	return start, span
}
