package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
)

// sqlCounts reads, in one statement, everything the per-step check needs.
// It is the simulation's own reading of the ledger's tables, independent of
// the queries it checks.
//
//	$1 event, $2 now, $3 a hold's whole-life cap
//
// A hold's expiry is its row's, or later where a booking of it keeps it
// (bookings.hold_until). A hold is sold when its row says confirmed, or
// when a booking was confirmed from it (not from the overflow reserve):
// the sale keeps it, still pending, for good.
const sqlCounts = `
WITH h AS (
	SELECT holds.*, greatest(expires_at,
		(SELECT max(b.hold_until) FROM bookings b WHERE b.hold_id = holds.id)) AS kept_until,
		status = 'confirmed' OR (status = 'pending' AND EXISTS (SELECT 1 FROM bookings b
			WHERE b.hold_id = holds.id AND b.confirmed_at IS NOT NULL AND NOT b.overflow)) AS sold
	FROM holds WHERE event_id = $1
), confirmed AS (
	SELECT coalesce(sum(quantity), 0) AS seats FROM bookings WHERE event_id = $1 AND status = 'confirmed'
), tickets AS (
	SELECT count(*) AS valid, count(DISTINCT seat) AS seats, coalesce(max(seat), 0) AS top
	FROM tickets WHERE event_id = $1 AND valid
), held AS (
	SELECT coalesce(sum(quantity), 0) AS seats FROM h
	WHERE sold OR (status = 'pending' AND kept_until > $2)
), per_user AS (
	SELECT user_id, sum(seats) AS seats FROM (
		SELECT user_id, quantity AS seats FROM bookings WHERE event_id = $1 AND status = 'confirmed'
		UNION ALL
		SELECT user_id, quantity FROM h WHERE status = 'pending' AND NOT sold AND kept_until > $2
	) s GROUP BY user_id ORDER BY 2 DESC, 1 LIMIT 1
), over_life AS (
	SELECT count(*) AS n, min(id::text) AS example FROM h
	WHERE status = 'pending' AND NOT sold AND kept_until > created_at + $3::interval
)
SELECT confirmed.seats, tickets.valid, tickets.seats, tickets.top, held.seats,
	(SELECT overflow_used FROM events WHERE id = $1),
	coalesce((SELECT user_id FROM per_user), ''), coalesce((SELECT seats FROM per_user), 0),
	over_life.n, coalesce(over_life.example, '')
FROM confirmed, tickets, held, over_life`

type counts struct {
	confirmedSeats, validTickets, distinctSeats, maxSeat, heldSeats, overflowUsed int64
	maxUser                                                                       string
	maxUserSeats                                                                  int64
	overLife                                                                      int64
	overLifeHold                                                                  string
}

func readCounts(ctx context.Context, l *ledger.Ledger, event int64, now time.Time, life time.Duration) (counts, error) {
	var c counts
	err := l.Pool().QueryRow(ctx, sqlCounts, event, now, fmt.Sprintf("%d milliseconds", life.Milliseconds())).Scan(
		&c.confirmedSeats, &c.validTickets, &c.distinctSeats, &c.maxSeat, &c.heldSeats, &c.overflowUsed,
		&c.maxUser, &c.maxUserSeats, &c.overLife, &c.overLifeHold)
	return c, err
}

