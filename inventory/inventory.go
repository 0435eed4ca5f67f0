package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultReclaimLimit bounds how many expired holds one hold call returns to
// the pool, so a call stays short however many holds lapsed at once; the
// reaper takes the rest.
const DefaultReclaimLimit = 20

// Errors of the inventory.
var (
	// ErrNotLoaded means the event's keys are missing (new event, flushed or
	// restarted Redis): Rebuild loads them from the ledger.
	ErrNotLoaded = errors.New("inventory not loaded")
	// ErrFrozen means a rebuild is loading the keys right now.
	ErrFrozen = errors.New("inventory is being rebuilt")
	// ErrRebuilding is returned by Rebuild when another rebuild of the event
	// holds the fence.
	ErrRebuilding = errors.New("another rebuild is in progress")
)

// Record is what Redis keeps about a hold.
type Record struct {
	User     string `json:"u"`
	Quantity int64  `json:"q"`
	// KeyDigest and BodyDigest identify the request that made the hold, so
	// a retry of that very request can be answered as the first one was even
	// after the idempotency record is gone.
	KeyDigest  string `json:"k,omitempty"`
	BodyDigest string `json:"b,omitempty"`
	Confirmed  bool   `json:"c,omitempty"`
	// Overflow marks the record of a buyer whose hold expired and who was
	// then served from the overflow reserve: it takes no seat (Quantity 0)
	// and only keeps the buyer's place in the one-hold-per-user guard.
	Overflow bool `json:"o,omitempty"`
	// Seats are the reserved seats the hold has (Quantity of them), sorted;
	// none for a general-admission hold.
	Seats []string `json:"s,omitempty"`
	// Section is the general-admission section of a seat map whose places
	// (Quantity of them) the hold has; "" otherwise.
	Section string `json:"g,omitempty"`
}

// Inventory runs the scripts on one Redis (or Redis Cluster).
type Inventory struct {
	rdb          redis.UniversalClient
	reclaimLimit int
	// retryEvery is the pause between attempts while a rebuild holds the
	// fence (real time: it waits for other work, not for an expiry).
	retryEvery time.Duration

	// holds runs the hold script through go-redis's AutoPipeline when the
	// client has one: the holds of concurrent requests then share round
	// trips (a batch is one write and one read, and one read for Redis)
	// instead of a round trip each. A call is then not cut short by its
	// context: it waits for its answer, which the caller needs anyway (the
	// seats may have been taken).
	holds redis.Scripter
}

