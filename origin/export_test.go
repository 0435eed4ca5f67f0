package origin

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/waitroom"
)

// HoldBatchGate holds the first batch of hold rows back, so that the rows
// queued meanwhile go into the next batch together: batching made
// deterministic, whatever the machine's speed.
type HoldBatchGate struct {
	w    *ledger.HoldWriter
	open chan struct{}

	mu    sync.Mutex
	sizes []int
}

// GateHoldBatches gates s's hold rows. Call it before any hold is made.
func GateHoldBatches(s *Server) *HoldBatchGate {
	g := &HoldBatchGate{w: s.seats.HoldWriter(), open: make(chan struct{})}
	g.w.OnBatch(func(n int) {
		g.mu.Lock()
		g.sizes = append(g.sizes, n)
		first := len(g.sizes) == 1
		g.mu.Unlock()
		if first {
			<-g.open
		}
	})
	return g
}

// WaitQueued waits until the first batch is held back and n rows wait
// behind it.
func (g *HoldBatchGate) WaitQueued(t *testing.T, n int) {
	t.Helper()
	for range 10_000 {
		g.mu.Lock()
		held := len(g.sizes) > 0
		g.mu.Unlock()
		if held && g.w.Queued() >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d hold rows never queued behind the first batch", n)
}

// Open lets the batches go.
func (g *HoldBatchGate) Open() { close(g.open) }

// Sizes are the row counts of the batches written so far.
func (g *HoldBatchGate) Sizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sizes...)
}

// WaitUncertainFinal waits until every hold write s gave up on is final.
func (s *Server) WaitUncertainFinal() { s.seats.Releases().WaitUncertainFinal() }

// AfterRedisStep has s run f between the Redis step and the ledger step of
// every change to a hold (confirm, extend). Set it before any request.
func (s *Server) AfterRedisStep(f func()) { s.seats.Hooks(f, nil) }

// BeforeCorrect has s run f in every drift correction between its reading
// of the ledger and its script. Set it before any request.
func (s *Server) BeforeCorrect(f func()) { s.seats.HookCorrect(f) }

// InFlight is how many hold writes and changes s has under way for event.
func (s *Server) InFlight(event int64) int64 {
	ev, err := s.seats.Registry().Event(context.Background(), event)
	if err != nil {
		return 0
	}
	return ev.InFlight()
}

// SettleTime is how long a rebuild of s waits for other nodes' hold writes.
func (s *Server) SettleTime() time.Duration { return s.seats.Recovery().SettleTime() }

// DuringRebuild has s run f in every rebuild once the inventory is frozen.
// Set it before any request.
func (s *Server) DuringRebuild(f func()) { s.seats.Hooks(nil, f) }

// LoadNewEvent loads a just-created event into Redis as CreateEvent does.
func (s *Server) LoadNewEvent(ctx context.Context, id int64) error {
	return s.seats.Recovery().LoadNewEvent(ctx, id)
}

// Admitted is the admission check of a hold request.
func (s *Server) Admitted(ctx context.Context, event, position int64) bool {
	ev, err := s.seats.Registry().Event(ctx, event)
	if err != nil {
		return false
	}
	return s.gate.admitted(ctx, ev, position)
}

// AdmissionState is the admission state s last saw for event.
func (s *Server) AdmissionState(event int64) waitroom.State {
	ev, err := s.seats.Registry().Event(context.Background(), event)
	if err != nil {
		return waitroom.State{}
	}
	return ev.Room().State()
}

// PublishMaxAge is how long the publisher leaves unchanged figures.
const PublishMaxAge = publishMaxAge

// PaceCounts makes s's publisher count an event's holds in the ledger
// again only `every` after each count, however long the count took.
func PaceCounts(s *Server, every time.Duration) {
	s.publisher.countAgain = func(time.Duration) time.Duration { return every }
}

// NoteKeysOnce notes s's key checks for every served event, as Run does
// every waitroom.KeyNoteEvery.
func NoteKeysOnce(ctx context.Context, s *Server) { s.publisher.noteKeys(ctx) }
