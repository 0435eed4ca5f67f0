package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Correction is what Correct did.
type Correction struct {
	// Before and After are remaining before and after the call.
	Before, After int64
	// Added and Dropped count the hold records added and dropped.
	Added, Dropped int64
	// Seats counts the reserved seats whose owner was set right: missing,
	// stray, or another hold's.
	Seats int64
	// Places is by how many places the general-admission sections' counts
	// were set right, in all.
	Places int64
	// Lapsed counts the holds of add not added for expiring before
	// notBefore.
	Lapsed int64
	// Confirmed counts the pending records confirmed from a confirmed
	// hold of add: confirmations Redis lost.
	Confirmed int64
}

// Recount says whether Correct counts every hold record again to set
// remaining, the reserved seats' owners and the sections' places.
type Recount bool

const (
	// RecountAlways counts whatever the call changed: it also sets right
	// counts that something wrote outside the scripts.
	RecountAlways Recount = true
	// RecountIfChanged counts only when the call added, dropped or
	// confirmed a record. The count reads every record in one script,
	// which blocks Redis for about a second per hundred thousand holds,
	// while the scripts keep the counts in step with the records.
	RecountIfChanged Recount = false
)

// Correct brings an event's keys in line with the ledger without stopping
// the sale: it adds the holds of add that Redis does not have (live in the
// ledger, lost by Redis: a failover that dropped acknowledged writes),
// confirms the pending records of the confirmed holds of add (a lost
// confirmation: Redis would give the seats away at the hold's expiry), drops
// the holds of drop (ended in the ledger) except buyers' records of no
// seats, and (by recount) sets remaining to sellable minus the seats of
// every hold record, all in one script. Holds, releases and reclaims keep
// remaining and the records in step, so that count is exact with any
// number of them in flight; the reserved seats' owners are rewritten from
// the records' seat lists, and each general-admission section of sections
// (section -> capacity) is set to its capacity minus the places of the
// records naming it. A hold whose ledger row is not written yet keeps its seats until
// its own request settles it. Read the ledger after the Redis state the
// drops were chosen from: a hold is added only if Redis still lacks it when
// the script runs. A pending hold of add expiring before notBefore (zero:
// no bound) is not added: a node whose clock is ahead may have reclaimed
// it, and its seats gone to another hold, so the caller passes its clock
// plus how far apart the nodes' clocks may be. It fails with ErrNotLoaded,
// or ErrFrozen while a rebuild holds the fence (the rebuild sets everything
// anyway).
func (inv *Inventory) Correct(ctx context.Context, event, sellable int64, sections map[string]int64, notBefore time.Time, recount Recount, add []LiveHold, drop []string) (Correction, error) {
	capacities, err := sectionsArg(sections)
	if err != nil {
		return Correction{}, fmt.Errorf("correct event %d: %w", event, err)
	}
	bound := int64(0)
	if !notBefore.IsZero() {
		bound = ms(notBefore)
	}
	always := 0
	if recount {
		always = 1
	}
	args := make([]any, 0, 5+4*len(add)+len(drop))
	args = append(args, sellable, capacities, bound, always, len(add))
	for _, h := range add {
		rec, err := json.Marshal(h.record())
		if err != nil {
			return Correction{}, fmt.Errorf("correct event %d: encode hold %s: %w", event, h.ID, err)
		}
		exp := int64(-1)
		if !h.Confirmed && !h.Overflow {
			exp = ms(h.ExpiresAt)
		}
		args = append(args, h.ID, h.User, rec, exp)
	}
	for _, id := range drop {
		args = append(args, id)
	}
	vals, err := correctScript.Run(ctx, inv.rdb, KeysFor(event).all(), args...).Slice()
	if err != nil {
		return Correction{}, fmt.Errorf("correct event %d: %w", event, err)
	}
	r, err := parseReply(vals, 9)
	if err != nil {
		return Correction{}, fmt.Errorf("correct event %d: %w", event, err)
	}
	switch Outcome(r.str(0)) {
	case frozen:
		return Correction{}, fmt.Errorf("correct event %d: %w", event, ErrFrozen)
	case notLoaded:
		return Correction{}, fmt.Errorf("correct event %d: %w", event, ErrNotLoaded)
	}
	c := Correction{Before: r.int(1), After: r.int(2), Added: r.int(3), Dropped: r.int(4), Seats: r.int(5), Places: r.int(6), Lapsed: r.int(7), Confirmed: r.int(8)}
	return c, r.err
}

// PendingIDs lists the ids of the holds Redis has pending for event: those
// in its expiry index, read a page at a time (see scanIDs).
func (inv *Inventory) PendingIDs(ctx context.Context, event int64) ([]string, error) {
	ids, err := scanIDs(ctx, inv.rdb.ZScan, KeysFor(event).Expiry)
	if err != nil {
		return nil, fmt.Errorf("list pending holds of event %d: %w", event, err)
	}
	return ids, nil
}

// HoldIDs lists the ids of the hold records Redis keeps for event, read a
// page at a time (see scanIDs).
func (inv *Inventory) HoldIDs(ctx context.Context, event int64) ([]string, error) {
	ids, err := scanIDs(ctx, inv.rdb.HScan, KeysFor(event).Holds)
	if err != nil {
		return nil, fmt.Errorf("list holds of event %d: %w", event, err)
	}
	return ids, nil
}

// scanPage is how many entries one call of a listing asks Redis for.
const scanPage = 1000

// scanIDs lists the members of the hash or sorted set at key with scan
// (HSCAN or ZSCAN), without their values, each once. One HKEYS or ZRANGE of
// a big event's holds keeps Redis from every hold and release while it
// runs (over 100 ms with 200,000 holds); a page of a scan takes 2–3 ms, in
// all about three times the work of the one read, spread out. Unlike one
// read, the listing is not a snapshot: an id there throughout is listed,
// one added or removed meanwhile may or may not be. Correct allows for
// both, as it does for changes made between a listing and its script: it
// adds a hold only if its record is missing by then, and drops one only if
// the ledger has ended it.
func scanIDs(ctx context.Context, scan func(ctx context.Context, key string, cursor uint64, match string, count int64) *redis.ScanCmd, key string) ([]string, error) {
	seen := map[string]bool{}
	var ids []string
	var cursor uint64
	for {
		page, next, err := scan(ctx, key, cursor, "", scanPage).Result()
		if err != nil {
			return nil, err
		}
		// Members and values alternate.
		for i := 0; i < len(page); i += 2 {
			if id := page[i]; !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		if next == 0 {
			return ids, nil
		}
		cursor = next
	}
}
