package waitroom

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// AccountHandoutStore is an AccountStore that also keeps when each
// account's position was handed out, so that every gateway counts its
// admission window from the same moment.
type AccountHandoutStore interface {
	// AccountPositionAt is AccountPosition with the position's handout
	// (zero when not kept).
	AccountPositionAt(ctx context.Context, event int64, subject string) (pos int64, handedOut time.Time, ok bool, err error)
	// ClaimAccountAt is ClaimAccount for pos handed out at handedOut; it
	// returns the position the account holds and its handout.
	ClaimAccountAt(ctx context.Context, event int64, subject string, pos int64, handedOut time.Time, ttl time.Duration) (int64, time.Time, error)
}

// accountAt reads subject's position and its handout.
func (r *Room) accountAt(ctx context.Context, as AccountStore, subject string) (int64, time.Time, bool, error) {
	if hs, ok := as.(AccountHandoutStore); ok {
		return hs.AccountPositionAt(ctx, r.event, subject)
	}
	pos, ok, err := as.AccountPosition(ctx, r.event, subject)
	return pos, time.Time{}, ok, err
}

// claimAt claims pos, handed out at handedOut, for subject.
func (r *Room) claimAt(ctx context.Context, as AccountStore, subject string, pos int64, handedOut time.Time, ttl time.Duration) (int64, time.Time, error) {
	if hs, ok := as.(AccountHandoutStore); ok {
		return hs.ClaimAccountAt(ctx, r.event, subject, pos, handedOut, ttl)
	}
	got, err := as.ClaimAccount(ctx, r.event, subject, pos, ttl)
	if got != pos {
		handedOut = time.Time{}
	}
	return got, handedOut, err
}

// JoinAccountAt hands subject, an account, its position: the one it holds
// already, else the next one. again tells which, and handedOut when the
// position was handed out: now for a new one; for one held already, when it
// was, or zero when the store does not say. Should two devices of one
// account join at once, both get the position the first claimed; the
// other's is left unused. A store that keeps no accounts hands out a new
// position each time.
func (r *Room) JoinAccountAt(ctx context.Context, subject string, ttl time.Duration) (pos int64, handedOut time.Time, again bool, err error) {
	as, ok := r.store.(AccountStore)
	if !ok {
		pos, err := r.Join(ctx)
		return pos, r.opts.Now(), false, err
	}
	held, heldAt, ok, err := r.accountAt(ctx, as, subject)
	if err != nil {
		return 0, time.Time{}, false, err
	}
	// forgot is set once the held position was given up: the draw's
	// position, if it was that one, is not given again.
	var forgot bool
	if ok && r.AdmissionOverSince(held, heldAt) {
		// Its turn came and went: a place at the back, unless the origin
		// keeps it admitted.
		if ext, err := r.Extended(ctx, subject); err != nil || ext {
			return held, heldAt, true, err
		}
		if err := as.ForgetAccount(ctx, r.event, subject); err != nil {
			return 0, time.Time{}, false, err
		}
		ok, forgot = false, true
	}
	if ok {
		return held, heldAt, true, nil
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
			// Its handout is not known: the draw's, or when it was
			// first taken.
			_, _, err = r.claimAt(ctx, as, subject, drawn, time.Time{}, ttl)
			return drawn, time.Time{}, true, err
		case err != nil && !errors.Is(err, ErrNotEntrant):
			return 0, time.Time{}, false, err
		}
	}
	fresh, err := r.Join(ctx)
	if err != nil {
		return 0, time.Time{}, false, err
	}
	got, gotAt, err := r.claimAt(ctx, as, subject, fresh, r.opts.Now(), ttl)
	if err != nil {
		return 0, time.Time{}, false, err
	}
	return got, gotAt, got != fresh, nil
}

// KeepAccount keeps subject's position in the event alive for ttl, or
// gives it pos again if the store forgot it: the account's token was
// renewed.
func (r *Room) KeepAccount(ctx context.Context, subject string, pos int64, ttl time.Duration) error {
	return r.KeepAccountAt(ctx, subject, pos, time.Time{}, ttl)
}

