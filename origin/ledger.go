package origin

import (
	"context"

	"github.com/waitroom/waitroom/origin/ledger"
)

// The ledger's types under the names the origin's callers know them by;
// package ledger owns them.
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
