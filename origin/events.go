package origin

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/waitroom/waitroom/waitroom"
)

// Defaults and bounds of event creation.
const (
	DefaultOverflowPct    = 2
	DefaultHoldTTLSeconds = 600
	DefaultMaxPerUser     = 4
	maxCapacity           = 10_000_000
	maxHoldTTLSeconds     = 7 * 24 * 3600
	maxNameLen            = 200
	maxPerUserLimit       = 10_000
)

// overflowReserve is pct of capacity rounded up, so any pct > 0 keeps at
// least one seat; it never takes the last sellable seat.
func overflowReserve(capacity, pct int64) int64 {
	r := (capacity*pct + 99) / 100
	return min(r, capacity-1)
}

var currencyCode = regexp.MustCompile(`^[a-z]{3}$`)

// createEventRequest is the body of POST /v1/events. Pointers tell a field
// left out (default) from one set to 0 (overflow_pct 0 means no reserve).
type createEventRequest struct {
	ID             *int64  `json:"id"`
	Name           *string `json:"name"`
	Capacity       *int64  `json:"capacity"`
	Price          *int64  `json:"price"`
	Currency       *string `json:"currency"`
	HoldTTLSeconds *int64  `json:"hold_ttl_seconds"`
	MaxPerUser     *int64  `json:"max_per_user"`
	OverflowPct    *int64  `json:"overflow_pct"`
}

// errInvalid is a request that is well-formed JSON but not acceptable.
type errInvalid struct{ msg string }

func (e errInvalid) Error() string { return e.msg }

func invalidf(format string, args ...any) error { return errInvalid{fmt.Sprintf(format, args...)} }

func (r createEventRequest) event(now time.Time) (Event, error) {
	e := Event{
		OverflowPct:    DefaultOverflowPct,
		HoldTTLSeconds: DefaultHoldTTLSeconds,
		MaxPerUser:     DefaultMaxPerUser,
		CreatedAt:      now,
	}
	if r.ID != nil {
		if *r.ID <= 0 {
			return e, invalidf("id must be a positive integer")
		}
		e.ID = *r.ID
	}
	if r.Name == nil || strings.TrimSpace(*r.Name) == "" {
		return e, invalidf("name is required")
	}
	if utf8.RuneCountInString(*r.Name) > maxNameLen {
		return e, invalidf("name is longer than %d characters", maxNameLen)
	}
	e.Name = *r.Name
	if r.Capacity == nil || *r.Capacity < 1 || *r.Capacity > maxCapacity {
		return e, invalidf("capacity must be an integer from 1 to %d", maxCapacity)
	}
	e.Capacity = *r.Capacity
	if r.Price == nil || *r.Price < 0 {
		return e, invalidf("price is required: a non-negative integer in the currency's smallest unit")
	}
	e.Price = *r.Price
	if r.Currency == nil || !currencyCode.MatchString(strings.ToLower(*r.Currency)) {
		return e, invalidf("currency must be a three-letter ISO 4217 code")
	}
	e.Currency = strings.ToLower(*r.Currency)
	if r.HoldTTLSeconds != nil {
		if *r.HoldTTLSeconds < 1 || *r.HoldTTLSeconds > maxHoldTTLSeconds {
			return e, invalidf("hold_ttl_seconds must be from 1 to %d", maxHoldTTLSeconds)
		}
		e.HoldTTLSeconds = *r.HoldTTLSeconds
	}
	if r.MaxPerUser != nil {
		if *r.MaxPerUser < 1 || *r.MaxPerUser > maxPerUserLimit {
			return e, invalidf("max_per_user must be from 1 to %d", maxPerUserLimit)
		}
		e.MaxPerUser = *r.MaxPerUser
	}
	if r.OverflowPct != nil {
		if *r.OverflowPct < 0 || *r.OverflowPct > 100 {
			return e, invalidf("overflow_pct must be from 0 to 100")
		}
		e.OverflowPct = *r.OverflowPct
	}
	e.OverflowReserve = overflowReserve(e.Capacity, e.OverflowPct)
	e.Sellable = e.Capacity - e.OverflowReserve
	if price, qty := e.Price, e.MaxPerUser; qty > 0 && price > (1<<62)/qty {
		return e, invalidf("price is too large")
	}
	return e, nil
}

