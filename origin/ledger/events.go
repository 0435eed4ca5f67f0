package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waitroom/waitroom/origin/seatmap"
)

// Event is an event as the ledger keeps it. Its configuration never changes
// once created, so every node may cache it.
type Event struct {
	ID          int64  `db:"id"`
	Name        string `db:"name"`
	Capacity    int64  `db:"capacity"`
	OverflowPct int64  `db:"overflow_pct"`
	// OverflowReserve seats are kept out of Redis to absorb payments that
	// land after their hold expired.
	OverflowReserve int64     `db:"overflow_reserve"`
	Sellable        int64     `db:"sellable"`
	Price           int64     `db:"price"`
	Currency        string    `db:"currency"`
	HoldTTLSeconds  int64     `db:"hold_ttl_seconds"`
	MaxPerUser      int64     `db:"max_per_user"`
	CreatedAt       time.Time `db:"created_at"`
	// Seating is the seat map of a reserved-seating event (Capacity is its
	// number of seats); nil for general admission.
	Seating *seatmap.Map `db:"seating"`
}

// Seated reports whether the event has reserved seating.
func (e Event) Seated() bool { return e.Seating != nil }

// HoldTTL is how long a new hold lasts.
func (e Event) HoldTTL() time.Duration { return time.Duration(e.HoldTTLSeconds) * time.Second }

// CreateEvent inserts e; with e.ID 0 it takes the next free id.
func (l *Ledger) CreateEvent(ctx context.Context, e Event) (Event, error) {
	insert := func(id int64) (created Event, err error) {
		err = pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, sqlInsertEvent, id, e.Name, e.Capacity, e.OverflowPct, e.OverflowReserve,
				e.Sellable, e.Price, e.Currency, e.HoldTTLSeconds, e.MaxPerUser, e.CreatedAt, e.Seating)
			if created, err = collectOne[Event](rows, err, fmt.Sprintf("insert event %d", id)); err != nil || !e.Seated() {
				return err
			}
			return insertSeats(ctx, tx, created)
		})
		return created, err
	}
	if e.ID != 0 {
		created, err := insert(e.ID)
		if errors.Is(err, ErrNotFound) {
			return Event{}, fmt.Errorf("create event %d: %w", e.ID, ErrEventExists)
		}
		return created, err
	}
	// The sequence may run into ids given explicitly: skip those.
	for range 1000 {
		var id int64
		if err := l.pool.QueryRow(ctx, sqlNextEventID).Scan(&id); err != nil {
			return Event{}, fmt.Errorf("create event: next id: %w", err)
		}
		created, err := insert(id)
		if !errors.Is(err, ErrNotFound) {
			return created, err
		}
	}
	return Event{}, errors.New("create event: no free id found")
}

// Event reads one event.
func (l *Ledger) Event(ctx context.Context, id int64) (Event, error) {
	rows, err := l.pool.Query(ctx, sqlEvent, id)
	return collectOne[Event](rows, err, fmt.Sprintf("read event %d", id))
}

// Events reads every event.
func (l *Ledger) Events(ctx context.Context) ([]Event, error) {
	rows, err := l.pool.Query(ctx, sqlEvents)
	return collectAll[Event](rows, err, "read events")
}
