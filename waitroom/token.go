package waitroom

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer is the iss claim of every queue token.
const Issuer = "waitroom"

// MinSecretLen is the shortest signing secret accepted: HS256 is only as
// strong as its key, and 32 bytes matches the hash size.
const MinSecretLen = 32

// DefaultLeeway absorbs clock skew between the gateway nodes and the origin.
const DefaultLeeway = 5 * time.Second

// Errors returned by Verify. Every one of them means "treat the bearer as a
// new arrival"; they are distinguished only for logs and tests.
var (
	ErrInvalidToken = errors.New("invalid queue token")
	ErrWrongEvent   = errors.New("queue token is for another event")
)

// Key is one HMAC key of a KeySet, named by the kid header of the tokens it
// signs.
type Key struct {
	ID     string
	Secret []byte
}

// KeySet signs with its first key and verifies with any of them, so a new key
// can be put in front while tokens signed with the old one stay valid until
// they expire.
type KeySet struct {
	keys   []Key
	byID   map[string][]byte
	parser *jwt.Parser
	// own are the signers of every key, by the encoded header (without its
	// dot) each writes: verifyOwn's way in.
	own       map[string]*signer
	validator *jwt.Validator
	now       func() time.Time
	seen      *verifiedCache
	sign      *signer
}

// NewKeySet checks the keys (at least one, ids unique and non-empty, secrets
// at least MinSecretLen bytes) and returns a set that reads the clock from now
// (time.Now when nil).
func NewKeySet(now func() time.Time, keys ...Key) (*KeySet, error) {
	if len(keys) == 0 {
		return nil, errors.New("no signing key configured")
	}
	if now == nil {
		now = time.Now
	}
	ks := &KeySet{byID: make(map[string][]byte, len(keys)), own: make(map[string]*signer, len(keys)), now: now, seen: newVerifiedCache(verifiedCacheSize)}
	for i, k := range keys {
		if k.ID == "" {
			return nil, fmt.Errorf("key %d: empty key id", i+1)
		}
		if len(k.Secret) < MinSecretLen {
			return nil, fmt.Errorf("key %q: secret is %d bytes, at least %d required", k.ID, len(k.Secret), MinSecretLen)
		}
		if _, dup := ks.byID[k.ID]; dup {
			return nil, fmt.Errorf("key %q: duplicate key id", k.ID)
		}
		secret := append([]byte(nil), k.Secret...)
		ks.keys = append(ks.keys, Key{ID: k.ID, Secret: secret})
		ks.byID[k.ID] = secret
		s := newSigner(Key{ID: k.ID, Secret: secret})
		ks.own[strings.TrimSuffix(s.header, ".")] = s
		if i == 0 {
			ks.sign = s
		}
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithIssuer(Issuer),
		jwt.WithLeeway(DefaultLeeway),
		jwt.WithTimeFunc(func() time.Time { return ks.now() }),
	}
	ks.parser = jwt.NewParser(opts...)
	ks.validator = jwt.NewValidator(opts...)
	return ks, nil
}

// ParseKeys reads the "kid:secret[,kid:secret…]" form used by the
// WAITROOM_KEYS environment variable.
func ParseKeys(s string) ([]Key, error) {
	var keys []Key
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		id, secret, ok := strings.Cut(part, ":")
		if !ok || id == "" || secret == "" {
			return nil, fmt.Errorf("key %d: want kid:secret", i+1)
		}
		keys = append(keys, Key{ID: id, Secret: []byte(secret)})
	}
	return keys, nil
}

// SigningKeyID is the kid of the key new tokens are signed with.
func (ks *KeySet) SigningKeyID() string { return ks.keys[0].ID }

// SignedNow reports, without checking anything else, whether raw starts as
// the tokens signed now do (their encoded header): a cheap test that puts
// the likeliest of many candidate tokens first.
func (ks *KeySet) SignedNow(raw string) bool { return strings.HasPrefix(raw, ks.sign.header) }