// New wraps rdb; the client is the caller's to close.
func New(rdb redis.UniversalClient) *Inventory {
	inv := &Inventory{rdb: rdb, holds: rdb, reclaimLimit: DefaultReclaimLimit, retryEvery: 20 * time.Millisecond}
	if c, ok := rdb.(interface {
		AutoPipeline() (*redis.AutoPipeliner, error)
	}); ok {
		if ap, err := c.AutoPipeline(); err == nil {
			inv.holds = ap
		}
	}
	return inv
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time {
	if v < 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// Outcome is what a script did.
type Outcome string

// Outcomes of the scripts.
const (
	Held        Outcome = "held"
	AlreadyHeld Outcome = "already_held"
	SoldOut     Outcome = "sold_out"
	SeatsTaken  Outcome = "seats_taken"
	Released    Outcome = "released"
	NotLive     Outcome = "not_live"
	Confirmed   Outcome = "confirmed"
	Expired     Outcome = "expired"
	Extended    Outcome = "extended"
	Claimed     Outcome = "claimed"
	Late        Outcome = "late"
	notLoaded   Outcome = "not_loaded"
	frozen      Outcome = "frozen"
)

// HoldRequest asks for Quantity seats of Event for User.
type HoldRequest struct {
	Event int64
	// HoldID is used if a new hold is made (the caller generates it so the
	// ledger row can carry the same id).
	HoldID    string
	User      string
	Quantity  int64
	ExpiresAt time.Time
	Now       time.Time
	// KeyDigest and BodyDigest are stored in the hold's Record.
	KeyDigest, BodyDigest string
	// Seats, when set, are the reserved seats to take, all of them or none
	// (SeatsTaken); Quantity must be their count. Hold sorts them.
	Seats []string
	// Section, when set, is the general-admission section of a seat map
	// the Quantity places come out of (SoldOut when it has fewer left; the
	// result's Remaining is then the section's). Not with Seats.
	Section string

	// Claim, if set, is a key on the event's slot (its name has hashtag.Event(Event)
	// in it) that the call claims for the request, so that a caller keeping
	// idempotency records in Redis needs no round trip of its own to claim
	// one. When Claim holds a value other than ClaimReplace, the call
	// changes nothing and answers Claimed with that value; otherwise Claim
	// is set to ClaimValue for ClaimTTL with the call's answer.
	Claim, ClaimValue, ClaimReplace string
	ClaimTTL                        time.Duration

	// Deadline, if set, is the latest the call may take seats, by Redis's
	// wall clock (not Now: this is about the network, not expiry). A call
	// that reaches Redis later answers Late and changes nothing, so a caller
	// whose reply was lost knows, once Deadline has passed on Redis's clock,
	// that no run of the call can take seats any more.
	Deadline time.Time
}

// HoldResult is the answer of Hold.
type HoldResult struct {
	// Outcome is Held, AlreadyHeld, SoldOut, SeatsTaken (Taken names the
	// asked-for seats another live hold has), Late (past the Deadline) or,
	// when the request's Claim holds another request's value, Claimed.
	Outcome Outcome
	// HoldID, Record and ExpiresAt describe the new hold (Held) or the
	// user's existing one (AlreadyHeld). ExpiresAt is zero for a confirmed
	// hold.
	HoldID    string
	Record    Record
	ExpiresAt time.Time
	// Remaining is the count of seats left after the call.
	Remaining int64
	// Reclaimed is how many seats of expired holds came back in this call.
	Reclaimed int64
	// ClaimedBy is the value found under HoldRequest.Claim (Claimed).
	ClaimedBy string
	// Taken are the seats that made the hold SeatsTaken.
	Taken []string
}

// Hold runs the hold script: the user's existing hold if there is one,
// otherwise Quantity seats taken if that many remain. Expired holds are
// returned to the pool first. It fails with ErrNotLoaded or ErrFrozen when
// the keys cannot be trusted; the caller rebuilds or waits.
func (inv *Inventory) Hold(ctx context.Context, req HoldRequest) (HoldResult, error) {
	if req.Quantity < 1 {
		return HoldResult{}, fmt.Errorf("hold: quantity %d: must be at least 1", req.Quantity)
	}
	if len(req.Seats) > 0 && int64(len(req.Seats)) != req.Quantity {
		return HoldResult{}, fmt.Errorf("hold: %d seats for quantity %d", len(req.Seats), req.Quantity)
	}
	if len(req.Seats) > 0 && req.Section != "" {
		return HoldResult{}, fmt.Errorf("hold: seats and a general-admission section %s together", req.Section)
	}
	keys, argv, err := HoldScriptArgs(req, inv.reclaimLimit)
	if err != nil {
		return HoldResult{}, fmt.Errorf("hold: %w", err)
	}
	vals, err := holdScript.Run(ctx, inv.holds, keys, argv...).Slice()
	if err != nil {
		return HoldResult{}, fmt.Errorf("hold script for event %d: %w", req.Event, err)
	}
	r, err := parseReply(vals, 6)
	if err != nil {
		return HoldResult{}, fmt.Errorf("hold script for event %d: %w", req.Event, err)
	}
	out := HoldResult{Outcome: Outcome(r.str(0)), HoldID: r.str(1), Remaining: r.int(4), Reclaimed: r.int(5)}
	switch out.Outcome {
	case notLoaded:
		return out, fmt.Errorf("hold for event %d: %w", req.Event, ErrNotLoaded)
	case frozen:
		return out, fmt.Errorf("hold for event %d: %w", req.Event, ErrFrozen)
	case Claimed:
		out.ClaimedBy = r.str(2)
	case SeatsTaken:
		if err := json.Unmarshal([]byte(r.str(2)), &out.Taken); err != nil {
			return out, fmt.Errorf("hold for event %d: decode taken seats: %w", req.Event, err)
		}
	case Held, AlreadyHeld:
		if err := json.Unmarshal([]byte(r.str(2)), &out.Record); err != nil {
			return out, fmt.Errorf("hold for event %d: decode record of %s: %w", req.Event, out.HoldID, err)
		}
		out.ExpiresAt = fromMS(r.int(3))
	}
	return out, r.err
}

// ReleaseMode says which holds Release may return.
type ReleaseMode string

const (
	// PendingOnly leaves a confirmed hold alone: a hold with no ledger row
	// (which cannot have been confirmed) uses it.
	PendingOnly ReleaseMode = "pending"
	// AnyHold returns a confirmed hold's seats too: the ledger says the hold
	// is over (a cancelled sale, an expiry the reaper decided while a
	// confirmation's ledger step failed), and the ledger wins.
	AnyHold ReleaseMode = "any"
	// KeepBuyer returns the seats as AnyHold does, and leaves a record of no
	// seats (Record.Overflow) for the buyer, so the one-hold-per-user guard
	// still counts their purchase: a sale served from the overflow reserve.
	// Use ReleaseKeepingBuyer, which names the buyer.
	KeepBuyer ReleaseMode = "keep_buyer"
	// DropBuyer returns the seats as AnyHold does, and also removes a
	// buyer's record of no seats (Record.Overflow) kept under the hold: the
	// sale served from the overflow reserve ended (cancelled, refunded), so
	// the buyer may hold again.
	DropBuyer ReleaseMode = "drop_buyer"
)

// ReleaseResult is the answer of Release.
type ReleaseResult struct {
	// Outcome is Released (also for a buyer's record of no seats that
	// DropBuyer removed), NotLive (already returned, reclaimed or unknown;
	// also when the event is not loaded: a rebuild counts from the ledger)
	// or Confirmed (left alone).
	Outcome   Outcome
	Remaining int64
	// Seats is how many seats came back (0 unless Released).
	Seats int64
}

// Release returns a hold's seats once: a second release, or the release of
// a hold that is no longer live in Redis, changes nothing. While a rebuild
// holds the fence it waits (until ctx ends) rather than lose the release.
func (inv *Inventory) Release(ctx context.Context, event int64, holdID string, mode ReleaseMode) (ReleaseResult, error) {
	if mode == KeepBuyer {
		return ReleaseResult{}, fmt.Errorf("release hold %s of event %d: mode %s needs the buyer: use ReleaseKeepingBuyer", holdID, event, mode)
	}
	return inv.release(ctx, event, holdID, mode, "", time.Time{})
}

// ReleaseKeepingBuyer releases in the KeepBuyer mode: the hold's seats come
// back whatever its flag (once), and user keeps a record of no seats under
// holdID unless they hold other seats already at now (a confirmed hold, or a
// pending one not past its expiry). The record is written even when the
// hold itself is gone from Redis (reclaimed at its expiry).
func (inv *Inventory) ReleaseKeepingBuyer(ctx context.Context, event int64, holdID, user string, now time.Time) (ReleaseResult, error) {
	return inv.release(ctx, event, holdID, KeepBuyer, user, now)
}

func (inv *Inventory) release(ctx context.Context, event int64, holdID string, mode ReleaseMode, user string, now time.Time) (ReleaseResult, error) {
	waited := false
	for {
		vals, err := releaseScript.Run(ctx, inv.rdb, KeysFor(event).all(), holdID, string(mode), user, ms(now)).Slice()
		if err != nil {
			if waited && ctx.Err() != nil {
				// The caller's time ran out while the fence held the release:
				// it was not lost, it still has to be made.
				return ReleaseResult{}, fmt.Errorf("release hold %s of event %d: %w: %w", holdID, event, ErrFrozen, err)
			}
			return ReleaseResult{}, fmt.Errorf("release hold %s of event %d: %w", holdID, event, err)
		}
		r, err := parseReply(vals, 3)
		if err != nil {
			return ReleaseResult{}, fmt.Errorf("release hold %s of event %d: %w", holdID, event, err)
		}
		switch o := Outcome(r.str(0)); o {
		case frozen:
			waited = true
			if err := inv.pause(ctx); err != nil {
				return ReleaseResult{}, fmt.Errorf("release hold %s of event %d: %w: %w", holdID, event, ErrFrozen, err)
			}
		case notLoaded:
			return ReleaseResult{Outcome: NotLive}, r.err
		default:
			return ReleaseResult{Outcome: o, Remaining: r.int(1), Seats: r.int(2)}, r.err
		}
	}
}

// Confirm takes a live pending hold out of the expiry index for good. The
// outcome is Confirmed (now or earlier), Expired (past its expiry at now:
// the seat may be someone else's already) or NotLive. It fails with
// ErrNotLoaded, or ErrFrozen while a rebuild holds the fence: the caller
// waits for the rebuild (which may be waiting for the caller's own work to
// end) and calls again.
func (inv *Inventory) Confirm(ctx context.Context, event int64, holdID string, now time.Time) (Outcome, error) {
	vals, err := confirmScript.Run(ctx, inv.rdb, KeysFor(event).all(), holdID, ms(now)).Slice()
	if err != nil {
		return "", fmt.Errorf("confirm hold %s of event %d: %w", holdID, event, err)
	}
	r, err := parseReply(vals, 1)
	if err != nil {
		return "", fmt.Errorf("confirm hold %s of event %d: %w", holdID, event, err)
	}
	switch o := Outcome(r.str(0)); o {
	case frozen:
		return "", fmt.Errorf("confirm hold %s of event %d: %w", holdID, event, ErrFrozen)
	case notLoaded:
		return "", fmt.Errorf("confirm hold %s of event %d: %w", holdID, event, ErrNotLoaded)
	default:
		return o, r.err
	}
}

// Extend moves a live pending hold's expiry to until (never earlier than it
// is). The outcome is Extended (with the expiry now in force), Confirmed,
// Expired or NotLive. It fails with ErrNotLoaded or ErrFrozen as Confirm
// does.
func (inv *Inventory) Extend(ctx context.Context, event int64, holdID string, now, until time.Time) (Outcome, time.Time, error) {
	vals, err := extendScript.Run(ctx, inv.rdb, KeysFor(event).all(), holdID, ms(now), ms(until)).Slice()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("extend hold %s of event %d: %w", holdID, event, err)
	}
	r, err := parseReply(vals, 2)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("extend hold %s of event %d: %w", holdID, event, err)
	}
	switch o := Outcome(r.str(0)); o {
	case frozen:
		return "", time.Time{}, fmt.Errorf("extend hold %s of event %d: %w", holdID, event, ErrFrozen)
	case notLoaded:
		return "", time.Time{}, fmt.Errorf("extend hold %s of event %d: %w", holdID, event, ErrNotLoaded)
	case Extended:
		return o, fromMS(r.int(1)), r.err
	default:
		return o, time.Time{}, r.err
	}
}

