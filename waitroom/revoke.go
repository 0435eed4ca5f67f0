package waitroom

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
)

// A revocation ends a token's admission on every node sharing the store
// (docs/api.md §3, revocation): the site said the holder is done, e.g. its
// booking is confirmed. It names the token by subject and position, which
// every renewal of the token keeps, and lasts until the token, renewed no
// more, can no longer be valid.

// MaxRevocations bounds the revocations an event's store keeps; the oldest
// go first, and by then their tokens have long expired.
const MaxRevocations = 1 << 20

// Revocation is one revoked token.
type Revocation struct {
	Subject  string
	Position int64
	// Until is when the revocation ends: the token cannot be valid later.
	Until time.Time
	// TakenBy is the account that took the anonymous token's position
	// over (its bearer signed in); empty when the site revoked the token.
	TakenBy string
}

// RevocationStore shares revocations between the nodes of a fleet.
type RevocationStore interface {
	// Revoke records rv and tells every watcher of event.
	Revoke(ctx context.Context, event int64, rv Revocation) error
	// Revocations reads the revocations recorded after cursor (""
	// reads them all) and the cursor to read on from.
	Revocations(ctx context.Context, event int64, cursor string) ([]Revocation, string, error)
}

// revocations is a room's copy of its event's revocations: what the
// request path looks tokens up in, without a store call. bySubject is the
// latest of each subject's, for an account: its revocation ends its
// admission whatever position it would be given next.
type revocations struct {
	mu        sync.RWMutex
	until     map[revoked]time.Time
	takenBy   map[revoked]string
	bySubject map[string]Revocation
	cursor    string
}

type revoked struct {
	subject  string
	position int64
}

func (v *revocations) add(now time.Time, rvs ...Revocation) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.until == nil {
		v.until = make(map[revoked]time.Time)
		v.takenBy = make(map[revoked]string)
		v.bySubject = make(map[string]Revocation)
	}
	for _, rv := range rvs {
		if now.Before(rv.Until) {
			k := revoked{rv.Subject, rv.Position}
			v.until[k] = rv.Until
			if rv.TakenBy != "" {
				v.takenBy[k] = rv.TakenBy
			}
			if cur, ok := v.bySubject[rv.Subject]; !ok || cur.Until.Before(rv.Until) {
				v.bySubject[rv.Subject] = rv
			}
		}
	}
	for k, until := range v.until {
		if !now.Before(until) {
			delete(v.until, k)
			delete(v.takenBy, k)
		}
	}
	for k, rv := range v.bySubject {
		if !now.Before(rv.Until) {
			delete(v.bySubject, k)
		}
	}
}

// takeOver starts v from the revocations o holds; o keeps its own. Not
// from o's cursor: v reads the store's from the start, as a new room does,
// and a revocation read twice is the same revocation.
func (v *revocations) takeOver(o *revocations) {
	o.mu.RLock()
	until, takenBy, bySubject := maps.Clone(o.until), maps.Clone(o.takenBy), maps.Clone(o.bySubject)
	o.mu.RUnlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.until, v.takenBy, v.bySubject = until, takenBy, bySubject
}

// Revoke ends the admission of the token of subject at position on every
// node sharing the store, until it can no longer be valid (ttl, a token's
// life, from now). This node stops admitting it at once.
func (r *Room) Revoke(ctx context.Context, subject string, position int64, ttl time.Duration) error {
	rv := Revocation{Subject: subject, Position: position, Until: r.opts.Now().Add(ttl)}
	r.revoked.add(r.opts.Now(), rv)
	rs, ok := r.store.(RevocationStore)
	if !ok {
		return nil
	}
	if err := rs.Revoke(ctx, r.event, rv); err != nil {
		r.unsent.add(r.opts.Now(), rv)
		return err
	}
	return nil
}

// maxUnsent bounds the revocations a room keeps to send again; past it,
// ended ones are dropped, then the oldest.
const maxUnsent = 1 << 16

// unsentRevocations are the revocations a room made that the store did not
// take (unreachable, failing over): this node stops admitting their tokens
// at once, but the other nodes learn them only from the store, so Refresh
// sends them again until it takes them. A revocation sent twice is the same
// revocation.
type unsentRevocations struct {
	mu  sync.Mutex
	rvs []Revocation
}

func (u *unsentRevocations) add(now time.Time, rvs ...Revocation) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rvs = append(u.rvs, rvs...)
	if len(u.rvs) > maxUnsent {
		u.rvs = slices.DeleteFunc(u.rvs, func(rv Revocation) bool { return !now.Before(rv.Until) })
		if over := len(u.rvs) - maxUnsent; over > 0 {
			u.rvs = slices.Delete(u.rvs, 0, over)
		}
	}
}

