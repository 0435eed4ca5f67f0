package waitroom

import "time"

// All held is not sold out (docs/api.md §3). When the last seat goes into
// a buyer's basket the origin raises the sold-out flag, yet every seat
// still in a pending hold comes back unless its buyer pays. Until nothing
// can come back, a position not yet admitted keeps its place and is told
// that every seat is held; the sold-out answer is for an event where no
// live hold is left, one an operator sold out, or a position past the
// hard cap (State.BeyondCap).

// ActorOrigin is the actor the origin names when it moves the sold-out
// flag by the seats left (Change.Actor): its flag says no seat is left to
// hold, not that none can come back. Any other actor's flag is an
// operator's decision and stands.
const ActorOrigin = "origin"

// DefaultHoldWindow is how soon the seats of live holds are taken for
// bought or back when the origin's figures do not say
// (Inventory.HoldTTLSeconds): the origin's default hold TTL.
const DefaultHoldWindow = 10 * time.Minute

// Availability is what a position not yet admitted can still hope for.
type Availability struct {
	// SoldOut is the sold-out answer's case: nothing can come back (the
	// origin's flag, and its figures count no live hold), or the flag is
	// an operator's, or the origin's without fresh figures to say what
	// its holds are.
	SoldOut bool
	// AllHeld is set while no seat is left to hold but MayReturn seats are
	// in live holds, which end (paid for, or back on sale) within Within.
	// It may be set with SoldOut (an operator's flag): the answer is then
	// the sold-out one.
	AllHeld   bool
	MayReturn int64
	Within    time.Duration
}

// Judge tells what positions not yet admitted can hope for, from the
// event's state and the origin's figures (fresh: Room.Inventory's verdict
// on their age).
func Judge(s State, inv Inventory, fresh bool) Availability {
	var a Availability
	if fresh {
		// The figures may lag the flag by one publish: seats they still
		// count as remaining were taken into holds since.
		back := inv.Held
		if s.SoldOut {
			back += max(inv.Remaining, 0)
		}
		if back > 0 && (s.SoldOut || inv.Remaining <= 0) {
			a.AllHeld, a.MayReturn, a.Within = true, back, DefaultHoldWindow
			if inv.HoldTTLSeconds > 0 {
				a.Within = time.Duration(inv.HoldTTLSeconds) * time.Second
			}
		}
	}
	a.SoldOut = s.SoldOut && (s.SoldOutBy != ActorOrigin || !a.AllHeld)
	return a
}

// Availability is Judge of the room's state and figures in memory: what
// the gateway answers a position not yet admitted by, and what its
// per-second record of the sale notes (AllHeld).
func (r *Room) Availability() Availability {
	inv, fresh := r.Inventory()
	return Judge(r.State(), inv, fresh)
}
