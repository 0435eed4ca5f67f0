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
	return "v_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// IsVisitorID tells an id NewVisitorID made from an account's.
func IsVisitorID(id string) bool { return strings.HasPrefix(id, "v_") }
