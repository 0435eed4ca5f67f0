package waitroom

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/waitroom/waitroom/hashtag"
)

// A pre-queue token yields one position, ever (docs/api.md §3): the one
// the draw gave its bearer, or, when the draw has none for it (its bearer
// was not in it, or the opening was taken out of the config), the one its
// first presentation was handed, which the store keeps by the token's
// subject for as long as the token can be presented.

// PreQueueStore keeps the position a pre-queue token was handed outside
// the draw, with the moment it was handed out: a later presentation is
// judged by the window from then, as the position's own token (its hat) is,
// not from when a gateway saw the counter pass a position another leased.
type PreQueueStore interface {
	// PreQueuePosition is the position subject's pre-queue token was
	// handed and when (zero when nothing says: a draw's position); ok is
	// false when it was handed none (or the record expired).
	PreQueuePosition(ctx context.Context, event int64, subject string) (pos int64, handedOut time.Time, ok bool, err error)
	// ClaimPreQueue records pos, handed out at handedOut, for subject's
	// pre-queue token unless one is recorded already, and returns the
	// recorded one; the record lives for ttl from now.
	ClaimPreQueue(ctx context.Context, event int64, subject string, pos int64, handedOut time.Time, ttl time.Duration) (int64, time.Time, error)
}

// ErrNoPreQueueRecord is returned when the store keeps no pre-queue
// positions.
var ErrNoPreQueueRecord = errors.New("the store keeps no pre-queue positions")

// PreQueuePlaced is the position subject's pre-queue token was handed
// outside the draw, and when (zero when nothing says); ok is false when it
// was handed none yet.
func (r *Room) PreQueuePlaced(ctx context.Context, subject string) (pos int64, handedOut time.Time, ok bool, err error) {
	ps, isPS := r.store.(PreQueueStore)
	if !isPS {
		return 0, time.Time{}, false, ErrNoPreQueueRecord
	}
	return ps.PreQueuePosition(ctx, r.event, subject)
}

// PlacePreQueue hands subject's pre-queue token its one position outside
// the draw: the account's (JoinAccountAt) for an account, else the next; if
// a concurrent presentation of the token was handed one first, that one,
// and the position taken here is left unused. The record lives for ttl.
// handedOut is when the position was handed out, so its token tells every
// gateway where its admission window starts: now for a position taken
// here, the store's time for an account's, zero when nothing says.
func (r *Room) PlacePreQueue(ctx context.Context, subject string, account bool, ttl time.Duration) (pos int64, handedOut time.Time, err error) {
	ps, ok := r.store.(PreQueueStore)
	if !ok {
		return 0, time.Time{}, ErrNoPreQueueRecord
	}
	if account {
		pos, handedOut, _, err = r.JoinAccountAt(ctx, subject, ttl)
	} else {
		pos, err = r.Join(ctx)
		handedOut = r.opts.Now()
	}
	if err != nil {
		return 0, time.Time{}, err
	}
	// Another presentation's place, handed out earlier, when one was
	// claimed first: its record tells when.
	pos, handedOut, err = ps.ClaimPreQueue(ctx, r.event, subject, pos, handedOut, ttl)
	if err == nil && !account {
		r.yielded(subject, pos, handedOut, ttl)
	}
	return pos, handedOut, err
}

// RecordDrawnPreQueue records pos, the position the draw gave subject, as
// the one its pre-queue token yielded, so the token yields it again once
// the draw cannot say (the opening taken out of the config). The record
// lives for ttl; a store that keeps no pre-queue records keeps nothing.
// An account's is remembered by the account's own record (HoldAccount).
func (r *Room) RecordDrawnPreQueue(ctx context.Context, subject string, account bool, pos int64, ttl time.Duration) error {
	ps, ok := r.store.(PreQueueStore)
	if !ok {
		return nil
	}
	// A draw's position is handed out when the entries close, which the
	// room's window tells.
	pos, handedOut, err := ps.ClaimPreQueue(ctx, r.event, subject, pos, time.Time{}, ttl)
	if err == nil && !account {
		r.yielded(subject, pos, handedOut, ttl)
	}
	return err
}

// maxYields bounds the pre-queue tokens' positions a room remembers for a
// restore (some 30 MiB at most); past it, expired ones are dropped, then
// new ones are not remembered.
const maxYields = 1 << 18

// yields is the position each anonymous pre-queue token was seen to yield,
// by subject, while its record lives: the store's record goes with the
// event's state (Redis restarted empty), and without it the token would
// be placed again at the back while the position it yielded still admits
// its bearer. A room writes them back when it restores the state, as it
// does its revocations. An account's are not: the account's own record
// answers for its pre-queue token.
type yields struct {
	mu sync.Mutex
	m  map[string]accountEntry
}

