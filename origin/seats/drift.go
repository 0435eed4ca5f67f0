package seats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
)

// Invariant is the check of one event's inventory against the ledger:
//
//	remaining == sellable − active_holds
//	overflow_used <= overflow_reserve
//
// where active_holds counts the seats of confirmed holds and of pending
// holds not yet expired, and overflow_used the seats of late payments
// confirmed from the overflow reserve (their holds expired: they take no
// seat of the sellable pool). Confirmed counts every seat sold, from either.
// Drift is remaining − (sellable − active_holds): positive means Redis
// would sell seats the ledger has given away (the dangerous direction),
// negative means seats are stuck.
type Invariant struct {
	Event           int64 `json:"event"`
	Capacity        int64 `json:"capacity"`
	Sellable        int64 `json:"sellable"`
	OverflowReserve int64 `json:"overflow_reserve"`
	Remaining       int64 `json:"remaining"`
	ActiveHolds     int64 `json:"active_holds"`
	Pending         int64 `json:"pending"`
	Confirmed       int64 `json:"confirmed"`
	OverflowUsed    int64 `json:"overflow_used"`
	// Tickets counts valid tickets: one per seat confirmed.
	Tickets int64 `json:"tickets"`
	Drift   int64 `json:"drift"`
	// SeatDrift counts the reserved seats whose state (free, held, sold)
	// differs between Redis and the ledger, and the places by which a
	// general-admission section's count differs; Sections the same by
	// section. Both absent for a general-admission event.
	SeatDrift *int64         `json:"seat_drift,omitempty"`
	Sections  []SectionDrift `json:"sections,omitempty"`
}

// CheckInvariant computes the invariant of an event. Redis is read before
// and after the ledger and the check repeated if it moved in between, so a
// sale in progress does not show as drift. Missing keys are loaded first
// (the ledger wins).
func (rc *Recovery) CheckInvariant(ctx context.Context, id int64) (Invariant, error) {
	ev, err := rc.registry.Event(ctx, id)
	if err != nil {
		return Invariant{}, err
	}
	var inv Invariant
	for attempt := 0; ; attempt++ {
		before, loaded, err := rc.reclaim(ctx, ev)
		if err != nil {
			return Invariant{}, err
		}
		if !loaded {
			if err := rc.ensureLoaded(ctx, ev); err != nil {
				return Invariant{}, err
			}
			continue
		}
		counts, err := rc.ledger.SeatCounts(ctx, id, rc.now())
		if err != nil {
			return Invariant{}, err
		}
		after, loaded, err := rc.reclaim(ctx, ev)
		if err != nil {
			return Invariant{}, err
		}
		inv = Invariant{
			Event: id, Capacity: ev.Capacity, Sellable: ev.Sellable, OverflowReserve: ev.OverflowReserve,
			Remaining: after, ActiveHolds: counts.Active(), Pending: counts.Pending,
			Confirmed: counts.Confirmed + counts.OverflowUsed, OverflowUsed: counts.OverflowUsed, Tickets: counts.Tickets,
			Drift: after - (ev.Sellable - counts.Active()),
		}
		if (loaded && before == after) || attempt >= 4 {
			break
		}
	}
	if ev.Seated() {
		n, sections, err := rc.seatDrift(ctx, ev)
		if err != nil {
			return Invariant{}, err
		}
		inv.SeatDrift, inv.Sections = &n, sections
	}
	rc.metrics.Drift.WithLabelValues(fmt.Sprint(id)).Set(float64(inv.Drift))
	rc.metrics.Remaining.WithLabelValues(fmt.Sprint(id)).Set(float64(inv.Remaining))
	return inv, nil
}

// CorrectDrift corrects an event's inventory from the ledger while its sale
// goes on: the holds Redis lost are added back, those the ledger ended are
// dropped, and remaining is set from the hold records Redis keeps, in one
// script (inventory.Correct), so the holds, releases and reclaims running
// meanwhile on any node are counted exactly. Nothing is paused or frozen.
func (rc *Recovery) CorrectDrift(ctx context.Context, id int64) (inventory.Correction, error) {
	ev, err := rc.registry.Event(ctx, id)
	if err != nil {
		return inventory.Correction{}, err
	}
	return rc.Correct(ctx, ev, inventory.RecountAlways)
}