// Claims are the claims of a queue token. A pre-queue token (PreQueue,
// the pre claim) has no position: it says its bearer entered a scheduled
// opening's draw, and Verify never accepts it, so nothing can admit it.
//
// Account (the acc claim) marks the token of an account, a user id from the
// site: an account's id may look like anything, an anonymous visitor's
// (NewVisitorID) included, so the mark and not the id tells them apart.
// Tokens issued before the mark existed carry none; for them an id without
// the visitor prefix is an account's (Ticket.IsAccount).
type Claims struct {
	Event    int64       `json:"evt"`
	Position int64       `json:"pos,omitempty"`
	PreQueue bool        `json:"pre,omitempty"`
	Account  accountMark `json:"acc,omitempty"`
	// HandedOut is when the position was handed out (unix seconds): the
	// admission window runs from it or from the watermark's reaching the
	// position, whichever is later, at every gateway. Renewals keep it.
	HandedOut int64 `json:"hat,omitempty"`
	jwt.RegisteredClaims
}

// accountMark is the acc claim: true marks an account's token, and any
// other value, or none, does not. No value of it makes a token invalid, so
// verifiers that do not know the claim (the edge Worker) take the same
// tokens.
type accountMark bool

// UnmarshalJSON implements json.Unmarshaler.
func (m *accountMark) UnmarshalJSON(b []byte) error {
	*m = accountMark(string(b) == "true")
	return nil
}

// MaxPosition is the largest queue position: the largest integer a JSON
// number carries exactly (2^53−1), which every client reads as written.
const MaxPosition = 1<<53 - 1

// ValidSubject reports whether a non-empty id can be a token's subject:
// one without control characters (a tab aside). An admitted request
// carries it in X-Waitroom-User, where no other control character can go,
// and no store takes a NUL as text (PostgreSQL refuses it): an id that
// could never buy is no id.
func ValidSubject(id string) bool {
	return strings.IndexFunc(id, func(r rune) bool { return r != '\t' && (r < 0x20 || r == 0x7f) }) < 0
}

// Validate is called by the parser after the registered claims pass.
func (c Claims) Validate() error {
	switch {
	case c.Subject == "":
		return errors.New("missing sub")
	case !ValidSubject(c.Subject):
		return errors.New("sub holds a control character")
	case c.Event <= 0:
		return errors.New("evt must be a positive number")
	case c.PreQueue && c.Position != 0:
		return errors.New("a pre-queue token has no pos")
	case !c.PreQueue && c.Position <= 0:
		return errors.New("pos must be a positive number")
	case c.Position > MaxPosition:
		// Never handed out: a position is a JSON number, exact to 2^53−1,
		// and a store that took one near the counter's end as handed out
		// would have none left to give.
		return errors.New("pos is past the largest position")
	case c.IssuedAt == nil:
		return errors.New("missing iat")
	}
	return nil
}

// Ticket is what a token says about its bearer once verified.
type Ticket struct {
	Subject   string
	Event     int64
	Position  int64
	IssuedAt  time.Time
	ExpiresAt time.Time
	// PreQueue marks a pre-queue token: no position, never admitted.
	PreQueue bool
	// Account marks an account's token (the acc claim).
	Account bool
	// HandedOut is when the position was handed out (the hat claim);
	// zero when the token does not say.
	HandedOut time.Time
	// Raw is the token as it was presented or issued.
	Raw string
}

// Issue signs a token for subject at position in event, valid for ttl, and
// remembers it as verified (Remember).
func (ks *KeySet) Issue(subject string, event, position int64, ttl time.Duration) (Ticket, error) {
	now := ks.now().UTC().Truncate(time.Second)
	return ks.remembered(ks.issue(Ticket{Subject: subject, Event: event, Position: position, IssuedAt: now, ExpiresAt: now.Add(ttl)}))
}

// IssueAccount is Issue for an account: the token carries the acc mark.
func (ks *KeySet) IssueAccount(subject string, event, position int64, ttl time.Duration) (Ticket, error) {
	now := ks.now().UTC().Truncate(time.Second)
	return ks.remembered(ks.issue(Ticket{Subject: subject, Event: event, Position: position, Account: true, IssuedAt: now, ExpiresAt: now.Add(ttl)}))
}