// takeOver starts u from the revocations o has to send again. o keeps
// them too: should the config that took them over fail to start, the old
// one runs on; a revocation sent twice is the same revocation.
func (u *unsentRevocations) takeOver(o *unsentRevocations) {
	o.mu.Lock()
	rvs := slices.Clone(o.rvs)
	o.mu.Unlock()
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rvs = rvs
}

// take empties the list and returns what of it has not ended.
func (u *unsentRevocations) take(now time.Time) []Revocation {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.rvs) == 0 {
		return nil
	}
	rvs := slices.DeleteFunc(u.rvs, func(rv Revocation) bool { return !now.Before(rv.Until) })
	u.rvs = nil
	return rvs
}

// resendRevocations sends the store the revocations it did not take, in
// order, keeping from the first it refuses again.
func (r *Room) resendRevocations(ctx context.Context) error {
	rs, ok := r.store.(RevocationStore)
	if !ok {
		return nil
	}
	rvs := r.unsent.take(r.opts.Now())
	for i, rv := range rvs {
		if err := rs.Revoke(ctx, r.event, rv); err != nil {
			r.unsent.add(r.opts.Now(), rvs[i:]...)
			return err
		}
	}
	return nil
}

// TakeOver ends the admission of an anonymous visitor's token of subject
// at position, as Revoke does, because account took its position over:
// not a purchase, so its bearer is not done, only no longer at that place.
// This node knows it once the store does, so a take-over the store missed
// is made again at the next request that asks for it.
func (r *Room) TakeOver(ctx context.Context, subject string, position int64, account string, ttl time.Duration) error {
	rv := Revocation{Subject: subject, Position: position, Until: r.opts.Now().Add(ttl), TakenBy: account}
	if rs, ok := r.store.(RevocationStore); ok {
		if err := rs.Revoke(ctx, r.event, rv); err != nil {
			return err
		}
	}
	r.revoked.add(r.opts.Now(), rv)
	return nil
}

// Revoked reports whether the token of subject at position was revoked: a
// lookup in memory, kept fresh by Run within a poll of a revocation on
// another node.
func (r *Room) Revoked(subject string, position int64) bool {
	_, ok := r.RevokedFor(subject, position)
	return ok
}

// RevokedFor is Revoked, and the account that took the position over when
// that is why (empty: the site revoked the token).
func (r *Room) RevokedFor(subject string, position int64) (takenBy string, ok bool) {
	k := revoked{subject, position}
	r.revoked.mu.RLock()
	until, ok := r.revoked.until[k]
	takenBy = r.revoked.takenBy[k]
	r.revoked.mu.RUnlock()
	if !ok || !r.opts.Now().Before(until) {
		return "", false
	}
	return takenBy, true
}

// SubjectRevoked reports whether any token of subject was revoked, and the
// position of the latest: an account (one position per event) is done for
// as long as its revocation lasts, even once the position it held is given
// up (its admission window ended) and another would be handed out.
func (r *Room) SubjectRevoked(subject string) (position int64, ok bool) {
	r.revoked.mu.RLock()
	rv, ok := r.revoked.bySubject[subject]
	r.revoked.mu.RUnlock()
	if !ok || !r.opts.Now().Before(rv.Until) {
		return 0, false
	}
	return rv.Position, true
}

// syncRevocations reads the revocations other nodes made since the last
// read.
func (r *Room) syncRevocations(ctx context.Context) error {
	rs, ok := r.store.(RevocationStore)
	if !ok {
		return nil
	}
	r.revoked.mu.RLock()
	cursor := r.revoked.cursor
	r.revoked.mu.RUnlock()
	rvs, next, err := rs.Revocations(ctx, r.event, cursor)
	if err != nil {
		return err
	}
	r.revoked.add(r.opts.Now(), rvs...)
	r.revoked.mu.Lock()
	r.revoked.cursor = next
	r.revoked.mu.Unlock()
	return nil
}

// restoreRevocations writes back the revocations the room remembers that
// have not ended, into a store that lost them with the event's state, so a
// gateway started afterwards (or a reload's new room) knows them too. Every
// gateway that joins the restore writes back its own; a revocation written
// twice is the same revocation.
func (r *Room) restoreRevocations(ctx context.Context) error {
	rs, ok := r.store.(revocationRestorer)
	if !ok {
		return nil
	}
	now := r.opts.Now()
	r.revoked.mu.RLock()
	var rvs []Revocation
	for k, until := range r.revoked.until {
		if now.Before(until) {
			rvs = append(rvs, Revocation{Subject: k.subject, Position: k.position, Until: until, TakenBy: r.revoked.takenBy[k]})
		}
	}
	for _, rv := range r.revoked.bySubject {
		if now.Before(rv.Until) {
			if until := r.revoked.until[revoked{rv.Subject, rv.Position}]; !until.Equal(rv.Until) {
				rvs = append(rvs, rv)
			}
		}
	}
	r.revoked.mu.RUnlock()
	if len(rvs) == 0 {
		return nil
	}
	return rs.restoreRevocations(ctx, r.event, rvs)
}

