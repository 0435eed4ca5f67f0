package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waitroom/waitroom/origin/seatmap"
)

// SeatsTakenError is a seated hold refused by the ledger: Seats, of those
// it asked for, are another live hold's.
type SeatsTakenError struct{ Seats []string }

func (e *SeatsTakenError) Error() string { return fmt.Sprintf("seats taken: %v", e.Seats) }

// ErrSeatsTaken matches every SeatsTakenError.
var ErrSeatsTaken = errors.New("seats taken")

func (e *SeatsTakenError) Is(target error) bool { return target == ErrSeatsTaken }

// insertSeats writes one free row per seat of a new event's map, and its
// general-admission sections.
func insertSeats(ctx context.Context, tx pgx.Tx, e Event) error {
	event, m := e.ID, *e.Seating
	if m.HasGA() {
		if err := insertPlaces(ctx, tx, e); err != nil {
			return fmt.Errorf("insert places of event %d: %w", event, err)
		}
	}
	seats := m.Seats()
	if len(seats) > 0 {
		ids, sections, ns := make([]string, len(seats)), make([]string, len(seats)), make([]int32, len(seats))
		for i, s := range seats {
			ids[i], sections[i], ns[i] = s.ID, s.Section, int32(s.Ordinal)
		}
		if _, err := tx.Exec(ctx, sqlInsertEventSeats, event, ids, sections, ns); err != nil {
			return fmt.Errorf("insert seats of event %d: %w", event, err)
		}
	}
	return analyzeSeats(ctx, tx, m, len(seats) > 0)
}

// analyzeSeats renews the planner's statistics of the tables a new event
// filled (seats: event_seats has rows of it). Until then they describe only
// the events there were at the last (auto)analyze, where the new event's id
// does not occur: the planner takes the event for a row or so, and plans the
// claim of a hold's seats as a nested loop that reads all the event's seats
// once per seat of the event (minutes with 200,000 seats, so every hold
// missed its deadline until autoanalyze came round). ANALYZE counts the
// rows of its own transaction: run here, its statistics are committed with
// the rows, and no statement plans the event without them. It reads a
// sample of at most 30,000 rows (0.04 s for 200,000 seats in an empty
// table, 0.2 s in one of 2,000,000). Its lock, held until the commit,
// conflicts only with another ANALYZE or VACUUM of the table (another
// event's creation waits that long; an autovacuum in the way gives way).
// ga_inventory has a few rows per event: no plan of it goes wrong.
func analyzeSeats(ctx context.Context, tx pgx.Tx, m seatmap.Map, seats bool) error {
	if seats {
		if _, err := tx.Exec(ctx, sqlAnalyzeEventSeats); err != nil {
			return fmt.Errorf("analyze event_seats: %w", err)
		}
	}
	if m.HasGA() {
		if _, err := tx.Exec(ctx, sqlAnalyzeGAPlaces); err != nil {
			return fmt.Errorf("analyze ga_places: %w", err)
		}
	}
	return nil
}

