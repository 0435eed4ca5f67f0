package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// outboxSetting is the session setting the outbox's triggers write rows
// under (migration 014); Options.Outbox sets it on every connection.
const outboxSetting = "waitroom.outbox"

// Outbox statuses.
const (
	OutboxPending = "pending"
	OutboxDead    = "dead"
)

// ErrOutboxNotDead: the event is still being sent; only an event given up
// on is sent again on request.
var ErrOutboxNotDead = errors.New("event is not given up on")

// OutboxEvent is a row of the outbox: a booking event for the site, written
// in the transaction of the change it reports.
type OutboxEvent struct {
	Seq       int64      `db:"id"`
	ID        string     `db:"event_id"`
	BookingID string     `db:"booking_id"`
	Type      string     `db:"type"`
	Body      string     `db:"body"`
	CreatedAt time.Time  `db:"created_at"`
	Status    string     `db:"status"`
	Attempts  int        `db:"attempts"`
	NextAt    time.Time  `db:"next_at"`
	LastError string     `db:"last_error"`
	DeadAt    *time.Time `db:"dead_at"`
	// ResentAt is when an operator last sent it again; nil if never.
	ResentAt *time.Time `db:"resent_at"`
}

// Since is when the event's tries began: its change, or the last time an
// operator sent it again.
func (e OutboxEvent) Since() time.Time {
	if e.ResentAt != nil && e.ResentAt.After(e.CreatedAt) {
		return *e.ResentAt
	}
	return e.CreatedAt
}

// OutboxBacklog is what is left to send.
type OutboxBacklog struct {
	Pending int64
	// Oldest is when the oldest pending event was written; zero with none.
	Oldest time.Time
	Dead   int64
}

// ClaimOutbox leases up to limit due events, each the first pending one of
// its booking, until until.
func (l *Ledger) ClaimOutbox(ctx context.Context, now, until time.Time, limit int) ([]OutboxEvent, error) {
	rows, err := l.pool.Query(ctx, sqlClaimOutbox, now, until, limit)
	return collectAll[OutboxEvent](rows, err, "lease outbox events")
}

// OutboxDelivered deletes an event the site acknowledged.
func (l *Ledger) OutboxDelivered(ctx context.Context, seq int64) error {
	if _, err := l.pool.Exec(ctx, sqlOutboxDelivered, seq); err != nil {
		return fmt.Errorf("delete delivered outbox event %d: %w", seq, err)
	}
	return nil
}

// OutboxFailed records a failed try: the event is tried again at next, or,
// dead, given up on.
func (l *Ledger) OutboxFailed(ctx context.Context, seq int64, attempts int, reason string, next time.Time, dead bool, now time.Time) error {
	if _, err := l.pool.Exec(ctx, sqlOutboxFailed, seq, attempts, reason, next, dead, now); err != nil {
		return fmt.Errorf("record failed outbox event %d: %w", seq, err)
	}
	return nil
}

// DeadOutbox lists the events given up on, in the order they were, after
// the one (deadAt, seq) (zero values: from the first).
func (l *Ledger) DeadOutbox(ctx context.Context, deadAt time.Time, seq int64, limit int) ([]OutboxEvent, error) {
	rows, err := l.pool.Query(ctx, sqlDeadOutbox, deadAt, seq, limit)
	return collectAll[OutboxEvent](rows, err, "list dead outbox events")
}

// RedeliverOutbox sends an event given up on again, from now, as if new.
// ErrNotFound: no such event (or delivered since); ErrOutboxNotDead: it is
// still being sent.
func (l *Ledger) RedeliverOutbox(ctx context.Context, id string, now time.Time) (OutboxEvent, error) {
	var ev OutboxEvent
	err := l.InTx(ctx, time.Time{}, func(tx Tx) error {
		var status string
		err := tx.tx.QueryRow(ctx, sqlOutboxStatus, id).Scan(&status)
		if err != nil {
			return err
		}
		if status != OutboxDead {
			return ErrOutboxNotDead
		}
		rows, err := tx.tx.Query(ctx, sqlRedeliverOne, id, now)
		ev, err = collectOne[OutboxEvent](rows, err, "redeliver outbox event "+id)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return OutboxEvent{}, fmt.Errorf("redeliver outbox event %s: %w", id, ErrNotFound)
	}
	return ev, err
}

// OutboxBacklog counts what is left to send, and what was given up on.
func (l *Ledger) OutboxBacklog(ctx context.Context) (OutboxBacklog, error) {
	var b OutboxBacklog
	if err := l.pool.QueryRow(ctx, sqlOutboxBacklog).Scan(&b.Pending, &b.Oldest, &b.Dead); err != nil {
		return b, fmt.Errorf("count outbox backlog: %w", err)
	}
	if b.Pending == 0 {
		b.Oldest = time.Time{}
	}
	return b, nil
}
