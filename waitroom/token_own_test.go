package waitroom

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// signPayload signs payload, any bytes at all, under the header key kid
// writes, as only a holder of the secret could.
func signPayload(kid string, secret []byte, payload string) string {
	enc := base64.RawURLEncoding
	s := newSigner(Key{ID: kid, Secret: secret})
	signed := s.header + enc.EncodeToString([]byte(payload))
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(signed))
	return signed + "." + enc.EncodeToString(mac.Sum(nil))
}

// agrees checks the fast path against the library on raw: it may decline,
// but what it accepts the library accepts, with the same ticket.
func agrees(t *testing.T, ks *KeySet, raw string) (fast bool) {
	t.Helper()
	own, ok := ks.verifyOwn(raw)
	lib, err := ks.verifyLibrary(raw)
	if ok {
		require.NoError(t, err, "the fast path accepted what the library refuses: %q", raw)
		require.Equal(t, lib, own, "the fast path read %q otherwise than the library", raw)
	}
	return ok
}

// Every token the signer writes takes the fast path, and reads as the
// library reads it.
func TestVerifyOwnTakesOwnTokens(t *testing.T) {
	clock := newClock()
	ks := mustKeySet(t, clock.Now, Key{ID: "k1", Secret: secretA}, Key{ID: "old", Secret: secretB})
	oldSigner := mustKeySet(t, clock.Now, Key{ID: "old", Secret: secretB})
	hat := clock.Now().Add(-time.Minute)
	for name, issue := range map[string]func() (Ticket, error){
		"queue token":     func() (Ticket, error) { return ks.Issue("v_abcdefghijklmnopqrstuv", 42, 123456, 30*time.Minute) },
		"account's token": func() (Ticket, error) { return ks.IssueAccount("user 7/a.b_c-d@example.com", 42, 9, time.Hour) },
		"handed out":      func() (Ticket, error) { return ks.IssueHandedOut("v_x", 42, 3, true, hat, time.Hour) },
		"pre-queue":       func() (Ticket, error) { return ks.IssuePreQueue("v_y", 42, clock.Now().Add(time.Hour)) },
		"pre-queue, account": func() (Ticket, error) {
			return ks.IssuePreQueueAccount("u", 42, clock.Now().Add(time.Hour))
		},
		"large numbers": func() (Ticket, error) {
			return ks.Issue("v_z", 999_999_999_999_999_999, MaxPosition, time.Hour)
		},
		"an older key's": func() (Ticket, error) { return oldSigner.Issue("v_w", 42, 5, time.Hour) },
	} {
		t.Run(name, func(t *testing.T) {
			tok, err := issue()
			require.NoError(t, err)
			assert.True(t, agrees(t, ks, tok.Raw), "declined the signer's own token %q", tok.Raw)
		})
	}
}

