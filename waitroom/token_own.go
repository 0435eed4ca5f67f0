package waitroom

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"strings"
	"time"
	"unsafe"

	"github.com/golang-jwt/jwt/v5"
)

// verifyOwn verifies raw without the JWT library's decoding when it is, byte
// for byte, a token a signer of this set writes: one of the set's headers,
// the claims exactly as appendClaims writes them, and the signature in its
// one canonical encoding. A node sees most tokens once (the origin checks
// each hold's token once, a gateway a waiting token at its first poll), and
// the library's two JSON decodes, of the header into a map and of the claims
// by reflection, were nine tenths of a first check.
//
// ok false decides nothing: the caller hands raw to the library, which is the
// judge of every token. So the fast path only ever accepts a subset of what
// the library accepts, with the same ticket: the claims it reads are
// written back by appendClaims and must give the payload's exact bytes, and
// they pass the library's own validator, built with the parser's options.
func (ks *KeySet) verifyOwn(raw string) (Ticket, bool) {
	header, rest, ok := strings.Cut(raw, ".")
	if !ok {
		return Ticket{}, false
	}
	s := ks.own[header]
	if s == nil {
		return Ticket{}, false
	}
	payload, sig, ok := strings.Cut(rest, ".")
	enc := base64.RawURLEncoding
	if !ok || len(sig) != enc.EncodedLen(sha256.Size) {
		return Ticket{}, false
	}
	signed := raw[:len(header)+1+len(payload)]
	sum := s.sum(bytesOf(signed))
	var want [43]byte // enc.EncodedLen(sha256.Size)
	enc.Encode(want[:], sum[:])
	if subtle.ConstantTimeCompare(want[:], bytesOf(sig)) != 1 {
		return Ticket{}, false
	}

	var claims [256]byte
	if enc.DecodedLen(len(payload)) > len(claims) {
		return Ticket{}, false
	}
	n, err := enc.Decode(claims[:], bytesOf(payload))
	if err != nil {
		return Ticket{}, false
	}
	t, ok := readOwnClaims(claims[:n])
	if !ok {
		return Ticket{}, false
	}
	var again [256]byte
	canon, err := appendClaims(again[:0], t)
	if err != nil || !bytes.Equal(canon, claims[:n]) {
		return Ticket{}, false
	}
	c := Claims{
		Event:     t.Event,
		Position:  t.Position,
		PreQueue:  t.PreQueue,
		Account:   accountMark(t.Account),
		HandedOut: unixOrZero(t.HandedOut),
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    Issuer,
			Subject:   t.Subject,
			IssuedAt:  jwt.NewNumericDate(t.IssuedAt),
			ExpiresAt: jwt.NewNumericDate(t.ExpiresAt),
		},
	}
	if ks.validator.Validate(c) != nil {
		return Ticket{}, false
	}
	t.Raw = raw
	return t, true
}

// readOwnClaims reads claims in the order and form appendClaims writes
// them. It does not check that form to the byte; its caller does, by
// writing the ticket back.
func readOwnClaims(b []byte) (Ticket, bool) {
	r := claimReader{b: b, ok: true}
	var t Ticket
	r.lit(`{"evt":`)
	t.Event = r.int()
	if r.opt(`,"pos":`) {
		t.Position = r.int()
	}
	t.PreQueue = r.opt(`,"pre":true`)
	t.Account = r.opt(`,"acc":true`)
	if r.opt(`,"hat":`) {
		t.HandedOut = handedOutTime(r.seconds())
	}
	r.lit(`,"iss":"` + Issuer + `","sub":"`)
	t.Subject = r.until('"')
	r.lit(`,"exp":`)
	t.ExpiresAt = time.Unix(r.seconds(), 0).UTC()
	r.lit(`,"iat":`)
	t.IssuedAt = time.Unix(r.seconds(), 0).UTC()
	r.lit(`}`)
	return t, r.ok && len(r.b) == 0
}

// claimReader walks claims; the first thing that does not fit clears ok,
// and every later step is then a no-op.
type claimReader struct {
	b  []byte
	ok bool
}

func (r *claimReader) lit(s string) {
	if !r.opt(s) {
		r.ok = false
	}
}

func (r *claimReader) opt(s string) bool {
	if r.ok && bytes.HasPrefix(r.b, bytesOf(s)) {
		r.b = r.b[len(s):]
		return true
	}
	return false
}

// int reads an optional minus and 1 to 18 digits: larger numbers, which
// no event, position or time needs, are left to the library.
func (r *claimReader) int() int64 {
	if !r.ok {
		return 0
	}
	i, neg := 0, false
	if len(r.b) > 0 && r.b[0] == '-' {
		i, neg = 1, true
	}
	var v int64
	start := i
	for ; i < len(r.b) && r.b[i] >= '0' && r.b[i] <= '9'; i++ {
		v = v*10 + int64(r.b[i]-'0')
	}
	if i == start || i-start > 18 {
		r.ok = false
		return 0
	}
	r.b = r.b[i:]
	if neg {
		return -v
	}
	return v
}

// seconds reads a time: the library reads times as float64, exact only
// for whole seconds up to 2^53, so any other is left to it.
func (r *claimReader) seconds() int64 {
	v := r.int()
	if v < 0 || v > 1<<53 {
		r.ok = false
	}
	return v
}

// until reads up to the next c and past it.
func (r *claimReader) until(c byte) string {
	if !r.ok {
		return ""
	}
	i := bytes.IndexByte(r.b, c)
	if i < 0 {
		r.ok = false
		return ""
	}
	s := string(r.b[:i])
	r.b = r.b[i+1:]
	return s
}

// unixOrZero is the hat claim of a time: 0 for none.
func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// bytesOf is s's bytes without a copy, for reading only.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
