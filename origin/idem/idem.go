// Package idem keeps the Idempotency-Key records of the origin's requests
// in Redis: a marker while the first request runs, then its response.
package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
)

// Store keeps the Idempotency-Key records of requests in Redis: a
// marker while the first request runs, then its response. Keeping them in
// Redis rather than Postgres keeps a hold at one ledger write; the resource
// a 201 created carries its own copy of the response in the ledger (see
// the holds table's response column), which is what a replay falls back on if Redis loses
// these records.
//
// The semantics, for holds and bookings alike: the same user, key and body
// get the first response again, byte for byte; the same key with another
// body is refused (422); the same key while the first request still runs is
// refused (409); a 5xx is not kept, so the client may retry.
//
// A booking claims its key with Begin. A hold request claims it in the
// hold script's own call (no round trip of its own), with a record naming
// the hold it makes (HoldClaim): once that hold's ledger row is committed,
// the row's response is the one to replay, so a 201 writes nothing more to
// Redis. Any other answer is kept over the claim with Finish, or the claim
// given up with AbandonClaim.
type Store struct {
	rdb redis.UniversalClient
	// InFlight is how long the marker of a running request lives: longer
	// than any request may take, short enough that a crashed node's marker
	// does not block the key for long.
	InFlight time.Duration
	// Keep is how long a response is kept.
	Keep time.Duration
}

// New keeps records in rdb for 24 hours.
func New(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, InFlight: time.Minute, Keep: 24 * time.Hour}
}

// Scope names one Idempotency-Key of one user for one kind of request.
type Scope struct {
	// Kind is the kind of request ("holds", "bookings").
	Kind string
	// Event is the event the request is about, 0 if none; it places the
	// record on the event's Redis slot.
	Event int64
	User  string
	Key   string
}

// KeyDigest identifies (user, key) without storing either in clear.
func KeyDigest(user, key string) string {
	h := sha256.Sum256([]byte(user + "\x00" + key))
	return hex.EncodeToString(h[:16])
}

// RequestDigest identifies a request body in its canonical form, so the
// same request written with other spacing or field order is the same.
func RequestDigest(canonical string) string {
	h := sha256.Sum256([]byte(canonical))
	return hex.EncodeToString(h[:16])
}

// RedisKey is the key of sc's record, on the event's slot.
func (sc Scope) RedisKey() string {
	tag := ""
	if sc.Event != 0 {
		tag = hashtag.Event(sc.Event) + ":"
	}
	return "idem:" + tag + sc.Kind + ":" + KeyDigest(sc.User, sc.Key)
}

// StoredResponse is a response kept for replay.
type StoredResponse struct {
	Status int    `json:"status"`
	Body   []byte `json:"body"`
}

// Record is a kept record: a running request's marker or claim, or its
// response.
type Record struct {
	Running  bool            `json:"running,omitempty"`
	Digest   string          `json:"digest"`
	Response *StoredResponse `json:"response,omitempty"`
	// Hold and At (unix ms) are set in a hold request's claim.
	Hold string `json:"hold,omitempty"`
	At   int64  `json:"at,omitempty"`
}

// HoldClaim is the record a hold request claims its key with: the hold it
// makes, whose ledger row will carry the answer, and when, so that the
// claim of a request that died without answering can be told from the
// claim of one still running (InFlight).
func HoldClaim(digest, hold string, now time.Time) string {
	b, _ := json.Marshal(Record{Digest: digest, Hold: hold, At: now.UnixMilli()})
	return string(b)
}

// Idempotency refusals.
var (
	ErrRequestInProgress = errors.New("a request with this idempotency key is still running")
	ErrKeyReused         = errors.New("idempotency key was used with another request body")
)

// Begin claims sc for the request with digest. It returns (nil, nil) when
// the caller should run the request (and then call Finish or Abandon), the
// stored response to replay, or ErrRequestInProgress / ErrKeyReused.
func (i *Store) Begin(ctx context.Context, sc Scope, digest string) (*StoredResponse, error) {
	key := sc.RedisKey()
	marker, err := json.Marshal(Record{Running: true, Digest: digest})
	if err != nil {
		return nil, fmt.Errorf("idempotency marker: %w", err)
	}
	for range 3 {
		ok, err := i.rdb.SetNX(ctx, key, marker, i.InFlight).Result()
		if err != nil {
			return nil, fmt.Errorf("idempotency: claim key: %w", err)
		}
		if ok {
			return nil, nil
		}
		raw, err := i.rdb.Get(ctx, key).Bytes()
		if errors.Is(err, redis.Nil) {
			continue // expired or abandoned in between: claim again
		}
		if err != nil {
			return nil, fmt.Errorf("idempotency: read key: %w", err)
		}
		var rec Record
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, fmt.Errorf("idempotency: decode record: %w", err)
		}
		switch {
		case rec.Digest != digest:
			return nil, ErrKeyReused
		case rec.Running || rec.Response == nil:
			return nil, ErrRequestInProgress
		default:
			return rec.Response, nil
		}
	}
	return nil, ErrRequestInProgress
}

// Finish keeps the response of the request Begin let run; a 5xx is not
// kept (Abandon).
func (i *Store) Finish(ctx context.Context, sc Scope, digest string, resp StoredResponse) error {
	if resp.Status >= 500 {
		return i.Abandon(ctx, sc)
	}
	rec, err := json.Marshal(Record{Digest: digest, Response: &resp})
	if err != nil {
		return fmt.Errorf("idempotency record: %w", err)
	}
	if err := i.rdb.Set(ctx, sc.RedisKey(), rec, i.Keep).Err(); err != nil {
		return fmt.Errorf("idempotency: keep response: %w", err)
	}
	return nil
}

// AbandonClaim gives sc up, so a retry runs again, if it still holds
// claim, the record this request claimed it with. A request that cannot
// tell whether its claim was made (the hold script's answer was lost) must
// not remove another request's.
func (i *Store) AbandonClaim(ctx context.Context, sc Scope, claim string) error {
	key := sc.RedisKey()
	err := i.rdb.Watch(ctx, func(tx *redis.Tx) error {
		cur, err := tx.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) || (err == nil && cur != claim) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, key)
			return nil
		})
		return err
	}, key)
	if err != nil && !errors.Is(err, redis.TxFailedErr) { // changed meanwhile: no longer this request's
		return fmt.Errorf("idempotency: abandon claim: %w", err)
	}
	return nil
}

// Abandon forgets the request Begin let run, so a retry runs it again.
func (i *Store) Abandon(ctx context.Context, sc Scope) error {
	if err := i.rdb.Del(ctx, sc.RedisKey()).Err(); err != nil {
		return fmt.Errorf("idempotency: abandon key: %w", err)
	}
	return nil
}