// revocationRestorer is a RevocationStore that can lose its revocations
// with the event's state (Redis), and takes them back in bulk.
type revocationRestorer interface {
	restoreRevocations(ctx context.Context, event int64, rvs []Revocation) error
}

// restoreRevocations implements revocationRestorer: the revocations
// appended to the stream in pipelines, one change notice at the end.
func (r *RedisStore) restoreRevocations(ctx context.Context, event int64, rvs []Revocation) error {
	for len(rvs) > 0 {
		n := min(len(rvs), revocationBatch)
		p := r.rdb.Pipeline()
		for _, rv := range rvs[:n] {
			p.XAdd(ctx, revocationEntry(event, rv))
		}
		if _, err := p.Exec(ctx); err != nil {
			return unavailable("restore revocations", err)
		}
		rvs = rvs[n:]
	}
	if err := r.rdb.Publish(ctx, changedChannel(event), r.node).Err(); err != nil {
		return unavailable("restore revocations", err)
	}
	return nil
}

func revokedKey(event int64) string { return "waitroom:" + hashtag.Event(event) + ":revoked" }

// revocationEntry is rv as an entry of the event's stream; "by" only on a
// take-over, which a node that does not know it reads as a revocation.
func revocationEntry(event int64, rv Revocation) *redis.XAddArgs {
	values := []any{"sub", rv.Subject, "pos", rv.Position, "until", rv.Until.UnixMilli()}
	if rv.TakenBy != "" {
		values = append(values, "by", rv.TakenBy)
	}
	return &redis.XAddArgs{Stream: revokedKey(event), MaxLen: MaxRevocations, Approx: true, Values: values}
}

// revocationBatch is how many revocations one read takes at most.
const revocationBatch = 10000

// Revoke implements RevocationStore with a stream capped at MaxRevocations
// entries, so every node reads on from where it was.
func (r *RedisStore) Revoke(ctx context.Context, event int64, rv Revocation) error {
	p := r.rdb.Pipeline()
	p.XAdd(ctx, revocationEntry(event, rv))
	p.Publish(ctx, changedChannel(event), r.node)
	if _, err := p.Exec(ctx); err != nil {
		return unavailable("revoke", err)
	}
	return nil
}

// Revocations implements RevocationStore.
func (r *RedisStore) Revocations(ctx context.Context, event int64, cursor string) ([]Revocation, string, error) {
	start := "-"
	if cursor != "" {
		start = "(" + cursor
	}
	var out []Revocation
	for {
		msgs, err := r.rdb.XRangeN(ctx, revokedKey(event), start, "+", revocationBatch).Result()
		if err != nil {
			return out, cursor, unavailable("read revocations", err)
		}
		now := r.now()
		for _, m := range msgs {
			sub, _ := m.Values["sub"].(string)
			posStr, _ := m.Values["pos"].(string)
			untilStr, _ := m.Values["until"].(string)
			by, _ := m.Values["by"].(string)
			pos, err1 := strconv.ParseInt(posStr, 10, 64)
			until, err2 := strconv.ParseInt(untilStr, 10, 64)
			cursor = m.ID
			if err1 != nil || err2 != nil || !now.Before(time.UnixMilli(until)) {
				continue
			}
			out = append(out, Revocation{Subject: sub, Position: pos, Until: time.UnixMilli(until), TakenBy: by})
		}
		if len(msgs) < revocationBatch {
			return out, cursor, nil
		}
		start = "(" + cursor
	}
}

// Revoke implements RevocationStore.
func (m *MemoryStore) Revoke(_ context.Context, event int64, rv Revocation) error {
	m.mu.Lock()
	e := m.event(event)
	e.revokedSeq++
	e.revoked = append(e.revoked, memRevocation{seq: e.revokedSeq, rv: rv})
	if n := len(e.revoked) - MaxRevocations; n > 0 {
		e.revoked = append(e.revoked[:0], e.revoked[n:]...)
	}
	m.mu.Unlock()
	m.notify(event)
	return nil
}

// Revocations implements RevocationStore.
func (m *MemoryStore) Revocations(_ context.Context, event int64, cursor string) ([]Revocation, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.event(event)
	after, _ := strconv.ParseInt(strings.TrimSpace(cursor), 10, 64)
	now := m.now()
	var out []Revocation
	from := sort.Search(len(e.revoked), func(i int) bool { return e.revoked[i].seq > after })
	for _, x := range e.revoked[from:] {
		if now.Before(x.rv.Until) {
			out = append(out, x.rv)
		}
	}
	return out, strconv.FormatInt(e.revokedSeq, 10), nil
}

type memRevocation struct {
	seq int64
	rv  Revocation
}

var (
	_ RevocationStore = (*MemoryStore)(nil)
	_ RevocationStore = (*RedisStore)(nil)
)
