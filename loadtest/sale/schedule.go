package sale

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/waitroom/waitroom/loadtest/latency"
)

// schedule hands the queued users to the workers when their next request
// is due: at their arrival (the crowd is sorted by arrival), then at every
// wake-up a worker set (the next poll, after Retry-After). A waiting user
// is an entry in a heap, not a goroutine with a timer: two million of them
// cost a few bytes each.
type schedule struct {
	start    time.Time
	arrivals []user // sorted by arrival
	next     int    // the next user to arrive

	mu      sync.Mutex
	wakeups wakeups
	// poke wakes the dispatcher when a wake-up comes earlier than the one
	// it sleeps until.
	poke chan struct{}

	// lag is how late each request was sent against its schedule: the load
	// generator falling behind shows here, not as a slower server.
	lag latency.Recorder
}

// wakeup is a user due at a time (since the start).
type wakeup struct {
	at time.Duration
	u  int32
}

// wakeups is a min-heap of wakeup by time.
type wakeups []wakeup

func (w wakeups) Len() int           { return len(w) }
func (w wakeups) Less(i, j int) bool { return w[i].at < w[j].at }
func (w wakeups) Swap(i, j int)      { w[i], w[j] = w[j], w[i] }
func (w *wakeups) Push(x any)        { *w = append(*w, x.(wakeup)) }
func (w *wakeups) Pop() any {
	old := *w
	x := old[len(old)-1]
	*w = old[:len(old)-1]
	return x
}

func newSchedule(start time.Time, users []user) *schedule {
	return &schedule{start: start, arrivals: users, poke: make(chan struct{}, 1)}
}

// after sets user u's next request d from now.
func (s *schedule) after(u int, d time.Duration) {
	at := time.Since(s.start) + d
	s.mu.Lock()
	heap.Push(&s.wakeups, wakeup{at: at, u: int32(u)})
	first := s.wakeups[0].u == int32(u) && s.wakeups[0].at == at
	s.mu.Unlock()
	if first {
		select {
		case s.poke <- struct{}{}:
		default:
		}
	}
}

// due takes the next user whose time has come, or says when the next one
// is due (ok false; more false when nobody is left to schedule).
func (s *schedule) due(now time.Duration) (u int, at time.Duration, ok, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	arrival, haveArrival := time.Duration(0), s.next < len(s.arrivals)
	if haveArrival {
		arrival = s.arrivals[s.next].arrival
	}
	haveWakeup := len(s.wakeups) > 0
	switch {
	case haveArrival && (!haveWakeup || arrival <= s.wakeups[0].at):
		if arrival > now {
			return 0, arrival, false, true
		}
		s.next++
		return s.next - 1, arrival, true, true
	case haveWakeup:
		w := s.wakeups[0]
		if w.at > now {
			return 0, w.at, false, true
		}
		heap.Pop(&s.wakeups)
		return int(w.u), w.at, true, true
	}
	return 0, 0, false, false
}

// dispatch sends every user to work when due, until ctx ends or done is
// closed. With nobody left to schedule it waits for a wake-up (a buyer sent
// back to the queue) or the end.
func (s *schedule) dispatch(ctx context.Context, done <-chan struct{}, work chan<- int) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Since(s.start)
		u, at, ok, more := s.due(now)
		if ok {
			select {
			case work <- u:
				s.lag.Add(time.Since(s.start) - at)
			case <-ctx.Done():
				return
			case <-done:
				return
			}
			continue
		}
		wait := time.Hour
		if more {
			wait = at - now
		}
		// Since Go 1.23 a reset timer delivers nothing stale.
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.poke:
		case <-ctx.Done():
			return
		case <-done:
			return
		}
	}
}