// Remember keeps t, issued by ks, among the verified tokens, so its next
// Verify is a lookup. Worth it for a token shown again within moments (a
// page admitted at once, whose requests follow); not for one next shown
// after seconds, which a busy cache has dropped by then and which only
// pushes out tokens being shown.
func (ks *KeySet) Remember(t Ticket) { ks.seen.put(t.Raw, t) }

func (ks *KeySet) remembered(t Ticket, err error) (Ticket, error) {
	if err == nil {
		ks.Remember(t)
	}
	return t, err
}

// IssueHandedOut signs a token for subject (an account's when account) at
// position in event, valid for ttl, that tells when the position was handed
// out (zero: it does not say). The caller decides whether to Remember it.
func (ks *KeySet) IssueHandedOut(subject string, event, position int64, account bool, handedOut time.Time, ttl time.Duration) (Ticket, error) {
	now := ks.now().UTC().Truncate(time.Second)
	t := Ticket{Subject: subject, Event: event, Position: position, Account: account, IssuedAt: now, ExpiresAt: now.Add(ttl)}
	if !handedOut.IsZero() {
		t.HandedOut = handedOut.UTC().Truncate(time.Second)
	}
	return ks.issue(t)
}

// IssuePreQueue signs a pre-queue token for subject in event, valid until
// expires: it carries no position and only VerifyPreQueue accepts it.
func (ks *KeySet) IssuePreQueue(subject string, event int64, expires time.Time) (Ticket, error) {
	now := ks.now().UTC().Truncate(time.Second)
	return ks.issue(Ticket{Subject: subject, Event: event, PreQueue: true, IssuedAt: now, ExpiresAt: expires.UTC().Truncate(time.Second)})
}

// IssuePreQueueAccount is IssuePreQueue for an account: the token carries
// the acc mark.
func (ks *KeySet) IssuePreQueueAccount(subject string, event int64, expires time.Time) (Ticket, error) {
	now := ks.now().UTC().Truncate(time.Second)
	return ks.issue(Ticket{Subject: subject, Event: event, PreQueue: true, Account: true, IssuedAt: now, ExpiresAt: expires.UTC().Truncate(time.Second)})
}

// IsAccount tells whether t is an account's token rather than an anonymous
// visitor's: its acc mark says so, or, on a token issued before the mark
// existed, its subject lacks the visitor prefix. An account's new tokens
// all carry the mark, so its id may start as a visitor's does.
func (t Ticket) IsAccount() bool { return t.Account || !IsVisitorID(t.Subject) }

func (ks *KeySet) issue(t Ticket) (Ticket, error) {
	claims := Claims{
		Event:    t.Event,
		Position: t.Position,
		PreQueue: t.PreQueue,
		Account:  accountMark(t.Account),
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    Issuer,
			Subject:   t.Subject,
			IssuedAt:  jwt.NewNumericDate(t.IssuedAt),
			ExpiresAt: jwt.NewNumericDate(t.ExpiresAt),
		},
	}
	if err := claims.Validate(); err != nil {
		return Ticket{}, fmt.Errorf("issue queue token: %w", err)
	}
	raw, err := ks.sign.token(t)
	if err != nil {
		return Ticket{}, fmt.Errorf("sign queue token: %w", err)
	}
	t.Raw = raw
	return t, nil
}

// Verify checks raw's signature (HS256 only, key chosen by kid), its
// registered claims (issuer, iat, exp with DefaultLeeway), that it belongs
// to event and that it carries a position: a pre-queue token is refused, so
// neither the gateway nor the origin can ever admit one. Any failure wraps
// ErrInvalidToken.
func (ks *KeySet) Verify(raw string, event int64) (Ticket, error) {
	t, err := ks.verify(raw, event)
	if err == nil && t.PreQueue {
		return Ticket{}, fmt.Errorf("%w: %w", ErrInvalidToken, ErrPreQueueToken)
	}
	return t, err
}

