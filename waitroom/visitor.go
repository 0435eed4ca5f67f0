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

// IsVisitorID tells whether id looks like one NewVisitorID made. An
// account's id may look so too: a token's acc mark, not its id, tells an
// account's token (Ticket.IsAccount).
func IsVisitorID(id string) bool { return strings.HasPrefix(id, "v_") }
