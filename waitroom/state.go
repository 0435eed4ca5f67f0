package waitroom

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// State is an event's admission state: what every gateway node and the origin
// decide admission by.
type State struct {
	Event int64 `json:"event"`
	// Watermark is the highest admitted position.
	Watermark int64 `json:"watermark"`
	// LastPosition is the highest position handed out so far.
	LastPosition int64 `json:"last_position"`
	// HardCap is the last position that can ever be admitted; 0 means none.
	HardCap int64 `json:"hard_cap"`
	// HardCapPerRemaining, when above 0, derives the hard cap from the
	// origin's inventory: the watermark plus this many positions per seat
	// remaining (Room keeps it so).
	HardCapPerRemaining float64 `json:"hard_cap_per_remaining,omitempty"`
	SoldOut             bool    `json:"sold_out"`
	// SoldOutBy is the actor of the change that raised SoldOut (Change.Actor;
	// empty when unknown, as after a restore): the origin's flag
	// (ActorOrigin) gives way while held seats may come back (Judge).
	SoldOutBy string `json:"-"`
	Paused    bool   `json:"paused"`
	// RestoringUntil is set while the store puts back state it lost (or
	// sets up a new event): until then no position is handed out, so that
	// every gateway can first add what it remembers. Zero otherwise.
	RestoringUntil time.Time `json:"-"`
}

// Restoring reports whether the state is still being restored at now.
func (s State) Restoring(now time.Time) bool { return now.Before(s.RestoringUntil) }

// Admits reports whether a token at position may pass. Sold out does not
// matter here: buyers already admitted must still be able to pay.
// A position below 1 (a pre-queue token has none) is never admitted.
func (s State) Admits(position int64) bool {
	return s.Reached(position) && !s.Paused
}

// Reached reports whether the watermark has reached position, within the
// hard cap: a position that a pause alone keeps from passing. Its admission
// window runs whether or not the event is paused.
func (s State) Reached(position int64) bool {
	return position >= 1 && position <= s.Watermark && !s.BeyondCap(position)
}

// BeyondCap reports whether position is past the hard cap and so can never
// be admitted.
func (s State) BeyondCap(position int64) bool {
	return s.HardCap > 0 && position > s.HardCap
}

// Waiting is the number of positions handed out but not yet admitted.
func (s State) Waiting() int64 {
	return max(0, s.LastPosition-s.Watermark)
}

// Change is an update to an event's state. Nil fields are left alone;
// RaiseBy is added to the watermark after SetWatermark is applied.
type Change struct {
	SetWatermark *int64
	RaiseBy      int64
	SoldOut      *bool
	Paused       *bool
	// HardCap changes the hard cap live (0: none); from then on the
	// configured one no longer overwrites it.
	HardCap *int64
	// HardCapPerRemaining derives the hard cap from the inventory from now
	// on (0: no longer); a HardCap given without it ends the derivation.
	HardCapPerRemaining *float64
	// Actor and Reason go into the event's change log with every field the
	// change moves.
	Actor  string
	Reason string
	// IfWatermark, when set, applies the change only while the watermark
	// is this one, in the same step: two people raising it from what they
	// each saw do not both raise it. Otherwise nothing changes and Update
	// returns ErrWatermarkMoved.
	IfWatermark *int64
}

// ErrNotLogged is returned by Room.ChangeLog when the store keeps no change
// log.
var ErrNotLogged = errors.New("the store keeps no change log")

// ErrNegative is returned for a change that would make a count negative.
var ErrNegative = errors.New("value must not be negative")

// ErrWatermarkMoved is returned for a change whose IfWatermark is not the
// watermark any more; nothing is changed.
var ErrWatermarkMoved = errors.New("the watermark is not the one the change was made from")

// ErrOverflow is returned for a change that would raise the watermark past
// the largest position there can be; nothing is changed.
var ErrOverflow = errors.New("watermark would overflow")

// raise is the watermark that results from adding by to w, or ErrOverflow.
func raise(w, by int64) (int64, error) {
	if by > math.MaxInt64-w {
		return 0, fmt.Errorf("%w: %d + %d", ErrOverflow, w, by)
	}
	return w + by, nil
}

func (c Change) validate() error {
	if c.SetWatermark != nil && *c.SetWatermark < 0 {
		return ErrNegative
	}
	if c.RaiseBy < 0 {
		return ErrNegative
	}
	if c.HardCap != nil && *c.HardCap < 0 {
		return ErrNegative
	}
	if k := c.HardCapPerRemaining; k != nil && (*k < 0 || math.IsNaN(*k) || math.IsInf(*k, 0)) {
		return ErrNegative
	}
	if c.SetWatermark != nil {
		if _, err := raise(*c.SetWatermark, c.RaiseBy); err != nil {
			return err
		}
	}
	return nil
}

