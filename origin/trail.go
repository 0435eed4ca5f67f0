package origin

import (
	"cmp"
	"slices"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
)

// Trail is a buyer's audit trail in one event (docs/api.md §12).
type Trail struct {
	Event   int64        `json:"event"`
	User    string       `json:"user"`
	Entries []TrailEntry `json:"entries"`
}

// TrailEntry is one thing that happened to the buyer, at the time the
// ledger keeps for it.
type TrailEntry struct {
	Time      time.Time      `json:"-"`
	At        string         `json:"time"`
	Kind      string         `json:"kind"`
	HoldID    *string        `json:"hold_id"`
	BookingID *string        `json:"booking_id"`
	Detail    map[string]any `json:"detail"`
	// seq keeps the order entries were derived in among equal times and
	// ranks.
	seq int
}

// trailRank orders entries of one time (one request's changes share it) as
// they happen: a hold ends before the next is made, a hold is made before
// it is booked, paid, confirmed, ticketed, cancelled, refunded.
var trailRank = map[string]int{
	TrailHoldExpired: 0, TrailHoldReleased: 0,
	TrailAdmitted: 1, TrailHoldCreated: 2, TrailBookingCreated: 3,
	TrailPaymentSucceeded: 4, TrailPaymentFailed: 4, TrailPaymentEvent: 4,
	TrailHoldConfirmed: 5, TrailBookingConfirmed: 6, TrailBookingFailed: 6, TrailTicketIssued: 7,
	TrailBookingCancelled: 8, TrailTicketVoided: 9,
	TrailRefundPending: 10, TrailRefundFailed: 10, TrailRefundSucceeded: 10, TrailBookingRefunded: 11,
}

// Kinds of trail entries.
const (
	TrailAdmitted         = "admitted"
	TrailHoldCreated      = "hold_created"
	TrailHoldConfirmed    = "hold_confirmed"
	TrailHoldReleased     = "hold_released"
	TrailHoldExpired      = "hold_expired"
	TrailBookingCreated   = "booking_created"
	TrailBookingConfirmed = "booking_confirmed"
	TrailBookingFailed    = "booking_failed"
	TrailBookingCancelled = "booking_cancelled"
	TrailBookingRefunded  = "booking_refunded"
	TrailPaymentSucceeded = "payment_succeeded"
	TrailPaymentFailed    = "payment_failed"
	TrailPaymentEvent     = "payment_event"
	TrailRefundPending    = "refund_pending"
	TrailRefundSucceeded  = "refund_succeeded"
	TrailRefundFailed     = "refund_failed"
	TrailTicketIssued     = "ticket_issued"
	TrailTicketVoided     = "ticket_voided"
)

