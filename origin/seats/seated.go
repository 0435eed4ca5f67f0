package seats

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/seatmap"
)

// Reserved seating. Redis says which hold has each seat (the hold script
// takes a hold's seats all together or none); every node keeps a view of
// the seat map read from Redis at most DefaultSeatMapMaxAge ago, which the
// seat map reads are served from and the best-available choice is made
// on, plus the seats this node's own holds took since (so a choice does
// not pick them again before the next read).

// DefaultSeatMapMaxAge is how old a seat map view may be before a read
// reads Redis again.
const DefaultSeatMapMaxAge = time.Second

// bestTries bounds the attempts of a best-available hold whose chosen
// seats another hold took between the view and the hold script.
const bestTries = 4

// ReasonContended: a best-available hold found its chosen seats taken
// every time it tried.
const ReasonContended = "contended"

// SeatView is which reserved seats a live hold had at one moment, and the
// places the general-admission sections had left.
type SeatView struct {
	// At is when (wall clock) Redis was read.
	At     time.Time
	states map[string]inventory.SeatState
	places map[string]int64

	// taken is states a section, as bitmaps the best-available choice
	// passes a sold row on without reading its seats; built at the first
	// choice made on the view.
	takenOnce sync.Once
	taken     map[string]*seatmap.Taken
}

// sectionsTaken is the view's taken seats by section (nil: none taken).
func (v *SeatView) sectionsTaken(x *seatmap.Index, m seatmap.Map) map[string]*seatmap.Taken {
	v.takenOnce.Do(func() {
		v.taken = make(map[string]*seatmap.Taken)
		for id, st := range v.states {
			if st == inventory.SeatFree {
				continue
			}
			sec, row, k, ok := x.Locate(id)
			if !ok {
				continue
			}
			t := v.taken[sec]
			if t == nil {
				s, _ := m.Section(sec)
				t = seatmap.NewTaken(s)
				v.taken[sec] = t
			}
			t.Take(row, k)
		}
	})
	return v.taken
}

// Places is the places general-admission section had left in the view.
func (v *SeatView) Places(section string) int64 { return v.places[section] }

// State is the seat's state in the view.
func (v *SeatView) State(id string) inventory.SeatState {
	if st, ok := v.states[id]; ok {
		return st
	}
	return inventory.SeatFree
}

// seatIndex is an event's seat map view and the seats taken on this node
// since it was read.
type seatIndex struct {
	view atomic.Pointer[SeatView]
	mu   sync.Mutex
	// since maps a seat to the wall time this node saw it taken (or, with
	// false, given back) after the view was read.
	since map[string]seatChange
	// changed counts since's seats by section and row: a choice looks a
	// seat up in since only in a row that has one.
	changed map[string][]int32

	// locate finds the seats by id; the map does not change once served.
	locateOnce sync.Once
	locate     *seatmap.Index
}

type seatChange struct {
	at    time.Time
	taken bool
}

// seatLocator is the index of the event's seats.
func (ev *Event) seatLocator() *seatmap.Index {
	ev.seats.locateOnce.Do(func() { ev.seats.locate = ev.Seating.Index() })
	return ev.seats.locate
}

// markSeat records c of seat id in since; ev.seats.mu is held.
func (ev *Event) markSeat(id string, c seatChange) {
	if ev.seats.since == nil {
		ev.seats.since = make(map[string]seatChange)
	}
	if _, ok := ev.seats.since[id]; !ok {
		ev.countChange(id, 1)
	}
	ev.seats.since[id] = c
}

// forgetSeat removes seat id from since; ev.seats.mu is held.
func (ev *Event) forgetSeat(id string) {
	if _, ok := ev.seats.since[id]; ok {
		delete(ev.seats.since, id)
		ev.countChange(id, -1)
	}
}

func (ev *Event) countChange(id string, d int32) {
	sec, row, _, ok := ev.seatLocator().Locate(id)
	if !ok {
		return
	}
	if ev.seats.changed == nil {
		ev.seats.changed = make(map[string][]int32)
	}
	c := ev.seats.changed[sec]
	if c == nil {
		s, _ := ev.Seating.Section(sec)
		c = make([]int32, len(s.Rows))
		ev.seats.changed[sec] = c
	}
	c[row] += d
}

// seatsTaken records that this node saw seats taken (or freed).
func (ev *Event) seatsTaken(ids []string, taken bool) {
	if !ev.Seated() || len(ids) == 0 {
		return
	}
	now := time.Now()
	ev.seats.mu.Lock()
	defer ev.seats.mu.Unlock()
	for _, id := range ids {
		ev.markSeat(id, seatChange{at: now, taken: taken})
	}
}

