package origin

import (
	"context"
	"encoding/json"

	"github.com/waitroom/waitroom/origin/ledger"
)

// bookingJSON is <booking> of docs/api.md §9.
type bookingJSON struct {
	BookingID string       `json:"booking_id"`
	HoldID    string       `json:"hold_id"`
	EventID   int64        `json:"event_id"`
	UserID    string       `json:"user_id"`
	Status    string       `json:"status"`
	Amount    int64        `json:"amount"`
	Currency  string       `json:"currency"`
	PaymentID string       `json:"payment_id"`
	Tickets   []ticketJSON `json:"tickets"`
	Quantity  int64        `json:"quantity"`
	// StatusReason says why (a decline code, late_payment_overflow,
	// late_payment_sold_out, cancelled_by_buyer, …); "" when nothing needs
	// saying.
	StatusReason string `json:"status_reason"`
	// Overflow: confirmed from the overflow reserve (a late payment).
	Overflow bool `json:"overflow"`
	// RefundStatus: null (none due), "pending", "succeeded" or "failed".
	RefundStatus *string `json:"refund_status"`
	// AmountRefunded: money of a confirmed booking returned at the
	// provider while the sale stands (a partial refund); 0 otherwise.
	AmountRefunded int64  `json:"amount_refunded"`
	CreatedAt      string `json:"created_at"`
}

func renderBooking(b ledger.Booking, tickets []ticketJSON) []byte {
	if tickets == nil {
		tickets = []ticketJSON{}
	}
	var refund *string
	if b.RefundStatus != "" {
		refund = &b.RefundStatus
	}
	out, _ := json.Marshal(bookingJSON{
		BookingID: b.ID, HoldID: b.HoldID, EventID: b.EventID, UserID: b.UserID, Status: b.Status,
		Amount: b.Amount, Currency: b.Currency, PaymentID: b.PaymentID, Tickets: tickets, Quantity: b.Quantity,
		StatusReason: b.StatusReason, Overflow: b.Overflow, RefundStatus: refund, AmountRefunded: b.AmountRefunded,
		CreatedAt: rfc3339(b.CreatedAt),
	})
	return append(out, '\n')
}

func canonicalBooking(holdID, method string) string {
	return "hold_id=" + holdID + "\x00payment_method_token=" + method
}

// bookingBody is the booking's answer with its valid tickets, as a GET
// answers it.
func (s bookingsAPI) bookingBody(ctx context.Context, b ledger.Booking) ([]byte, error) {
	return s.bookings.Body(ctx, b)
}
