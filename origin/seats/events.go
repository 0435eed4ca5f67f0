package seats

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/waitroom"
)

// Event is an event as this node serves it: its configuration, the
// admission state followed from the shared store, and the per-event
// coordination of the protocol.
type Event struct {
	ledger.Event
	room *waitroom.Room
	// soldOutMu orders sold-out updates, so the last one written reflects
	// the latest remaining.
	soldOutMu sync.Mutex
	// inflight counts the hold writes and changes between their Redis step
	// and the end of their ledger step (or compensation): a rebuild waits
	// for them. Raised and lowered in inFlight only.
	inflight atomic.Int64
	// finalAt is when (wall clock, unix ns) the last write this node gave
	// up on for the event can no longer be committed: a rebuild waits for
	// it too.
	finalAt atomic.Int64
	// driftSeen is the drift of the reconciler's last check if nothing was
	// in flight for the event then, else 0.
	driftSeen atomic.Int64
	// seats is the reserved seating's view (seated.go).
	seats seatIndex
	// notes sends the notes of the event's new holds to the room.
	notes holderNotes
}

// Room is the event's admission state, as this node follows it.
func (ev *Event) Room() *waitroom.Room { return ev.room }

// InFlight is how many hold writes and changes are under way for the event.
func (ev *Event) InFlight() int64 { return ev.inflight.Load() }

// noteFinal records that a write given up on is final at t.
func (ev *Event) noteFinal(t time.Time) {
	for {
		cur := ev.finalAt.Load()
		if t.UnixNano() <= cur || ev.finalAt.CompareAndSwap(cur, t.UnixNano()) {
			return
		}
	}
}

// Event returns the live event, reading it from the ledger when this node
// has not seen it yet (created on another node).
func (g *Registry) Event(ctx context.Context, id int64) (*Event, error) {
	g.mu.RLock()
	ev := g.events[id]
	g.mu.RUnlock()
	if ev != nil {
		return ev, nil
	}
	e, err := g.ledger.Event(ctx, id)
	if err != nil {
		return nil, err
	}
	return g.Serve(e), nil
}

// Serve starts serving e (idempotent) and returns it live.
func (g *Registry) Serve(e ledger.Event) *Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ev := g.events[e.ID]; ev != nil {
		return ev
	}
	ev := &Event{Event: e, room: waitroom.NewRoom(g.store, e.ID, waitroom.RoomOptions{
		Follow: true, Now: g.cfg.Clock, Logger: g.log, PollInterval: g.cfg.RoomPollInterval,
	})}
	ev.notes.send = ev.room.NoteHolders
	g.events[e.ID] = ev
	go ev.room.Run(g.bg)
	return ev
}

// Events are the events this node serves.
func (g *Registry) Events() []*Event {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]*Event, 0, len(g.events))
	for _, ev := range g.events {
		out = append(out, ev)
	}
	return out
}

// LoadEvents starts serving every event of the ledger not served yet, and
// returns them all.
func (g *Registry) LoadEvents(ctx context.Context) ([]*Event, error) {
	all, err := g.ledger.Events(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Event, 0, len(all))
	for _, e := range all {
		out = append(out, g.Serve(e))
	}
	return out, nil
}

// CreateEvent writes a new event and loads its seats into Redis.
func (p *Protocol) CreateEvent(ctx context.Context, e ledger.Event) (ledger.Event, error) {
	created, err := p.ledger.CreateEvent(ctx, e)
	if err != nil {
		return ledger.Event{}, err
	}
	ev := p.registry.Serve(created)
	if err := p.recovery.rebuild(ctx, ev, reasonCreated); err != nil {
		// The event exists; the first hold loads it again.
		p.log.Warn("new event not loaded into redis yet", "event", ev.ID, "error", err)
	}
	return created, nil
}

// LoadNewEvent loads a just-created event into Redis as CreateEvent does.
func (rc *Recovery) LoadNewEvent(ctx context.Context, id int64) error {
	ev, err := rc.registry.Event(ctx, id)
	if err != nil {
		return err
	}
	return rc.rebuild(ctx, ev, reasonCreated)
}

// Remaining is the count of seats left: from Redis, or from the ledger when
// Redis cannot answer (the ledger wins anyway).
func (rc *Recovery) Remaining(ctx context.Context, ev *Event) (int64, error) {
	n, loaded, err := rc.reclaim(ctx, ev)
	if err == nil && loaded {
		return n, nil
	}
	c, cerr := rc.ledger.SeatCounts(ctx, ev.ID, rc.now())
	if cerr != nil {
		return 0, errors.Join(err, cerr)
	}
	return max(0, ev.Sellable-c.Active()), nil
}
