package waitroom

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
	return ps.ClaimPreQueue(ctx, r.event, subject, pos, handedOut, ttl)
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
	_, _, err := ps.ClaimPreQueue(ctx, r.event, subject, pos, time.Time{}, ttl)
	return err
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
