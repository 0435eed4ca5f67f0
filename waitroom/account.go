package waitroom

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
)

// AccountStore keeps the one position of each account (a user id from the
// site's authentication) in an event, so that joining again from another
// device, or after losing the token, gives back the same place
// (docs/api.md §3, one position per account). An entry lives for a TTL from
// its last claim.
type AccountStore interface {
	// AccountPosition is subject's position in event; ok is false when it
	// has none (or it expired).
	AccountPosition(ctx context.Context, event int64, subject string) (pos int64, ok bool, err error)
	// ClaimAccount gives subject position pos unless it has one already,
	// and returns the one it has; either way the entry lives for ttl from
	// now.
	ClaimAccount(ctx context.Context, event int64, subject string, pos int64, ttl time.Duration) (int64, error)
	// ForgetAccount drops subject's position: its admission is over.
	ForgetAccount(ctx context.Context, event int64, subject string) error
}

// JoinAccount hands subject, an account, its position: the one it holds
// already, else the next one. again tells which. Should two devices of one
// account join at once, both get the position the first claimed; the
// other's is left unused. A store that keeps no accounts hands out a new
// position each time.
func (r *Room) JoinAccount(ctx context.Context, subject string, ttl time.Duration) (pos int64, again bool, err error) {
	as, ok := r.store.(AccountStore)
	if !ok {
		pos, err := r.Join(ctx)
		return pos, false, err
	}
	held, ok, err := as.AccountPosition(ctx, r.event, subject)
	if err != nil {
		return 0, false, err
	}
	// forgot is set once the held position was given up: the draw's
	// position, if it was that one, is not given again.
	var forgot bool
	if ok && r.AdmissionOver(held) {
		// Its turn came and went: a place at the back, unless the origin
		// keeps it admitted.
		if ext, err := r.Extended(ctx, subject); err != nil || ext {
			return held, true, err
		}
		if err := as.ForgetAccount(ctx, r.event, subject); err != nil {
			return 0, false, err
		}
		ok, forgot = false, true
	}
	if ok {
		return held, true, nil
	}
	if r.lot != nil && !forgot {
		// An entrant of the pre-queue holds the position drawn for it,
		// until its turn came and went as any account's does.
		drawn, err := r.DrawnPosition(ctx, subject)
		over := err == nil && r.AdmissionOver(drawn)
		if over {
			var ext bool
			if ext, err = r.Extended(ctx, subject); err != nil || ext {
				over = false
			}
		}
		switch {
		case err == nil && !over:
			_, err = as.ClaimAccount(ctx, r.event, subject, drawn, ttl)
			return drawn, true, err
		case err != nil && !errors.Is(err, ErrNotEntrant):
			return 0, false, err
		}
	}
	fresh, err := r.Join(ctx)
	if err != nil {
		return 0, false, err
	}
	got, err := as.ClaimAccount(ctx, r.event, subject, fresh, ttl)
	if err != nil {
		return 0, false, err
	}
	return got, got != fresh, nil
}

// KeepAccount keeps subject's position in the event alive for ttl, or
// gives it pos again if the store forgot it: the account's token was
// renewed.
func (r *Room) KeepAccount(ctx context.Context, subject string, pos int64, ttl time.Duration) error {
	as, ok := r.store.(AccountStore)
	if !ok {
		return nil
	}
	_, err := as.ClaimAccount(ctx, r.event, subject, pos, ttl)
	return err
}

// accountKey names subject's position key: a hash, so that an id of any
// length or alphabet makes a short key.
func accountKey(event int64, subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return "waitroom:" + hashtag.Event(event) + ":account:" + hex.EncodeToString(sum[:16])
}

//go:embed account.lua
var accountLua string

var accountScript = redis.NewScript(accountLua)

// AccountPosition implements AccountStore.
func (r *RedisStore) AccountPosition(ctx context.Context, event int64, subject string) (int64, bool, error) {
	pos, err := r.rdb.Get(ctx, accountKey(event, subject)).Int64()
	switch {
	case err == redis.Nil:
		return 0, false, nil
	case err != nil:
		return 0, false, unavailable("account position", err)
	}
	return pos, true, nil
}

// ClaimAccount implements AccountStore.
func (r *RedisStore) ClaimAccount(ctx context.Context, event int64, subject string, pos int64, ttl time.Duration) (int64, error) {
	got, err := accountScript.Run(ctx, r.rdb, []string{accountKey(event, subject)}, pos, max(ttl.Milliseconds(), 1)).Int64()
	if err != nil {
		return 0, unavailable("claim account position", err)
	}
	return got, nil
}

// maxMemoryAccounts bounds the accounts a memory store remembers; expired
// ones are dropped first.
const maxMemoryAccounts = 1 << 20

type accountEntry struct {
	pos   int64
	until time.Time
}

// AccountPosition implements AccountStore.
func (m *MemoryStore) AccountPosition(_ context.Context, event int64, subject string) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.accounts[nonceKey{event, subject}]
	if !ok || !m.now().Before(e.until) {
		return 0, false, nil
	}
	return e.pos, true, nil
}

// ClaimAccount implements AccountStore.
func (m *MemoryStore) ClaimAccount(_ context.Context, event int64, subject string, pos int64, ttl time.Duration) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if m.accounts == nil {
		m.accounts = make(map[nonceKey]accountEntry)
	}
	k := nonceKey{event, subject}
	if e, ok := m.accounts[k]; ok && now.Before(e.until) {
		pos = e.pos
	} else if len(m.accounts) >= maxMemoryAccounts {
		for k, e := range m.accounts {
			if !now.Before(e.until) {
				delete(m.accounts, k)
			}
		}
		if len(m.accounts) >= maxMemoryAccounts {
			return 0, fmt.Errorf("claim account position: %w: %d accounts remembered", ErrUnavailable, len(m.accounts))
		}
	}
	m.accounts[k] = accountEntry{pos: pos, until: now.Add(ttl)}
	return pos, nil
}

var (
	_ AccountStore = (*MemoryStore)(nil)
	_ AccountStore = (*RedisStore)(nil)
)
