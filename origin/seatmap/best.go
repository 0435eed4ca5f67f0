package seatmap

import (
	"slices"
	"sort"
	"strings"
)

// Occupancy says which seats of one section are not free, by row (its
// index in the section's Rows) and seat number.
type Occupancy interface {
	// Full reports that no seat of row is free; false when one may be.
	Full(row int) bool
	// Taken reports whether seat k of row is not free.
	Taken(row, k int) bool
}

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
	s, _ := m.Section(section)
	return m.BestOf(section, n, byID{s, taken})
}

// byID is the Occupancy of a seat's id: it knows no row to be full, so
// each seat of a row read is asked of taken.
type byID struct {
	s     Section
	taken func(id string) bool
}

func (b byID) Full(int) bool { return false }

func (b byID) Taken(row, k int) bool { return b.taken(SeatID(b.s.ID, b.s.Rows[row].ID, k)) }

// BestOf is Best on an Occupancy of the section: a row it says is full
// costs nothing to pass, so that a nearly sold section does not cost its
// sold seats at each request.
func (m Map) BestOf(section string, n int, occ Occupancy) (ids []string, free int) {
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
	// only when no row has them. The rows share one buffer, each capped at
	// its end: a row's slice of it is not overwritten as the buffer grows.
	rows := make([][]int, len(s.Rows))
	var buf []int
	for i, r := range s.Rows {
		if occ.Full(i) {
			continue
		}
		start := len(buf)
		for k := 1; k <= r.Seats; k++ {
			if !occ.Taken(i, k) {
				buf = append(buf, k)
			}
		}
		rows[i] = buf[start:len(buf):len(buf)]
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

// Taken is the taken seats of one section, a bitmap and a count a row: an
// Occupancy that knows a full row without reading its seats.
type Taken struct {
	rows []takenRow
}

type takenRow struct {
	seats, n int
	bits     []uint64
}

// NewTaken is s with no seat taken.
func NewTaken(s Section) *Taken {
	t := &Taken{rows: make([]takenRow, len(s.Rows))}
	for i, r := range s.Rows {
		t.rows[i].seats = r.Seats
	}
	return t
}

// Take marks seat k of row taken; a seat outside the row is ignored.
func (t *Taken) Take(row, k int) {
	if row < 0 || row >= len(t.rows) {
		return
	}
	r := &t.rows[row]
	if k < 1 || k > r.seats {
		return
	}
	if r.bits == nil {
		r.bits = make([]uint64, (r.seats+63)/64)
	}
	w, b := (k-1)/64, uint64(1)<<((k-1)%64)
	if r.bits[w]&b == 0 {
		r.bits[w] |= b
		r.n++
	}
}

// Full reports that every seat of row is taken.
func (t *Taken) Full(row int) bool { return t.rows[row].n == t.rows[row].seats }

// Taken reports whether seat k of row is taken.
func (t *Taken) Taken(row, k int) bool {
	r := t.rows[row]
	return r.bits != nil && r.bits[(k-1)/64]&(uint64(1)<<((k-1)%64)) != 0
}

// Index finds the reserved seats of a map by id without searching its
// sections and rows, for a map whose seats are looked up by the thousand.
type Index struct {
	rows map[string]seatRow
}

type seatRow struct {
	section string
	row     int
	seats   int
}

// Index indexes m's rows.
func (m Map) Index() *Index {
	x := &Index{rows: map[string]seatRow{}}
	for _, s := range m.Sections {
		for i, r := range s.Rows {
			x.rows[s.ID+"-"+r.ID] = seatRow{section: s.ID, row: i, seats: r.Seats}
		}
	}
	return x
}

// Locate finds a seat by id as Map.Locate does: its section's id, its row
// (index in the section's Rows) and number.
func (x *Index) Locate(id string) (section string, row, n int, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return "", 0, 0, false
	}
	r, ok := x.rows[id[:i]]
	if !ok {
		return "", 0, 0, false
	}
	// The number in decimal, as SeatID writes it (no sign, no leading 0),
	// read without the allocation of checking it by writing it back.
	v := 0
	for j, c := range []byte(id[i+1:]) {
		if c < '0' || c > '9' || (j == 0 && c == '0') || v > r.seats {
			return "", 0, 0, false
		}
		v = v*10 + int(c-'0')
	}
	if v < 1 || v > r.seats {
		return "", 0, 0, false
	}
	return r.section, r.row, v, true
}
