package origin

import (
	"context"

	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/ledger"
)

// The names the origin's callers know the ledger's, the seat protocol's and
// the bookings' types by; the packages named own them.
type (
	Ledger        = ledger.Ledger
	LedgerOptions = ledger.Options
	Event         = ledger.Event
	Hold          = ledger.Hold
	Booking       = ledger.Booking
	MoneyCount    = ledger.MoneyCount
	MoneyReport   = ledger.MoneyReport
)

// OpenLedger connects to the ledger and applies its migrations
// (ledger.Open).
func OpenLedger(ctx context.Context, url string, opts LedgerOptions) (*Ledger, error) {
	return ledger.Open(ctx, url, opts)
}

// Hold and booking statuses, and the ledger's errors callers check.
const (
	StatusPending   = ledger.StatusPending
	StatusConfirmed = ledger.StatusConfirmed
	StatusExpired   = ledger.StatusExpired
	StatusReleased  = ledger.StatusReleased

	BookingPaymentPending = ledger.BookingPaymentPending
	BookingConfirmed      = ledger.BookingConfirmed
	BookingFailed         = ledger.BookingFailed
	BookingCancelled      = ledger.BookingCancelled
	BookingRefunded       = ledger.BookingRefunded

	RefundPending   = ledger.RefundPending
	RefundSucceeded = ledger.RefundSucceeded
	RefundFailed    = ledger.RefundFailed
)

var (
	ErrNotFound      = ledger.ErrNotFound
	ErrHoldNotActive = ledger.ErrHoldNotActive
)

// Reasons a booking gives for its status (status_reason).
const (
	ReasonLateOverflow       = booking.ReasonLateOverflow
	ReasonLateSoldOut        = booking.ReasonLateSoldOut
	ReasonLatePerUserLimit   = booking.ReasonLatePerUserLimit
	ReasonPaidAfterFailure   = booking.ReasonPaidAfterFailure
	ReasonCancelled          = booking.ReasonCancelled
	ReasonPaymentRejected    = booking.ReasonPaymentRejected
	ReasonPaymentNotFound    = booking.ReasonPaymentNotFound
	ReasonNoSeatLeft         = booking.ReasonNoSeatLeft
	ReasonRefundedAtProvider = booking.ReasonRefundedAtProvider
)

// Tickets (booking.SignTicket, booking.VerifyTicket).
type TicketClaims = booking.TicketClaims

// MinTicketKeyLen is the shortest ticket key accepted.
const MinTicketKeyLen = booking.MinTicketKeyLen

// ErrInvalidTicket: the code is not one signed with this key.
var ErrInvalidTicket = booking.ErrInvalidTicket

// SignTicket returns the code of the ticket for c.
func SignTicket(key []byte, c TicketClaims) (string, error) { return booking.SignTicket(key, c) }

// VerifyTicket checks a ticket code with the key alone (no database).
func VerifyTicket(key []byte, code string) (TicketClaims, error) {
	return booking.VerifyTicket(key, code)
}
