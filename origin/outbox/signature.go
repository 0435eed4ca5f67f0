package outbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries an event's signature: t=<unix>,v1=<hex>.
const SignatureHeader = "Waitroom-Signature"

// DefaultTolerance is how old a signature a receiver should still take, as
// the recipes in examples/backends do.
const DefaultTolerance = 5 * time.Minute

// Signature errors.
var (
	ErrNoSignature  = errors.New("no valid signature header")
	ErrBadSignature = errors.New("signature does not match")
	ErrSignatureAge = errors.New("signature timestamp outside the tolerance")
)

// Sign is the header value of body sent at t: HMAC-SHA256 of "t.body" with
// secret, the scheme payment providers use for their webhooks.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks header against body as a receiver does: a v1 signature of
// it with secret, made within tolerance of now.
func Verify(header string, body, secret []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrNoSignature
	}
	if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %v", ErrSignatureAge, d)
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return ErrBadSignature
}
