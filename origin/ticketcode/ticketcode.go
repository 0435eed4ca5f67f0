// Package ticketcode is the ticket code: what a ticket grants, signed with
// Ed25519. The origin signs with a private key only it holds; a gate device
// holds the public keys and verifies a code without the server. The package
// needs nothing but the standard library and google/uuid, so a gate device
// can import it as it is.
//
// Ed25519 rather than the HMAC the codes used before: with HMAC the key
// that verifies also signs, so every gate device would carry the power to
// mint tickets, and a stolen scanner would be a ticket printer. Ed25519
// rather than ECDSA P-256: deterministic signatures (no per-signature
// nonce to get wrong), 64-byte signatures and 32-byte keys that keep the QR
// code small, and it is in the standard library. The code is a fixed binary
// layout rather than a JWT: one algorithm, chosen by the version byte,
// leaves nothing to negotiate ("alg": "none"), and it is half the size.
//
// A code is base64url (no padding) of:
//
//	version (1 byte, 2) | key id (4) | booking id (16) | event id (8, big endian)
//	| not after (8, big endian Unix seconds, 0 = never) | seat length (1) | seat (1–64 bytes)
//	| Ed25519 signature (64) over "waitroom ticket\x00" and every byte before it
package ticketcode

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// MinSecretLen is the shortest secret a signing key is derived from.
const MinSecretLen = 32

// MaxSeatLen is the longest seat, in bytes.
const MaxSeatLen = 64

const (
	version     = 2
	keyIDLen    = 4
	headerLen   = 1 + keyIDLen + 16 + 8 + 8 + 1
	minCodeLen  = headerLen + 1 + ed25519.SignatureSize
	maxCodeLen  = headerLen + MaxSeatLen + ed25519.SignatureSize
	signContext = "waitroom ticket\x00"
	seedContext = "waitroom ticket signing key\x00"
)

// Verification errors. ErrInvalid covers every code that is not one the
// keys signed (malformed, unknown key, bad signature); ErrExpired is a
// genuine code past its NotAfter.
var (
	ErrInvalid = errors.New("invalid ticket code")
	ErrExpired = errors.New("ticket code expired")
)

// Claims is what a ticket grants.
type Claims struct {
	// BookingID is the booking the ticket belongs to (a UUID).
	BookingID string
	EventID   int64
	// Seat is the ticket's seat: its number in a general-admission event,
	// its seat id ("A-1-7") in a seated one.
	Seat string
	// NotAfter is the last moment the ticket admits; zero: no end.
	NotAfter time.Time
}

// PublicKey is a verification key with its id, as gate devices hold it.
type PublicKey struct {
	// ID is the key id carried by every code the key signed: 8 hex digits,
	// the first 4 bytes of SHA-256 of the key.
	ID  string
	Key ed25519.PublicKey
}

// String is the key as ParsePublicKey reads it: "<id>:<base64url key>".
func (k PublicKey) String() string {
	return k.ID + ":" + base64.RawURLEncoding.EncodeToString(k.Key)
}

func keyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:keyIDLen])
}

// ParsePublicKey reads "<id>:<base64url key>" (PublicKey.String) and checks
// that the id is the key's.
func ParsePublicKey(s string) (PublicKey, error) {
	id, enc, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return PublicKey{}, fmt.Errorf("public key %q: want <id>:<base64url key>", s)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(enc)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return PublicKey{}, fmt.Errorf("public key %q: not a base64url Ed25519 key of %d bytes", id, ed25519.PublicKeySize)
	}
	k := PublicKey{ID: id, Key: ed25519.PublicKey(raw)}
	if want := keyID(k.Key); id != want {
		return PublicKey{}, fmt.Errorf("public key %q: the id of this key is %s", id, want)
	}
	return k, nil
}

// ParsePublicKeys reads a comma-separated list of ParsePublicKey's form;
// the empty string is no keys.
func ParsePublicKeys(s string) ([]PublicKey, error) {
	var out []PublicKey
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, err := ParsePublicKey(part)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

// Signer signs ticket codes. Only the origin has one.
type Signer struct {
	priv ed25519.PrivateKey
	pub  PublicKey
}

// NewSigner derives the signing key from secret (at least MinSecretLen
// bytes): the Ed25519 seed is SHA-256 of a context string and the secret,
// so the same secret gives the same key on every origin node and across
// restarts, and the secret never signs anything itself.
func NewSigner(secret []byte) (*Signer, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("ticket signing key: the secret must be at least %d bytes", MinSecretLen)
	}
	h := sha256.New()
	h.Write([]byte(seedContext))
	h.Write(secret)
	priv := ed25519.NewKeyFromSeed(h.Sum(nil))
	pub := priv.Public().(ed25519.PublicKey)
	return &Signer{priv: priv, pub: PublicKey{ID: keyID(pub), Key: pub}}, nil
}