// What the signer never writes, or the library would read otherwise, or
// refuses, is left to the library.
func TestVerifyOwnLeavesTheRestToTheLibrary(t *testing.T) {
	clock := newClock()
	ks := mustKeySet(t, clock.Now, Key{ID: "k1", Secret: secretA})
	now := clock.Now().Unix()
	claims := func(format string) string {
		return strings.NewReplacer("IAT", itoa(now), "EXP", itoa(now+600)).Replace(format)
	}
	good := claims(`{"evt":42,"pos":7,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`)
	require.True(t, agrees(t, ks, signPayload("k1", secretA, good)))

	for name, payload := range map[string]string{
		"a space":                   claims(`{"evt":42, "pos":7,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`),
		"fields in another order":   claims(`{"pos":7,"evt":42,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`),
		"an unknown field":          claims(`{"evt":42,"pos":7,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT,"x":1}`),
		"a field twice":             claims(`{"evt":42,"evt":43,"pos":7,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`),
		"a leading zero":            claims(`{"evt":042,"pos":7,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`),
		"a zero position":           claims(`{"evt":42,"pos":0,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`),
		"a zero hat":                claims(`{"evt":42,"pos":7,"hat":0,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`),
		"acc false":                 claims(`{"evt":42,"pos":7,"acc":false,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`),
		"an escaped subject":        claims(`{"evt":42,"pos":7,"iss":"waitroom","sub":"v\u005fa","exp":EXP,"iat":IAT}`),
		"a subject with a quote":    claims(`{"evt":42,"pos":7,"iss":"waitroom","sub":"v\"a","exp":EXP,"iat":IAT}`),
		"a fraction of a second":    claims(`{"evt":42,"pos":7,"iss":"waitroom","sub":"v_a","exp":EXP.5,"iat":IAT}`),
		"a time as a float":         claims(`{"evt":42,"pos":7,"iss":"waitroom","sub":"v_a","exp":1.0e12,"iat":IAT}`),
		"a time past 2^53":          claims(`{"evt":42,"pos":7,"iss":"waitroom","sub":"v_a","exp":9007199254740993,"iat":IAT}`),
		"a number of 19 digits":     claims(`{"evt":1000000000000000000,"pos":7,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`),
		"another issuer":            claims(`{"evt":42,"pos":7,"iss":"other","sub":"v_a","exp":EXP,"iat":IAT}`),
		"expired":                   strings.Replace(good, itoa(now+600), itoa(now-60), 1),
		"issued in the future":      strings.Replace(good, `"iat":`+itoa(now), `"iat":`+itoa(now+60), 1),
		"no subject":                claims(`{"evt":42,"pos":7,"iss":"waitroom","sub":"","exp":EXP,"iat":IAT}`),
		"no position":               claims(`{"evt":42,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`),
		"a pre-queue with position": claims(`{"evt":42,"pos":7,"pre":true,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`),
		"a negative event":          claims(`{"evt":-42,"pos":7,"iss":"waitroom","sub":"v_a","exp":EXP,"iat":IAT}`),
		"trailing bytes":            good + " ",
	} {
		t.Run(name, func(t *testing.T) {
			assert.False(t, agrees(t, ks, signPayload("k1", secretA, payload)))
		})
	}

	signed := signPayload("k1", secretA, good)
	dot := strings.LastIndexByte(signed, '.')
	for name, raw := range map[string]string{
		"another key's signature": signPayload("k1", secretB, good),
		"an unknown kid":          signPayload("k9", secretA, good),
		"a signature cut short":   signed[:len(signed)-1],
		"a signature's last bits": signed[:len(signed)-1] + string(signed[len(signed)-1]^1),
		"a fourth segment":        signed + ".x",
		"no signature":            signed[:dot+1],
		"no dots":                 strings.ReplaceAll(signed, ".", ""),
	} {
		t.Run(name, func(t *testing.T) {
			assert.False(t, agrees(t, ks, raw))
		})
	}
}

// Whatever claims a key holder signs, the fast path either leaves them to
// the library or reads them as it does.
func FuzzVerifyOwnAgreesWithTheLibrary(f *testing.F) {
	clock := newClock()
	ks := mustKeySet(f, clock.Now, Key{ID: "k1", Secret: secretA})
	now := itoa(clock.Now().Unix())
	later := itoa(clock.Now().Unix() + 600)
	f.Add(`{"evt":42,"pos":7,"iss":"waitroom","sub":"v_a","exp":` + later + `,"iat":` + now + `}`)
	f.Add(`{"evt":42,"pos":7,"pre":true,"acc":true,"hat":` + now + `,"iss":"waitroom","sub":"v_a","exp":` + later + `,"iat":` + now + `}`)
	f.Add(`{"evt":42,"pre":true,"iss":"waitroom","sub":"a b","exp":` + later + `,"iat":` + now + `}`)
	f.Add(`{"evt":42,"pos":7,"iss":"waitroom","sub":"v_a","exp":9007199254740993,"iat":` + now + `}`)
	f.Fuzz(func(t *testing.T, payload string) {
		agrees(t, ks, signPayload("k1", secretA, payload))
	})
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