// reclaimBatch is how many expired holds one reclaim call returns at most.
const reclaimBatch = 1000

// Reclaim returns the seats of every hold whose expiry passed before now and
// reads the count of seats left; loaded is false when the keys are missing
// or a rebuild is loading them. Reads that must count lapsed holds as free
// (the invariant, an event's remaining) use it rather than Remaining.
func (inv *Inventory) Reclaim(ctx context.Context, event int64, now time.Time) (remaining, seats int64, loaded bool, err error) {
	for {
		vals, err := reclaimScript.Run(ctx, inv.rdb, KeysFor(event).all(), ms(now), reclaimBatch).Slice()
		if err != nil {
			return 0, seats, false, fmt.Errorf("reclaim expired holds of event %d: %w", event, err)
		}
		r, err := parseReply(vals, 4)
		if err != nil {
			return 0, seats, false, fmt.Errorf("reclaim expired holds of event %d: %w", event, err)
		}
		if o := r.str(0); o != "ok" {
			return 0, seats, false, r.err
		}
		seats += r.int(2)
		if r.int(3) < reclaimBatch || r.err != nil {
			return r.int(1), seats, true, r.err
		}
	}
}

// Remaining reads the count of seats left; loaded is false when the keys are
// missing or a rebuild is loading them.
func (inv *Inventory) Remaining(ctx context.Context, event int64) (remaining int64, loaded bool, err error) {
	k := KeysFor(event)
	var get *redis.StringCmd
	var fz *redis.IntCmd
	_, err = inv.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, k.Remaining)
		fz = p.Exists(ctx, k.Frozen)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, false, fmt.Errorf("read remaining of event %d: %w", event, err)
	}
	if fz.Val() == 1 {
		return 0, false, nil
	}
	n, err := get.Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read remaining of event %d: %w", event, err)
	}
	return n, true, nil
}

