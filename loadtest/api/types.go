package api

import "time"

// Waiting is the gateway's JSON answer to a queued visitor.
type Waiting struct {
	Status          string `json:"status"`
	Event           int64  `json:"event"`
	Position        int64  `json:"position"`
	AdmittedThrough int64  `json:"admitted_through"`
	Ahead           int64  `json:"ahead"`
	EstimatedWait   int64  `json:"estimated_wait_seconds"`
	Token           string `json:"token"`
}

// GatewayState is an event's state on the gateway's admin API.
type GatewayState struct {
	Event        int64 `json:"event"`
	Watermark    int64 `json:"watermark"`
	LastPosition int64 `json:"last_position"`
	HardCap      int64 `json:"hard_cap"`
	SoldOut      bool  `json:"sold_out"`
	Paused       bool  `json:"paused"`
}

// Waiting is how many positions were handed out but not admitted.
func (s GatewayState) Waiting() int64 { return max(0, s.LastPosition-s.Watermark) }

// NewEvent is the body of POST /v1/events.
type NewEvent struct {
	ID             int64  `json:"id,omitempty"`
	Name           string `json:"name"`
	Capacity       int64  `json:"capacity"`
	Price          int64  `json:"price"`
	Currency       string `json:"currency"`
	HoldTTLSeconds int64  `json:"hold_ttl_seconds,omitempty"`
	MaxPerUser     int64  `json:"max_per_user,omitempty"`
	OverflowPct    *int64 `json:"overflow_pct,omitempty"`
	// Seating makes the event reserved seating (docs/api.md §15); Capacity
	// must then be its number of seats and places.
	Seating *Seating `json:"seating,omitempty"`
}

// Seating is an event's seat map: sections of rows of seats, each seat id
// <section>-<row>-<n>.
type Seating struct {
	Sections []Section `json:"sections"`
}

// Section is a block of rows at one price, its best rows first; or, with
// a Capacity and no rows, a general-admission section of that many places.
type Section struct {
	ID       string `json:"id"`
	Price    int64  `json:"price"`
	Rows     []Row  `json:"rows,omitempty"`
	Capacity int64  `json:"capacity,omitempty"`
}

// Row is a row of Seats seats.
type Row struct {
	ID    string `json:"id"`
	Seats int    `json:"seats"`
}

// Seats is the number of seats and general-admission places of the map.
func (s Seating) Seats() int64 {
	var n int64
	for _, sec := range s.Sections {
		n += sec.Capacity
		for _, r := range sec.Rows {
			n += int64(r.Seats)
		}
	}
	return n
}

// Event is the origin's event.
type Event struct {
	ID             int64  `json:"id"`
	Name           string `json:"name"`
	Capacity       int64  `json:"capacity"`
	Sellable       int64  `json:"sellable"`
	Remaining      int64  `json:"remaining"`
	Price          int64  `json:"price"`
	Currency       string `json:"currency"`
	HoldTTLSeconds int64  `json:"hold_ttl_seconds"`
	MaxPerUser     int64  `json:"max_per_user"`
	SoldOut        bool   `json:"sold_out"`
}

// Hold is the origin's hold.
type Hold struct {
	HoldID    string    `json:"hold_id"`
	EventID   int64     `json:"event_id"`
	UserID    string    `json:"user_id"`
	Quantity  int64     `json:"quantity"`
	Status    string    `json:"status"`
	ExpiresAt time.Time `json:"expires_at"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	// Seats are the reserved seats of a reserved-seating hold.
	Seats []string `json:"seats,omitempty"`
}

// Ticket is one seat of a confirmed booking.
type Ticket struct {
	Code    string `json:"code"`
	EventID int64  `json:"event_id"`
	Seat    any    `json:"seat"`
}

// Booking statuses.
const (
	BookingPending   = "payment_pending"
	BookingConfirmed = "confirmed"
	BookingFailed    = "failed"
	BookingCancelled = "cancelled"
	BookingRefunded  = "refunded"
)

// Booking is the origin's booking.
type Booking struct {
	BookingID string   `json:"booking_id"`
	HoldID    string   `json:"hold_id"`
	EventID   int64    `json:"event_id"`
	UserID    string   `json:"user_id"`
	Status    string   `json:"status"`
	Amount    int64    `json:"amount"`
	Currency  string   `json:"currency"`
	PaymentID string   `json:"payment_id"`
	Tickets   []Ticket `json:"tickets"`
	// Fields the origin adds to the contract's: why the booking is in its
	// status, whether its seat came from the overflow reserve, and where a
	// refund stands.
	StatusReason string `json:"status_reason,omitempty"`
	Overflow     bool   `json:"overflow,omitempty"`
	RefundStatus string `json:"refund_status,omitempty"`
}

// Settled reports whether the booking will not change by itself any more:
// not waiting for its payment, nor for a refund already decided.
func (b Booking) Settled() bool {
	switch b.Status {
	case "", BookingPending:
		return false
	case BookingCancelled:
		return b.RefundStatus != "pending"
	}
	return true
}

// Invariant is the origin's answer on the Redis ↔ Postgres invariant.
type Invariant struct {
	Event           int64 `json:"event"`
	Capacity        int64 `json:"capacity"`
	Sellable        int64 `json:"sellable"`
	OverflowReserve int64 `json:"overflow_reserve"`
	Remaining       int64 `json:"remaining"`
	// ActiveHolds counts the seats of confirmed holds and of pending holds
	// not yet expired.
	ActiveHolds int64 `json:"active_holds"`
	Pending     int64 `json:"pending"`
	Confirmed   int64 `json:"confirmed"`
	Drift       int64 `json:"drift"`
	// SeatDrift counts the reserved seats whose state differs between
	// Redis and the ledger (reserved seating only).
	SeatDrift int64 `json:"seat_drift"`
}

// Payment-method tokens of the simulated provider (API.md section 5).
const (
	CardVisa     = "pm_card_visa"
	CardDeclined = "pm_card_chargeDeclined"
	// FakepaySilent succeeds at the provider but sends no webhook.
	FakepaySilent = "pm_fakepay_silent"
	// FakepayFailThenSucceed is reported failed, then, a few seconds
	// later, succeeded: a provider that changes its mind.
	FakepayFailThenSucceed = "pm_fakepay_fail_then_succeed"
)
