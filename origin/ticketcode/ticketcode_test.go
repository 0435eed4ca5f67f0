package ticketcode_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/ticketcode"
)

var (
	secret      = []byte("ticket-secret-0123456789abcdef-0123")
	otherSecret = []byte("another-secret-0123456789abcdef-012")
	now         = time.Date(2026, 6, 1, 18, 0, 0, 0, time.UTC)
)

func signer(t *testing.T, secret []byte) *ticketcode.Signer {
	t.Helper()
	s, err := ticketcode.NewSigner(secret)
	require.NoError(t, err)
	return s
}

func verifier(t *testing.T, keys ...ticketcode.PublicKey) *ticketcode.Verifier {
	t.Helper()
	v, err := ticketcode.NewVerifier(keys...)
	require.NoError(t, err)
	return v
}

func TestRoundTrip(t *testing.T) {
	s := signer(t, secret)
	v := verifier(t, s.PublicKey())
	for _, c := range []ticketcode.Claims{
		{BookingID: uuid.NewString(), EventID: 42, Seat: "7"},
		{BookingID: uuid.NewString(), EventID: 1<<62 + 5, Seat: "A-12-340"},
		{BookingID: uuid.NewString(), EventID: 9, Seat: strings.Repeat("Ü", ticketcode.MaxSeatLen/2)},
		{BookingID: uuid.NewString(), EventID: 9, Seat: "1", NotAfter: now.Add(time.Hour)},
	} {
		code, err := s.Sign(c)
		require.NoError(t, err)
		got, err := v.Verify(code, now)
		require.NoError(t, err, "%+v", c)
		assert.Equal(t, c, got)
	}
}

func TestSameSecretSameKey(t *testing.T) {
	a, b := signer(t, secret), signer(t, secret)
	assert.Equal(t, a.PublicKey(), b.PublicKey(), "every origin node derives the same key from the secret")
	assert.NotEqual(t, a.PublicKey().ID, signer(t, otherSecret).PublicKey().ID)
	assert.Len(t, a.PublicKey().ID, 8)
}

func TestRefused(t *testing.T) {
	s := signer(t, secret)
	other := signer(t, otherSecret)
	v := verifier(t, s.PublicKey())
	claims := ticketcode.Claims{BookingID: uuid.NewString(), EventID: 42, Seat: "A-1-7"}
	code, err := s.Sign(claims)
	require.NoError(t, err)
	otherCode, err := other.Sign(claims)
	require.NoError(t, err)
	raw, err := base64.RawURLEncoding.DecodeString(code)
	require.NoError(t, err)

	// Signed by the other key, relabelled with this key's id.
	relabelled := append([]byte(nil), mustDecode(t, otherCode)...)
	copy(relabelled[1:5], raw[1:5])

	tests := map[string]string{
		"empty":             "",
		"garbage":           "not-a-ticket",
		"path":              "../../etc/passwd",
		"truncated":         code[:len(code)-1],
		"one char more":     code + "A",
		"upper-cased":       strings.ToUpper(code),
		"padded":            base64.URLEncoding.EncodeToString(raw),
		"standard alphabet": base64.RawStdEncoding.EncodeToString(append([]byte{0xfb, 0xff}, raw[2:]...)),
		"other key":         otherCode,
		"other key, our id": encode(relabelled),
		"wrong version":     encode(with(raw, 0, 1)),
		"seat length zero":  encode(with(raw, 37, 0)),
		"seat length off":   encode(with(raw, 37, raw[37]+1)),
	}
	// Every single byte changed, the signature's included.
	for i := range raw {
		tests[fmt.Sprintf("byte %d changed", i)] = encode(with(raw, i, raw[i]^0x01))
	}
	for name, bad := range tests {
		_, err := v.Verify(bad, now)
		assert.ErrorIs(t, err, ticketcode.ErrInvalid, name)
	}
}

func TestExpired(t *testing.T) {
	s := signer(t, secret)
	v := verifier(t, s.PublicKey())
	end := now.Add(-time.Second)
	code, err := s.Sign(ticketcode.Claims{BookingID: uuid.NewString(), EventID: 42, Seat: "3", NotAfter: end})
	require.NoError(t, err)
	got, err := v.Verify(code, now)
	assert.ErrorIs(t, err, ticketcode.ErrExpired)
	assert.NotErrorIs(t, err, ticketcode.ErrInvalid, "genuine, only over")
	assert.Equal(t, end.Truncate(time.Second), got.NotAfter)
	_, err = v.Verify(code, end)
	assert.NoError(t, err, "valid through its last second")
}

