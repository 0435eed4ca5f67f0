package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
)

// sqlCounts reads, in one statement, everything the per-step check needs.
// It is the simulation's own reading of the ledger's tables, independent of
// the queries it checks.
//
//	$1 event, $2 now, $3 a hold's whole-life cap
const sqlCounts = `
WITH confirmed AS (
	SELECT coalesce(sum(quantity), 0) AS seats FROM bookings WHERE event_id = $1 AND status = 'confirmed'
), tickets AS (
	SELECT count(*) AS valid, count(DISTINCT seat) AS seats, coalesce(max(seat), 0) AS top
	FROM tickets WHERE event_id = $1 AND valid
), held AS (
	SELECT coalesce(sum(quantity), 0) AS seats FROM holds
	WHERE event_id = $1 AND (status = 'confirmed' OR (status = 'pending' AND expires_at > $2))
), per_user AS (
	SELECT user_id, sum(seats) AS seats FROM (
		SELECT user_id, quantity AS seats FROM bookings WHERE event_id = $1 AND status = 'confirmed'
		UNION ALL
		SELECT user_id, quantity FROM holds WHERE event_id = $1 AND status = 'pending' AND expires_at > $2
	) s GROUP BY user_id ORDER BY 2 DESC, 1 LIMIT 1
), over_life AS (
	SELECT count(*) AS n, min(id::text) AS example FROM holds
	WHERE event_id = $1 AND status = 'pending' AND expires_at > created_at + $3::interval
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