// Defaults are the values an event starts with when its store has none. A
// node whose store lost the state (a Redis restart) passes what it still
// remembers, so the queue carries on where it was.
type Defaults struct {
	Watermark int64
	// WatermarkConfigured says Watermark is only the configured one: the
	// node remembers none. A restore then uses it only when no node
	// remembers a watermark (docs/api.md §14: "used when the store has no
	// watermark yet"); one that does replaces it, even with a lower one
	// (staff lowered it).
	WatermarkConfigured bool
	// HardCap is configuration rather than state: Ensure writes it, unless
	// the hard cap was changed live (Change.HardCap), which then stays
	// until the store loses the event's state.
	HardCap int64
	// HardCapPerRemaining is configuration as HardCap is: the hard cap
	// derived from the inventory (State.HardCapPerRemaining).
	HardCapPerRemaining float64
	// LastPosition raises the position counter to at least this value, so
	// positions already handed out are never handed out again.
	LastPosition int64
	SoldOut      bool
	// SoldOutBy is the actor of SoldOut (State.SoldOutBy): the origin's
	// flag stays the origin's when the state is put back, so it still
	// gives way while held seats may come back. When the nodes restoring
	// the state disagree, an operator's (any other actor's) wins.
	SoldOutBy string
	Paused    bool
	// Restore is set by a node that hands out positions (a gateway): when
	// the store has no state for the event, or a position counter below
	// LastPosition, the store lost it (or the event is new), and it holds
	// new positions back for its restore window while every such node
	// adds what it remembers; a node that joins a restore in progress
	// raises the watermark (unless WatermarkConfigured; a configured one
	// it replaces) and the counter to its values. Without it,
	// Ensure only fills in what is missing.
	Restore bool
}

func (d Defaults) validate() error {
	if d.Watermark < 0 || d.HardCap < 0 || d.LastPosition < 0 || d.HardCapPerRemaining < 0 {
		return ErrNegative
	}
	return nil
}

// ErrUnavailable wraps store failures (Redis down, timeouts) so callers can
// answer "try again" instead of failing hard.
var ErrUnavailable = errors.New("queue store unavailable")

// ErrNoState is returned by Store.State when the store holds no state for
// the event: never set up, or lost with a Redis restart. Store.NextPosition
// returns it too, rather than hand out a position from a counter that
// restarted.
var ErrNoState = errors.New("no queue state stored for event")

// ErrRestoring is returned by Store.NextPosition (and Room.Join) while the
// event's state is being restored: no position is handed out until every
// gateway had the chance to say how far the queue had gone.
var ErrRestoring = errors.New("queue state being restored")

// DefaultRestoreWindow is how long a restore holds new positions back:
// three of a gateway's polls, so that each live gateway has read the
// state (or had the change notice) and added what it remembers.
const DefaultRestoreWindow = 3 * DefaultPollInterval

// Store keeps positions and admission state. MemoryStore serves one node;
// RedisStore lets many gateway nodes and the origin share one queue.
type Store interface {
	// NextPosition hands out the next queue position of event (1-based);
	// ErrNoState when the store lost the event's state and ErrRestoring
	// while it is being restored, so no position is handed out twice.
	NextPosition(ctx context.Context, event int64) (int64, error)
	// State reads event's current state; ErrNoState (with whatever partial
	// state there is) when the store has none.
	State(ctx context.Context, event int64) (State, error)
	// Ensure writes d for the fields event has no value for yet (the hard
	// cap always; the position counter is raised to d.LastPosition), or
	// restores them (see Defaults.Restore), and returns the resulting
	// state.
	Ensure(ctx context.Context, event int64, d Defaults) (State, error)
	// Update applies c atomically, tells every watcher, and returns the new
	// state.
	Update(ctx context.Context, event int64, c Change) (State, error)
	// Watch signals on the returned channel whenever event's state may have
	// changed, from this node or another, until ctx ends. Signals can be
	// lost (the channel holds one); watchers also poll.
	Watch(ctx context.Context, event int64) <-chan struct{}
	// Lead reports whether this node holds event's named lease for ttl, so
	// one node of a fleet does periodic work (the autopilot) per period.
	Lead(ctx context.Context, event int64, name string, ttl time.Duration) (bool, error)
}