// InsertSeatedHold writes a new pending hold of reserved seats, h.Seats,
// and claims them, in one transaction: every seat free or held by a hold
// past its expiry at now, or nothing is written (a *SeatsTakenError naming
// the others'). The user's previous hold, if it lapsed without the reaper
// marking it, is marked expired first. ctx's deadline is the write's, as
// for InsertHold: the server commits nothing after it.
func (l *Ledger) InsertSeatedHold(ctx context.Context, h Hold, now time.Time) (WriteOutcome, error) {
	if len(h.Seats) == 0 || int64(len(h.Seats)) != h.Quantity {
		return WriteFailed, fmt.Errorf("insert seated hold %s: %d seats for quantity %d", h.ID, len(h.Seats), h.Quantity)
	}
	var deadline time.Time
	if d := deadlineOf(ctx); d != nil {
		deadline = *d
	}
	seats := slices.Sorted(slices.Values(h.Seats))
	write := func(tx Tx) error {
		if err := tx.lockBuyerToHold(ctx, h.EventID, h.UserID); err != nil {
			return err
		}
		if _, err := expireLapsedOfUser(ctx, tx.tx, h.EventID, h.UserID, now); err != nil {
			return fmt.Errorf("expire lapsed hold: %w", err)
		}
		tag, err := tx.tx.Exec(ctx, sqlInsertSeatedHold, h.ID, h.EventID, h.UserID, h.Quantity, h.Amount, h.ExpiresAt,
			h.CreatedAt, h.IdempotencyKey, h.RequestDigest, h.Response, deadlineOf(ctx), h.Position, seats)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrPastDeadline
		}
		rows, err := tx.tx.Query(ctx, sqlClaimSeats, h.EventID, h.ID, h.ExpiresAt, seats, now)
		claimed, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("claim seats: %w", err)
		}
		if len(claimed) != len(seats) {
			taken := slices.DeleteFunc(slices.Clone(seats), func(s string) bool { return slices.Contains(claimed, s) })
			return &SeatsTakenError{Seats: taken}
		}
		return nil
	}
	err := retryDeadlock(ctx, func() error { return l.InTx(ctx, deadline, write) })
	if cerr := constraintError(err); cerr != nil {
		return WriteFailed, fmt.Errorf("insert seated hold %s: %w", h.ID, cerr)
	}
	switch {
	case err == nil:
		return WriteDone, nil
	case errors.Is(err, ErrSeatsTaken), errors.Is(err, ErrPastDeadline), errors.Is(err, ErrBuyerHasSeats):
		return WriteFailed, fmt.Errorf("insert seated hold %s: %w", h.ID, err)
	case errors.Is(err, ErrUncertain):
		return WriteUncertain, fmt.Errorf("insert seated hold %s: %w", h.ID, err)
	}
	return Classify(err), fmt.Errorf("insert seated hold %s: %w", h.ID, err)
}

// TakenSeat is a reserved seat a live hold has, as the ledger says.
type TakenSeat struct {
	SeatID  string `db:"seat_id"`
	Section string `db:"section"`
	// Status is held or sold.
	Status string `db:"status"`
}

// TakenSeats reads the reserved seats of event a live hold has at now.
func (l *Ledger) TakenSeats(ctx context.Context, event int64, now time.Time) ([]TakenSeat, error) {
	rows, err := l.pool.Query(ctx, sqlTakenSeats, event, now)
	return collectAll[TakenSeat](rows, err, fmt.Sprintf("read taken seats of event %d", event))
}

// SeatAudit is the ledger's account of an event's reserved seats.
type SeatAudit struct {
	// DoubleHeld counts seats listed by more than one live hold.
	DoubleHeld int64 `db:"double_held"`
	// Mismatched counts seats of a live hold whose seat row names another
	// hold (or none).
	Mismatched int64 `db:"mismatched"`
	// DoubleTicketed counts seats with more than one valid ticket.
	DoubleTicketed int64 `db:"double_ticketed"`
	// Held counts the seats of live holds.
	Held int64 `db:"held"`
}

// AuditSeats checks at now that no reserved seat of event is had twice.
func (l *Ledger) AuditSeats(ctx context.Context, event int64, now time.Time) (SeatAudit, error) {
	rows, err := l.pool.Query(ctx, sqlAuditSeats, event, now)
	return collectOne[SeatAudit](rows, err, fmt.Sprintf("audit seats of event %d", event))
}

// SeatsOfHold reads the seats of a confirmed hold with their seat numbers
// (the numbers its tickets carry), in number order: its reserved seats and
// their ids, or the places of a general-admission section, which get their
// numbers here (the lowest free ones of the section), named
// "<section>/<place>" (seatmap.PlaceLabel).
func (t Tx) SeatsOfHold(ctx context.Context, event int64, holdID string) (numbers []int32, ids []string, err error) {
	return t.seatsOfHold(ctx, event, holdID, false)
}

// seatsOfHold is SeatsOfHold; selling: the hold is pending and sold in
// this transaction, after the read (the confirmation writer's order), so
// its section's places are numbered as a sold hold's.
func (t Tx) seatsOfHold(ctx context.Context, event int64, holdID string, selling bool) (numbers []int32, ids []string, err error) {
	rows, err := t.tx.Query(ctx, sqlSeatsOfHold, event, holdID, selling)
	if err != nil {
		return nil, nil, fmt.Errorf("read seats of hold %s: %w", holdID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var n, place int32
		var id string
		if err := rows.Scan(&n, &id, &place); err != nil {
			return nil, nil, fmt.Errorf("read seats of hold %s: %w", holdID, err)
		}
		numbers, ids = append(numbers, n), append(ids, placeLabel(id, place))
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read seats of hold %s: %w", holdID, err)
	}
	return numbers, ids, nil
}