// sqlSeatChecks reads the seat map's and the sections' invariants of an
// event, each a count of what breaks it with an example:
//
//   - section: a general-admission section whose buckets' remaining plus
//     the places of its pending and confirmed holds is not its capacity;
//
//   - placed: a valid ticket whose number is not its hold's in the map
//     (a reserved seat not sold to the booking's hold, a section's place
//     not numbered for it);
//
//   - stray: a section's place numbered for a hold that has ended;
//
//   - released: a booking paying or paid on a hold its buyer released;
//
//   - inside: a ticket voided after a gate let its holder in (a
//     cancellation or a refund put an occupied seat back on sale).
//
//     $1 event, $2 the sections' capacities as JSON {"GA-1": 5, …}
const sqlSeatChecks = `
WITH caps AS (
	SELECT key AS section, value::int AS capacity FROM jsonb_each_text($2::jsonb)
), rem AS (
	SELECT section, sum(remaining) AS remaining FROM ga_inventory WHERE event_id = $1 GROUP BY section
), taken AS (
	SELECT ga_section AS section, sum(quantity) AS taken FROM holds
	WHERE event_id = $1 AND ga_section IS NOT NULL AND status IN ('pending', 'confirmed') GROUP BY ga_section
), sections AS (
	SELECT c.section, c.capacity, coalesce(r.remaining, 0) AS remaining, coalesce(t.taken, 0) AS taken
	FROM caps c LEFT JOIN rem r USING (section) LEFT JOIN taken t USING (section)
	WHERE coalesce(r.remaining, 0) + coalesce(t.taken, 0) <> c.capacity
), misplaced AS (
	SELECT t.code, t.seat, b.hold_id FROM tickets t JOIN bookings b ON b.id = t.booking_id
	WHERE t.event_id = $1 AND t.valid AND (
		(EXISTS (SELECT 1 FROM event_seats s WHERE s.event_id = $1 AND s.n = t.seat)
			AND NOT EXISTS (SELECT 1 FROM event_seats s WHERE s.event_id = $1 AND s.n = t.seat
				AND s.status = 'sold' AND s.hold_id = b.hold_id))
		OR (EXISTS (SELECT 1 FROM ga_places p WHERE p.event_id = $1 AND p.n = t.seat)
			AND NOT EXISTS (SELECT 1 FROM ga_places p WHERE p.event_id = $1 AND p.n = t.seat AND p.hold_id = b.hold_id)))
), stray AS (
	SELECT p.n, p.hold_id, h.status FROM ga_places p JOIN holds h ON h.id = p.hold_id
	WHERE p.event_id = $1 AND h.status NOT IN ('pending', 'confirmed')
), released AS (
	SELECT b.id, b.status FROM bookings b JOIN holds h ON h.id = b.hold_id
	WHERE b.event_id = $1 AND h.status = 'released' AND b.status IN ('payment_pending', 'confirmed')
), inside AS (
	SELECT t.code, b.status FROM tickets t JOIN bookings b ON b.id = t.booking_id
	WHERE t.event_id = $1 AND NOT t.valid AND EXISTS (SELECT 1 FROM scans s WHERE s.code = t.code AND s.result = 'admitted')
)
SELECT
	(SELECT count(*) FROM sections),
	coalesce((SELECT format('section %s: %s remaining + %s taken, capacity %s', section, remaining, taken, capacity) FROM sections LIMIT 1), ''),
	(SELECT count(*) FROM misplaced),
	coalesce((SELECT format('ticket of number %s (hold %s)', seat, hold_id) FROM misplaced LIMIT 1), ''),
	(SELECT count(*) FROM stray),
	coalesce((SELECT format('place %s numbered for hold %s, which is %s', n, hold_id, status) FROM stray LIMIT 1), ''),
	(SELECT count(*) FROM released),
	coalesce((SELECT format('booking %s is %s', id, status) FROM released LIMIT 1), ''),
	(SELECT count(*) FROM inside),
	coalesce((SELECT format('ticket %s, its booking %s', code, status) FROM inside LIMIT 1), '')`

type seatChecks struct {
	sections, misplaced, stray, released, inside          int64
	sectionEx, misplacedEx, strayEx, releasedEx, insideEx string
}

func readSeatChecks(ctx context.Context, l *ledger.Ledger, event int64, capacities map[string]int) (seatChecks, error) {
	var c seatChecks
	caps, err := json.Marshal(capacities)
	if err != nil {
		return c, err
	}
	err = l.Pool().QueryRow(ctx, sqlSeatChecks, event, string(caps)).Scan(
		&c.sections, &c.sectionEx, &c.misplaced, &c.misplacedEx, &c.stray, &c.strayEx, &c.released, &c.releasedEx, &c.inside, &c.insideEx)
	return c, err
}

// sqlConfirming lists the reserved seats the ledger has held by a pending,
// live hold whose booking waits for its payment and was made or last looked
// at by the payment reconciliation since $3 (not due to it yet), with the
// hold. confirming (check.go) keeps those Redis has sold to the same hold.
//
//	$1 event, $2 now, $3 now less the reconciliation's PendingAfter
const sqlConfirming = `SELECT s.seat_id, s.hold_id::text FROM event_seats s JOIN holds h ON h.id = s.hold_id
	WHERE s.event_id = $1 AND s.status = 'held' AND h.status = 'pending'
		AND greatest(h.expires_at, (SELECT max(b.hold_until) FROM bookings b WHERE b.hold_id = h.id)) >= $2
		AND EXISTS (SELECT 1 FROM bookings b
			WHERE b.hold_id = h.id AND b.status = 'payment_pending' AND b.checked_at >= $3)`

// readConfirming returns sqlConfirming's seats: seat id → hold id.
func readConfirming(ctx context.Context, l *ledger.Ledger, event int64, now, dueBefore time.Time) (map[string]string, error) {
	rows, err := l.Pool().Query(ctx, sqlConfirming, event, now, dueBefore)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var seat, hold string
		if err := rows.Scan(&seat, &hold); err != nil {
			return nil, err
		}
		out[seat] = hold
	}
	return out, rows.Err()
}