// Correct is CorrectDrift of an event read already; recount says whether
// the script counts every hold record again when it changed none.
func (rc *Recovery) Correct(ctx context.Context, ev *Event, recount inventory.Recount) (inventory.Correction, error) {
	// Redis first: a hold the ledger has ended stays ended, whenever read.
	inRedis, err := rc.inv.HoldIDs(ctx, ev.ID)
	if err != nil {
		return inventory.Correction{}, err
	}
	ended, err := rc.ledger.EndedHolds(ctx, inRedis)
	if err != nil {
		return inventory.Correction{}, err
	}
	pending, err := rc.inv.PendingIDs(ctx, ev.ID)
	if err != nil {
		return inventory.Correction{}, err
	}
	snap, err := rc.ledgerState(ctx, ev, func(ctx context.Context) ([]ledger.LiveHold, []ledger.OverflowBuyer, error) {
		return rc.ledger.LiveHoldsNow(ctx, ev.ID, rc.now())
	})
	if err != nil {
		return inventory.Correction{}, err
	}
	have := make(map[string]bool, len(inRedis))
	for _, id := range inRedis {
		have[id] = true
	}
	pendingInRedis := make(map[string]bool, len(pending))
	for _, id := range pending {
		pendingInRedis[id] = true
	}
	// A hold the ledger has confirmed and Redis pending is a confirmation
	// Redis lost: it is passed too, and the script confirms it, or Redis
	// would give its seats away at its expiry. (The other way round, a
	// hold confirmed in Redis whose ledger step failed, is left: its
	// payment's retry completes it, or the ledger ends it and it is
	// dropped.)
	var add []inventory.LiveHold
	for _, h := range snap.Holds {
		if !have[h.ID] || (h.Confirmed && pendingInRedis[h.ID]) {
			add = append(add, h)
		}
	}
	if rc.beforeCorrect != nil {
		rc.beforeCorrect()
	}
	// A hold this node reads live may have lapsed by the clock of another
	// node, ahead of this one by up to the margin, and been reclaimed there,
	// its seats gone to another hold: such a hold is not put back.
	c, err := rc.inv.Correct(ctx, ev.ID, ev.Sellable, ev.sectionCapacities(), rc.now().Add(rc.cfg.ClockSkewMargin), recount, add, ended)
	if err != nil {
		return c, err
	}
	if c.Added > 0 || c.Confirmed > 0 {
		// A hold read live above may have been released since, its record
		// gone before the script put it back (or its release still owed to
		// Redis): its seats would stay taken until the next pass. The
		// ledger is asked again now that the script has run; any of them
		// ended by now is dropped at once.
		if c, err = rc.dropEndedSince(ctx, ev, add, c); err != nil {
			return c, err
		}
	}
	if c.Before != c.After || c.Added > 0 || c.Dropped > 0 || c.Seats > 0 || c.Places > 0 || c.Confirmed > 0 {
		rc.metrics.DriftCorrections.Inc()
		rc.log.Warn("inventory corrected from the ledger", "event", ev.ID, "remaining_before", c.Before,
			"remaining_after", c.After, "holds_added", c.Added, "holds_confirmed", c.Confirmed, "holds_dropped", c.Dropped, "seats_corrected", c.Seats, "places_corrected", c.Places)
		if ev.room.State().SoldOut != (c.After == 0) {
			rc.registry.SyncSoldOut(ctx, ev)
		}
	}
	return c, nil
}

// dropEndedSince drops the holds of added that the ledger has ended by now,
// folding the second script's figures into c.
func (rc *Recovery) dropEndedSince(ctx context.Context, ev *Event, added []inventory.LiveHold, c inventory.Correction) (inventory.Correction, error) {
	ids := make([]string, len(added))
	for i, h := range added {
		ids[i] = h.ID
	}
	ended, err := rc.ledger.EndedHolds(ctx, ids)
	if err != nil || len(ended) == 0 {
		return c, err
	}
	again, err := rc.inv.Correct(ctx, ev.ID, ev.Sellable, ev.sectionCapacities(), time.Time{}, inventory.RecountIfChanged, nil, ended)
	if err != nil {
		return c, err
	}
	c.After = again.After
	c.Dropped += again.Dropped
	c.Seats += again.Seats
	c.Places += again.Places
	return c, nil
}

