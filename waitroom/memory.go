package waitroom

import (
	"context"
	"sync"
	"time"
)

// MemoryStore keeps every event's state in this process: the default for a
// single gateway node, with no dependencies.
type MemoryStore struct {
	mu       sync.Mutex
	events   map[int64]*memEvent
	watchers map[int64]map[chan struct{}]struct{}
	now      func() time.Time
}

type memEvent struct {
	state        State
	hasWatermark bool
	leases       map[string]time.Time
}

// NewMemoryStore returns an empty store reading the clock from now
// (time.Now when nil).
func NewMemoryStore(now func() time.Time) *MemoryStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{
		events:   make(map[int64]*memEvent),
		watchers: make(map[int64]map[chan struct{}]struct{}),
		now:      now,
	}
}

func (m *MemoryStore) event(id int64) *memEvent {
	e, ok := m.events[id]
	if !ok {
		e = &memEvent{state: State{Event: id}, leases: make(map[string]time.Time)}
		m.events[id] = e
	}
	return e
}

// NextPosition implements Store.
func (m *MemoryStore) NextPosition(_ context.Context, event int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.event(event)
	e.state.LastPosition++
	return e.state.LastPosition, nil
}

// State implements Store.
func (m *MemoryStore) State(_ context.Context, event int64) (State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.event(event)
	if !e.hasWatermark {
		return e.state, ErrNoState
	}
	return e.state, nil
}

// Ensure implements Store.
func (m *MemoryStore) Ensure(_ context.Context, event int64, d Defaults) (State, error) {
	if err := d.validate(); err != nil {
		return State{}, err
	}
	m.mu.Lock()
	e := m.event(event)
	if !e.hasWatermark {
		e.state.Watermark = d.Watermark
		e.state.SoldOut = e.state.SoldOut || d.SoldOut
		e.state.Paused = e.state.Paused || d.Paused
		e.hasWatermark = true
	}
	e.state.HardCap = d.HardCap
	e.state.LastPosition = max(e.state.LastPosition, d.LastPosition)
	s := e.state
	m.mu.Unlock()
	m.notify(event)
	return s, nil
}

// Update implements Store.
func (m *MemoryStore) Update(_ context.Context, event int64, c Change) (State, error) {
	if err := c.validate(); err != nil {
		return State{}, err
	}
	m.mu.Lock()
	e := m.event(event)
	watermark := e.state.Watermark
	if c.SetWatermark != nil {
		watermark = *c.SetWatermark
	}
	watermark, err := raise(watermark, c.RaiseBy)
	if err != nil {
		m.mu.Unlock()
		return State{}, err
	}
	if c.SetWatermark != nil || c.RaiseBy != 0 {
		e.state.Watermark = watermark
		e.hasWatermark = true
	}
	if c.SoldOut != nil {
		e.state.SoldOut = *c.SoldOut
	}
	if c.Paused != nil {
		e.state.Paused = *c.Paused
	}
	if c.HardCap != nil {
		e.state.HardCap = *c.HardCap
	}
	s := e.state
	m.mu.Unlock()
	m.notify(event)
	return s, nil
}

// Watch implements Store.
func (m *MemoryStore) Watch(ctx context.Context, event int64) <-chan struct{} {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	if m.watchers[event] == nil {
		m.watchers[event] = make(map[chan struct{}]struct{})
	}
	m.watchers[event][ch] = struct{}{}
	m.mu.Unlock()
	context.AfterFunc(ctx, func() {
		m.mu.Lock()
		delete(m.watchers[event], ch)
		m.mu.Unlock()
	})
	return ch
}

func (m *MemoryStore) notify(event int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ch := range m.watchers[event] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Lead implements Store. In one process there is only one node, but the
// lease still spaces out callers by ttl.
func (m *MemoryStore) Lead(_ context.Context, event int64, name string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.event(event)
	now := m.now()
	if until, ok := e.leases[name]; ok && now.Before(until) {
		return false, nil
	}
	e.leases[name] = now.Add(ttl)
	return true, nil
}

var _ Store = (*MemoryStore)(nil)
