package ledger

// The booking events' outbox (outbox.go, migration 014).
const (
	outboxColumns = `id, event_id, booking_id::text AS booking_id, type, body, created_at, status, attempts,
		next_at, last_error, dead_at, resent_at`
	// The first pending event of each booking that is due, oldest first,
	// leased until $2 (SKIP LOCKED: nodes split the work). An event waits
	// while an earlier one of its booking is pending, leased or not: a
	// booking's events arrive in order. An event given up on does not hold
	// the later ones back.
	sqlClaimOutbox = `WITH due AS (
			SELECT o.id AS due_id FROM outbox o
			WHERE o.status = 'pending' AND o.next_at <= $1
				AND NOT EXISTS (SELECT 1 FROM outbox p
					WHERE p.booking_id = o.booking_id AND p.status = 'pending' AND p.id < o.id)
			ORDER BY o.next_at, o.id
			LIMIT $3
			FOR UPDATE SKIP LOCKED)
		UPDATE outbox o SET next_at = $2 FROM due WHERE o.id = due.due_id
		RETURNING ` + outboxColumns
	sqlOutboxDelivered = `DELETE FROM outbox WHERE id = $1 AND status = 'pending'`
	sqlOutboxFailed    = `UPDATE outbox SET attempts = $2, last_error = $3, next_at = $4,
			status = CASE WHEN $5 THEN 'dead' ELSE 'pending' END,
			dead_at = CASE WHEN $5 THEN $6::timestamptz END
		WHERE id = $1 AND status = 'pending'`
	sqlDeadOutbox = `SELECT ` + outboxColumns + ` FROM outbox
		WHERE status = 'dead' AND (dead_at, id) > ($1, $2) ORDER BY dead_at, id LIMIT $3`
	sqlOutboxStatus = `SELECT status FROM outbox WHERE event_id = $1 FOR UPDATE`
	// Its tries start again: none made, no error yet, its age from now.
	sqlRedeliverOne = `UPDATE outbox SET status = 'pending', attempts = 0, last_error = '', next_at = $2,
			dead_at = NULL, resent_at = $2
		WHERE event_id = $1 RETURNING ` + outboxColumns
	// Read every second on every node: each part is read through its
	// status's partial index, so it costs what is left, never the pages of
	// the events delivered (deleted) before.
	sqlOutboxBacklog = `SELECT p.n, coalesce(p.oldest, 'epoch'), d.n
		FROM (SELECT count(*) AS n, min(created_at) AS oldest FROM outbox WHERE status = 'pending') p,
			(SELECT count(*) AS n FROM outbox WHERE status = 'dead') d`
)