// yielded remembers that subject's pre-queue token yielded pos, handed out
// at handedOut, for ttl; only with a store that can lose the record.
func (r *Room) yielded(subject string, pos int64, handedOut time.Time, ttl time.Duration) {
	if _, ok := r.store.(preQueueRestorer); !ok {
		return
	}
	now := r.opts.Now()
	e := accountEntry{pos: pos, handedOut: handedOut, until: now.Add(ttl)}
	y := &r.yields
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.m == nil {
		y.m = make(map[string]accountEntry)
	}
	if _, ok := y.m[subject]; !ok && len(y.m) >= maxYields {
		for k, old := range y.m {
			if !now.Before(old.until) {
				delete(y.m, k)
			}
		}
		if len(y.m) >= maxYields {
			return
		}
	}
	y.m[subject] = e
}

// takeOver starts y from the positions o remembers; o keeps its own.
func (y *yields) takeOver(o *yields) {
	o.mu.Lock()
	m := maps.Clone(o.m)
	o.mu.Unlock()
	y.mu.Lock()
	defer y.mu.Unlock()
	y.m = m
}

// preQueueRestorer is a PreQueueStore that can lose its records with the
// event's state (Redis), and takes back what a room remembers of them.
type preQueueRestorer interface {
	restorePreQueue(ctx context.Context, event int64, yields map[string]accountEntry) error
}

// restorePreQueue writes back the positions the room saw pre-queue tokens
// yield, where the store has none (the first claim stays).
func (r *Room) restorePreQueue(ctx context.Context) error {
	rs, ok := r.store.(preQueueRestorer)
	if !ok {
		return nil
	}
	now := r.opts.Now()
	r.yields.mu.Lock()
	live := make(map[string]accountEntry, len(r.yields.m))
	for k, e := range r.yields.m {
		if now.Before(e.until) {
			live[k] = e
		} else {
			delete(r.yields.m, k)
		}
	}
	r.yields.mu.Unlock()
	if len(live) == 0 {
		return nil
	}
	return rs.restorePreQueue(ctx, r.event, live)
}

func preQueueKey(event int64, subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return "waitroom:" + hashtag.Event(event) + ":prequeued:" + hex.EncodeToString(sum[:16])
}

// PreQueuePosition implements PreQueueStore: the key's value is an
// account's ("<pos>:<unix ms>", or "<pos>" without the moment).
func (r *RedisStore) PreQueuePosition(ctx context.Context, event int64, subject string) (int64, time.Time, bool, error) {
	return r.positionAt(ctx, preQueueKey(event, subject), "pre-queue position")
}

// ClaimPreQueue implements PreQueueStore with account_at.lua: the first
// position claimed stays.
func (r *RedisStore) ClaimPreQueue(ctx context.Context, event int64, subject string, pos int64, handedOut time.Time, ttl time.Duration) (int64, time.Time, error) {
	return r.claimPositionAt(ctx, preQueueKey(event, subject), pos, handedOut, ttl, "pre-queue position")
}

// PreQueuePosition implements PreQueueStore.
func (m *MemoryStore) PreQueuePosition(_ context.Context, event int64, subject string) (int64, time.Time, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.preQueued.get(nonceKey{event, subject}, m.now())
	return h.pos, h.at, ok, nil
}

// ClaimPreQueue implements PreQueueStore, keeping up to maxMemoryAccounts
// records; expired ones are dropped first.
func (m *MemoryStore) ClaimPreQueue(_ context.Context, event int64, subject string, pos int64, handedOut time.Time, ttl time.Duration) (int64, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, err := m.preQueued.claim(nonceKey{event, subject}, handout{pos, handedOut}, m.now(), ttl, "pre-queue position")
	return h.pos, h.at, err
}

// restorePreQueue implements preQueueRestorer with account_at.lua, in
// pipelines.
func (r *RedisStore) restorePreQueue(ctx context.Context, event int64, yields map[string]accountEntry) error {
	now := r.now()
	for len(yields) > 0 {
		n := 0
		p := r.rdb.Pipeline()
		for subject, e := range yields {
			delete(yields, subject)
			// EVAL: a pipeline cannot load a missing script.
			accountAtScript.Eval(ctx, p, []string{preQueueKey(event, subject)},
				accountValue(e.pos, e.handedOut), max(e.until.Sub(now).Milliseconds(), 1))
			if n++; n == revocationBatch {
				break
			}
		}
		if _, err := p.Exec(ctx); err != nil {
			return unavailable("restore pre-queue positions", err)
		}
	}
	return nil
}

var (
	_ preQueueRestorer = (*RedisStore)(nil)
	_ PreQueueStore    = (*MemoryStore)(nil)
	_ PreQueueStore    = (*RedisStore)(nil)
)