// VerifyPreQueue checks raw as Verify does, but accepts only a pre-queue
// token.
func (ks *KeySet) VerifyPreQueue(raw string, event int64) (Ticket, error) {
	t, err := ks.verify(raw, event)
	if err == nil && !t.PreQueue {
		return Ticket{}, fmt.Errorf("%w: not a pre-queue token", ErrInvalidToken)
	}
	return t, err
}

// VerifyAny checks raw as Verify does but accepts a pre-queue token too:
// the caller tells them apart by Ticket.PreQueue. A pre-queue ticket has no
// position, which State.Admits never admits.
func (ks *KeySet) VerifyAny(raw string, event int64) (Ticket, error) {
	return ks.verify(raw, event)
}

// ErrPreQueueToken is why Verify refuses a pre-queue token.
var ErrPreQueueToken = errors.New("a pre-queue token has no position")

func (ks *KeySet) verify(raw string, event int64) (Ticket, error) {
	t, ok := ks.seen.get(raw)
	if !ok || !t.fresh(ks.now()) {
		if t, ok = ks.verifyOwn(raw); !ok {
			var err error
			if t, err = ks.verifyLibrary(raw); err != nil {
				return Ticket{}, err
			}
		}
		ks.seen.put(raw, t)
	}
	if t.Event != event {
		return Ticket{}, fmt.Errorf("%w: %w: token is for event %d, not %d", ErrInvalidToken, ErrWrongEvent, t.Event, event)
	}
	return t, nil
}

