package origin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// MaxIdempotencyKeyLen is the longest Idempotency-Key accepted.
const MaxIdempotencyKeyLen = 255

// validIdempotencyKey: 1 to MaxIdempotencyKeyLen bytes of UTF-8. The key is
// kept in a text column, which refuses anything else: such a key could
// otherwise only ever be answered 503.
func validIdempotencyKey(key string) bool {
	return key != "" && len(key) <= MaxIdempotencyKeyLen && utf8.ValidString(key)
}

// Idempotency keeps the Idempotency-Key records of requests in Redis: a
// marker while the first request runs, then its response. Keeping them in
// Redis rather than Postgres keeps a hold at one ledger write; the resource
// a 201 created carries its own copy of the response in the ledger (see
// holds.response), which is what a replay falls back on if Redis loses
// these records.
//
// The semantics, for holds and bookings alike: the same user, key and body
// get the first response again, byte for byte; the same key with another
// body is refused (422); the same key while the first request still runs is
// refused (409); a 5xx is not kept, so the client may retry.
//
// A booking claims its key with Begin. A hold request claims it in the
// hold script's own call (no round trip of its own), with a record naming
// the hold it makes (holdClaim): once that hold's ledger row is committed,
// the row's response is the one to replay, so a 201 writes nothing more to
// Redis. Any other answer is kept over the claim with Finish, or the claim
// given up with AbandonClaim.
type Idempotency struct {
	rdb redis.UniversalClient
	// InFlight is how long the marker of a running request lives: longer
	// than any request may take, short enough that a crashed node's marker
	// does not block the key for long.
	InFlight time.Duration
	// Keep is how long a response is kept.
	Keep time.Duration
}

// NewIdempotency keeps records in rdb for 24 hours.
func NewIdempotency(rdb redis.UniversalClient) *Idempotency {
	return &Idempotency{rdb: rdb, InFlight: time.Minute, Keep: 24 * time.Hour}
}

// IdemScope names one Idempotency-Key of one user for one kind of request.
type IdemScope struct {
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

func (sc IdemScope) redisKey() string {
	tag := ""
	if sc.Event != 0 {
		tag = "{evt:" + strconv.FormatInt(sc.Event, 10) + "}:"
	}
	return "idem:" + tag + sc.Kind + ":" + KeyDigest(sc.User, sc.Key)
}

// StoredResponse is a response kept for replay.
type StoredResponse struct {
	Status int    `json:"status"`
	Body   []byte `json:"body"`
}

type idemRecord struct {
	Running  bool            `json:"running,omitempty"`
	Digest   string          `json:"digest"`
	Response *StoredResponse `json:"response,omitempty"`
	// Hold and At (unix ms) are set in a hold request's claim.
	Hold string `json:"hold,omitempty"`
	At   int64  `json:"at,omitempty"`
}

// holdClaim is the record a hold request claims its key with: the hold it
// makes, whose ledger row will carry the answer, and when, so that the
// claim of a request that died without answering can be told from the
// claim of one still running (InFlight).
func holdClaim(digest, hold string, now time.Time) string {
	b, _ := json.Marshal(idemRecord{Digest: digest, Hold: hold, At: now.UnixMilli()})
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
func (i *Idempotency) Begin(ctx context.Context, sc IdemScope, digest string) (*StoredResponse, error) {
	key := sc.redisKey()
	marker, err := json.Marshal(idemRecord{Running: true, Digest: digest})
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
		var rec idemRecord
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
func (i *Idempotency) Finish(ctx context.Context, sc IdemScope, digest string, resp StoredResponse) error {
	if resp.Status >= 500 {
		return i.Abandon(ctx, sc)
	}
	rec, err := json.Marshal(idemRecord{Digest: digest, Response: &resp})
	if err != nil {
		return fmt.Errorf("idempotency record: %w", err)
	}
	if err := i.rdb.Set(ctx, sc.redisKey(), rec, i.Keep).Err(); err != nil {
		return fmt.Errorf("idempotency: keep response: %w", err)
	}
	return nil
}

// AbandonClaim gives sc up, so a retry runs again, if it still holds
// claim, the record this request claimed it with. A request that cannot
// tell whether its claim was made (the hold script's answer was lost) must
// not remove another request's.
func (i *Idempotency) AbandonClaim(ctx context.Context, sc IdemScope, claim string) error {
	key := sc.redisKey()
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
func (i *Idempotency) Abandon(ctx context.Context, sc IdemScope) error {
	if err := i.rdb.Del(ctx, sc.redisKey()).Err(); err != nil {
		return fmt.Errorf("idempotency: abandon key: %w", err)
	}
	return nil
}
