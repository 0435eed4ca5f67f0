package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TrailHold is a hold as the audit trail reads it.
type TrailHold struct {
	ID        string    `db:"id"`
	Quantity  int64     `db:"quantity"`
	Status    string    `db:"status"`
	ExpiresAt time.Time `db:"expires_at"`
	CreatedAt time.Time `db:"created_at"`
	// UpdatedAt is the time of the hold's last change only: the row keeps
	// no time for the changes before it.
	UpdatedAt time.Time `db:"updated_at"`
	// Position is the token's queue position, 0 when not recorded.
	Position int64 `db:"position"`
}

// TrailPaymentEvent is a provider's webhook event acted on.
type TrailPaymentEvent struct {
	Provider   string    `db:"provider"`
	EventID    string    `db:"event_id"`
	Type       string    `db:"type"`
	PaymentID  string    `db:"payment_id"`
	BookingID  string    `db:"booking_id"`
	ReceivedAt time.Time `db:"received_at"`
}

// TrailTicket is a ticket, valid or voided.
type TrailTicket struct {
	Ticket
	BookingID string    `db:"booking_id"`
	Valid     bool      `db:"valid"`
	IssuedAt  time.Time `db:"issued_at"`
}

// Trail is every row the ledger keeps of one buyer in one event.
type Trail struct {
	Holds         []TrailHold
	Bookings      []Booking
	PaymentEvents []TrailPaymentEvent
	Tickets       []TrailTicket
}

// Trail reads the buyer's rows of the event in one snapshot, so the tables
// agree with each other.
func (l *Ledger) Trail(ctx context.Context, event int64, user string) (Trail, error) {
	var t Trail
	err := pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		rows, err := tx.Query(ctx, sqlTrailHolds, event, user)
		if t.Holds, err = collectAll[TrailHold](rows, err, "read holds"); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, sqlTrailBookings, event, user)
		if t.Bookings, err = collectAll[Booking](rows, err, "read bookings"); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, sqlTrailPaymentEvents, event, user)
		if t.PaymentEvents, err = collectAll[TrailPaymentEvent](rows, err, "read payment events"); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, sqlTrailTickets, event, user)
		t.Tickets, err = collectAll[TrailTicket](rows, err, "read tickets")
		return err
	})
	if err != nil {
		return Trail{}, fmt.Errorf("read trail of %s in event %d: %w", user, event, err)
	}
	return t, nil
}