// eventJSON is <event> of docs/api.md §6.
type eventJSON struct {
	ID              int64  `json:"id"`
	Name            string `json:"name"`
	Capacity        int64  `json:"capacity"`
	Sellable        int64  `json:"sellable"`
	Remaining       int64  `json:"remaining"`
	Price           int64  `json:"price"`
	Currency        string `json:"currency"`
	HoldTTLSeconds  int64  `json:"hold_ttl_seconds"`
	MaxPerUser      int64  `json:"max_per_user"`
	SoldOut         bool   `json:"sold_out"`
	OverflowPct     int64  `json:"overflow_pct"`
	OverflowReserve int64  `json:"overflow_reserve"`
}

func eventBody(e Event, remaining int64) eventJSON {
	return eventJSON{
		ID: e.ID, Name: e.Name, Capacity: e.Capacity, Sellable: e.Sellable, Remaining: remaining,
		Price: e.Price, Currency: e.Currency, HoldTTLSeconds: e.HoldTTLSeconds, MaxPerUser: e.MaxPerUser,
		SoldOut: remaining <= 0, OverflowPct: e.OverflowPct, OverflowReserve: e.OverflowReserve,
	}
}

// liveEvent is an event as this node serves it: its configuration, the
// admission state followed from the shared store, and per-event
// coordination.
type liveEvent struct {
	Event
	room *waitroom.Room
	// soldOutMu orders sold-out updates, so the last one written reflects
	// the latest remaining.
	soldOutMu sync.Mutex
	// inflight counts hold requests between the hold script and the end of
	// their ledger write (or compensation): a rebuild waits for them.
	inflight atomic.Int64
	// finalAt is when (wall clock, unix ns) the last write this node gave
	// up on for the event can no longer be committed: a rebuild waits for
	// it too.
	finalAt atomic.Int64
	// driftSeen is the drift of the reconciler's last check if nothing was
	// in flight for the event then, else 0.
	driftSeen atomic.Int64
}

// noteFinal records that a write given up on is final at t.
func (ev *liveEvent) noteFinal(t time.Time) {
	for {
		cur := ev.finalAt.Load()
		if t.UnixNano() <= cur || ev.finalAt.CompareAndSwap(cur, t.UnixNano()) {
			return
		}
	}
}

// event returns the live event, reading it from the ledger when this node
// has not seen it yet (created on another node).
func (s *Server) event(ctx context.Context, id int64) (*liveEvent, error) {
	s.mu.RLock()
	ev := s.events[id]
	s.mu.RUnlock()
	if ev != nil {
		return ev, nil
	}
	e, err := s.ledger.Event(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.addEvent(e), nil
}

// addEvent starts serving e (idempotent).
func (s *Server) addEvent(e Event) *liveEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev := s.events[e.ID]; ev != nil {
		return ev
	}
	ev := &liveEvent{Event: e, room: waitroom.NewRoom(s.store, e.ID, waitroom.RoomOptions{
		Follow: true, Now: s.cfg.Clock, Logger: s.log, PollInterval: s.cfg.RoomPollInterval,
	})}
	s.events[e.ID] = ev
	go ev.room.Run(s.bg)
	return ev
}

func (s *Server) liveEvents() []*liveEvent {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*liveEvent, 0, len(s.events))
	for _, ev := range s.events {
		out = append(out, ev)
	}
	return out
}

// loadEvents starts serving every event of the ledger not served yet.
func (s *Server) loadEvents(ctx context.Context) ([]*liveEvent, error) {
	all, err := s.ledger.Events(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*liveEvent, 0, len(all))
	for _, e := range all {
		out = append(out, s.addEvent(e))
	}
	return out, nil
}

// CreateEvent writes a new event and loads its seats into Redis.
func (s *Server) CreateEvent(ctx context.Context, e Event) (Event, error) {
	created, err := s.ledger.CreateEvent(ctx, e)
	if err != nil {
		return Event{}, err
	}
	ev := s.addEvent(created)
	if err := s.rebuild(ctx, ev, reasonCreated); err != nil {
		// The event exists; the first hold loads it again.
		s.log.Warn("new event not loaded into redis yet", "event", ev.ID, "error", err)
	}
	return created, nil
}

// remaining is the count of seats left: from Redis, or from the ledger when
// Redis cannot answer (the ledger wins anyway).
func (s *Server) remaining(ctx context.Context, ev *liveEvent) (int64, error) {
	n, loaded, err := s.reclaim(ctx, ev)
	if err == nil && loaded {
		return n, nil
	}
	c, cerr := s.ledger.SeatCounts(ctx, ev.ID, s.now())
	if cerr != nil {
		return 0, errors.Join(err, cerr)
	}
	return max(0, ev.Sellable-c.Active()), nil
}