// RebuildLastingDrift rebuilds an event whose drift is the same as at the last
// quiet check. A hold write, an uncertain write, a release still owed to
// Redis or a rebuild under way each move the drift for a moment; the same
// non-zero drift at two checks a reconcile interval apart, with none of
// them under way either time, is a lasting disagreement (seats leaked, or
// sellable twice). Other nodes' writes are not seen here, but would not
// leave the same drift twice; and a rebuild waits for them anyway.
func (rc *Recovery) RebuildLastingDrift(ctx context.Context, ev *Event, inv Invariant, quiet bool) error {
	seen := int64(0)
	if quiet {
		seen = inv.Drift
	}
	if last := ev.driftSeen.Swap(seen); seen == 0 || last != seen {
		return nil
	}
	rc.log.Error("inventory drift persists with nothing in flight: rebuilding from the ledger", "event", ev.ID,
		"remaining", inv.Remaining, "sellable", inv.Sellable, "active_holds", inv.ActiveHolds, "drift", inv.Drift)
	ev.driftSeen.Store(0)
	if err := rc.rebuild(ctx, ev, reasonDrift); err != nil && !errors.Is(err, inventory.ErrRebuilding) {
		return err
	}
	_, err := rc.CheckInvariant(ctx, ev.ID)
	return err
}

// Quiet reports whether nothing that moves the drift for a moment is under
// way for the event: this node's hold writes, its uncertain writes and its
// releases owed to Redis, and any node's rebuild.
func (rc *Recovery) Quiet(ctx context.Context, ev *Event) bool {
	if ev.inflight.Load() > 0 {
		return false
	}
	if rc.releases.pending(ev.ID) {
		return false
	}
	frozen, err := rc.inv.Frozen(ctx, ev.ID)
	return err == nil && !frozen
}

// Rebuild reloads an event's inventory from the ledger and returns the
// invariant after it.
func (rc *Recovery) Rebuild(ctx context.Context, id int64) (Invariant, error) {
	ev, err := rc.registry.Event(ctx, id)
	if err != nil {
		return Invariant{}, err
	}
	if err := rc.rebuild(ctx, ev, reasonAdmin); err != nil {
		return Invariant{}, err
	}
	return rc.CheckInvariant(ctx, id)
}

