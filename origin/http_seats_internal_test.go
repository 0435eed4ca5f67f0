package origin

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seatmap"
	"github.com/waitroom/waitroom/origin/seats"
)

// seatedEvent is an event of sections sections of perSection seats each,
// in rows of at most 1,000.
func seatedEvent(tb testing.TB, sections, perSection int) *seats.Event {
	tb.Helper()
	var m seatmap.Map
	for i := range sections {
		s := seatmap.Section{ID: fmt.Sprintf("S%d", i), Price: 100}
		for left := perSection; left > 0; left -= 1000 {
			s.Rows = append(s.Rows, seatmap.Row{ID: fmt.Sprint(len(s.Rows) + 1), Seats: min(left, 1000)})
		}
		m.Sections = append(m.Sections, s)
	}
	require.NoError(tb, m.Validate())
	return &seats.Event{Event: ledger.Event{ID: 1, Seating: &m}}
}

// BenchmarkSeatMapRender renders a new view of the same 100,000 seats in
// one section and in 1,000 (which fit in a request body of the event's
// creation): the time grows with the seats, not the sections.
//
//	go test -run '^$' -bench BenchmarkSeatMapRender -count 6 ./origin
func BenchmarkSeatMapRender(b *testing.B) {
	for _, c := range []struct{ sections, perSection int }{{1, 100_000}, {1_000, 100}} {
		b.Run(fmt.Sprintf("sections=%d", c.sections), func(b *testing.B) {
			ev := seatedEvent(b, c.sections, c.perSection)
			for b.Loop() {
				var maps seatMaps
				if _, err := maps.rendered(ev, &seats.SeatView{At: time.Now()}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestSeatMapViewRenderedOnce(t *testing.T) {
	ev := seatedEvent(t, 2, 50_000)
	var maps seatMaps
	v := &seats.SeatView{At: time.Now()}
	const readers = 8
	got := make([]*renderedSeatMap, readers)
	var start, wg sync.WaitGroup
	start.Add(1)
	for i := range readers {
		wg.Go(func() {
			start.Wait()
			r, err := maps.rendered(ev, v)
			assert.NoError(t, err)
			got[i] = r
		})
	}
	start.Done()
	wg.Wait()
	for i := range got {
		assert.Same(t, got[0], got[i], "reader %d rendered the view again", i)
	}
	older := &seats.SeatView{At: v.At.Add(-time.Second)}
	r, err := maps.rendered(ev, older)
	require.NoError(t, err)
	assert.Same(t, got[0], r, "a read of an older view is answered with the newer one rendered")
}
