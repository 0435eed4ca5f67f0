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

// SeatStates reads which reserved seats of event a live hold has at now:
// held (pending, not past its expiry) or sold (confirmed). A seat not in
// the map is free. loaded is false when the keys are missing or a rebuild
// is loading them.
func (inv *Inventory) SeatStates(ctx context.Context, event int64, now time.Time) (map[string]SeatState, bool, error) {
	k := KeysFor(event)
	vals, err := seatStatesScript.Run(ctx, inv.rdb, []string{k.Remaining, k.Holds, k.Expiry, k.Frozen, k.Seats}, ms(now)).Slice()
	if err != nil {
		return nil, false, fmt.Errorf("read seats of event %d: %w", event, err)
	}
	r, err := parseReply(vals, 1)
	if err != nil {
		return nil, false, fmt.Errorf("read seats of event %d: %w", event, err)
	}
	if r.str(0) != "ok" {
		return nil, false, r.err
	}
	out := make(map[string]SeatState, (len(vals)-1)/2)
	for i := 1; i+1 < len(vals); i += 2 {
		out[r.str(i)] = SeatState(r.str(i + 1))
	}
	return out, true, r.err
}
