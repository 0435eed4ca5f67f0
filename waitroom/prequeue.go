package waitroom

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
// the draw.
type PreQueueStore interface {
	// PreQueuePosition is the position subject's pre-queue token was
	// handed; ok is false when it was handed none (or the record expired).
	PreQueuePosition(ctx context.Context, event int64, subject string) (pos int64, ok bool, err error)
	// ClaimPreQueue records pos for subject's pre-queue token unless one
	// is recorded already, and returns the recorded one; the record lives
	// for ttl from now.
	ClaimPreQueue(ctx context.Context, event int64, subject string, pos int64, ttl time.Duration) (int64, error)
}

// ErrNoPreQueueRecord is returned when the store keeps no pre-queue
// positions.
var ErrNoPreQueueRecord = errors.New("the store keeps no pre-queue positions")

// PreQueuePlaced is the position subject's pre-queue token was handed
// outside the draw; ok is false when it was handed none yet.
func (r *Room) PreQueuePlaced(ctx context.Context, subject string) (pos int64, ok bool, err error) {
	ps, isPS := r.store.(PreQueueStore)
	if !isPS {
		return 0, false, ErrNoPreQueueRecord
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
	placed, err := ps.ClaimPreQueue(ctx, r.event, subject, pos, ttl)
	if err != nil {
		return 0, time.Time{}, err
	}
	if placed != pos {
		// Another presentation's place, handed out earlier.
		handedOut = time.Time{}
	}
	return placed, handedOut, nil
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
	_, err := ps.ClaimPreQueue(ctx, r.event, subject, pos, ttl)
	return err
}

func preQueueKey(event int64, subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return "waitroom:" + hashtag.Event(event) + ":prequeued:" + hex.EncodeToString(sum[:16])
}

// PreQueuePosition implements PreQueueStore.
func (r *RedisStore) PreQueuePosition(ctx context.Context, event int64, subject string) (int64, bool, error) {
	pos, err := r.rdb.Get(ctx, preQueueKey(event, subject)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, false, nil
	case err != nil:
		return 0, false, unavailable("pre-queue position", err)
	}
	return pos, true, nil
}

// ClaimPreQueue implements PreQueueStore with account.lua: the first
// position claimed stays.
func (r *RedisStore) ClaimPreQueue(ctx context.Context, event int64, subject string, pos int64, ttl time.Duration) (int64, error) {
	got, err := accountScript.Run(ctx, r.rdb, []string{preQueueKey(event, subject)}, pos, max(ttl.Milliseconds(), 1)).Int64()
	if err != nil {
		return 0, unavailable("claim pre-queue position", err)
	}
	return got, nil
}

// PreQueuePosition implements PreQueueStore.
func (m *MemoryStore) PreQueuePosition(_ context.Context, event int64, subject string) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.preQueued[nonceKey{event, subject}]
	if !ok || !m.now().Before(e.until) {
		return 0, false, nil
	}
	return e.pos, true, nil
}

// ClaimPreQueue implements PreQueueStore, keeping up to maxMemoryAccounts
// records; expired ones are dropped first.
func (m *MemoryStore) ClaimPreQueue(_ context.Context, event int64, subject string, pos int64, ttl time.Duration) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if m.preQueued == nil {
		m.preQueued = make(map[nonceKey]accountEntry)
	}
	k := nonceKey{event, subject}
	if e, ok := m.preQueued[k]; ok && now.Before(e.until) {
		pos = e.pos
	} else if len(m.preQueued) >= maxMemoryAccounts {
		for k, e := range m.preQueued {
			if !now.Before(e.until) {
				delete(m.preQueued, k)
			}
		}
		if len(m.preQueued) >= maxMemoryAccounts {
			return 0, fmt.Errorf("claim pre-queue position: %w: %d remembered", ErrUnavailable, len(m.preQueued))
		}
	}
	m.preQueued[k] = accountEntry{pos: pos, until: now.Add(ttl)}
	return pos, nil
}

var (
	_ PreQueueStore = (*MemoryStore)(nil)
	_ PreQueueStore = (*RedisStore)(nil)
)
