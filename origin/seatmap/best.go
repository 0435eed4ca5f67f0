package seatmap

import (
	"slices"
	"sort"
)

// Best chooses n free seats of section for one party: n side by side in
// one row when any row has them (the best row first, then the block nearest
// the row's middle); else the closest group: n in one row spanning the
// fewest seats, or, when no row has n free, free seats of the fewest
// consecutive rows. taken says whether a seat is not free; it is asked only
// of the rows read, which for a party seated together end at the first row
// that has them. free counts the free seats of the rows read: the whole
// section's when ids is nil, as it is when they are below n (or the
// section is unknown).
func (m Map) Best(section string, n int, taken func(id string) bool) (ids []string, free int) {
	s, ok := m.Section(section)
	if !ok || n < 1 {
		return nil, 0
	}
	pick := func(row int, nums []int) []string {
		out := make([]string, len(nums))
		for i, k := range nums {
			out[i] = SeatID(s.ID, s.Rows[row].ID, k)
		}
		return out
	}

	// The free seat numbers of each row, in order, read row by row as the
	// search for n together goes: a section of 200,000 seats is read whole
	// only when no row has them.
	rows := make([][]int, len(s.Rows))
	for i, r := range s.Rows {
		for k := 1; k <= r.Seats; k++ {
			if !taken(SeatID(s.ID, r.ID, k)) {
				rows[i] = append(rows[i], k)
			}
		}
		free += len(rows[i])
		// Together in one row: a window of n free numbers spanning n seats.
		if w, span := narrowest(rows[i], n, r.Seats); w >= 0 && span == n {
			return pick(i, rows[i][w:w+n]), free
		}
	}
	if free < n {
		return nil, free
	}
	// The closest group in one row.
	bestRow, bestW, bestSpan := -1, 0, 0
	for i, nums := range rows {
		if w, span := narrowest(nums, n, s.Rows[i].Seats); w >= 0 && (bestRow < 0 || span < bestSpan) {
			bestRow, bestW, bestSpan = i, w, span
		}
	}
	if bestRow >= 0 {
		return pick(bestRow, rows[bestRow][bestW:bestW+n]), free
	}
	// Across the fewest consecutive rows, seats nearest each row's middle.
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
		sort.SliceStable(nums, func(a, b int) bool { return abs(float64(nums[a])-mid) < abs(float64(nums[b])-mid) })
		nums = nums[:min(len(nums), n-len(ids))]
		slices.Sort(nums)
		ids = append(ids, pick(j, nums)...)
	}
	return ids, free
}

// narrowest finds the window of n consecutive entries of nums (sorted free
// seat numbers of a row of size seats) spanning the fewest seats, the one
// nearest the row's middle among those: its start, and its span; -1 when
// the row has fewer than n free.
func narrowest(nums []int, n, seats int) (start, span int) {
	start = -1
	mid := float64(seats+1) / 2
	var dist float64
	for w := 0; w+n <= len(nums); w++ {
		sp := nums[w+n-1] - nums[w] + 1
		d := abs(float64(nums[w]+nums[w+n-1])/2 - mid)
		if start < 0 || sp < span || (sp == span && d < dist) {
			start, span, dist = w, sp, d
		}
	}
	return start, span
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