// KeepAccountAt is KeepAccount for a position handed out at handedOut (the
// token's hat; zero when it does not say).
func (r *Room) KeepAccountAt(ctx context.Context, subject string, pos int64, handedOut time.Time, ttl time.Duration) error {
	as, ok := r.store.(AccountStore)
	if !ok {
		return nil
	}
	_, _, err := r.claimAt(ctx, as, subject, pos, handedOut, ttl)
	return err
}

// HoldAccount gives subject, an account, position pos (handed out at
// handedOut, zero when not known) unless it holds one already, and returns
// the one it holds and its handout, alive for ttl from now. A store that
// keeps no accounts gives pos back.
func (r *Room) HoldAccount(ctx context.Context, subject string, pos int64, handedOut time.Time, ttl time.Duration) (int64, time.Time, error) {
	as, ok := r.store.(AccountStore)
	if !ok {
		return pos, handedOut, nil
	}
	return r.claimAt(ctx, as, subject, pos, handedOut, ttl)
}

// TakeOverPlace gives subject, an account, pos (an anonymous visitor's
// place, handed out at handedOut; zero when not known) unless it holds a
// place already, its own or the one the draw gave it as an entrant of the
// pre-queue: the visitor signed in while waiting. took tells whether the
// place is the account's now (a concurrent take-over of the same place
// counts); otherwise the account's own is for JoinAccountAt to hand out.
func (r *Room) TakeOverPlace(ctx context.Context, subject string, pos int64, handedOut time.Time, ttl time.Duration) (took bool, err error) {
	if r.lot != nil {
		switch _, err := r.DrawnPosition(ctx, subject); {
		case err == nil:
			return false, nil
		case !errors.Is(err, ErrNotEntrant):
			return false, err
		}
	}
	got, _, err := r.HoldAccount(ctx, subject, pos, handedOut, ttl)
	return err == nil && got == pos, err
}

// TakeOverStore records which account took over an anonymous visitor's
// place: the first to claim it keeps it while the record lives, so one
// place becomes one account's however many sign in with its token at once,
// on whichever gateways.
type TakeOverStore interface {
	// ClaimTakeOver gives the place of subject's token at pos to account
	// unless another account has it, and returns the account that has it;
	// either way the record lives for ttl from now.
	ClaimTakeOver(ctx context.Context, event int64, subject string, pos int64, account string, ttl time.Duration) (string, error)
}

// ClaimPlace reports whether account may take over the anonymous place of
// subject's token at pos: no other account took it first. A store that
// keeps no such record lets it.
func (r *Room) ClaimPlace(ctx context.Context, subject string, pos int64, account string, ttl time.Duration) (bool, error) {
	ts, ok := r.store.(TakeOverStore)
	if !ok {
		return true, nil
	}
	owner, err := ts.ClaimTakeOver(ctx, r.event, subject, pos, account, ttl)
	return err == nil && owner == account, err
}

// AccountHeld is the position subject, an account, holds in the event and
// when it was handed out (zero when not known); ok is false when it holds
// none or the store keeps no accounts.
func (r *Room) AccountHeld(ctx context.Context, subject string) (pos int64, handedOut time.Time, ok bool, err error) {
	as, isAS := r.store.(AccountStore)
	if !isAS {
		return 0, time.Time{}, false, nil
	}
	return r.accountAt(ctx, as, subject)
}

// accountKey names subject's position key: a hash, so that an id of any
// length or alphabet makes a short key.
func accountKey(event int64, subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return "waitroom:" + hashtag.Event(event) + ":account:" + hex.EncodeToString(sum[:16])
}

//go:embed account_at.lua
var accountAtLua string

var accountAtScript = redis.NewScript(accountAtLua)

