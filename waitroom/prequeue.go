package waitroom

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
)

// A pre-queue token yields one position, ever (docs/api.md §12): the one
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
// outside the draw, or recorded from it, and when (zero when nothing
// says); ok is false when it was handed none yet. When the store lost the
// record with the event's state, the one this room saw answers.
func (r *Room) PreQueuePlaced(ctx context.Context, subject string) (pos int64, handedOut time.Time, ok bool, err error) {
	ps, isPS := r.store.(PreQueueStore)
	if !isPS {
		return 0, time.Time{}, false, ErrNoPreQueueRecord
	}
	pos, handedOut, ok, err = ps.PreQueuePosition(ctx, r.event, subject)
	if err != nil || ok {
		return pos, handedOut, ok, err
	}
	pos, handedOut, ok = r.yields.get(subject, r.opts.Now())
	return pos, handedOut, ok, nil
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
	if err := r.drawKept(ctx); err != nil {
		return 0, time.Time{}, err
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
	if err == nil {
		r.yielded(subject, pos, handedOut, ttl)
	}
	return pos, handedOut, err
}

// drawKept refuses, as a join while the state is restored is refused
// (ErrNoState), to place a pre-queue token outside the draw while the room
// knows the draw was made but the store no longer does: the store lost it
// with the event's state, and the token may have yielded its drawn
// position already. The room's restore writes the draw's record back, with
// the positions it saw pre-queue tokens yield.
func (r *Room) drawKept(ctx context.Context) error {
	if r.lot == nil || !r.lot.drawn.Load() {
		return nil
	}
	if _, ok := r.store.(openingRestorer); !ok {
		return nil
	}
	now := r.opts.Now()
	if !now.Before(r.lot.until) {
		return nil // the records expired, as they were meant to
	}
	rec, err := r.lot.store.Lottery(ctx, r.event)
	if err != nil || rec.Drawn {
		return err
	}
	r.wakeUp()
	if s, err := r.store.State(ctx, r.event); err == nil && !s.Restoring(now) {
		// The state is there: the draw's record alone went (evicted),
		// and no restore will follow to put it back.
		if err := r.restoreOpening(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("place pre-queue token: %w: the draw's record is gone", ErrNoState)
}

// RecordDrawnPreQueue records pos, the position the draw gave subject, as
// the one its pre-queue token yielded, so the token yields it again once
// the draw cannot say (the opening taken out of the config). The record
// lives for ttl; a store that keeps no pre-queue records keeps nothing.
func (r *Room) RecordDrawnPreQueue(ctx context.Context, subject string, pos int64, ttl time.Duration) error {
	ps, ok := r.store.(PreQueueStore)
	if !ok {
		return nil
	}
	// A draw's position is handed out when the entries close, which the
	// room's window tells.
	pos, handedOut, err := ps.ClaimPreQueue(ctx, r.event, subject, pos, time.Time{}, ttl)
	if err == nil {
		r.yielded(subject, pos, handedOut, ttl)
	}
	return err
}

// maxYields bounds the pre-queue tokens' positions a room remembers for a
// restore; past it, expired ones are dropped and then new ones are not
// remembered.
const maxYields = 1 << 18

// yields is the position each pre-queue token was seen to yield, by
// subject, while its record lives: what a room writes back when the store
// loses the event's state, as it does its revocations. Only a store that
// can lose them (Redis) has them remembered.
type yields struct {
	mu sync.Mutex
	m  map[string]accountEntry
}

func (y *yields) get(subject string, now time.Time) (int64, time.Time, bool) {
	y.mu.Lock()
	defer y.mu.Unlock()
	e, ok := y.m[subject]
	if !ok || !now.Before(e.until) {
		return 0, time.Time{}, false
	}
	return e.pos, e.handedOut, true
}

// yielded remembers that subject's pre-queue token yielded pos, handed out
// at handedOut, for ttl.
func (r *Room) yielded(subject string, pos int64, handedOut time.Time, ttl time.Duration) {
	if _, ok := r.store.(openingRestorer); !ok {
		return
	}
	now := r.opts.Now()
	y := &r.yields
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.m == nil {
		y.m = make(map[string]accountEntry)
	}
	if e, ok := y.m[subject]; ok && e.pos == pos && !e.until.Before(now.Add(ttl)) {
		return
	}
	if _, ok := y.m[subject]; !ok && len(y.m) >= maxYields {
		for k, e := range y.m {
			if !now.Before(e.until) {
				delete(y.m, k)
			}
		}
		if len(y.m) >= maxYields {
			return
		}
	}
	y.m[subject] = accountEntry{pos: pos, handedOut: handedOut, until: now.Add(ttl)}
}

// openingRestorer is a store that can lose the opening's records with the
// event's state (Redis), and takes back what a room remembers of them.
type openingRestorer interface {
	// restoreOpening writes back, where the store has none, that the
	// entries closed with reserved (when closed), that the draw was made
	// (when drawn), the lottery's records living until until; and each
	// pre-queue token's position, as ClaimPreQueue would.
	restoreOpening(ctx context.Context, event int64, closed bool, reserved Closed, drawn bool, until time.Time, yields map[string]accountEntry) error
}

// restoreOpening writes back what the room knows of the opening: that its
// entries closed and the draw was made, and the positions pre-queue tokens
// yielded.
func (r *Room) restoreOpening(ctx context.Context) error {
	rs, ok := r.store.(openingRestorer)
	if !ok {
		return nil
	}
	var closed, drawn bool
	var reserved Closed
	var until time.Time
	if l := r.lot; l != nil {
		l.mu.Lock()
		closed, drawn, reserved, until = l.closed.Load(), l.drawn.Load(), l.reserved, l.until
		l.mu.Unlock()
	}
	now := r.opts.Now()
	r.yields.mu.Lock()
	live := make(map[string]accountEntry, len(r.yields.m))
	for k, e := range r.yields.m {
		if now.Before(e.until) {
			live[k] = e
		}
	}
	r.yields.mu.Unlock()
	if !closed && !drawn && len(live) == 0 {
		return nil
	}
	return rs.restoreOpening(ctx, r.event, closed, reserved, drawn, until, live)
}

// restoreOpening implements openingRestorer: the lottery's fields with
// HSETNX, the records with account_at.lua (the first claim stays), in
// pipelines.
func (r *RedisStore) restoreOpening(ctx context.Context, event int64, closed bool, reserved Closed, drawn bool, until time.Time, yields map[string]accountEntry) error {
	now := r.now()
	if closed || drawn {
		key := lotteryKey(event)
		_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if closed {
				p.HSetNX(ctx, key, "closed", 1)
				p.HSetNX(ctx, key, "base", reserved.Base)
				p.HSetNX(ctx, key, "count", reserved.Count)
			}
			if drawn {
				p.HSetNX(ctx, key, "drawn", now.UnixMilli())
			}
			p.PExpireAt(ctx, key, until)
			return nil
		})
		if err != nil {
			return unavailable("restore the opening", err)
		}
	}
	for len(yields) > 0 {
		n := 0
		p := r.rdb.Pipeline()
		for subject, e := range yields {
			delete(yields, subject)
			// EVAL: a pipeline cannot retry a missing script.
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
	pos, at, ok := m.preQueued.get(nonceKey{event, subject}, m.now())
	return pos, at, ok, nil
}

// ClaimPreQueue implements PreQueueStore, keeping up to maxMemoryAccounts
// records; expired ones are dropped first.
func (m *MemoryStore) ClaimPreQueue(_ context.Context, event int64, subject string, pos int64, handedOut time.Time, ttl time.Duration) (int64, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.preQueued.claim(nonceKey{event, subject}, pos, handedOut, m.now(), ttl, "pre-queue position")
}

var (
	_ PreQueueStore = (*MemoryStore)(nil)
	_ PreQueueStore = (*RedisStore)(nil)
)
