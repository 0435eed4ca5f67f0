package ledger

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// A sale's tickets are written on its booking's row, by the statement
// that confirms it: no row of their own, one valid ticket per seat number
// all the same, and a voiding that frees the number and feeds the devices.
func TestASaleWritesItsTicketsOnItsBooking(t *testing.T) {
	ctx := context.Background()
	l := testLedger(t, testenv.Postgres(t))
	ev := confirmEvent(t, l, 10)
	c := payable(t, l, ev)

	var kind string
	require.NoError(t, l.pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'tickets'::regclass`).Scan(&kind))
	assert.Equal(t, "v", kind, "tickets is a view of the bookings' rows")

	require.NoError(t, NewConfirmWriter(l).Confirm(ctx, c))
	tickets, err := l.Bookings().TicketsOf(ctx, c.BookingID)
	require.NoError(t, err)
	require.Len(t, tickets, 1)
	code, seat := tickets[0].Code, int32(tickets[0].Seat)
	assert.Equal(t, c.BookingID+"/"+fmt.Sprint(seat), code)
	var n int
	require.NoError(t, l.pool.QueryRow(ctx, `SELECT count(*) FROM bookings
		WHERE id = $1 AND status = 'confirmed' AND tickets_valid AND tickets_issued_at = $2`, c.BookingID, c.Now).Scan(&n))
	assert.Equal(t, 1, n, "confirmed with its tickets")
	valid, err := l.Bookings().TicketIsValid(ctx, c.BookingID, code)
	require.NoError(t, err)
	assert.True(t, valid)

	// Another booking cannot hold a valid ticket for the seat, nor a
	// booking a second set of tickets.
	other := payable(t, l, ev).BookingID
	issue := func(booking string, seats ...int32) error {
		codes := make([]string, len(seats))
		for i, s := range seats {
			codes[i] = booking + "/" + fmt.Sprint(s)
		}
		return l.InTx(ctx, time.Time{}, func(tx Tx) error { return tx.IssueTickets(ctx, booking, codes, seats, nil, writerNow) })
	}
	var pgErr *pgconn.PgError
	err = issue(other, seat+1, seat)
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "23P01", pgErr.Code, "exclusion_violation: %v", err)
	assert.Error(t, issue(c.BookingID, seat+5), "a booking's tickets are issued once")

	// Voided: the number is free for another booking, the code no longer
	// valid, and the feed has the ticket with its seat.
	require.NoError(t, l.InTx(ctx, time.Time{}, func(tx Tx) error { return tx.VoidTicketsAt(ctx, c.BookingID, ev.ID, writerNow) }))
	valid, err = l.Bookings().TicketIsValid(ctx, c.BookingID, code)
	require.NoError(t, err)
	assert.False(t, valid)
	var feedSeat int32
	require.NoError(t, l.pool.QueryRow(ctx, `SELECT seat FROM ticket_voids WHERE code = $1`, code).Scan(&feedSeat))
	assert.Equal(t, seat, feedSeat)
	require.NoError(t, issue(other, seat, seat+1))
	let, err := l.Bookings().TicketsOf(ctx, other)
	require.NoError(t, err)
	assert.Len(t, let, 2)
}

// Migration 022 moves the tickets a ledger wrote as rows onto their
// bookings: valid ones stay valid, voided ones voided with their seat in
// the feed, and a booking an operator voided in part is voided whole; and
// 023 names each scan's booking.
func TestTicketRowsMoveOntoTheirBookings(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	all, err := loadMigrations()
	require.NoError(t, err)
	_, err = conn.Exec(ctx, sqlMigrationsTable)
	require.NoError(t, err)
	for _, m := range all {
		if m.version >= 22 {
			break
		}
		_, err := conn.Exec(ctx, m.sql)
		require.NoError(t, err, "migration %d", m.version)
		_, err = conn.Exec(ctx, sqlRecordMigration, m.version, m.name)
		require.NoError(t, err)
	}

	event := testenv.EventID()
	_, err = conn.Exec(ctx, sqlInsertEvent, event, "before", 10, 0, 0, 10, 100, "inr", 60, 4, writerNow, nil)
	require.NoError(t, err)
	booking := func(status string, seats []int32, seatIDs []string, valid []bool) string {
		hold, id := uuid.NewString(), uuid.NewString()
		_, err := conn.Exec(ctx, `INSERT INTO holds (id, event_id, user_id, quantity, amount, status, expires_at,
				created_at, updated_at, idempotency_key, request_digest, response)
			VALUES ($1, $2, $3, $4, 100, 'confirmed', $5, $5, $5, $6, 'd', '{}')`, hold, event, "u-"+id, len(seats), writerNow, hold)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `INSERT INTO bookings (id, hold_id, event_id, user_id, quantity, amount, currency, status,
				provider, payment_method, idempotency_key, request_digest, created_at, updated_at, checked_at, confirmed_at)
			VALUES ($1, $2, $3, $4, $5, 100, 'inr', $6, 'fakepay', 'pm_card_visa', $8, 'd', $7, $7, $7, $7)`,
			id, hold, event, "u-"+id, len(seats), status, writerNow, id)
		require.NoError(t, err)
		for i, s := range seats {
			var seatID *string
			if seatIDs != nil {
				seatID = &seatIDs[i]
			}
			_, err = conn.Exec(ctx, `INSERT INTO tickets (code, booking_id, event_id, seat, issued_at, seat_id, valid)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`, fmt.Sprintf("%s/%d", id, s), id, event, s, writerNow, seatID, valid[i])
			require.NoError(t, err)
		}
		return id
	}
	sold := booking("confirmed", []int32{4, 2}, []string{"A-4", "A-2"}, []bool{true, true})
	refunded := booking("refunded", []int32{1}, nil, []bool{false})
	halfVoided := booking("confirmed", []int32{5, 6}, nil, []bool{true, false})
	_, err = conn.Exec(ctx, `INSERT INTO scans (code, event_id, gate, scanned_at, recorded_at, offline, result, first, gate_event_id)
		VALUES ($1, $2, 'north-3', $3, $3, false, 'admitted', true, $2)`, sold+"/4", event, writerNow)
	require.NoError(t, err)

	l := testLedger(t, url)
	type onRow struct {
		Codes   []string  `db:"ticket_codes"`
		Seats   []int32   `db:"ticket_seats"`
		SeatIDs []string  `db:"ticket_seat_ids"`
		Issued  time.Time `db:"tickets_issued_at"`
		Valid   bool      `db:"tickets_valid"`
	}
	row := func(id string) onRow {
		rows, err := l.pool.Query(ctx, `SELECT ticket_codes, ticket_seats, ticket_seat_ids, tickets_issued_at, tickets_valid
			FROM bookings WHERE id = $1`, id)
		r, err := collectOne[onRow](rows, err, "read booking "+id)
		require.NoError(t, err)
		r.Issued = r.Issued.UTC()
		return r
	}
	assert.Equal(t, onRow{Codes: []string{sold + "/2", sold + "/4"}, Seats: []int32{2, 4}, SeatIDs: []string{"A-2", "A-4"},
		Issued: writerNow, Valid: true}, row(sold), "in seat order")
	assert.Equal(t, onRow{Codes: []string{refunded + "/1"}, Seats: []int32{1}, Issued: writerNow}, row(refunded))
	assert.False(t, row(halfVoided).Valid)

	voided := map[string]int32{}
	rows, err := l.pool.Query(ctx, `SELECT code, seat FROM ticket_voids WHERE event_id = $1`, event)
	require.NoError(t, err)
	for rows.Next() {
		var code string
		var seat int32
		require.NoError(t, rows.Scan(&code, &seat))
		voided[code] = seat
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, map[string]int32{refunded + "/1": 1, halfVoided + "/5": 5, halfVoided + "/6": 6}, voided)

	// The moved tickets keep their seats: a valid one's number is taken.
	other := payable(t, l, Event{ID: event}).BookingID
	err = l.InTx(ctx, time.Time{}, func(tx Tx) error {
		return tx.IssueTickets(ctx, other, []string{other + "/4"}, []int32{4}, nil, writerNow)
	})
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	assert.Equal(t, "23P01", pgErr.Code)

	// A scan made before names its ticket's booking (023).
	var scanned string
	require.NoError(t, l.pool.QueryRow(ctx, `SELECT booking_id::text FROM scans WHERE code = $1`, sold+"/4").Scan(&scanned))
	assert.Equal(t, sold, scanned)
}