// accountValue is an account key's value: "<pos>:<unix ms>", or "<pos>"
// without the handout.
func accountValue(pos int64, handedOut time.Time) string {
	if handedOut.IsZero() {
		return strconv.FormatInt(pos, 10)
	}
	return strconv.FormatInt(pos, 10) + ":" + strconv.FormatInt(handedOut.UnixMilli(), 10)
}

func parseAccountValue(v string) (int64, time.Time, error) {
	p, at, found := strings.Cut(v, ":")
	pos, err := strconv.ParseInt(p, 10, 64)
	if err != nil {
		return 0, time.Time{}, err
	}
	if !found {
		return pos, time.Time{}, nil
	}
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return 0, time.Time{}, err
	}
	return pos, time.UnixMilli(ms).UTC(), nil
}

// AccountPositionAt implements AccountHandoutStore.
func (r *RedisStore) AccountPositionAt(ctx context.Context, event int64, subject string) (int64, time.Time, bool, error) {
	return r.positionAt(ctx, accountKey(event, subject), "account position")
}

// ClaimAccountAt implements AccountHandoutStore.
func (r *RedisStore) ClaimAccountAt(ctx context.Context, event int64, subject string, pos int64, handedOut time.Time, ttl time.Duration) (int64, time.Time, error) {
	return r.claimPositionAt(ctx, accountKey(event, subject), pos, handedOut, ttl, "account position")
}

// positionAt reads a key account_at.lua keeps: the position and when it was
// handed out; ok is false without one.
func (r *RedisStore) positionAt(ctx context.Context, key, what string) (int64, time.Time, bool, error) {
	v, err := r.rdb.Get(ctx, key).Result()
	switch {
	case err == redis.Nil:
		return 0, time.Time{}, false, nil
	case err != nil:
		return 0, time.Time{}, false, unavailable(what, err)
	}
	pos, at, err := parseAccountValue(v)
	if err != nil {
		return 0, time.Time{}, false, fmt.Errorf("%s %q: %w", what, v, err)
	}
	return pos, at, true, nil
}

// claimPositionAt claims pos, handed out at handedOut, in key unless it
// holds one (account_at.lua), and returns the one it holds.
func (r *RedisStore) claimPositionAt(ctx context.Context, key string, pos int64, handedOut time.Time, ttl time.Duration, what string) (int64, time.Time, error) {
	v, err := accountAtScript.Run(ctx, r.rdb, []string{key}, accountValue(pos, handedOut), max(ttl.Milliseconds(), 1)).Text()
	if err != nil {
		return 0, time.Time{}, unavailable("claim "+what, err)
	}
	got, at, err := parseAccountValue(v)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("%s %q: %w", what, v, err)
	}
	return got, at, nil
}

// takeOverKey names the record of the account that took over the place of
// subject's token at pos.
func takeOverKey(event int64, subject string, pos int64) string {
	sum := sha256.Sum256([]byte(subject + "\x00" + strconv.FormatInt(pos, 10)))
	return "waitroom:" + hashtag.Event(event) + ":takeover:" + hex.EncodeToString(sum[:16])
}

// ClaimTakeOver implements TakeOverStore: account_at.lua keeps whatever
// value was claimed first, here the account.
func (r *RedisStore) ClaimTakeOver(ctx context.Context, event int64, subject string, pos int64, account string, ttl time.Duration) (string, error) {
	owner, err := accountAtScript.Run(ctx, r.rdb, []string{takeOverKey(event, subject, pos)}, account, max(ttl.Milliseconds(), 1)).Text()
	if err != nil {
		return "", unavailable("take over a place", err)
	}
	return owner, nil
}

// AccountPosition implements AccountStore.
func (r *RedisStore) AccountPosition(ctx context.Context, event int64, subject string) (int64, bool, error) {
	pos, _, ok, err := r.AccountPositionAt(ctx, event, subject)
	return pos, ok, err
}

// ClaimAccount implements AccountStore.
func (r *RedisStore) ClaimAccount(ctx context.Context, event int64, subject string, pos int64, ttl time.Duration) (int64, error) {
	got, _, err := r.ClaimAccountAt(ctx, event, subject, pos, time.Time{}, ttl)
	return got, err
}

