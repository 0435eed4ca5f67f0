package seatmap_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

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

func BenchmarkBest(b *testing.B) {
	m := bowl()
	for _, sold := range []int{0, 100, 399} {
		taken := soldRows(sold)
		b.Run(fmt.Sprintf("sold_rows=%d", sold), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ids, _ := m.Best("S", 4, taken); len(ids) != 4 {
					b.Fatal(ids)
				}
			}
		})
	}
}