// amountOf is the price of a hold of qty seats: the sections' prices of
// its reserved seats, or its general-admission section's price per place,
// or the event's price per seat.
func (ev *Event) amountOf(qty int64, seats []string, section string) int64 {
	if ev.Seated() && len(seats) > 0 {
		if p, ok := ev.Seating.Price(seats); ok {
			return p
		}
	}
	if ev.Seated() && section != "" {
		if s, ok := ev.Seating.Section(section); ok {
			return s.Price * qty
		}
	}
	return ev.Price * qty
}

// sectionCapacities maps each general-admission section of the event's
// seat map to its capacity; nil when it has none.
func (ev *Event) sectionCapacities() map[string]int64 {
	if !ev.Seated() || !ev.Seating.HasGA() {
		return nil
	}
	out := make(map[string]int64)
	for _, p := range ev.Seating.Places() {
		out[p.Section] = p.Capacity
	}
	return out
}

// SeatView is the event's seat map view, read from Redis again when older
// than Config.SeatMapMaxAge; concurrent reads of an old view share one
// Redis read. Keys missing from Redis are loaded first.
func (p *Protocol) SeatView(ctx context.Context, ev *Event) (*SeatView, error) {
	if !ev.Seated() {
		return nil, fmt.Errorf("event %d has no reserved seating", ev.ID)
	}
	if v := ev.seats.view.Load(); v != nil && p.cfg.WallClock().Sub(v.At) < p.seatMapMaxAge() {
		return v, nil
	}
	v, err, _ := p.recovery.flight.Do(fmt.Sprintf("seats:%d", ev.ID), func() (any, error) {
		at := p.cfg.WallClock()
		for attempt := 0; ; attempt++ {
			states, loaded, err := p.inv.SeatStates(ctx, ev.ID, p.now())
			if err != nil {
				return nil, err
			}
			if loaded {
				v := &SeatView{At: at, states: states.Seats, places: states.Places}
				ev.seats.view.Store(v)
				ev.seats.mu.Lock()
				for id, c := range ev.seats.since {
					if !c.at.After(at) {
						ev.forgetSeat(id)
					}
				}
				ev.seats.mu.Unlock()
				return v, nil
			}
			if attempt > 0 {
				return nil, fmt.Errorf("read seats of event %d: %w", ev.ID, inventory.ErrNotLoaded)
			}
			if err := p.recovery.ensureLoaded(ctx, ev); err != nil {
				return nil, err
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return v.(*SeatView), nil
}

func (p *Protocol) seatMapMaxAge() time.Duration {
	if p.cfg.SeatMapMaxAge > 0 {
		return p.cfg.SeatMapMaxAge
	}
	return DefaultSeatMapMaxAge
}

// choose picks n seats of section (any section when "") for one party on
// the view and the changes since, and marks them taken at once: the
// best-available holds of this node running at the same moment then pick
// other seats rather than race each other for the same ones. With any
// section, a general-admission section that comes first in the map with n
// places left in the view (and not in short) is chosen instead: places
// is its id. ids is nil when no section has n free (free counts them).
func (ev *Event) choose(v *SeatView, section string, n int, short map[string]bool) (ids []string, places string, free int) {
	view := v.sectionsTaken(ev.seatLocator(), *ev.Seating)
	ev.seats.mu.Lock()
	defer ev.seats.mu.Unlock()
	for _, s := range ev.Seating.Sections {
		if section != "" && s.ID != section {
			continue
		}
		if s.GA() {
			left := int(v.Places(s.ID))
			if short[s.ID] {
				left = 0
			}
			free += left
			if left >= n {
				return nil, s.ID, free
			}
			continue
		}
		got, f := ev.Seating.BestOf(s.ID, n, liveSeats{s: s, view: view[s.ID], since: ev.seats.since, changed: ev.seats.changed[s.ID]})
		free += f
		if got != nil {
			ids = got
			break
		}
	}
	if ids == nil {
		return nil, "", free
	}
	now := time.Now()
	for _, id := range ids {
		ev.markSeat(id, seatChange{at: now, taken: true})
	}
	return ids, "", free
}

// liveSeats is a section's seats as a choice sees them: the view's, but
// for the changes this node saw since.
type liveSeats struct {
	s       seatmap.Section
	view    *seatmap.Taken // nil: none taken in the view
	since   map[string]seatChange
	changed []int32
}

func (l liveSeats) Full(row int) bool {
	return l.view != nil && l.view.Full(row) && (l.changed == nil || l.changed[row] == 0)
}

func (l liveSeats) Taken(row, k int) bool {
	if l.changed != nil && l.changed[row] > 0 {
		if c, ok := l.since[seatmap.SeatID(l.s.ID, l.s.Rows[row].ID, k)]; ok {
			return c.taken
		}
	}
	return l.view != nil && l.view.Taken(row, k)
}

// unchoose forgets the marks choose made on ids: the hold did not take them.
func (ev *Event) unchoose(ids []string) {
	ev.seats.mu.Lock()
	defer ev.seats.mu.Unlock()
	for _, id := range ids {
		ev.forgetSeat(id)
	}
}

// PlaceBest holds req.Quantity seats of section chosen for the buyer (the
// best available, seatmap.Map.Best) from the seat map view, or of the first
// section that has them when section is "" (a general-admission section's
// places included). A general-admission section's places are held as
// Place holds them with req.Section. When the chosen seats are taken
// meanwhile it chooses again, at most bestTries times. SoldOut when the
// section has fewer free seats than asked for (Result.Remaining).
func (p *Protocol) PlaceBest(ctx context.Context, req PlaceRequest, section string) Result {
	ev := req.Event
	if s, ok := ev.Seating.Section(section); ok && s.GA() {
		req.Section = section
		return p.Place(ctx, req)
	}
	takeOver := ""
	var out Result
	short := map[string]bool{}
	for range bestTries {
		v, err := p.SeatView(ctx, ev)
		if err != nil {
			p.log.Warn("seat map not read", "event", ev.ID, "error", err)
			return unavailable(ReasonNotHeld)
		}
		ids, places, free := ev.choose(v, section, int(req.Quantity), short)
		if ids == nil && places == "" {
			return Result{Outcome: SoldOut, Remaining: int64(free), Section: section, At: p.now(), Claim: out.Claim}
		}
		req.Seats, req.Section = ids, places
		out = p.place(ctx, req, takeOver)
		switch {
		case out.Outcome == SoldOut && places != "":
			// The view was older than the section's last places: the next
			// section that has them.
			short[places] = true
			takeOver = out.Claim
			continue
		case out.Outcome == Held || places != "":
			return out
		case out.Outcome == SeatsUnavailable:
			// Taken by a hold this node did not see: the others of the
			// choice are free for the next one.
			ev.unchoose(slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(out.Taken, id) }))
			ev.seatsTaken(out.Taken, true)
			takeOver = out.Claim
			continue
		}
		ev.unchoose(ids)
		return out
	}
	claim := out.Claim
	out = unavailable(ReasonContended)
	out.Claim, out.At = claim, p.now()
	return out
}

// SectionDrift is one section's reserved seats where Redis and the ledger
// disagree, or a general-admission section's count of places.
type SectionDrift struct {
	Section string `json:"section"`
	// Seats counts the seats whose state (free, held, sold) differs; for
	// a general-admission section, the places by which Redis's count
	// differs from the ledger's.
	Seats int64 `json:"seats"`
	// Capacity, Remaining and Active describe a general-admission
	// section: its places, those Redis has left, and those the ledger's
	// live holds (pending, or confirmed) have; Remaining should be
	// Capacity − Active.
	Capacity  *int64 `json:"capacity,omitempty"`
	Remaining *int64 `json:"remaining,omitempty"`
	Active    *int64 `json:"active,omitempty"`
}

// seatDrift compares which reserved seats a live hold has in Redis and in
// the ledger, and the general-admission sections' places left: the seats
// (and places) that differ in all, and by section.
func (rc *Recovery) seatDrift(ctx context.Context, ev *Event) (int64, []SectionDrift, error) {
	now := rc.now()
	states, loaded, err := rc.inv.SeatStates(ctx, ev.ID, now)
	if err != nil {
		return 0, nil, err
	}
	if !loaded {
		return 0, nil, fmt.Errorf("seat drift of event %d: %w", ev.ID, inventory.ErrNotLoaded)
	}
	taken, err := rc.ledger.TakenSeats(ctx, ev.ID, now)
	if err != nil {
		return 0, nil, err
	}
	var active map[string]int64
	if ev.Seating.HasGA() {
		if active, err = rc.ledger.SectionCounts(ctx, ev.ID, now); err != nil {
			return 0, nil, err
		}
	}
	bySection := make(map[string]int64)
	var total int64
	inLedger := make(map[string]bool, len(taken))
	for _, s := range taken {
		inLedger[s.SeatID] = true
		if string(states.Seats[s.SeatID]) != s.Status {
			bySection[s.Section]++
			total++
		}
	}
	for id := range states.Seats {
		if !inLedger[id] {
			sec, _, _, _ := ev.Seating.Locate(id)
			bySection[sec.ID]++
			total++
		}
	}
	out := make([]SectionDrift, 0, len(ev.Seating.Sections))
	for _, s := range ev.Seating.Sections {
		d := SectionDrift{Section: s.ID, Seats: bySection[s.ID]}
		if s.GA() {
			capacity, left, live := s.Capacity, states.Places[s.ID], active[s.ID]
			d.Capacity, d.Remaining, d.Active = &capacity, &left, &live
			d.Seats = abs(left - (capacity - live))
			total += d.Seats
		}
		out = append(out, d)
	}
	return total, out, nil
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
