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
func seatedEvent(t *testing.T, sections, perSection int) *seats.Event {
	t.Helper()
	var m seatmap.Map
	for i := range sections {
		s := seatmap.Section{ID: fmt.Sprintf("S%d", i), Price: 100}
		for left := perSection; left > 0; left -= 1000 {
			s.Rows = append(s.Rows, seatmap.Row{ID: fmt.Sprint(len(s.Rows) + 1), Seats: min(left, 1000)})
		}
		m.Sections = append(m.Sections, s)
	}
	require.NoError(t, m.Validate())
	return &seats.Event{Event: ledger.Event{ID: 1, Seating: &m}}
}

// fastestRender is the least time of a few renderings of a new view of ev.
func fastestRender(t *testing.T, ev *seats.Event) time.Duration {
	t.Helper()
	best := time.Duration(1 << 62)
	for range 3 {
		var maps seatMaps
		start := time.Now()
		_, err := maps.rendered(ev, &seats.SeatView{At: time.Now()})
		require.NoError(t, err)
		best = min(best, time.Since(start))
	}
	return best
}

func TestSeatMapRenderGrowsWithSeatsNotSections(t *testing.T) {
	if testing.Short() {
		t.Skip("renders maps of 100,000 seats")
	}
	// 1,000 sections fit in a request body of the event's creation.
	one, many := fastestRender(t, seatedEvent(t, 1, 100_000)), fastestRender(t, seatedEvent(t, 1_000, 100))
	assert.Less(t, many, 2*one, "the same 100,000 seats in 1,000 sections took %v, in one %v", many, one)
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