// PublicKey is the key that verifies this signer's codes.
func (s *Signer) PublicKey() PublicKey { return s.pub }

// Sign returns the code of the ticket c.
func (s *Signer) Sign(c Claims) (string, error) {
	id, err := uuid.Parse(c.BookingID)
	if err != nil {
		return "", fmt.Errorf("sign ticket: booking id %q: %w", c.BookingID, err)
	}
	if c.EventID <= 0 {
		return "", fmt.Errorf("sign ticket: event %d out of range", c.EventID)
	}
	if c.Seat == "" || len(c.Seat) > MaxSeatLen || !utf8.ValidString(c.Seat) {
		return "", fmt.Errorf("sign ticket: seat %q: 1–%d bytes of UTF-8 are required", c.Seat, MaxSeatLen)
	}
	var notAfter int64
	if !c.NotAfter.IsZero() {
		if notAfter = c.NotAfter.Unix(); notAfter <= 0 {
			return "", fmt.Errorf("sign ticket: not after %v out of range", c.NotAfter)
		}
	}
	kid, _ := hex.DecodeString(s.pub.ID)
	b := make([]byte, 0, headerLen+len(c.Seat)+ed25519.SignatureSize)
	b = append(b, version)
	b = append(b, kid...)
	b = append(b, id[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.EventID))
	b = binary.BigEndian.AppendUint64(b, uint64(notAfter))
	b = append(b, byte(len(c.Seat)))
	b = append(b, c.Seat...)
	b = append(b, ed25519.Sign(s.priv, signed(b))...)
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func signed(body []byte) []byte {
	return append([]byte(signContext), body...)
}

// Verifier verifies ticket codes with public keys alone.
type Verifier struct {
	keys map[string]ed25519.PublicKey
}

// NewVerifier verifies codes signed by any of keys: the current key and the
// retired ones whose tickets are still out.
func NewVerifier(keys ...PublicKey) (*Verifier, error) {
	v := &Verifier{keys: make(map[string]ed25519.PublicKey, len(keys))}
	for _, k := range keys {
		if len(k.Key) != ed25519.PublicKeySize || k.ID != keyID(k.Key) {
			return nil, fmt.Errorf("ticket verifier: key %q is not an Ed25519 public key under its id", k.ID)
		}
		v.keys[k.ID] = k.Key
	}
	if len(v.keys) == 0 {
		return nil, errors.New("ticket verifier: no key")
	}
	return v, nil
}

// Verify checks code and returns what it grants: ErrInvalid when no key of
// v signed it as it is, ErrExpired when it did but now is past NotAfter.
// Whether the ticket was cancelled since, or used, is the ledger's to say.
func (v *Verifier) Verify(code string, now time.Time) (Claims, error) {
	if n := base64.RawURLEncoding.DecodedLen(len(code)); n < minCodeLen || n > maxCodeLen {
		return Claims{}, ErrInvalid
	}
	// The decoder skips line breaks even when strict: a code with one
	// would pass as another spelling of the same ticket.
	if strings.ContainsAny(code, "\r\n") {
		return Claims{}, ErrInvalid
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(code)
	if err != nil || b[0] != version {
		return Claims{}, ErrInvalid
	}
	seatLen := int(b[headerLen-1])
	if seatLen == 0 || len(b) != headerLen+seatLen+ed25519.SignatureSize {
		return Claims{}, ErrInvalid
	}
	pub, ok := v.keys[hex.EncodeToString(b[1:1+keyIDLen])]
	if !ok {
		return Claims{}, ErrInvalid
	}
	body, sig := b[:len(b)-ed25519.SignatureSize], b[len(b)-ed25519.SignatureSize:]
	if !ed25519.Verify(pub, signed(body), sig) {
		return Claims{}, ErrInvalid
	}
	id, _ := uuid.FromBytes(b[1+keyIDLen : 1+keyIDLen+16])
	c := Claims{
		BookingID: id.String(),
		EventID:   int64(binary.BigEndian.Uint64(b[21:29])),
		Seat:      string(b[headerLen : headerLen+seatLen]),
	}
	if na := int64(binary.BigEndian.Uint64(b[29:37])); na != 0 {
		c.NotAfter = time.Unix(na, 0).UTC()
		if now.After(c.NotAfter) {
			return c, ErrExpired
		}
	}
	return c, nil
}
