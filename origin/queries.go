package origin

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
		hold_ttl_seconds, max_per_user, created_at`

	sqlInsertEvent = `INSERT INTO events (` + eventColumns + `)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (id) DO NOTHING
		RETURNING ` + eventColumns

	sqlNextEventID = `SELECT nextval('events_id_seq')`

	sqlEvent  = `SELECT ` + eventColumns + ` FROM events WHERE id = $1`
	sqlEvents = `SELECT ` + eventColumns + ` FROM events ORDER BY id`
)

// Holds.
const (
	holdColumns = `id::text AS id, event_id, user_id, quantity, amount, status, expires_at, created_at,
		updated_at, idempotency_key, request_digest, response`

	// The one write of a hold.
	sqlInsertHold = `INSERT INTO holds (id, event_id, user_id, quantity, amount, status, expires_at,
			created_at, updated_at, idempotency_key, request_digest, response)
		VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $7, $8, $9, $10)`

	// A pending hold past its expiry is free already (Redis reclaimed it);
	// it makes way for the user's new hold in the same transaction.
	sqlExpireLapsedHoldOfUser = `UPDATE holds SET status = 'expired', updated_at = $3
		WHERE event_id = $1 AND user_id = $2 AND status = 'pending' AND expires_at < $3`

	sqlHold           = `SELECT ` + holdColumns + ` FROM holds WHERE id = $1`
	sqlHoldByKey      = `SELECT ` + holdColumns + ` FROM holds WHERE event_id = $1 AND user_id = $2 AND idempotency_key = $3`
	sqlLiveHoldOfUser = `SELECT ` + holdColumns + ` FROM holds
		WHERE event_id = $1 AND user_id = $2 AND status IN ('pending', 'confirmed')`
	sqlHoldExists = `SELECT EXISTS (SELECT 1 FROM holds WHERE id = $1)`

	// A buyer gives a hold back: only a pending hold that has not expired.
	sqlReleaseHold = `UPDATE holds SET status = 'released', updated_at = $2
		WHERE id = $1 AND status = 'pending' AND expires_at >= $2
		RETURNING ` + holdColumns

	// The expiry is not checked here: ConfirmHold has already taken the hold
	// out of Redis's expiry index, so the seat is the buyer's unless the
	// reaper expired the row first (status is then no longer pending).
	sqlConfirmHold = `UPDATE holds SET status = 'confirmed', updated_at = $2
		WHERE id = $1 AND status = 'pending'
		RETURNING ` + holdColumns

	sqlExtendHold = `UPDATE holds SET expires_at = greatest(expires_at, $3), updated_at = $2
		WHERE id = $1 AND status = 'pending' AND expires_at >= $2
		RETURNING ` + holdColumns

	// The reaper: status = 'pending' in both WHEREs is the whole correctness
	// argument (a confirmed hold is never expired), and SKIP LOCKED lets any
	// number of reapers split the work without two of them taking one row.
	sqlExpireDue = `UPDATE holds SET status = 'expired', updated_at = $1
		WHERE status = 'pending' AND id IN (
			SELECT id FROM holds
			WHERE status = 'pending' AND expires_at < $1
			ORDER BY expires_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED)
		RETURNING ` + holdColumns
)

// The invariant and the rebuild. A pending hold past expires_at is free
// everywhere, so it is not counted even before the reaper marks it.
const (
	sqlSeatCounts = `SELECT
			coalesce(sum(quantity) FILTER (WHERE status = 'confirmed'), 0) AS confirmed,
			coalesce(sum(quantity) FILTER (WHERE status = 'pending' AND expires_at >= $2), 0) AS pending
		FROM holds
		WHERE event_id = $1 AND status IN ('pending', 'confirmed')`

	sqlLiveHolds = `SELECT id::text AS id, user_id, quantity, status, expires_at, idempotency_key, request_digest
		FROM holds
		WHERE event_id = $1 AND (status = 'confirmed' OR (status = 'pending' AND expires_at >= $2))`
)
