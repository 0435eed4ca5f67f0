package inventory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// FenceTTL is how long a rebuild may hold the fence without renewing it; a
// rebuild that dies leaves the event frozen at most this long, then "not
// loaded" (remaining is only set at the very end), never half loaded.
const FenceTTL = 30 * time.Second

// rebuildBatch is how many holds go to Redis per script call, so one call
// never blocks Redis long however big the event.
const rebuildBatch = 500

// LiveHold is a hold the ledger counts against the sellable pool: pending
// and not expired, or confirmed.
type LiveHold struct {
	ID        string
	User      string
	Quantity  int64
	ExpiresAt time.Time
	Confirmed bool
	// Overflow: the buyer's record of no seats (Record.Overflow); Quantity
	// is 0 and Confirmed is implied.
	Overflow bool
	// KeyDigest and BodyDigest as in Record.
	KeyDigest, BodyDigest string
	// Seats are the reserved seats the hold has, as in Record.
	Seats []string
	// Section is the general-admission section the hold has places of, as
	// in Record.
	Section string
}

// record is the Record Redis keeps for h.
func (h LiveHold) record() Record {
	r := Record{User: h.User, Quantity: h.Quantity, KeyDigest: h.KeyDigest, BodyDigest: h.BodyDigest,
		Confirmed: h.Confirmed || h.Overflow, Overflow: h.Overflow}
	if !h.Overflow && len(h.Seats) > 0 {
		r.Seats = slices.Sorted(slices.Values(h.Seats))
	}
	if !h.Overflow {
		r.Section = h.Section
	}
	return r
}

// Snapshot is the state the ledger says Redis should have.
type Snapshot struct {
	Remaining int64
	// Sections are the places left of each general-admission section of
	// a seat map.
	Sections map[string]int64
	// Holds are loaded in order: a later hold of a user takes the user's
	// place in the one-hold-per-user guard.
	Holds []LiveHold
}

// sectionsArg is the JSON object of places by general-admission section a
// script takes ({} for none).
func sectionsArg(m map[string]int64) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode sections: %w", err)
	}
	return string(b), nil
}

// Rebuild replaces event's keys with what read returns. It freezes the keys
// first (the scripts refuse or wait while frozen), so no hold, release or
// confirmation can slip in between the ledger read and the load and be lost;
// read runs after the freeze for that reason. It fails with ErrRebuilding
// when another rebuild holds the fence.
func (inv *Inventory) Rebuild(ctx context.Context, event int64, read func(context.Context) (Snapshot, error)) error {
	_, err := inv.rebuild(ctx, event, false, read)
	return err
}

// Reload is Rebuild for an event whose keys are missing (a flushed or
// restarted Redis). It checks that they still are once it holds the fence,
// and changes nothing when they are not: callers that saw the keys missing
// while another rebuild was loading them must not clear them again. It
// reports whether it loaded the event.
func (inv *Inventory) Reload(ctx context.Context, event int64, read func(context.Context) (Snapshot, error)) (bool, error) {
	return inv.rebuild(ctx, event, true, read)
}

// errLoaded abandons a Reload that found the keys loaded.
var errLoaded = errors.New("already loaded")

func (inv *Inventory) rebuild(ctx context.Context, event int64, onlyMissing bool, read func(context.Context) (Snapshot, error)) (loaded bool, err error) {
	k := KeysFor(event)
	var b [16]byte
	_, _ = rand.Read(b[:])
	fence := hex.EncodeToString(b[:])
	ok, err := inv.rdb.SetNX(ctx, k.Frozen, fence, FenceTTL).Result()
	if err != nil {
		return false, fmt.Errorf("rebuild event %d: set fence: %w", event, err)
	}
	if !ok {
		// When the reply to the SET NX is lost, go-redis sends it again and
		// the retry finds the fence the first try set: with our token, which
		// no other rebuild has, it is ours. (SET NX GET would say so in one
		// call, but needs Redis 7.)
		owner, err := inv.rdb.Get(ctx, k.Frozen).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("rebuild event %d: read fence: %w", event, err)
		}
		if owner != fence {
			return false, fmt.Errorf("rebuild event %d: %w", event, ErrRebuilding)
		}
	}
	defer func() {
		if errors.Is(err, errLoaded) {
			loaded, err = false, nil
		}
		if loaded {
			return
		}
		// Lift the fence even if ctx is what failed: leaving it would block
		// the event for FenceTTL.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if aerr := rebuildFinishScript.Run(actx, inv.rdb, []string{k.Remaining, k.Frozen, k.Sections}, fence, "", "").Err(); aerr != nil {
			err = errors.Join(err, fmt.Errorf("lift fence: %w", aerr))
		}
	}()

	if onlyMissing {
		n, err := inv.rdb.Exists(ctx, k.Remaining).Result()
		if err != nil {
			return false, fmt.Errorf("rebuild event %d: %w", event, err)
		}
		if n == 1 {
			return false, errLoaded
		}
	}
	snap, err := read(ctx)
	if err != nil {
		return false, fmt.Errorf("rebuild event %d: read ledger: %w", event, err)
	}
	if snap.Remaining < 0 {
		return false, fmt.Errorf("rebuild event %d: remaining %d is negative", event, snap.Remaining)
	}
	mode := "reset"
	for start := 0; start == 0 || start < len(snap.Holds); start += rebuildBatch {
		batch := snap.Holds[start:min(start+rebuildBatch, len(snap.Holds))]
		args := make([]any, 0, 3+4*len(batch))
		args = append(args, fence, mode, FenceTTL.Milliseconds())
		for _, h := range batch {
			rec, err := json.Marshal(h.record())
			if err != nil {
				return false, fmt.Errorf("rebuild event %d: encode hold %s: %w", event, h.ID, err)
			}
			exp := int64(-1)
			if !h.Confirmed && !h.Overflow {
				exp = ms(h.ExpiresAt)
			}
			args = append(args, h.ID, h.User, rec, exp)
		}
		// A batch run again by go-redis after a lost reply loads the same
		// holds again (a "reset" clears what the first run loaded): harmless.
		if err := rebuildLoadScript.Run(ctx, inv.rdb, k.all(), args...).Err(); err != nil {
			return false, fmt.Errorf("rebuild event %d: load holds: %w", event, err)
		}
		mode = "append"
	}
	sections, err := sectionsArg(snap.Sections)
	if err != nil {
		return false, fmt.Errorf("rebuild event %d: %w", event, err)
	}
	n, err := rebuildFinishScript.Run(ctx, inv.rdb, []string{k.Remaining, k.Frozen, k.Sections}, fence, snap.Remaining, sections).Int()
	if err != nil {
		return false, fmt.Errorf("rebuild event %d: set remaining: %w", event, err)
	}
	if n == 0 {
		return false, fmt.Errorf("rebuild event %d: fence lost before remaining was set", event)
	}
	return true, nil
}