// buildTrail turns the buyer's ledger rows into entries in time order. A
// row keeps its creation time and the time of its last change, not the
// times of the changes between: an entry for a row's present state (a hold
// expired or released, a booking failed, cancelled or refunded, a refund's
// state) carries the time of the row's last change; a voided ticket the
// time of its booking's last change, at or after the voiding. The
// admission is the position of the token the first hold was made with.
func buildTrail(event int64, user string, rows ledger.Trail, now time.Time) Trail {
	var out []TrailEntry
	add := func(at time.Time, kind, hold, booking string, detail map[string]any) {
		e := TrailEntry{Time: at, At: rfc3339(at), Kind: kind, Detail: detail, seq: len(out)}
		if hold != "" {
			e.HoldID = &hold
		}
		if booking != "" {
			e.BookingID = &booking
		}
		if e.Detail == nil {
			e.Detail = map[string]any{}
		}
		out = append(out, e)
	}
	// A hold confirmed and later released (its booking cancelled) keeps
	// only the release's time; its confirmation is its booking's, made in
	// the same transaction. A booking served from the overflow reserve did
	// not confirm its hold.
	confirmedAt := make(map[string]time.Time)
	for _, b := range rows.Bookings {
		if b.ConfirmedAt != nil && !b.Overflow {
			confirmedAt[b.HoldID] = *b.ConfirmedAt
		}
	}
	for i, h := range rows.Holds {
		if i == 0 && h.Position > 0 {
			add(h.CreatedAt, TrailAdmitted, h.ID, "", map[string]any{"position": h.Position})
		}
		add(h.CreatedAt, TrailHoldCreated, h.ID, "", map[string]any{"quantity": h.Quantity, "expires_at": rfc3339(h.ExpiresAt)})
		switch {
		case h.Status == ledger.StatusConfirmed:
			add(h.UpdatedAt, TrailHoldConfirmed, h.ID, "", nil)
		case h.Status == ledger.StatusReleased:
			if at, ok := confirmedAt[h.ID]; ok {
				add(at, TrailHoldConfirmed, h.ID, "", nil)
			}
			add(h.UpdatedAt, TrailHoldReleased, h.ID, "", nil)
		case h.Status == ledger.StatusExpired:
			add(h.UpdatedAt, TrailHoldExpired, h.ID, "", map[string]any{"expires_at": rfc3339(h.ExpiresAt)})
		case h.Status == ledger.StatusPending && h.ExpiresAt.Before(now):
			// Lapsed, not marked yet: its expiry is the time.
			add(h.ExpiresAt, TrailHoldExpired, h.ID, "", map[string]any{"expires_at": rfc3339(h.ExpiresAt)})
		}
	}
	for _, b := range rows.Bookings {
		add(b.CreatedAt, TrailBookingCreated, b.HoldID, b.ID, map[string]any{
			"quantity": b.Quantity, "amount": b.Amount, "currency": b.Currency, "provider": b.Provider})
		if b.ConfirmedAt != nil {
			add(*b.ConfirmedAt, TrailBookingConfirmed, b.HoldID, b.ID, map[string]any{
				"overflow": b.Overflow, "payment_id": b.PaymentID})
		}
		reason := map[string]any{"status_reason": b.StatusReason}
		switch b.Status {
		case ledger.BookingFailed:
			add(b.UpdatedAt, TrailBookingFailed, b.HoldID, b.ID, reason)
		case ledger.BookingCancelled:
			add(b.UpdatedAt, TrailBookingCancelled, b.HoldID, b.ID, reason)
		case ledger.BookingRefunded:
			add(b.UpdatedAt, TrailBookingRefunded, b.HoldID, b.ID, reason)
		}
		refund := map[string]any{"refund_id": b.RefundID, "attempts": b.RefundAttempts}
		switch b.RefundStatus {
		case ledger.RefundPending:
			add(b.UpdatedAt, TrailRefundPending, b.HoldID, b.ID, refund)
		case ledger.RefundSucceeded:
			add(b.UpdatedAt, TrailRefundSucceeded, b.HoldID, b.ID, refund)
		case ledger.RefundFailed:
			add(b.UpdatedAt, TrailRefundFailed, b.HoldID, b.ID, refund)
		}
	}
	holdOf := make(map[string]string, len(rows.Bookings))
	updated := make(map[string]time.Time, len(rows.Bookings))
	for _, b := range rows.Bookings {
		holdOf[b.ID], updated[b.ID] = b.HoldID, b.UpdatedAt
	}
	for _, pe := range rows.PaymentEvents {
		// Other events (refunds) only prompted the origin to ask the
		// provider; what it learnt is the booking's refund state.
		kind := TrailPaymentEvent
		switch pe.Type {
		case "payment_intent.succeeded":
			kind = TrailPaymentSucceeded
		case "payment_intent.payment_failed":
			kind = TrailPaymentFailed
		}
		add(pe.ReceivedAt, kind, holdOf[pe.BookingID], pe.BookingID, map[string]any{
			"provider": pe.Provider, "provider_event": pe.EventID, "type": pe.Type, "payment_id": pe.PaymentID})
	}
	for _, t := range rows.Tickets {
		// The seat as the ticket carries it: a reserved seat's id, not its
		// number in the map.
		detail := map[string]any{"code": t.Code, "seat": ticketsJSON([]ledger.Ticket{t.Ticket})[0].Seat}
		add(t.IssuedAt, TrailTicketIssued, holdOf[t.BookingID], t.BookingID, detail)
		if !t.Valid {
			add(updated[t.BookingID], TrailTicketVoided, holdOf[t.BookingID], t.BookingID, detail)
		}
	}
	slices.SortStableFunc(out, func(a, b TrailEntry) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		if c := cmp.Compare(trailRank[a.Kind], trailRank[b.Kind]); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	if out == nil {
		out = []TrailEntry{}
	}
	return Trail{Event: event, User: user, Entries: out}
}