// sqlGateChecks reads the gate's invariants over every event of the run:
//
//   - elsewhere: a ticket admitted at a gate of another event (the gates
//     are named for their event, $2: {"e0-north": <event>, …});
//
//   - twice: a ticket admitted by more than one online scan;
//
//   - early: a ticket admitted by a scan from before it was issued;
//
//   - revoked: a scan recorded from a device after its revocation.
//
//     $1 the events, $2 the gates' events as JSON
const sqlGateChecks = `
WITH gates AS (
	SELECT key AS gate, value::bigint AS event_id FROM jsonb_each_text($2::jsonb)
), elsewhere AS (
	SELECT s.code, s.gate, s.event_id FROM scans s JOIN gates g ON g.gate = s.gate
	WHERE s.event_id = ANY($1) AND s.result = 'admitted' AND g.event_id <> s.event_id
), twice AS (
	SELECT code, count(*) AS n FROM scans
	WHERE event_id = ANY($1) AND result = 'admitted' AND NOT offline GROUP BY code HAVING count(*) > 1
), early AS (
	SELECT s.code, s.scanned_at, t.issued_at FROM scans s JOIN tickets t ON t.code = s.code
	WHERE s.event_id = ANY($1) AND s.result = 'admitted' AND s.scanned_at < t.issued_at
)
SELECT
	(SELECT count(*) FROM elsewhere),
	coalesce((SELECT format('a ticket of event %s admitted at gate %s', event_id, gate) FROM elsewhere LIMIT 1), ''),
	(SELECT count(*) FROM twice),
	coalesce((SELECT format('a ticket admitted by %s online scans', n) FROM twice LIMIT 1), ''),
	(SELECT count(*) FROM early),
	coalesce((SELECT format('a ticket issued %s admitted by a scan at %s', issued_at, scanned_at) FROM early LIMIT 1), '')`

type gateChecks struct {
	elsewhere, twice, early       int64
	elsewhereEx, twiceEx, earlyEx string
}

func readGateChecks(ctx context.Context, l *ledger.Ledger, events []int64, gates map[string]int64) (gateChecks, error) {
	var c gateChecks
	g, err := json.Marshal(gates)
	if err != nil {
		return c, err
	}
	err = l.Pool().QueryRow(ctx, sqlGateChecks, events, string(g)).Scan(
		&c.elsewhere, &c.elsewhereEx, &c.twice, &c.twiceEx, &c.early, &c.earlyEx)
	return c, err
}

// ticketRow is a ticket as the scan steps choose among them.
type ticketRow struct {
	code     string
	event    int64
	issuedAt time.Time
	valid    bool
}

// sqlTickets lists the run's tickets in a stable order.
const sqlTickets = `SELECT code, event_id, issued_at, valid FROM tickets
	WHERE event_id = ANY($1) ORDER BY issued_at, event_id, seat, code`

func readTickets(ctx context.Context, l *ledger.Ledger, events []int64) ([]ticketRow, error) {
	rows, err := l.Pool().Query(ctx, sqlTickets, events)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ticketRow
	for rows.Next() {
		var t ticketRow
		if err := rows.Scan(&t.code, &t.event, &t.issuedAt, &t.valid); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// sqlValid says which of the codes are valid tickets.
const sqlValid = `SELECT code FROM tickets WHERE code = ANY($1) AND valid`

func readValid(ctx context.Context, l *ledger.Ledger, codes []string) (map[string]bool, error) {
	rows, err := l.Pool().Query(ctx, sqlValid, codes)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		out[c] = true
	}
	return out, rows.Err()
}

// sqlKeptContext tells how a kept payment came to be kept: the other
// bookings of its booking's hold (a buyer who paid again on the same
// hold), and whether the payment's success event was recorded as acted on.
//
//	$1 booking, $2 payment
const sqlKeptContext = `SELECT
	coalesce((SELECT string_agg(format('%s %s', id, status), ', ' ORDER BY created_at) FROM bookings
		WHERE hold_id = (SELECT hold_id FROM bookings WHERE id = $1::uuid) AND id <> $1::uuid), ''),
	EXISTS (SELECT 1 FROM payment_events WHERE payment_id = $2 AND type = 'payment_intent.succeeded')`

func readKeptContext(ctx context.Context, l *ledger.Ledger, booking, paymentID string) (others string, successRecorded bool, err error) {
	err = l.Pool().QueryRow(ctx, sqlKeptContext, booking, paymentID).Scan(&others, &successRecorded)
	return others, successRecorded, err
}
