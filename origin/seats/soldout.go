package seats

import (
	"context"
	"time"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/waitroom"
)

// SyncSoldOut makes the shared sold-out flag match the inventory: set when
// remaining is 0, cleared when released seats came back. Every gateway
// follows the flag within a second. A flag the origin did not set (an
// operator's) is never cleared here: it stays until the operator lifts it.
// The origin knows its own by a mark it writes next to the flag
// (soldOutMark).
func (g *Registry) SyncSoldOut(ctx context.Context, ev *Event) {
	ev.soldOutMu.Lock()
	defer ev.soldOutMu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	n, loaded, err := g.inv.Remaining(ctx, ev.ID)
	if err != nil || !loaded {
		return
	}
	want := n == 0
	st := ev.room.State()
	mark := soldOutMark(ev.ID)
	switch {
	case want && !st.SoldOut:
		// The mark first: a flag set without it would pass for an
		// operator's and never be cleared.
		if err := g.rdb.Set(ctx, mark, "1", 0).Err(); err != nil {
			g.log.Warn("could not mark the sold-out flag as the origin's", "event", ev.ID, "error", err)
			return
		}
	case !want && st.SoldOut:
		if !g.soldOutIsOurs(ctx, st, mark) {
			return // an operator's flag, or unknown: left as it is
		}
	case !st.SoldOut:
		// Lifted by anyone: a mark left would claim a later operator's flag.
		if err := g.rdb.Del(ctx, mark).Err(); err != nil {
			g.log.Warn("could not clear the sold-out mark", "event", ev.ID, "error", err)
		}
		return
	default:
		return
	}
	if _, err := ev.room.Update(ctx, waitroom.Change{SoldOut: &want, Actor: waitroom.ActorOrigin, Reason: soldOutReason(want)}); err != nil {
		g.log.Warn("could not update the sold-out flag", "event", ev.ID, "sold_out", want, "error", err)
		return
	}
	if !want {
		if err := g.rdb.Del(ctx, mark).Err(); err != nil {
			g.log.Warn("could not clear the sold-out mark", "event", ev.ID, "error", err)
		}
	}
	g.log.Info("sold-out flag updated", "event", ev.ID, "sold_out", want, "remaining", n)
}

// soldOutIsOurs tells whether the set sold-out flag of st is the
// origin's. The state says whose it is, and keeps saying it through a
// restore after Redis lost the event, where the mark is lost with the rest;
// a state that does not say (written before it did) has the mark.
func (g *Registry) soldOutIsOurs(ctx context.Context, st waitroom.State, mark string) bool {
	switch st.SoldOutBy {
	case waitroom.ActorOrigin:
		return true
	case "":
		n, err := g.rdb.Exists(ctx, mark).Result()
		return err == nil && n > 0
	default:
		return false
	}
}

// soldOutMark is the key that says the event's sold-out flag is the
// origin's, on the event's slot.
func soldOutMark(event int64) string { return "origin:" + hashtag.Event(event) + ":sold_out_set" }

// soldOutReason says in the event's change log why the origin moved the
// flag.
func soldOutReason(soldOut bool) string {
	if soldOut {
		return "no seat left to hold"
	}
	return "seats came back"
}
