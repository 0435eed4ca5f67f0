package sale

import (
	"container/heap"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The schedule gives out arrivals and wake-ups in time order, merged, and
// only once they are due.
func TestScheduleDue(t *testing.T) {
	users := make([]user, 3)
	for i, at := range []time.Duration{10, 20, 40} {
		users[i].arrival = at * time.Millisecond
	}
	s := newSchedule(time.Now(), users)
	// Wake-ups set relative to now: push them at fixed times instead.
	s.wakeups = wakeups{{at: 30 * time.Millisecond, u: 0}, {at: 15 * time.Millisecond, u: 1}}
	heap.Init(&s.wakeups)

	tests := []struct {
		now    time.Duration
		u      int
		at     time.Duration
		ok     bool
		more   bool
		reason string
	}{
		{5 * time.Millisecond, 0, 10 * time.Millisecond, false, true, "nothing due yet: the first arrival is next"},
		{50 * time.Millisecond, 0, 10 * time.Millisecond, true, true, "the first arrival"},
		{50 * time.Millisecond, 1, 15 * time.Millisecond, true, true, "a wake-up before the next arrival"},
		{50 * time.Millisecond, 1, 20 * time.Millisecond, true, true, "the second arrival"},
		{50 * time.Millisecond, 0, 30 * time.Millisecond, true, true, "the other wake-up"},
		{35 * time.Millisecond, 0, 40 * time.Millisecond, false, true, "the last arrival is not due"},
		{50 * time.Millisecond, 2, 40 * time.Millisecond, true, true, "the last arrival"},
		{50 * time.Millisecond, 0, 0, false, false, "nobody left"},
	}
	for _, tc := range tests {
		u, at, ok, more := s.due(tc.now)
		assert.Equal(t, tc.ok, ok, tc.reason)
		assert.Equal(t, tc.more, more, tc.reason)
		assert.Equal(t, tc.at, at, tc.reason)
		if ok {
			assert.Equal(t, tc.u, u, tc.reason)
		}
	}
}

func TestPositionSet(t *testing.T) {
	var p positionSet
	for _, pos := range []int64{1, 2, 64, 65, 10_000, 2, 0, 10_000, -3} {
		p.seen(pos)
	}
	count, dups := p.read()
	assert.Equal(t, int64(5), count, "positions 1, 2, 64, 65 and 10,000")
	assert.Equal(t, int64(2), dups, "2 and 10,000 handed out twice")
}
