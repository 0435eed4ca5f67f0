package waitroom

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MemoryStore keeps every event's state in this process: the default for a
// single gateway node, with no dependencies.
type MemoryStore struct {
	mu       sync.Mutex
	events   map[int64]*memEvent
	watchers map[int64]map[chan struct{}]struct{}
	nonces   map[nonceKey]time.Time
	accounts positionRecords
	// preQueued is the position each pre-queue token was handed outside
	// the draw (prequeue.go).
	preQueued positionRecords
	// takenOver is the account each anonymous place went to (account.go).
	takenOver firstClaims[string]
	extended  map[nonceKey]time.Time
	now       func() time.Time
}

type memEvent struct {
	state        State
	hasWatermark bool
	// hardCapLive is set once the hard cap was changed live (Change): the
	// configured one no longer overwrites it.
	hardCapLive bool
	leases      map[string]time.Time
	lottery     *memLottery
	// log is the change log, newest last, at most MaxLogEntries.
	log []LogEntry
	// revoked lists revocations in the order made, numbered by revokedSeq.
	revoked    []memRevocation
	revokedSeq int64
	presence   memPresence
	inventory  *Inventory
	held       memHeld
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

// positionAtHand implements positionsAtHand: a memory store never waits.
func (m *MemoryStore) positionAtHand(event int64) (int64, bool) {
	pos, _ := m.NextPosition(context.Background(), event) // never fails
	return pos, true
}

// raiseFloor implements positionFloor: a position above the counter was
// handed out by the store this one replaced (the process restarted), so
// the counter carries on after it.
func (m *MemoryStore) raiseFloor(event, pos int64) {
	m.mu.Lock()
	e := m.event(event)
	raised := pos > e.state.LastPosition
	if raised {
		e.state.LastPosition = pos
	}
	m.mu.Unlock()
	if raised {
		m.notify(event)
	}
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
		if d.SoldOut && !e.state.SoldOut {
			e.state.SoldOut, e.state.SoldOutBy = true, d.SoldOutBy
		}
		e.state.Paused = e.state.Paused || d.Paused
		e.hasWatermark = true
	}
	if !e.hardCapLive {
		e.state.HardCap, e.state.HardCapPerRemaining = d.HardCap, d.HardCapPerRemaining
	}
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
	if c.IfWatermark != nil && *c.IfWatermark != e.state.Watermark {
		m.mu.Unlock()
		return State{}, fmt.Errorf("%w: it is %d, not %d", ErrWatermarkMoved, e.state.Watermark, *c.IfWatermark)
	}
	before := e.state
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
		e.state.SoldOut, e.state.SoldOutBy = *c.SoldOut, ""
		if *c.SoldOut {
			e.state.SoldOutBy = c.Actor
		}
	}
	if c.Paused != nil {
		e.state.Paused = *c.Paused
	}
	if c.HardCap != nil {
		e.state.HardCap = *c.HardCap
		e.state.HardCapPerRemaining = 0
		e.hardCapLive = true
	}
	if c.HardCapPerRemaining != nil {
		e.state.HardCapPerRemaining = *c.HardCapPerRemaining
		e.hardCapLive = true
	}
	s := e.state
	e.log = append(e.log, logEntries(c, before, s, m.now())...)
	if n := len(e.log) - MaxLogEntries; n > 0 {
		e.log = append(e.log[:0], e.log[n:]...)
	}
	m.mu.Unlock()
	m.notify(event)
	return s, nil
}

// ChangeLog implements ChangeLogStore.
func (m *MemoryStore) ChangeLog(_ context.Context, event int64, limit int) ([]LogEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	log := m.event(event).log
	out := make([]LogEntry, 0, min(limit, len(log)))
	for i := len(log) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, log[i])
	}
	return out, nil
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

// memLottery is an event's lottery in memory.
type memLottery struct {
	seed      []byte
	entrants  map[string]struct{}
	closed    bool
	reserved  Closed
	drawn     bool
	positions map[string]int64
}

func (m *MemoryStore) lottery(event int64) *memLottery {
	e := m.event(event)
	if e.lottery == nil {
		e.lottery = &memLottery{entrants: make(map[string]struct{}), positions: make(map[string]int64)}
	}
	return e.lottery
}

// EnsureSeed implements LotteryStore.
func (m *MemoryStore) EnsureSeed(_ context.Context, event int64, seed []byte, _ time.Time) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lottery(event)
	if l.seed == nil {
		l.seed = append([]byte(nil), seed...)
	}
	return append([]byte(nil), l.seed...), nil
}

// Enter implements LotteryStore.
func (m *MemoryStore) Enter(_ context.Context, event int64, subject string, _ time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lottery(event)
	if l.closed {
		return ErrEntriesClosed
	}
	l.entrants[subject] = struct{}{}
	return nil
}

// CloseEntries implements LotteryStore.
func (m *MemoryStore) CloseEntries(_ context.Context, event int64, _ time.Time) (Closed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lottery(event)
	if !l.closed {
		e := m.event(event)
		l.closed = true
		l.reserved = Closed{Base: e.state.LastPosition, Count: int64(len(l.entrants))}
		e.state.LastPosition += l.reserved.Count
	}
	return l.reserved, nil
}

// Entrants implements LotteryStore.
func (m *MemoryStore) Entrants(_ context.Context, event int64) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lottery(event)
	out := make([]string, 0, len(l.entrants))
	for id := range l.entrants {
		out = append(out, id)
	}
	return out, nil
}

// SaveDraw implements LotteryStore.
func (m *MemoryStore) SaveDraw(_ context.Context, event int64, positions map[string]int64, _ time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lottery(event)
	for id, pos := range positions {
		l.positions[id] = pos
	}
	l.drawn = true
	return nil
}

// Lottery implements LotteryStore.
func (m *MemoryStore) Lottery(_ context.Context, event int64) (LotteryRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lottery(event)
	return LotteryRecord{Seed: append([]byte(nil), l.seed...), EntriesClosed: l.closed, Reserved: l.reserved, Drawn: l.drawn}, nil
}

// DrawnPosition implements LotteryStore.
func (m *MemoryStore) DrawnPosition(_ context.Context, event int64, subject string) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pos, ok := m.lottery(event).positions[subject]
	return pos, ok, nil
}

// maxMemoryNonces bounds the used-nonce set; each entry took a solved
// challenge to make, and expired ones are dropped first.
const maxMemoryNonces = 1 << 20

// UseNonce implements NonceStore.
func (m *MemoryStore) UseNonce(_ context.Context, event int64, id string, until time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if m.nonces == nil {
		m.nonces = make(map[nonceKey]time.Time)
	}
	k := nonceKey{event, id}
	if exp, ok := m.nonces[k]; ok && now.Before(exp) {
		return false, nil
	}
	if len(m.nonces) >= maxMemoryNonces {
		for k, exp := range m.nonces {
			if !now.Before(exp) {
				delete(m.nonces, k)
			}
		}
		if len(m.nonces) >= maxMemoryNonces {
			// Full of live nonces: refuse rather than forget one that
			// could then be used again.
			return false, ErrUnavailable
		}
	}
	m.nonces[k] = until
	return true, nil
}

type nonceKey struct {
	event int64
	id    string
}

var (
	_ ChangeLogStore = (*MemoryStore)(nil)
	_ LotteryStore   = (*MemoryStore)(nil)
	_ NonceStore     = (*MemoryStore)(nil)
	_ positionFloor  = (*MemoryStore)(nil)
)