// ensureLoaded rebuilds an event whose keys are missing, or waits for the
// rebuild another node is running.
func (rc *Recovery) ensureLoaded(ctx context.Context, ev *Event) error {
	for {
		_, loaded, err := rc.inv.Remaining(ctx, ev.ID)
		if err != nil {
			return err
		}
		if loaded {
			return nil
		}
		frozen, err := rc.inv.Frozen(ctx, ev.ID)
		if err != nil {
			return err
		}
		if !frozen {
			err := rc.rebuild(ctx, ev, reasonMissing)
			if err == nil || !errors.Is(err, inventory.ErrRebuilding) {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the rebuild of event %d: %w", ev.ID, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Why a rebuild runs.
const (
	reasonAdmin   = "admin"
	reasonMissing = "missing"
	// reasonDrift: the reconciler found the same drift twice with nothing
	// in flight.
	reasonDrift = "drift"
	// reasonCreated: a new event, which cannot have holds yet unless
	// another node loaded it first, so there is nothing to wait for.
	reasonCreated = "created"
)

// rebuild is the recovery procedure: freeze the inventory (the fence: no
// hold, release or change runs while it is set, and it lapses by itself if
// this node dies mid-way), let the hold writes already under way finish,
// count the ledger, load Redis, lift the fence. The fence is the rebuild's
// pause: the admission state an operator controls (paused, sold out) is
// never touched. Concurrent calls on this node share one run.
func (rc *Recovery) rebuild(ctx context.Context, ev *Event, reason string) error {
	_, err, _ := rc.flight.Do(fmt.Sprintf("rebuild:%d", ev.ID), func() (any, error) {
		// Detached: callers may give up waiting, the rebuild must not stop
		// half way (it would only leave the event unloaded, but needlessly).
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), inventory.FenceTTL)
		defer cancel()
		onlyMissing := reason == reasonMissing || reason == reasonCreated
		if onlyMissing {
			// Loaded meanwhile: nothing to do. (Reload below checks again,
			// under the fence.)
			if _, loaded, err := rc.inv.Remaining(ctx, ev.ID); err == nil && loaded {
				return nil, nil
			}
		}
		start := rc.cfg.WallClock()
		read := func(ctx context.Context) (inventory.Snapshot, error) {
			if rc.duringRebuild != nil {
				rc.duringRebuild()
			}
			if reason != reasonCreated {
				if err := rc.settle(ctx, ev); err != nil {
					return inventory.Snapshot{}, err
				}
			}
			return rc.snapshot(ctx, ev)
		}
		if onlyMissing {
			// Requests that found the keys missing may get here just after
			// another rebuild loaded them, and a new event may have been
			// loaded by another node's first hold, whose seats a reset would
			// give away: Reload leaves loaded keys alone.
			if loaded, err := rc.inv.Reload(ctx, ev.ID, read); err != nil || !loaded {
				return nil, err
			}
		} else if err := rc.inv.Rebuild(ctx, ev.ID, read); err != nil {
			return nil, err
		}
		rc.metrics.Rebuilds.WithLabelValues(reason).Inc()
		rc.log.Info("inventory rebuilt from the ledger", "event", ev.ID, "reason", reason, "took", rc.cfg.WallClock().Sub(start))
		return nil, nil
	})
	return err
}

// settle waits, once the inventory is frozen, until no hold write that ran
// the hold script before the freeze can still be committed, so the ledger
// read next has every row it will ever have: this node's writes exactly
// (until they end, and those it gave up on until their deadline, checked by
// the server, has passed), other nodes' for RebuildSettle (their write
// timeout) plus the clock-skew margin.
func (rc *Recovery) settle(ctx context.Context, ev *Event) error {
	var until time.Time
	if rc.cfg.RebuildSettle > 0 {
		until = rc.cfg.WallClock().Add(rc.cfg.RebuildSettle + rc.cfg.ClockSkewMargin)
	}
	for ev.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	// Read after the count reached 0: a write noted as given up on before it
	// left the count is seen here.
	if final := time.Unix(0, ev.finalAt.Load()); final.After(until) {
		until = final
	}
	if wait := until.Sub(rc.cfg.WallClock()); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// snapshot is the state the ledger says Redis should hold.
func (rc *Recovery) snapshot(ctx context.Context, ev *Event) (inventory.Snapshot, error) {
	return rc.ledgerState(ctx, ev, func(ctx context.Context) ([]ledger.LiveHold, []ledger.OverflowBuyer, error) {
		return rc.ledger.LiveHolds(ctx, ev.ID, rc.now())
	})
}

// ledgerState turns the ledger's live holds and overflow buyers, as read
// returns them, into the state Redis should hold.
func (rc *Recovery) ledgerState(ctx context.Context, ev *Event, read func(context.Context) ([]ledger.LiveHold, []ledger.OverflowBuyer, error)) (inventory.Snapshot, error) {
	rows, buyers, err := read(ctx)
	if err != nil {
		return inventory.Snapshot{}, err
	}
	snap := inventory.Snapshot{Holds: make([]inventory.LiveHold, 0, len(buyers)+len(rows))}
	// The buyers first: a live hold a buyer made since takes their place in
	// the one-hold-per-user guard.
	for _, b := range buyers {
		snap.Holds = append(snap.Holds, inventory.LiveHold{
			ID: b.ID, User: b.UserID, Overflow: true,
			KeyDigest: idem.KeyDigest(b.UserID, b.IdempotencyKey), BodyDigest: b.RequestDigest,
		})
	}
	var active int64
	for _, h := range rows {
		active += h.Quantity
		snap.Holds = append(snap.Holds, inventory.LiveHold{
			ID: h.ID, User: h.UserID, Quantity: h.Quantity, ExpiresAt: h.ExpiresAt,
			Confirmed:  h.Status == ledger.StatusConfirmed,
			KeyDigest:  idem.KeyDigest(h.UserID, h.IdempotencyKey),
			BodyDigest: h.RequestDigest,
			Seats:      h.Seats,
			Section:    h.Section,
		})
	}
	if caps := ev.sectionCapacities(); caps != nil {
		snap.Sections = make(map[string]int64, len(caps))
		for _, h := range rows {
			if h.Section != "" {
				caps[h.Section] -= h.Quantity
			}
		}
		for s, left := range caps {
			snap.Sections[s] = max(left, 0)
		}
	}
	snap.Remaining = ev.Sellable - active
	if snap.Remaining < 0 {
		rc.log.Error("ledger holds exceed the sellable pool", "event", ev.ID, "sellable", ev.Sellable, "active", active)
		snap.Remaining = 0
	}
	return snap, nil
}

// reclaim returns lapsed holds' seats in Redis and reads remaining, so the
// count treats expired holds as free, as the ledger does.
func (rc *Recovery) reclaim(ctx context.Context, ev *Event) (int64, bool, error) {
	n, seats, loaded, err := rc.inv.Reclaim(ctx, ev.ID, rc.now())
	if seats > 0 {
		rc.metrics.ReclaimedSeats.Add(float64(seats))
		if ev.room.State().SoldOut {
			rc.registry.SyncSoldOut(ctx, ev)
		}
	}
	return n, loaded, err
}