// Rotation: the origin signs with the new key and verifies with both, so
// tickets issued under the retired key still admit; a device that has only
// the retired key refuses the new tickets until it is updated.
func TestRotation(t *testing.T) {
	retired, current := signer(t, secret), signer(t, otherSecret)
	old, err := retired.Sign(ticketcode.Claims{BookingID: uuid.NewString(), EventID: 1, Seat: "1"})
	require.NoError(t, err)
	fresh, err := current.Sign(ticketcode.Claims{BookingID: uuid.NewString(), EventID: 1, Seat: "2"})
	require.NoError(t, err)

	both := verifier(t, current.PublicKey(), retired.PublicKey())
	for _, code := range []string{old, fresh} {
		_, err := both.Verify(code, now)
		assert.NoError(t, err)
	}
	_, err = verifier(t, retired.PublicKey()).Verify(fresh, now)
	assert.ErrorIs(t, err, ticketcode.ErrInvalid)
}

func TestPublicKeys(t *testing.T) {
	a, b := signer(t, secret).PublicKey(), signer(t, otherSecret).PublicKey()
	got, err := ticketcode.ParsePublicKeys(a.String() + ", " + b.String() + ",")
	require.NoError(t, err)
	assert.Equal(t, []ticketcode.PublicKey{a, b}, got)
	none, err := ticketcode.ParsePublicKeys("")
	require.NoError(t, err)
	assert.Empty(t, none)

	for name, bad := range map[string]string{
		"no id":          base64.RawURLEncoding.EncodeToString(a.Key),
		"another's id":   b.ID + ":" + base64.RawURLEncoding.EncodeToString(a.Key),
		"short key":      a.ID + ":" + base64.RawURLEncoding.EncodeToString(a.Key[:31]),
		"not base64url":  a.ID + ":" + strings.Repeat("*", 43),
		"a private seed": a.ID + ":" + base64.RawURLEncoding.EncodeToString(make([]byte, ed25519.SeedSize+1)),
	} {
		_, err := ticketcode.ParsePublicKey(bad)
		assert.Error(t, err, name)
	}
	_, err = ticketcode.NewVerifier()
	assert.Error(t, err, "a verifier needs a key")
	_, err = ticketcode.NewVerifier(ticketcode.PublicKey{ID: b.ID, Key: a.Key})
	assert.Error(t, err, "a key under another's id")
}

func TestSignRefuses(t *testing.T) {
	_, err := ticketcode.NewSigner([]byte("short"))
	assert.Error(t, err)
	s := signer(t, secret)
	id := uuid.NewString()
	for name, c := range map[string]ticketcode.Claims{
		"booking id":   {BookingID: "b-1", EventID: 1, Seat: "1"},
		"event":        {BookingID: id, EventID: 0, Seat: "1"},
		"no seat":      {BookingID: id, EventID: 1},
		"long seat":    {BookingID: id, EventID: 1, Seat: strings.Repeat("x", ticketcode.MaxSeatLen+1)},
		"invalid utf8": {BookingID: id, EventID: 1, Seat: "\xff"},
		"not after":    {BookingID: id, EventID: 1, Seat: "1", NotAfter: time.Unix(-5, 0)},
	} {
		_, err := s.Sign(c)
		assert.Error(t, err, name)
	}
}

func FuzzVerify(f *testing.F) {
	s, err := ticketcode.NewSigner(secret)
	require.NoError(f, err)
	v, err := ticketcode.NewVerifier(s.PublicKey())
	require.NoError(f, err)
	code, err := s.Sign(ticketcode.Claims{BookingID: uuid.NewString(), EventID: 42, Seat: "A-1-7"})
	require.NoError(f, err)
	f.Add(code)
	f.Add("")
	f.Add(tamperLast(code))
	f.Fuzz(func(t *testing.T, in string) {
		c, err := v.Verify(in, now)
		if err != nil {
			return
		}
		// Only a code the key signed verifies: re-signing its claims
		// (Ed25519 is deterministic) gives the same code back.
		again, err := s.Sign(c)
		require.NoError(t, err)
		require.Equal(t, in, again)
	})
}

func tamperLast(code string) string {
	b := []byte(code)
	b[len(b)-2] ^= 0x01
	return string(b)
}

func mustDecode(t *testing.T, code string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(code)
	require.NoError(t, err)
	return b
}

func encode(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func with(b []byte, i int, v byte) []byte {
	c := append([]byte(nil), b...)
	c[i] = v
	return c
}
