package ledger

// Every SQL statement of the origin, in one place.

// Migrations.
const (
	sqlMigrateNoTimeout    = `SET statement_timeout = 0`
	sqlMigrateResetTimeout = `RESET statement_timeout`
	sqlMigrateLock         = `SELECT pg_advisory_lock($1)`
	sqlMigrateUnlock       = `SELECT pg_advisory_unlock($1)`
	sqlMigrationsTable     = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
	)`
	sqlAppliedMigrations = `SELECT version FROM schema_migrations ORDER BY version`
	sqlRecordMigration   = `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`
)

// Events.
const (
	eventColumns = `id, name, capacity, overflow_pct, overflow_reserve, sellable, price, currency,
		hold_ttl_seconds, max_per_user, created_at, seating`

	sqlInsertEvent = `INSERT INTO events (` + eventColumns + `)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (id) DO NOTHING
		RETURNING ` + eventColumns

	sqlNextEventID = `SELECT nextval('events_id_seq')`

	// The seat rows of a new reserved-seating event, all free.
	sqlInsertEventSeats = `INSERT INTO event_seats (event_id, seat_id, section, n)
		SELECT $1, unnest($2::text[]), unnest($3::text[]), unnest($4::int[])`

	// The planner's statistics of the tables a new event fills in bulk,
	// taken again in the creating transaction (see analyzeSeats).
	sqlAnalyzeEventSeats = `ANALYZE event_seats`
	sqlAnalyzeGAPlaces   = `ANALYZE ga_places`

	sqlEvent  = `SELECT ` + eventColumns + ` FROM events WHERE id = $1`
	sqlEvents = `SELECT ` + eventColumns + ` FROM events ORDER BY id`
)

// Holds.
const (
	// A hold's status as its sale leaves it: a pending hold that is sold
	// (migration 021) is confirmed.
	holdStatus = `CASE WHEN status = 'pending' AND hold_sold(event_id, id) THEN 'confirmed' ELSE status END`
	// Whether a hold is sold: confirmed, or pending and kept by its sale.
	holdIsSold = `(status = 'confirmed' OR (status = 'pending' AND hold_sold(event_id, id)))`

	// expires_at is the hold's expiry as its bookings moved it (migration
	// 016); a pending hold a booking was confirmed from is sold (021), and
	// read as confirmed.
	holdColumns = `id::text AS id, event_id, user_id, quantity, amount, ` + holdStatus + ` AS status,
		expiry(holds) AS expires_at, created_at,
		updated_at, idempotency_key, request_digest, response, coalesce(position, 0) AS position, seats,
		coalesce(ga_section, '') AS ga_section`

	// The one write of a hold, alone. $11 is the write's deadline, checked
	// by the server's own clock (clock_timestamp(): the time the row goes
	// in, not the start of the transaction), so a statement that reaches
	// the server late (held up in the network after the origin gave up on
	// it) writes nothing: past its deadline a write's outcome is final.
	// NULL: no deadline.
	sqlInsertHold = `INSERT INTO holds (id, event_id, user_id, quantity, amount, status, expires_at,
			created_at, updated_at, idempotency_key, request_digest, response, position)
		SELECT $1::uuid, $2::bigint, $3::text, $4::integer, $5::bigint, 'pending', $6::timestamptz,
			$7::timestamptz, $7::timestamptz, $8::text, $9::text, $10::bytea, nullif($12::bigint, 0)
		WHERE ($11::timestamptz IS NULL OR clock_timestamp() < $11::timestamptz)
			AND NOT EXISTS (SELECT 1 FROM bookings b
				WHERE b.event_id = $2::bigint AND b.user_id = $3::text AND b.status = 'confirmed' AND b.overflow)`

	// The buyers' locks, (event, user) each, until the transaction ends,
	// taken in one order: a new hold's row and a late payment's count of
	// the buyer's seats (sqlSeatsOfBuyer) both run under them, each in a
	// statement after the lock, so each sees what the other committed. A
	// late payment confirmed from the overflow reserve first, a new hold's
	// row is refused (the NOT EXISTS of the inserts below: Redis refuses
	// such a buyer a hold too); a row written first, the late payment
	// counts it and is refunded. Two keys, so none is the migrations'.
	sqlLockBuyers = `SELECT count(pg_advisory_xact_lock(k.e, k.u)) FROM (
			SELECT DISTINCT hashtext(event_id::text) AS e, hashtext(user_id) AS u
			FROM unnest($1::bigint[], $2::text[]) AS r (event_id, user_id)
			ORDER BY e, u) k`
	// Whether the buyer has seats from the overflow reserve (a new hold
	// refused for that).
	sqlBuyerHasOverflow = `SELECT EXISTS (SELECT 1 FROM bookings
		WHERE event_id = $1 AND user_id = $2 AND status = 'confirmed' AND overflow)`

	// The rows of many new holds in one statement and one commit (see
	// holdwriter.go). A row that breaks a unique index (the user's live
	// hold, the Idempotency-Key) is skipped rather than failing the others,
	// and so is a row whose deadline (as in sqlInsertHold) has passed, or
	// whose buyer has seats from the overflow reserve; RETURNING says which
	// went in. Run after sqlLockBuyers, in its transaction.
	sqlInsertHolds = `INSERT INTO holds (id, event_id, user_id, quantity, amount, status, expires_at,
			created_at, updated_at, idempotency_key, request_digest, response, position)
		SELECT id, event_id, user_id, quantity, amount, 'pending', expires_at,
			created_at, created_at, idempotency_key, request_digest, response, nullif(position, 0)
		FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::integer[], $5::bigint[], $6::timestamptz[],
			$7::timestamptz[], $8::text[], $9::text[], $10::bytea[], $11::timestamptz[], $12::bigint[])
			AS r (id, event_id, user_id, quantity, amount, expires_at, created_at, idempotency_key, request_digest, response,
				deadline, position)
		WHERE (r.deadline IS NULL OR clock_timestamp() < r.deadline)
			AND NOT EXISTS (SELECT 1 FROM bookings b
				WHERE b.event_id = r.event_id AND b.user_id = r.user_id AND b.status = 'confirmed' AND b.overflow)
		ON CONFLICT DO NOTHING
		RETURNING id::text`

	// A reserved-seating hold, written alone in its own transaction with
	// the claim of its seats (sqlClaimSeats); otherwise as sqlInsertHold.
	sqlInsertSeatedHold = `INSERT INTO holds (id, event_id, user_id, quantity, amount, status, expires_at,
			created_at, updated_at, idempotency_key, request_digest, response, position, seats)
		SELECT $1::uuid, $2::bigint, $3::text, $4::integer, $5::bigint, 'pending', $6::timestamptz,
			$7::timestamptz, $7::timestamptz, $8::text, $9::text, $10::bytea, nullif($12::bigint, 0), $13::text[]
		WHERE $11::timestamptz IS NULL OR clock_timestamp() < $11::timestamptz`

	// The claim of a hold's seats, in the hold's transaction: the check and
	// the claim in one statement per row, each free or held by a hold past
	// its expiry at $5 (lazy expiry). The rows are locked in seat id order,
	// so two holds wanting the same seats never deadlock. RETURNING names
	// the seats claimed: fewer than asked for, and the hold is rolled back.
	sqlClaimSeats = `UPDATE event_seats SET status = 'held', hold_id = $2, hold_expires_at = $3
		WHERE event_id = $1 AND seat_id IN (
			SELECT seat_id FROM event_seats
			WHERE event_id = $1 AND seat_id = ANY($4::text[])
				AND (status = 'free' OR (status = 'held' AND hold_expires_at < $5))
			ORDER BY seat_id
			FOR UPDATE)
		RETURNING seat_id`

	// A pending hold past its expiry is free already (Redis reclaimed it);
	// it makes way for the user's new hold in the same transaction. Locked
	// first, then ended by sqlExpireLocked (see expireLocked).
	sqlLockLapsedHoldOfUser = `SELECT id FROM holds
		WHERE event_id = $1 AND user_id = $2 AND status = 'pending' AND expires_at < $3
		FOR UPDATE`

	sqlHold           = `SELECT ` + holdColumns + ` FROM holds WHERE id = $1`
	sqlHoldByKey      = `SELECT ` + holdColumns + ` FROM holds WHERE event_id = $1 AND user_id = $2 AND idempotency_key = $3`
	sqlLiveHoldOfUser = `SELECT ` + holdColumns + ` FROM holds
		WHERE event_id = $1 AND user_id = $2 AND status IN ('pending', 'confirmed')`
	sqlHoldsWritten = `SELECT ` + holdColumns + ` FROM holds WHERE id = ANY($1::uuid[])`

	// A buyer gives a hold back: only a pending hold that has not expired,
	// and not while a payment for it is under way (it would land on a
	// released hold). Run after sqlLockHoldRow, in its transaction, so the
	// NOT EXISTS sees a booking committed while the lock was awaited.
	sqlLockHoldRow = `SELECT 1 FROM holds WHERE id = $1 FOR UPDATE`
	sqlReleaseHold = `UPDATE holds SET status = 'released', updated_at = $2
		WHERE id = $1 AND status = 'pending' AND (expires_at >= $2 OR booking_keeps(event_id, id, $2))
			AND NOT EXISTS (SELECT 1 FROM bookings b WHERE b.hold_id = holds.id AND b.status = 'payment_pending')
			AND NOT hold_sold(event_id, id)
		RETURNING ` + holdColumns

	// The expiry is not checked here: ConfirmHold has already taken the hold
	// out of Redis's expiry index, so the seat is the buyer's unless the
	// reaper expired the row first (status is then no longer pending). A
	// paid booking's sale does not write the hold (sqlConfirmBookings):
	// this is a sale without a booking.
	sqlConfirmHold = `UPDATE holds SET status = 'confirmed', updated_at = $2
		WHERE id = $1 AND status = 'pending'
		RETURNING ` + holdColumns

	sqlExtendHold = `UPDATE holds SET expires_at = greatest(expires_at, $3), updated_at = $2
		WHERE id = $1 AND status = 'pending' AND (expires_at >= $2 OR booking_keeps(event_id, id, $2))
			AND NOT hold_sold(event_id, id)
		RETURNING ` + holdColumns

	// A pending, unexpired hold a booking is about to keep (the booking's
	// row carries the extension): locked, so no reaper ends it meanwhile.
	// The table's ROW EXCLUSIVE lock is taken first, as a write of the
	// hold's row took it: a rebuild's sqlLockHoldWrites waits for the
	// booking's commit as it waited for the extension's.
	sqlLockHoldsForWrite = `LOCK TABLE holds IN ROW EXCLUSIVE MODE`
	sqlLockLiveHold      = `SELECT ` + holdColumns + ` FROM holds
		WHERE id = $1 AND status = 'pending' AND (expires_at >= $2 OR booking_keeps(event_id, id, $2))
			AND NOT hold_sold(event_id, id)
		FOR UPDATE`

	// The reaper's candidates, from $3 on (NULL: all): status = 'pending'
	// and booking_keeps in every WHERE are the whole correctness argument
	// (a sold hold is never expired), and SKIP LOCKED lets any number of
	// reapers split the work without two of them taking one row. Locked
	// here, ended by sqlExpireLocked.
	sqlLockDue = `SELECT id FROM holds
		WHERE status = 'pending' AND expires_at < $1 AND ($3::timestamptz IS NULL OR expires_at >= $3)
			AND NOT booking_keeps(event_id, id, $1)
		ORDER BY expires_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED`

	// Sold holds stay pending, in the reaper's index, for good: a reaper
	// that walked them every pass would read every sale the events made.
	// It walks from a point before which every pending hold past its own
	// expiry is sold: the earliest expiry, from $2 on (NULL: all) and
	// before $1, of a pending hold that is not (one a payment keeps, or
	// one another reaper has locked); $1 when there is none.
	sqlReapFrom = `SELECT coalesce(min(expires_at), $1) FROM holds
		WHERE status = 'pending' AND expires_at < $1 AND ($2::timestamptz IS NULL OR expires_at >= $2)
			AND NOT hold_sold(event_id, id)`

	// Locked pending holds $1 still past their expiry at $2, read in this
	// statement's own snapshot (taken after the locks), ended.
	sqlExpireLocked = `UPDATE holds SET status = 'expired', updated_at = $2
		WHERE id = ANY($1::uuid[]) AND status = 'pending' AND expires_at < $2 AND NOT booking_keeps(event_id, id, $2)
		RETURNING ` + holdColumns
)

// The invariant and the rebuild. A pending hold past its expiry is free
// everywhere, so it is not counted even before the reaper marks it.
const (
	//
	// Late payments confirmed from the overflow reserve leave their hold
	// expired (its seats went back to the sellable pool): they are counted
	// by events.overflow_used, never among the holds.
	sqlSeatCounts = `WITH kept AS (
			SELECT hold_id, max(hold_until) AS until FROM bookings
			WHERE event_id = $1 AND hold_until IS NOT NULL GROUP BY hold_id),
		sales AS (` + sqlSalesOfEvent + `),
		h AS (
			SELECT h.quantity, h.status = 'confirmed' OR (h.status = 'pending' AND sales.hold_id IS NOT NULL) AS sold,
				h.status = 'pending' AND (h.expires_at >= $2 OR kept.until >= $2) AS live
			FROM holds h LEFT JOIN kept ON kept.hold_id = h.id LEFT JOIN sales ON sales.hold_id = h.id
			WHERE h.event_id = $1 AND h.status IN ('pending', 'confirmed'))
		SELECT
			coalesce(sum(quantity) FILTER (WHERE sold), 0) AS confirmed,
			coalesce(sum(quantity) FILTER (WHERE live AND NOT sold), 0) AS pending,
			coalesce((SELECT overflow_used FROM events WHERE id = $1), 0)::bigint AS overflow_used,
			(SELECT count(*) FROM tickets WHERE event_id = $1 AND valid) AS tickets
		FROM h`

	// The expiries the event's bookings gave their holds are read in one
	// pass, not hold by hold.
	// A pending hold a booking was confirmed from is sold (021).
	sqlLiveHolds = `WITH kept AS (
			SELECT hold_id, max(hold_until) AS until FROM bookings
			WHERE event_id = $1 AND hold_until IS NOT NULL GROUP BY hold_id),
		sales AS (` + sqlSalesOfEvent + `)
		SELECT h.id::text AS id, h.user_id, h.quantity,
			CASE WHEN h.status = 'pending' AND sales.hold_id IS NOT NULL THEN 'confirmed' ELSE h.status END AS status,
			greatest(h.expires_at, kept.until) AS expires_at,
			h.idempotency_key, h.request_digest, h.seats, coalesce(h.ga_section, '') AS ga_section
		FROM holds h LEFT JOIN kept ON kept.hold_id = h.id LEFT JOIN sales ON sales.hold_id = h.id
		WHERE h.event_id = $1 AND (h.status = 'confirmed'
			OR (h.status = 'pending' AND (sales.hold_id IS NOT NULL OR greatest(h.expires_at, kept.until) >= $2)))`

	// The holds of event $1 that bookings were confirmed from, for a pass
	// over all of its holds (hold_sold is the one hold's): by bookings_sales.
	sqlSalesOfEvent = `SELECT DISTINCT hold_id FROM bookings
			WHERE event_id = $1 AND confirmed_at IS NOT NULL AND NOT overflow`

	// Buyers served from the overflow reserve: their holds expired, but the
	// one-hold-per-user guard still counts their purchase.
	sqlOverflowBuyers = `SELECT b.hold_id::text AS id, b.user_id, h.idempotency_key, h.request_digest
		FROM bookings b JOIN holds h ON h.id = b.hold_id
		WHERE b.event_id = $1 AND b.status = 'confirmed' AND b.overflow`

	// The reserved seats a live hold has at $2, by section, for the seat
	// drift: sold, or held by a pending hold not past its expiry.
	sqlTakenSeats = `SELECT seat_id, section, status FROM event_seats
		WHERE event_id = $1 AND (status = 'sold' OR (status = 'held' AND hold_expires_at >= $2))`

	// The audit of an event's reserved seats at $2 (the load generator's
	// check that none was sold twice): seats listed by more than one live
	// hold, seats of a live hold whose row names another hold, and seats
	// with more than one valid ticket.
	sqlAuditSeats = `WITH live AS (
			SELECT id, unnest(seats) AS seat_id FROM holds
			WHERE event_id = $1 AND seats IS NOT NULL
				AND (status = 'confirmed' OR (status = 'pending' AND (expires_at >= $2 OR booking_keeps(event_id, id, $2)))))
		SELECT
			(SELECT count(*) FROM (SELECT seat_id FROM live GROUP BY seat_id HAVING count(*) > 1) x) AS double_held,
			(SELECT count(*) FROM live JOIN event_seats s ON s.event_id = $1 AND s.seat_id = live.seat_id
				WHERE s.hold_id IS DISTINCT FROM live.id) AS mismatched,
			(SELECT count(*) FROM (SELECT seat_id FROM tickets WHERE event_id = $1 AND valid AND seat_id IS NOT NULL
				GROUP BY seat_id HAVING count(*) > 1) y) AS double_ticketed,
			(SELECT count(*) FROM live) AS held`

	// Holds over for good, for the drift correction: their records in Redis
	// are dropped.
	sqlEndedHolds = `SELECT id::text FROM holds WHERE id = ANY($1::uuid[]) AND status IN ('expired', 'released')`

	// Taken before a read that must see every write whose deadline has
	// passed (a rebuild's, an uncertain write's check): a write checks its
	// deadline after taking its own lock on the table (ROW EXCLUSIVE, held
	// to its commit), so this lock waits for any write that passed the check
	// and has not committed yet, however long its commit takes. Writes wait
	// meanwhile; the read that follows is short.
	sqlLockHoldWrites = `LOCK TABLE holds IN SHARE MODE`
	// A lock request that waits also holds up every write of the table that
	// comes after it, so it waits only this long, then gives way.
	sqlLockHoldWritesTimeout = `SET LOCAL lock_timeout = '100ms'`
)

// Bookings. Every change of a booking's status is conditional on the status
// it leaves, so concurrent webhooks, reconciliations and cancellations of
// one booking settle it once.
const (
	bookingColumns = `id::text AS id, hold_id::text AS hold_id, event_id, user_id, quantity, amount, currency,
		status, status_reason, provider, payment_method, coalesce(payment_id, '') AS payment_id, overflow,
		refund_status, coalesce(refund_id, '') AS refund_id, refund_attempts, idempotency_key, request_digest, response,
		created_at, updated_at, confirmed_at, checked_at, failure_checks::int AS failure_checks, amount_refunded,
		refund_error, refund_retry_at, hold_until, provider_refund_pending`

	sqlInsertBooking = `INSERT INTO bookings (id, hold_id, event_id, user_id, quantity, amount, currency, status,
			provider, payment_method, idempotency_key, request_digest, created_at, updated_at, checked_at, hold_until)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'payment_pending', $8, $9, $10, $11, $12, $12, $12, $13)
		RETURNING ` + bookingColumns

	sqlBooking      = `SELECT ` + bookingColumns + ` FROM bookings WHERE id = $1`
	sqlLockBooking  = `SELECT ` + bookingColumns + ` FROM bookings WHERE id = $1 FOR UPDATE`
	sqlBookingByKey = `SELECT ` + bookingColumns + ` FROM bookings WHERE user_id = $1 AND idempotency_key = $2`
	// A hold has one live booking at most (bookings_one_per_hold), and
	// maybe ended ones besides: the live one, else the latest.
	sqlLiveBookingOfHold = `SELECT ` + bookingColumns + ` FROM bookings WHERE hold_id = $1 AND status <> 'failed'
		ORDER BY status IN ('payment_pending', 'confirmed') DESC, created_at DESC, id LIMIT 1`
	// The holder's own bookings, by bookings_idempotency_key's leading
	// column: a hold's failed bookings are in no index of their own.
	sqlLastFailedBookingOfHold = `SELECT ` + bookingColumns + ` FROM bookings
		WHERE user_id = $1 AND hold_id = $2 AND status = 'failed' ORDER BY updated_at DESC, id LIMIT 1`
	sqlBookingByPayment = `SELECT ` + bookingColumns + ` FROM bookings WHERE provider = $1 AND payment_id = $2`
	sqlBookingAnswered  = `UPDATE bookings SET payment_id = coalesce(payment_id, nullif($2, '')), response = $3, updated_at = $4
		WHERE id = $1`

	sqlConfirmBooking = `UPDATE bookings SET status = 'confirmed', status_reason = $2, overflow = $3,
			payment_id = coalesce(payment_id, nullif($4, '')), confirmed_at = $5, updated_at = $5
		WHERE id = $1 AND status = 'payment_pending'
		RETURNING ` + bookingColumns

	// $5: the answer of the request that made the booking, when it is
	// known already (NULL otherwise), kept in the same write.
	sqlFailBooking = `UPDATE bookings SET status = 'failed', status_reason = $2,
			payment_id = coalesce(payment_id, nullif($3, '')), updated_at = $4, response = coalesce($5, response)
		WHERE id = $1 AND status = 'payment_pending'
		RETURNING ` + bookingColumns

	// A failed booking whose payment succeeded after all waits for it
	// again (its hold locked, no other live booking of it).
	sqlReviveBooking = `UPDATE bookings SET status = 'payment_pending', status_reason = '',
			payment_id = coalesce(payment_id, nullif($2, '')), updated_at = $3
		WHERE id = $1 AND status = 'failed' AND refund_status = ''
		RETURNING ` + bookingColumns

	// Money came in that no seat can answer: the refund is decided here,
	// made at the provider after the commit.
	sqlRefundPayment = `UPDATE bookings SET status = 'cancelled', status_reason = $2, refund_status = 'pending',
			payment_id = coalesce(payment_id, nullif($3, '')), updated_at = $4
		WHERE id = $1 AND status IN ('payment_pending', 'failed')
		RETURNING ` + bookingColumns

	sqlCancelBooking = `UPDATE bookings SET status = 'cancelled', status_reason = $2, refund_status = $3, updated_at = $4
		WHERE id = $1 AND status = 'confirmed'
		RETURNING ` + bookingColumns

	// The provider reported the refund succeeded: $2 is the refund (''
	// when the money went back through a refund the origin did not make),
	// $4 the attempt it is about (see money.go).
	sqlRefundDone = `UPDATE bookings SET status = 'refunded', refund_status = 'succeeded', refund_error = '',
			refund_id = coalesce(nullif($2, ''), refund_id), updated_at = $3
		WHERE id = $1 AND refund_attempts = $4 AND refund_status IN ('pending', 'failed')
			AND (refund_id IS NULL OR $2 = '' OR refund_id = $2)
		RETURNING ` + bookingColumns

	// The payment reconciliation takes the unsettled bookings not looked at
	// since $2, and leases them until the next look ($1 - $2 later at the
	// earliest). What the provider has yet to decide is asked about that
	// often while it matters at once, then less and less: a payment still
	// pending while its booking keeps the hold (the buyer's seats wait
	// for it), and a refund the origin has still to make, every $1 - $2;
	// a payment pending past that, and a refund made and pending at the
	// provider, each wait twice the one before, counted from the hold's
	// end (or the booking's making) and the refund's, at most an hour.
	// A booking left unsettled for days is asked about 24 times a day, not
	// 1,440. A failed booking's payment is asked about up to 5 times, the
	// k-th ($1 - $2) * 2^k after the one before; a refund refused as
	// invalid waits for its refund_retry_at.
	sqlClaimUnsettled = `UPDATE bookings SET checked_at = $1,
			failure_checks = failure_checks + CASE WHEN status = 'failed' AND refund_status = '' THEN 1 ELSE 0 END
		WHERE id IN (
			SELECT id FROM bookings
			WHERE ((status = 'payment_pending' AND (hold_until >= $1
						OR checked_at <= $1 - least(interval '1 hour', greatest($1 - $2, checked_at - coalesce(hold_until, created_at)))))
					OR (refund_status = 'pending' AND (refund_id IS NULL
						OR checked_at <= $1 - least(interval '1 hour', greatest($1 - $2, checked_at - updated_at))))
					OR (refund_status = 'failed' AND (refund_retry_at IS NULL OR refund_retry_at <= $1))
					OR (status = 'failed' AND failure_checks < 5 AND payment_id IS NOT NULL AND refund_status = ''
						AND checked_at < $1 - ($1 - $2) * power(2, failure_checks))
					OR (status = 'confirmed' AND provider_refund_pending
						AND checked_at <= $1 - least(interval '1 hour', greatest($1 - $2, checked_at - updated_at))))
				AND checked_at < $2
			ORDER BY checked_at
			LIMIT $3
			FOR UPDATE SKIP LOCKED)
		RETURNING ` + bookingColumns
)

// Confirmations of paid bookings, many in one transaction (confirmwriter.go).
const (
	// Item i sells hold $2[i] through booking $3[i]: both rows are locked
	// (the latest versions, as concurrent changes left them: a reaper that
	// locked the hold first ended it, one that comes after reads the sale),
	// and what was found of each is returned for sqlConfirmBookings to
	// write. An item is written only if its hold is pending and not sold,
	// its booking waits for its payment and its deadline $4[i] (NULL: none)
	// has not passed. The deadline is read by the server's clock when the
	// rows are locked, after the transaction took its lock of the holds
	// table (sqlLockHoldsForWrite), so a rebuild's read waits for the commit
	// of any item that passed it, as for sqlBeforeDeadline.
	sqlLockConfirmations = `WITH r AS (
			SELECT * FROM unnest($1::int[], $2::uuid[], $3::uuid[], $4::timestamptz[]) AS r (i, hold_id, booking_id, deadline))
		SELECT r.i,
			CASE WHEN h.status = 'pending' AND hold_sold(h.event_id, h.id) THEN 'confirmed' ELSE h.status END AS hold_status,
			b.status AS booking_status, b.quantity::bigint AS quantity,
			(r.deadline IS NULL OR clock_timestamp() < r.deadline) AS in_time
		FROM r JOIN holds h ON h.id = r.hold_id JOIN bookings b ON b.id = r.booking_id
		FOR UPDATE OF h, b`

	// The bookings sqlLockConfirmations found ready, confirmed with their
	// tickets in one write of each row, which keeps the hold sold without a
	// write of its own (migrations 021, 022). Their rows are locked by this
	// transaction since they were found waiting for their payment, so they
	// are found by id alone: a condition on their status has the planner
	// read every booking waiting for its payment when its statistics lag
	// behind a sale (measured: 47 of a batch's 68 ms). Booking $1[i] is paid by
	// payment $2[i] at $3[i], by the webhook event $4[i] ('' for none); its
	// tickets are elements $5[i] to $6[i] of the codes $7, the seat numbers
	// $8 and, if $9[i] (reserved seats), the seats $10.
	sqlConfirmBookings = `UPDATE bookings b SET status = 'confirmed', status_reason = '', overflow = false,
			payment_id = coalesce(b.payment_id, nullif(r.payment_id, '')), confirmed_at = r.now, updated_at = r.now,
			settled_event = nullif(r.event_id, ''),
			ticket_codes = ($7::text[])[r.lo:r.hi], ticket_seats = ($8::int[])[r.lo:r.hi],
			ticket_seat_ids = CASE WHEN r.seated THEN ($10::text[])[r.lo:r.hi] END,
			tickets_issued_at = r.now, tickets_valid = true
		FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::text[], $5::int[], $6::int[], $9::bool[])
			AS r (booking_id, payment_id, now, event_id, lo, hi, seated)
		WHERE b.id = r.booking_id`
)

// The holds of bookings.
const (
	sqlLockHold = `SELECT ` + holdColumns + ` FROM holds WHERE id = $1 FOR UPDATE`

	// A late payment's hold, pending but past its expiry: its seats go
	// back to the pool (the payment is served from the overflow reserve,
	// or refunded).
	sqlExpireHold = `UPDATE holds SET status = 'expired', updated_at = $2
		WHERE id = $1 AND status = 'pending' AND expires_at < $2 AND NOT booking_keeps(event_id, id, $2)`

	// A cancelled sale gives its seats back.
	sqlReleaseConfirmedHold = `UPDATE holds SET status = 'released', updated_at = $2
		WHERE id = $1 AND ` + holdIsSold

	// The last statement of a change to a hold (lifecycle.go): whether the
	// server is still before the change's deadline, by its own clock.
	sqlBeforeDeadline = `SELECT clock_timestamp() < $1::timestamptz`

	// A paid hold that no seat number is left for: its payment is refunded.
	sqlReleaseUnseatedHold = `UPDATE holds SET status = 'released', updated_at = $2
		WHERE id = $1 AND status IN ('pending', 'confirmed')`
)

// The overflow reserve, on the event's row: the row lock orders the late
// payments of one event. Seat numbers, on the event's seat blocks.
const (
	sqlTakeOverflow = `UPDATE events SET overflow_used = overflow_used + $2
		WHERE id = $1 AND overflow_used + $2 <= overflow_reserve
		RETURNING overflow_used`
	sqlGiveOverflow = `UPDATE events SET overflow_used = overflow_used - $2
		WHERE id = $1 AND overflow_used >= $2`

	// The seats a buyer has in the event besides booking $3 (of hold $4),
	// at $5: live holds, and bookings confirmed from the overflow reserve,
	// whose holds expired.
	sqlSeatsOfBuyer = `SELECT
			(SELECT coalesce(sum(quantity), 0) FROM holds
				WHERE event_id = $1 AND user_id = $2 AND id <> $4::uuid
					AND (status = 'confirmed' OR (status = 'pending' AND (expires_at >= $5 OR booking_keeps(event_id, id, $5)))))
			+ (SELECT coalesce(sum(quantity), 0) FROM bookings
				WHERE event_id = $1 AND user_id = $2 AND id <> $3::uuid AND status = 'confirmed' AND overflow)`
)

// Tickets.
const (
	// A booking's tickets, on its row, once: $4 the reserved seat of each,
	// or NULL for general admission.
	sqlIssueTickets = `UPDATE bookings SET ticket_codes = $2, ticket_seats = $3, ticket_seat_ids = $4,
			tickets_issued_at = $5, tickets_valid = true
		WHERE id = $1 AND ticket_codes IS NULL`
	// ticketColumns read a Ticket: a booking's tickets, a scanned one.
	ticketColumns       = `code, event_id, seat::bigint AS seat, coalesce(seat_id, '') AS seat_id`
	sqlTicketsOfBooking = `SELECT ` + ticketColumns + ` FROM tickets
		WHERE booking_id = $1 AND valid ORDER BY seat`

	sqlVoidTickets   = `UPDATE bookings SET tickets_valid = false WHERE id = $1 AND tickets_valid RETURNING ticket_seats`
	sqlTicketIsValid = `SELECT EXISTS (SELECT 1 FROM bookings WHERE id = $1 AND $2 = ANY(ticket_codes) AND tickets_valid)`
	// A ticket's first admission is the scan marked first (scans_first).
	sqlBookingLetIn = `SELECT EXISTS (SELECT 1 FROM bookings b JOIN scans s ON s.code = ANY(b.ticket_codes) AND s.first
		WHERE b.id = $1)`
)

// Webhook events, acted on once.
const (
	// An event that confirmed its booking is recorded on the booking
	// (bookings.settled_event, by sqlConfirmBookings), every other one in
	// payment_events.
	sqlPaymentEventSeen = `SELECT EXISTS (SELECT 1 FROM payment_events WHERE provider = $1 AND event_id = $2)
		OR EXISTS (SELECT 1 FROM bookings WHERE provider = $1 AND settled_event = $2)`
	sqlRecordPaymentEvent = `INSERT INTO payment_events (provider, event_id, type, payment_id, booking_id, received_at)
		SELECT $1, $2, $3, $4, $5, $6
		WHERE NOT EXISTS (SELECT 1 FROM bookings WHERE provider = $1 AND settled_event = $2)
		ON CONFLICT DO NOTHING`
)

// Money: refunds followed to the provider's word, refunds made at the
// provider, and the ledger's account of the money taken (money.go). Every
// change of a refund names the attempt it is about ($4), so an answer about
// an attempt given up on changes nothing.
const (
	// A refund made and not over yet: its id, to ask about it later.
	sqlRefundMade = `UPDATE bookings SET refund_id = $2, updated_at = $3
		WHERE id = $1 AND refund_attempts = $4 AND refund_status = 'pending' AND refund_id IS NULL
		RETURNING ` + bookingColumns

	// The provider reported the refund failed, maybe after it had
	// succeeded (a card refund can fail days later): the booking is
	// cancelled and owes a refund again.
	sqlRefundFailed = `UPDATE bookings SET status = 'cancelled', refund_status = 'failed',
			refund_id = coalesce(nullif($2, ''), refund_id), updated_at = $3
		WHERE id = $1 AND refund_attempts = $4 AND (
			(refund_status = 'pending' AND (refund_id IS NULL OR refund_id = $2))
			OR (refund_status = 'succeeded' AND refund_id = $2))
		RETURNING ` + bookingColumns

	// The provider refused the refund as an invalid request (the payment
	// cannot be refunded as asked): failed, with the reason kept for an
	// operator, and not made again before $3.
	sqlRefundRefused = `UPDATE bookings SET status = 'cancelled', refund_status = 'failed', refund_error = $2,
			refund_retry_at = $3, updated_at = $4
		WHERE id = $1 AND refund_attempts = $5 AND refund_status = 'pending' AND refund_id IS NULL
		RETURNING ` + bookingColumns

	// Money of a confirmed booking's payment returned at the provider, not
	// all of it: the sale stands, the amount returned is recorded.
	sqlPartlyRefunded = `UPDATE bookings SET amount_refunded = $2, provider_refund_pending = $4, updated_at = $3
		WHERE id = $1 AND status = 'confirmed' AND $2 < amount
			AND (amount_refunded <> $2 OR provider_refund_pending <> $4)
		RETURNING ` + bookingColumns

	// Part of the payment of a booking still waiting for it went back at
	// the provider: once confirmed, its refunds are asked about.
	sqlMarkRefundPendingWhileWaiting = `UPDATE bookings SET provider_refund_pending = true, updated_at = $2
		WHERE id = $1 AND status = 'payment_pending'
		RETURNING ` + bookingColumns

	// A failed refund is tried again as a new attempt, by one node.
	sqlRetryRefund = `UPDATE bookings SET refund_status = 'pending', refund_id = NULL, refund_retry_at = NULL,
			refund_attempts = refund_attempts + 1, updated_at = $3
		WHERE id = $1 AND refund_status = 'failed' AND refund_attempts = $2
		RETURNING ` + bookingColumns

	// The payment of a confirmed booking was refunded at the provider.
	sqlRefundedInFullAfterEntry = `UPDATE bookings SET amount_refunded = amount, provider_refund_pending = false, updated_at = $2
		WHERE id = $1 AND status = 'confirmed' AND (amount_refunded <> amount OR provider_refund_pending)
		RETURNING ` + bookingColumns
	sqlRefundedAtProvider = `UPDATE bookings SET status = 'refunded', status_reason = $2, refund_status = 'succeeded',
			provider_refund_pending = false, updated_at = $3
		WHERE id = $1 AND status = 'confirmed'
		RETURNING ` + bookingColumns

	// A booking ended by a refund made at the provider (no refund of the
	// origin's own), whose refund failed since: the money is back with the
	// merchant and the seats are gone, so the origin owes the refund, made
	// under its own key.
	sqlProviderRefundFailed = `UPDATE bookings SET status = 'cancelled', refund_status = 'pending', updated_at = $2
		WHERE id = $1 AND status = 'refunded' AND refund_status = 'succeeded' AND refund_id IS NULL
		RETURNING ` + bookingColumns

	// The payment of a booking still waiting for it was refunded at the
	// provider before the origin settled it.
	sqlRefundedUnsettled = `UPDATE bookings SET status = 'refunded', status_reason = $2, refund_status = 'succeeded',
			payment_id = coalesce(payment_id, nullif($3, '')), updated_at = $4
		WHERE id = $1 AND status = 'payment_pending'
		RETURNING ` + bookingColumns

	sqlCountFailedRefunds = `SELECT count(*) FROM bookings WHERE refund_status = 'failed'`

	// Bookings still waiting for a payment made before $1 whose id the
	// ledger never learned (bookings_unsettled covers them).
	sqlCountUnresolvedPayments = `SELECT count(*) FROM bookings
		WHERE status = 'payment_pending' AND amount > 0 AND payment_id IS NULL AND created_at < $1`

	// Every booking that took money (amount > 0) in one bucket: confirmed
	// with a valid ticket per seat, refunded, refund pending or failed, or
	// kept (money taken, and none of those). Bookings waiting for their
	// payment are counted apart; failed ones took nothing. A confirmed
	// booking counts what it kept; what a partial refund returned is a
	// bucket of its own (partly_refunded, one row always).
	sqlMoneyReport = `WITH b AS (
			SELECT bk.status, bk.refund_status, bk.amount, bk.amount_refunded, bk.quantity,
				CASE WHEN bk.tickets_valid THEN cardinality(bk.ticket_codes) ELSE 0 END AS valid_tickets
			FROM bookings bk
			WHERE bk.event_id = $1 AND bk.amount > 0),
		x AS (SELECT amount, amount_refunded, CASE
				WHEN status = 'payment_pending' AND refund_status = '' AND valid_tickets = 0 THEN 'payment_pending'
				WHEN status = 'failed' AND refund_status = '' AND valid_tickets = 0 THEN 'not_taken'
				WHEN status = 'confirmed' AND refund_status = '' AND valid_tickets = quantity THEN 'confirmed'
				WHEN status = 'refunded' AND refund_status = 'succeeded' AND valid_tickets = 0 THEN 'refunded'
				WHEN status = 'cancelled' AND refund_status = 'pending' AND valid_tickets = 0 THEN 'refund_pending'
				WHEN status = 'cancelled' AND refund_status = 'failed' AND valid_tickets = 0 THEN 'refund_failed'
				ELSE 'kept' END AS bucket
			FROM b)
		SELECT bucket, count(*) AS count,
			coalesce(sum(CASE WHEN bucket = 'confirmed' THEN amount - amount_refunded ELSE amount END), 0)::bigint AS amount
		FROM x
		GROUP BY bucket
		UNION ALL
		SELECT 'partly_refunded', count(*), coalesce(sum(amount_refunded), 0)::bigint
		FROM x WHERE bucket = 'confirmed' AND amount_refunded > 0`
)

// The audit trail (trail.go): every row of one buyer in one event, each
// with the times its table keeps.
const (
	sqlTrailHolds = `SELECT id::text AS id, quantity, ` + holdStatus + ` AS status, expiry(holds) AS expires_at, created_at, updated_at,
			coalesce(position, 0) AS position
		FROM holds WHERE event_id = $1 AND user_id = $2
		ORDER BY created_at, id`

	sqlTrailBookings = `SELECT ` + bookingColumns + ` FROM bookings
		WHERE event_id = $1 AND user_id = $2
		ORDER BY created_at, id`

	// Webhook events name their booking as text (the provider's metadata).
	// The payment_intent.succeeded that confirmed a booking is kept on the
	// booking (settled_event), received when it confirmed it.
	sqlTrailPaymentEvents = `SELECT * FROM (
			SELECT pe.provider, pe.event_id, pe.type, pe.payment_id, pe.booking_id, pe.received_at
			FROM payment_events pe JOIN bookings b ON pe.booking_id = b.id::text
			WHERE b.event_id = $1 AND b.user_id = $2
			UNION ALL
			SELECT b.provider, b.settled_event, 'payment_intent.succeeded', coalesce(b.payment_id, ''), b.id::text, b.confirmed_at
			FROM bookings b
			WHERE b.event_id = $1 AND b.user_id = $2 AND b.settled_event IS NOT NULL) e
		ORDER BY received_at, event_id`

	sqlTrailTickets = `SELECT t.code, t.event_id, t.seat::bigint AS seat, coalesce(t.seat_id, '') AS seat_id,
			t.booking_id::text AS booking_id, t.valid, t.issued_at
		FROM tickets t JOIN bookings b ON b.id = t.booking_id
		WHERE b.event_id = $1 AND b.user_id = $2
		ORDER BY t.issued_at, t.seat`
)

// Seat numbers, from the event's seat blocks (migrations 007 and 015).
const (
	// Up to $2 freed seat numbers, one another confirmation has locked
	// skipped: handed out again before new ones.
	sqlTakeFreedSeats = `DELETE FROM free_seats WHERE event_id = $1 AND seat IN (
			SELECT seat FROM free_seats WHERE event_id = $1 ORDER BY seat LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING seat`

	// One block of the event that has not run out, that no other
	// confirmation has locked and that is not one of $3 (those this one
	// holds already), the first from block $2 on, wrapping around. It stays
	// locked until the commit, so the confirmations meanwhile take from
	// other blocks instead of waiting.
	sqlLockSeatBlock = `SELECT block, next, stop FROM seat_blocks
		WHERE event_id = $1 AND next < stop AND block <> ALL ($3::int[])
		ORDER BY block < $2, block
		LIMIT 1 FOR UPDATE SKIP LOCKED`

	// Every block that has not run out, locked in block order, waiting:
	// only this statement waits for a block, all in one order, so two
	// confirmations never deadlock.
	sqlLockSeatBlocks = `SELECT block, next, stop FROM seat_blocks
		WHERE event_id = $1 AND next < stop
		ORDER BY block FOR UPDATE`

	// The first number a locked block [$2, $3) has not handed out: one past
	// its highest ticket, voided ones included (migration 022).
	sqlSeatBlockNext = `SELECT seat_block_next($1, $2, $3)`

	// Blocks that ran out: not locked again.
	sqlSeatBlocksRunOut = `UPDATE seat_blocks SET next = stop WHERE event_id = $1 AND block = ANY($2::int[]) AND next < stop`

	sqlFreeSeats = `INSERT INTO free_seats (event_id, seat) SELECT $1, unnest($2::int[]) ON CONFLICT DO NOTHING`
)