// verifyLibrary verifies raw with the JWT library, whatever its form.
func (ks *KeySet) verifyLibrary(raw string) (Ticket, error) {
	var c Claims
	_, err := ks.parser.ParseWithClaims(raw, &c, ks.keyFor)
	if err != nil {
		return Ticket{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if err := wholeSecondTimes(raw); err != nil {
		return Ticket{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	return Ticket{
		Subject:   c.Subject,
		Event:     c.Event,
		Position:  c.Position,
		PreQueue:  c.PreQueue,
		Account:   bool(c.Account),
		IssuedAt:  c.IssuedAt.Time.UTC(),
		HandedOut: handedOutTime(c.HandedOut),
		ExpiresAt: c.ExpiresAt.Time.UTC(),
		Raw:       raw,
	}, nil
}

// handedOutTime is the hat claim's time; zero when it is absent.
func handedOutTime(sec int64) time.Time {
	if sec <= 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}

// wholeSecondTimes refuses a token whose exp, iat or nbf is not a JSON
// number of whole seconds (1e9 and 1.0 are whole; 1.5 and "1" are not). The
// gateway only ever signs whole seconds; the JWT library would also take a
// fraction (truncated) or a number in a string, which every
// other checker of these tokens (the edge Worker, the backend recipes with
// their own JWT libraries) would judge differently. Only a token whose
// signature verified, and that verifyOwn did not take, gets here.
func wholeSecondTimes(raw string) error {
	_, rest, _ := strings.Cut(raw, ".")
	payload, _, _ := strings.Cut(rest, ".")
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return err
	}
	var times struct {
		Exp, Iat, Nbf json.RawMessage
	}
	if err := json.Unmarshal(b, &times); err != nil {
		return err
	}
	for _, v := range []struct {
		name string
		raw  json.RawMessage
	}{{"exp", times.Exp}, {"iat", times.Iat}, {"nbf", times.Nbf}} {
		if v.raw == nil || string(v.raw) == "null" {
			continue
		}
		if f, err := strconv.ParseFloat(string(v.raw), 64); err != nil || f != math.Trunc(f) {
			return fmt.Errorf("%s is not a whole number of seconds", v.name)
		}
	}
	return nil
}

func (ks *KeySet) keyFor(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	if kid == "" {
		return nil, errors.New("missing kid header")
	}
	secret, ok := ks.byID[kid]
	if !ok {
		return nil, fmt.Errorf("unknown kid %q", kid)
	}
	return secret, nil
}

// signer signs tokens with one key. Every new arrival gets a token, so
// signing is on the gateway's hottest path: the header, the same for every
// token of the key, is encoded once, the claims are appended field by field
// without reflection, and the HMAC state is reused. The bytes are those jwt.Token.SignedString makes
// for the same claims (tested). A token in exactly that form is verified
// by verifyOwn; any other by the jwt parser.
type signer struct {
	// header is the encoded header and the dot after it.
	header string
	macs   sync.Pool // of hash.Hash, HMAC-SHA256 with the key
}

func newSigner(k Key) *signer {
	// The fields in the order jwt's header map marshals in (sorted).
	h, _ := json.Marshal(struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
		Typ string `json:"typ"`
	}{jwt.SigningMethodHS256.Alg(), k.ID, "JWT"})
	s := &signer{header: base64.RawURLEncoding.EncodeToString(h) + "."}
	secret := k.Secret
	s.macs.New = func() any { return hmac.New(sha256.New, secret) }
	return s
}

// token signs t's claims (times in whole seconds, as jwt.NumericDate has
// them).
func (s *signer) token(t Ticket) (string, error) {
	enc := base64.RawURLEncoding
	var claims [192]byte
	payload, err := appendClaims(claims[:0], t)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 0, len(s.header)+enc.EncodedLen(len(payload))+1+enc.EncodedLen(sha256.Size))
	buf = append(buf, s.header...)
	buf = enc.AppendEncode(buf, payload)
	sum := s.sum(buf)
	buf = append(buf, '.')
	buf = enc.AppendEncode(buf, sum[:])
	// buf is never written again, so the token is its bytes, as
	// strings.Builder hands its own out: one allocation instead of two.
	return unsafe.String(unsafe.SliceData(buf), len(buf)), nil
}

// sum is the HMAC of signed, the token's header and payload with the dot
// between them.
func (s *signer) sum(signed []byte) [sha256.Size]byte {
	mac := s.macs.Get().(hash.Hash)
	mac.Reset()
	mac.Write(signed)
	var sum [sha256.Size]byte
	mac.Sum(sum[:0])
	s.macs.Put(mac)
	return sum
}

// appendClaims appends t's claims as json.Marshal writes Claims: the
// event's fields, then the registered claims, empty ones left out. Only
// the subject may need escaping, which json.Marshal does when it has
// anything but plain printable ASCII.
func appendClaims(b []byte, t Ticket) ([]byte, error) {
	b = append(b, `{"evt":`...)
	b = strconv.AppendInt(b, t.Event, 10)
	if t.Position != 0 {
		b = append(b, `,"pos":`...)
		b = strconv.AppendInt(b, t.Position, 10)
	}
	if t.PreQueue {
		b = append(b, `,"pre":true`...)
	}
	if t.Account {
		b = append(b, `,"acc":true`...)
	}
	if !t.HandedOut.IsZero() {
		b = append(b, `,"hat":`...)
		b = strconv.AppendInt(b, t.HandedOut.Unix(), 10)
	}
	b = append(b, `,"iss":"`+Issuer+`","sub":`...)
	if plainJSON(t.Subject) {
		b = append(b, '"')
		b = append(b, t.Subject...)
		b = append(b, '"')
	} else {
		sub, err := json.Marshal(t.Subject)
		if err != nil {
			return nil, err
		}
		b = append(b, sub...)
	}
	b = append(b, `,"exp":`...)
	b = strconv.AppendInt(b, t.ExpiresAt.Unix(), 10)
	b = append(b, `,"iat":`...)
	b = strconv.AppendInt(b, t.IssuedAt.Unix(), 10)
	return append(b, '}'), nil
}

// plainJSON tells whether json.Marshal writes s as it is between quotes:
// printable ASCII without the quote, the backslash, or the <, > and & it
// escapes for HTML.
func plainJSON(s string) bool {
	for i := range len(s) {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
