package booking

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// A ticket code carries what it grants and proves it: the booking, the
// event and the seat, then HMAC-SHA256 over them keyed by the ticket key.
// A gate scanner holding the key verifies a code offline; without the key a
// code can be neither guessed nor altered. The layout (base64url, no
// padding):
//
//	version (1 byte) | booking id (16) | event id (8, big endian) | seat (4) | HMAC-SHA256 (32)

// MinTicketKeyLen is the shortest ticket key accepted.
const MinTicketKeyLen = 32

const (
	ticketVersion    = 1
	ticketClaimsLen  = 1 + 16 + 8 + 4
	ticketCodeLen    = ticketClaimsLen + sha256.Size
	ticketMACContext = "waitroom ticket\x00"
)

// ErrInvalidTicket: the code is not one signed with this key.
var ErrInvalidTicket = errors.New("invalid ticket code")

// TicketClaims is what a ticket grants.
type TicketClaims struct {
	BookingID string
	EventID   int64
	Seat      int64
}

func ticketMAC(key, claims []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ticketMACContext))
	m.Write(claims)
	return m.Sum(nil)
}

// SignTicket returns the code of the ticket for c.
func SignTicket(key []byte, c TicketClaims) (string, error) {
	if len(key) < MinTicketKeyLen {
		return "", fmt.Errorf("sign ticket: key shorter than %d bytes", MinTicketKeyLen)
	}
	id, err := uuid.Parse(c.BookingID)
	if err != nil {
		return "", fmt.Errorf("sign ticket: booking id %q: %w", c.BookingID, err)
	}
	if c.EventID <= 0 || c.Seat <= 0 || c.Seat > 1<<31-1 {
		return "", fmt.Errorf("sign ticket: event %d seat %d out of range", c.EventID, c.Seat)
	}
	b := make([]byte, ticketClaimsLen, ticketCodeLen)
	b[0] = ticketVersion
	copy(b[1:17], id[:])
	binary.BigEndian.PutUint64(b[17:25], uint64(c.EventID))
	binary.BigEndian.PutUint32(b[25:29], uint32(c.Seat))
	b = append(b, ticketMAC(key, b)...)
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// VerifyTicket checks a ticket code with the key alone (no database) and
// returns what it grants. Whether the ticket was cancelled since is the
// ledger's to say.
func VerifyTicket(key []byte, code string) (TicketClaims, error) {
	if len(key) < MinTicketKeyLen {
		return TicketClaims{}, fmt.Errorf("verify ticket: key shorter than %d bytes", MinTicketKeyLen)
	}
	if base64.RawURLEncoding.DecodedLen(len(code)) != ticketCodeLen {
		return TicketClaims{}, ErrInvalidTicket
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(code)
	if err != nil || len(b) != ticketCodeLen || b[0] != ticketVersion {
		return TicketClaims{}, ErrInvalidTicket
	}
	if !hmac.Equal(b[ticketClaimsLen:], ticketMAC(key, b[:ticketClaimsLen])) {
		return TicketClaims{}, ErrInvalidTicket
	}
	id, _ := uuid.FromBytes(b[1:17])
	return TicketClaims{
		BookingID: id.String(),
		EventID:   int64(binary.BigEndian.Uint64(b[17:25])),
		Seat:      int64(binary.BigEndian.Uint32(b[25:29])),
	}, nil
}