// maxMemoryAccounts bounds the accounts a memory store remembers; expired
// ones are dropped first.
const maxMemoryAccounts = 1 << 20

type accountEntry struct {
	pos       int64
	handedOut time.Time
	until     time.Time
}

// firstClaims is the memory store's account_at.lua: a value by key, the
// first claim staying while it lives (accounts' and pre-queue tokens'
// positions, the accounts that took places over). The store's lock is held.
type firstClaims[V any] map[nonceKey]firstClaim[V]

type firstClaim[V any] struct {
	v     V
	until time.Time
}

func (c firstClaims[V]) get(k nonceKey, now time.Time) (V, bool) {
	e, ok := c[k]
	if !ok || !now.Before(e.until) {
		var none V
		return none, false
	}
	return e.v, true
}

// claim gives k the value v unless it has one, keeps it alive for ttl from
// now, and returns the one it has. Up to maxMemoryAccounts records are
// kept; expired ones are dropped first.
func (c *firstClaims[V]) claim(k nonceKey, v V, now time.Time, ttl time.Duration, what string) (V, error) {
	if *c == nil {
		*c = make(firstClaims[V])
	}
	records := *c
	if e, ok := records[k]; ok && now.Before(e.until) {
		v = e.v
	} else if len(records) >= maxMemoryAccounts {
		for k, e := range records {
			if !now.Before(e.until) {
				delete(records, k)
			}
		}
		if len(records) >= maxMemoryAccounts {
			var none V
			return none, fmt.Errorf("claim %s: %w: %d remembered", what, ErrUnavailable, len(records))
		}
	}
	records[k] = firstClaim[V]{v: v, until: now.Add(ttl)}
	return v, nil
}

// handout is a position and when it was handed out (zero when not known).
type handout struct {
	pos int64
	at  time.Time
}

// positionRecords are the positions of accounts, and of pre-queue tokens
// outside the draw.
type positionRecords = firstClaims[handout]

// AccountPosition implements AccountStore.
func (m *MemoryStore) AccountPosition(ctx context.Context, event int64, subject string) (int64, bool, error) {
	pos, _, ok, err := m.AccountPositionAt(ctx, event, subject)
	return pos, ok, err
}

// AccountPositionAt implements AccountHandoutStore.
func (m *MemoryStore) AccountPositionAt(_ context.Context, event int64, subject string) (int64, time.Time, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.accounts.get(nonceKey{event, subject}, m.now())
	return h.pos, h.at, ok, nil
}

// ClaimAccount implements AccountStore.
func (m *MemoryStore) ClaimAccount(ctx context.Context, event int64, subject string, pos int64, ttl time.Duration) (int64, error) {
	got, _, err := m.ClaimAccountAt(ctx, event, subject, pos, time.Time{}, ttl)
	return got, err
}

// ClaimAccountAt implements AccountHandoutStore.
func (m *MemoryStore) ClaimAccountAt(_ context.Context, event int64, subject string, pos int64, handedOut time.Time, ttl time.Duration) (int64, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, err := m.accounts.claim(nonceKey{event, subject}, handout{pos, handedOut}, m.now(), ttl, "account position")
	return h.pos, h.at, err
}

// ClaimTakeOver implements TakeOverStore.
func (m *MemoryStore) ClaimTakeOver(_ context.Context, event int64, subject string, pos int64, account string, ttl time.Duration) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.takenOver.claim(nonceKey{event, subject + "\x00" + strconv.FormatInt(pos, 10)}, account, m.now(), ttl, "a place taken over")
}

var (
	_ TakeOverStore       = (*MemoryStore)(nil)
	_ TakeOverStore       = (*RedisStore)(nil)
	_ AccountHandoutStore = (*MemoryStore)(nil)
	_ AccountHandoutStore = (*RedisStore)(nil)
	_ AccountStore        = (*MemoryStore)(nil)
	_ AccountStore        = (*RedisStore)(nil)
)
