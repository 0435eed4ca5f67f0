package inventory

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed seat_states.lua
	seatStatesSrc    string
	seatStatesScript = redis.NewScript(seatStatesSrc)
)

// SeatState is what a reserved seat is in Redis.
type SeatState string

// States of a reserved seat.
const (
	SeatFree SeatState = "free"
	SeatHeld SeatState = "held"
	SeatSold SeatState = "sold"
)

// SeatMapState is a seat map's state in Redis at one moment.
type SeatMapState struct {
	// Seats are the reserved seats a live hold has: held (pending, not
	// past its expiry) or sold (confirmed). A seat not in it is free.
	Seats map[string]SeatState
	// Places are the places left of each general-admission section, the
	// places of holds past their expiry counted as free.
	Places map[string]int64
}

// SeatStates reads event's seat map state at now. loaded is false when the
// keys are missing or a rebuild is loading them.
func (inv *Inventory) SeatStates(ctx context.Context, event int64, now time.Time) (SeatMapState, bool, error) {
	k := KeysFor(event)
	vals, err := seatStatesScript.Run(ctx, inv.rdb, []string{k.Remaining, k.Holds, k.Expiry, k.Frozen, k.Seats, k.Sections}, ms(now)).Slice()
	if err != nil {
		return SeatMapState{}, false, fmt.Errorf("read seats of event %d: %w", event, err)
	}
	r, err := parseReply(vals, 1)
	if err != nil {
		return SeatMapState{}, false, fmt.Errorf("read seats of event %d: %w", event, err)
	}
	if r.str(0) != "ok" {
		return SeatMapState{}, false, r.err
	}
	if len(vals) < 2 {
		return SeatMapState{}, false, fmt.Errorf("read seats of event %d: reply has no section count", event)
	}
	m := int(r.int(1))
	first := 2 + 2*m
	if first > len(vals) {
		return SeatMapState{}, false, fmt.Errorf("read seats of event %d: reply has %d values for %d sections", event, len(vals), m)
	}
	out := SeatMapState{Seats: make(map[string]SeatState, (len(vals)-first)/2), Places: make(map[string]int64, m)}
	for i := 2; i < first; i += 2 {
		out.Places[r.str(i)] = r.int(i + 1)
	}
	for i := first; i+1 < len(vals); i += 2 {
		out.Seats[r.str(i)] = SeatState(r.str(i + 1))
	}
	return out, true, r.err
}
