package ledger

// The SQL of general-admission sections inside a seat map (sections.go);
// queries.go has the rest.
const (
	// A new section's places: its bucket rows ($4 of them, the capacity $3
	// split evenly), and one numbered place each, $5 the first number.
	sqlInsertSectionBuckets = `INSERT INTO ga_inventory (event_id, section, bucket, remaining)
		SELECT $1, $2, b, ($3::bigint * (b + 1) / $4 - $3::bigint * b / $4)::int
		FROM generate_series(0, $4::int - 1) AS b`
	sqlInsertSectionPlaces = `INSERT INTO ga_places (event_id, n, section, place)
		SELECT $1, $3::int + p - 1, $2, p FROM generate_series(1, $4::int) AS p`

	// A hold's $3 places from one bucket: the conditional decrement, on
	// the first bucket from $4 on (wrapping around) that has them and that
	// no other transaction has locked. It never waits: with every bucket
	// that has them locked, or none having them, it takes nothing.
	// The bucket is chosen in a CTE, which runs once: a subquery joined
	// to the UPDATE could be run again for each row, and would then pick
	// another bucket each time (the ones this statement updated are skipped).
	sqlTakePlaces = `WITH b AS (
			SELECT bucket FROM ga_inventory
			WHERE event_id = $1 AND section = $2 AND remaining >= $3
			ORDER BY bucket < $4, bucket
			LIMIT 1 FOR UPDATE SKIP LOCKED)
		UPDATE ga_inventory g SET remaining = g.remaining - $3 FROM b
		WHERE g.event_id = $1 AND g.section = $2 AND g.bucket = b.bucket AND g.remaining >= $3
		RETURNING g.bucket`

	// When no single bucket could give the places: every bucket of the
	// section locked, waiting, in bucket order (the one order every
	// statement that waits for buckets takes them in), as the first
	// statement of its transaction. sqlTakePlaces may leave a bucket locked
	// that it found too short once locked (PostgreSQL keeps the lock of a
	// row that fails the recheck), and waiting for the others with it
	// held deadlocks.
	sqlLockSectionBuckets = `SELECT bucket, remaining FROM ga_inventory
		WHERE event_id = $1 AND section = $2 ORDER BY bucket FOR UPDATE`
	// Then the places across them: $4[i] from bucket $3[i], each a
	// conditional decrement still.
	sqlTakePlacesAcross = `UPDATE ga_inventory g SET remaining = g.remaining - t.q
		FROM unnest($3::int[], $4::int[]) AS t (bucket, q)
		WHERE g.event_id = $1 AND g.section = $2 AND g.bucket = t.bucket AND g.remaining >= t.q`
	// Lazy expiry: the section's pending holds past their expiry at $3
	// are free (Redis reclaimed them); marking them expired gives their
	// places back to the buckets (the holds_ga_follow trigger). A hold
	// another transaction has locked (the reaper's) is left to it. One of
	// them may be confirmed in Redis, its confirmation's ledger step having
	// failed, and Redis never reclaims a confirmed hold: each is noted as
	// owed a release in Redis (releases_owed), in this transaction, which
	// the origin makes after it (the reaper's pass). The count is of the
	// holds expired.
	// Locked here, then ended by sqlExpireLockedOwed (see expireLocked).
	sqlLockLapsedOfSection = `SELECT id FROM holds
		WHERE event_id = $1 AND ga_section = $2 AND status = 'pending' AND expires_at < $3 AND NOT booking_keeps(event_id, id, $3)
		FOR UPDATE SKIP LOCKED`
	sqlExpireLockedOwed = `WITH ended AS (
			UPDATE holds SET status = 'expired', updated_at = $2
			WHERE id = ANY($1::uuid[]) AND status = 'pending' AND expires_at < $2 AND NOT booking_keeps(event_id, id, $2)
			RETURNING id, event_id)
		INSERT INTO releases_owed (hold_id, event_id, noted_at)
		SELECT id, event_id, $2 FROM ended
		ON CONFLICT (hold_id) DO NOTHING`

	// The releases Redis is owed (of event $1, or of every event when $1
	// is 0), oldest first, at most $2; and those made.
	sqlReleasesOwed = `SELECT hold_id::text AS hold_id, event_id FROM releases_owed
		WHERE $1::bigint = 0 OR event_id = $1
		ORDER BY noted_at, hold_id
		LIMIT $2`
	sqlReleasesMade = `DELETE FROM releases_owed WHERE hold_id = ANY($1::uuid[])`

	// A general-admission section's hold, written alone in its own
	// transaction with the decrement of its buckets; otherwise as
	// sqlInsertHold.
	sqlInsertSectionHold = `INSERT INTO holds (id, event_id, user_id, quantity, amount, status, expires_at,
			created_at, updated_at, idempotency_key, request_digest, response, position, ga_section, ga_buckets)
		SELECT $1::uuid, $2::bigint, $3::text, $4::integer, $5::bigint, 'pending', $6::timestamptz,
			$7::timestamptz, $7::timestamptz, $8::text, $9::text, $10::bytea, nullif($12::bigint, 0), $13::text, $14::int[]
		WHERE $11::timestamptz IS NULL OR clock_timestamp() < $11::timestamptz`

	// The seats of a confirmed hold with their numbers, for its tickets: a
	// reserved seat's, or a section's places. A hold of a section is given
	// the numbers it has not got yet here, the lowest free ones of its
	// section that no other confirmation has locked (so confirmations of
	// one section do not wait on each other). The claimed rows are read
	// apart: the statement's own scan of ga_places sees them as they were.
	// Only a sold hold is given numbers: the places of one that ended
	// are back in the buckets, maybe sold to another hold already.
	// The planner takes a LIMIT it cannot read for a tenth of the rows, so
	// the statement is shaped to need no good guess of it: the section is
	// a value (not a join), so the free places are read in number order
	// from ga_places_free and the scan stops at the places needed; and the
	// picked numbers are an array, so their rows are found by the primary
	// key (a join to pick was a hash join over a sequential scan of all
	// the event's places, 200,000 of them per confirmation).
	sqlSeatsOfHold = `WITH h AS (
			SELECT ga_section, quantity FROM holds WHERE id = $2 AND ga_section IS NOT NULL
				AND (` + holdIsSold + ` OR ($3 AND status = 'pending'))),
		want AS (
			SELECT h.ga_section, h.quantity - (SELECT count(*) FROM ga_places WHERE event_id = $1 AND hold_id = $2) AS n
			FROM h),
		pick AS (
			SELECT p.n FROM ga_places p
			WHERE p.event_id = $1 AND p.section = (SELECT ga_section FROM want) AND p.hold_id IS NULL
			ORDER BY p.n
			LIMIT coalesce((SELECT greatest(n, 0) FROM want), 0)
			FOR UPDATE OF p SKIP LOCKED),
		claimed AS (
			UPDATE ga_places p SET hold_id = $2
			WHERE p.event_id = $1 AND p.n = ANY (ARRAY(SELECT n FROM pick))
			RETURNING p.n, p.section, p.place)
		SELECT n, seat_id AS seat, 0 AS place FROM event_seats WHERE event_id = $1 AND hold_id = $2
		UNION ALL SELECT n, section, place FROM claimed
		UNION ALL SELECT n, section, place FROM ga_places WHERE event_id = $1 AND hold_id = $2
		ORDER BY n`

	// The places of an event's sections that live holds have at $2
	// (confirmed, or pending and not past their expiry), by section.
	sqlSectionCounts = `SELECT ga_section AS section, coalesce(sum(quantity), 0)::bigint AS active
		FROM holds
		WHERE event_id = $1 AND ga_section IS NOT NULL
			AND (status = 'confirmed' OR (status = 'pending' AND (expires_at >= $2 OR booking_keeps(event_id, id, $2))))
		GROUP BY ga_section`

	// The ledger's own account of each section: its places, those left in
	// its buckets, those of holds that have not ended (a lapsed hold the
	// reaper has not marked still has its places in the buckets' count),
	// those sold, the numbers given to holds, and the faults a number or a
	// ticket can have (see SectionAudit).
	sqlAuditSections = `WITH p AS (
			SELECT section, count(*) AS capacity, count(hold_id) AS numbered
			FROM ga_places WHERE event_id = $1 GROUP BY section),
		t AS (
			SELECT gp.section, gp.n, gp.hold_id AS numbered_to, b.hold_id AS ticket_hold
			FROM tickets tk
			JOIN ga_places gp ON gp.event_id = tk.event_id AND gp.n = tk.seat
			JOIN bookings b ON b.id = tk.booking_id
			WHERE tk.event_id = $1 AND tk.valid)
		SELECT p.section,
			p.capacity,
			coalesce((SELECT sum(remaining) FROM ga_inventory g WHERE g.event_id = $1 AND g.section = p.section), 0)::bigint AS remaining,
			coalesce((SELECT sum(quantity) FROM holds h WHERE h.event_id = $1 AND h.ga_section = p.section
				AND h.status IN ('pending', 'confirmed')), 0)::bigint AS taken,
			coalesce((SELECT sum(quantity) FROM holds WHERE event_id = $1 AND ga_section = p.section
				AND ` + holdIsSold + `), 0)::bigint AS sold,
			p.numbered,
			(SELECT count(DISTINCT t.n) FROM t WHERE t.section = p.section) AS ticketed,
			(SELECT count(*) FROM ga_places gp WHERE gp.event_id = $1 AND gp.section = p.section AND gp.hold_id IS NOT NULL
				AND NOT EXISTS (SELECT 1 FROM holds WHERE id = gp.hold_id AND ` + holdIsSold + `)) AS stray,
			(SELECT count(*) FROM t WHERE t.section = p.section AND t.numbered_to IS DISTINCT FROM t.ticket_hold) AS unmatched,
			(SELECT count(*) FROM (SELECT n FROM t WHERE t.section = p.section GROUP BY n HAVING count(*) > 1) d) AS double_ticketed
		FROM p
		ORDER BY p.section`
)