// Frozen reports whether a rebuild of event holds the fence.
func (inv *Inventory) Frozen(ctx context.Context, event int64) (bool, error) {
	n, err := inv.rdb.Exists(ctx, KeysFor(event).Frozen).Result()
	if err != nil {
		return false, fmt.Errorf("read fence of event %d: %w", event, err)
	}
	return n == 1, nil
}

func (inv *Inventory) pause(ctx context.Context) error {
	t := time.NewTimer(inv.retryEvery)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// reply reads a script's array reply.
type reply struct {
	vals []any
	err  error
}

func parseReply(vals []any, n int) (*reply, error) {
	if len(vals) < n {
		return nil, fmt.Errorf("reply has %d values, want %d", len(vals), n)
	}
	return &reply{vals: vals}, nil
}

func (r *reply) str(i int) string {
	switch v := r.vals[i].(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	if r.err == nil {
		r.err = fmt.Errorf("reply value %d: unexpected %T", i, r.vals[i])
	}
	return ""
}

func (r *reply) int(i int) int64 {
	switch v := r.vals[i].(type) {
	case int64:
		return v
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil {
			return n
		}
	}
	if r.err == nil {
		r.err = fmt.Errorf("reply value %d: unexpected %T %v", i, r.vals[i], r.vals[i])
	}
	return 0
}
