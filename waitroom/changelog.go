package waitroom

import (
	"context"
	"encoding/json"
	"strconv"
	"time"
)

// MaxLogEntries bounds an event's change log in the store: the newest are
// kept.
const MaxLogEntries = 1000

// Actors of the changes the package makes itself.
const (
	ActorAutopilot = "autopilot"
	// ActorUnnamed is logged for a change that named no actor.
	ActorUnnamed = "unnamed"
)

// LogEntry is one change of an event's admission state: who moved which
// field from what to what, and why (docs/api.md §4, the change log).
type LogEntry struct {
	Time  time.Time `json:"time"`
	Actor string    `json:"actor"`
	// Field is watermark, hard_cap, hard_cap_per_remaining, sold_out or
	// paused.
	Field  string          `json:"field"`
	From   json.RawMessage `json:"from"`
	To     json.RawMessage `json:"to"`
	Reason string          `json:"reason"`
}

// ChangeLogStore keeps each event's change log, newest first, bounded by
// MaxLogEntries. Both of the package's stores are one: their Update writes
// it.
type ChangeLogStore interface {
	// ChangeLog reads up to limit entries of event, newest first.
	ChangeLog(ctx context.Context, event int64, limit int) ([]LogEntry, error)
}

// logEntries lists what c changed between before and after, newest last
// (the order they are pushed in).
func logEntries(c Change, before, after State, at time.Time) []LogEntry {
	actor := c.Actor
	if actor == "" {
		actor = ActorUnnamed
	}
	var out []LogEntry
	add := func(field string, from, to string) {
		if from != to {
			out = append(out, LogEntry{Time: at.UTC(), Actor: actor, Field: field,
				From: json.RawMessage(from), To: json.RawMessage(to), Reason: c.Reason})
		}
	}
	num := func(n int64) string { return strconv.FormatInt(n, 10) }
	add("watermark", num(before.Watermark), num(after.Watermark))
	add("hard_cap", num(before.HardCap), num(after.HardCap))
	add("hard_cap_per_remaining", strconv.FormatFloat(before.HardCapPerRemaining, 'g', -1, 64), strconv.FormatFloat(after.HardCapPerRemaining, 'g', -1, 64))
	add("sold_out", strconv.FormatBool(before.SoldOut), strconv.FormatBool(after.SoldOut))
	add("paused", strconv.FormatBool(before.Paused), strconv.FormatBool(after.Paused))
	return out
}

// ChangeLog reads the event's change log, newest first; ErrNotLogged when
// the store keeps none.
func (r *Room) ChangeLog(ctx context.Context, limit int) ([]LogEntry, error) {
	ls, ok := r.store.(ChangeLogStore)
	if !ok {
		return nil, ErrNotLogged
	}
	if limit <= 0 || limit > MaxLogEntries {
		limit = MaxLogEntries
	}
	return ls.ChangeLog(ctx, r.event, limit)
}
