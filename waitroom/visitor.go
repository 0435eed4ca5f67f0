package waitroom

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
)

// NewVisitorID returns a random, unguessable id for a visitor the site did not
// identify: 128 bits, URL-safe.
func NewVisitorID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	// Encoded in place after the prefix: one allocation per new arrival.
	var id [2 + 22]byte
	copy(id[:], "v_")
	base64.RawURLEncoding.Encode(id[2:], b[:])
	return string(id[:])
}

// IsVisitorID tells an id NewVisitorID made from an account's.
func IsVisitorID(id string) bool { return strings.HasPrefix(id, "v_") }
