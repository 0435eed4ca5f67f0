package ledger

// The gate's SQL: scans, gate devices and the feed of voided tickets.

// Scans at the gates (scans.go). A scan locks its ticket's booking first
// (the row its ticket is on, by the id the verified code carries), so the
// scans of one ticket, and its voiding, are decided one at a time.
const (
	scanColumns = `gate, scanned_at, recorded_at, offline, result, first, coalesce(device_id::text, '') AS device_id,
		admitted_before_void`
	sqlLockScannedTicket = `SELECT t.code, b.event_id, t.seat::bigint AS seat, coalesce(t.seat_id, '') AS seat_id,
			b.tickets_valid AS valid, b.tickets_issued_at AS issued_at, b.id::text AS booking_id,
			(SELECT v.voided_at FROM ticket_voids v WHERE v.code = t.code) AS voided_at
		FROM bookings b, unnest(b.ticket_codes, b.ticket_seats, b.ticket_seat_ids) AS t (code, seat, seat_id)
		WHERE b.id = $1 AND t.code = $2
		FOR UPDATE OF b`
	sqlFirstScan = `SELECT ` + scanColumns + ` FROM scans WHERE code = $1 AND first`
	// A scan its sender uploaded before: another device's at the same
	// gate and moment is a scan of its own (migration 020).
	sqlUploadedScan = `SELECT ` + scanColumns + ` FROM scans
		WHERE code = $1 AND gate = $2 AND gate_event_id = $3 AND scanned_at = $4 AND offline
			AND coalesce(device_id::text, '') = $5`
	sqlLetInBeforeVoidBy = `SELECT EXISTS (SELECT 1 FROM scans WHERE code = $1 AND gate = $2
		AND coalesce(device_id::text, '') = $3 AND scanned_at <= $4 AND admitted_before_void)`
	sqlUnmarkFirstScan = `UPDATE scans SET first = false WHERE code = $1 AND first`
	sqlInsertScan      = `INSERT INTO scans (code, booking_id, event_id, gate, scanned_at, recorded_at, offline, result, first, device_id,
			gate_event_id, admitted_before_void)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
	// One its sender noted before inserts nothing: the row not inserted
	// is how a refusal sent again is told.
	sqlNoteOfflineRefusal = `INSERT INTO offline_refusals (code_sha256, gate, gate_event_id, scanned_at, device_id, result, recorded_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`
	sqlValidTicketCodes = `SELECT code FROM tickets WHERE event_id = $1 AND valid ORDER BY code`
	sqlScansOf          = `SELECT ` + scanColumns + ` FROM scans WHERE code = $1 ORDER BY scanned_at, id`
	// An event's scans are the scans at its gates: another event's
	// tickets refused there included, its own refused elsewhere not.
	sqlScanTotals = `SELECT
			count(*) FILTER (WHERE first) AS admitted,
			count(*) FILTER (WHERE result = 'already_used') AS already_used,
			count(*) FILTER (WHERE result = 'ticket_void') AS void,
			count(*) FILTER (WHERE result = 'wrong_event') AS wrong_event,
			count(DISTINCT code) FILTER (WHERE admitted_before_void) AS let_in_then_voided,
			(SELECT count(*) FROM (SELECT 1 FROM scans WHERE gate_event_id = $1 AND result = 'admitted'
				GROUP BY code HAVING count(*) > 1) AS twice) AS double_admissions
		FROM scans WHERE gate_event_id = $1`
)

// Gate devices (gate.go). A device's token is its id and a secret; the
// row keeps SHA-256 of the secret only.
const (
	deviceColumns = `id::text AS id, gate, event_id, name, created_at, revoked_at,
		(SELECT max(s.recorded_at) FROM scans s WHERE s.device_id = d.id) AS last_scan_at`
	sqlInsertDevice = `INSERT INTO gate_devices AS d (id, gate, name, secret_hash, created_at, event_id)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING ` + deviceColumns
	sqlDevices = `SELECT ` + deviceColumns + ` FROM gate_devices d ORDER BY created_at, id`
	sqlDevice  = `SELECT ` + deviceColumns + ` FROM gate_devices d WHERE id = $1`
	// A device revoked before keeps the time it was revoked at.
	sqlRevokeDevice = `UPDATE gate_devices AS d SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1
		RETURNING ` + deviceColumns
	sqlDeviceCredential = `SELECT gate, event_id, created_at, secret_hash FROM gate_devices
		WHERE id = $1 AND revoked_at IS NULL`
	sqlAnyActiveDevice = `SELECT EXISTS (SELECT 1 FROM gate_devices WHERE revoked_at IS NULL)`
)

// The time the voidings of this transaction are stamped with, the origin's
// clock, for the trigger that writes their rows (migration 019): set for
// the transaction only.
const sqlVoidTime = `SELECT set_config('waitroom.voided_at', $1::timestamptz::text, true)`

// The feed of voided tickets (gate.go), read between two snapshots: the
// voidings not visible to the snapshot of the read before ($2, NULL for
// the first) and visible to this read's ($3), after the position $4, $5
// within them, in the order (xid, id). A voiding still running when a
// snapshot was taken is not visible to it, so it is read the next time
// whichever order the voidings commit in.
const (
	sqlCurrentSnapshot = `SELECT pg_current_snapshot()::text`
	sqlVoidFeed        = `SELECT v.xid::text AS xid, v.id, v.code, v.event_id, v.seat::bigint AS seat,
			coalesce(v.seat_id, '') AS seat_id
		FROM ticket_voids v
		WHERE v.event_id = $1
			AND ($2::text::pg_snapshot IS NULL
				OR (v.xid >= pg_snapshot_xmin($2::text::pg_snapshot) AND NOT pg_visible_in_snapshot(v.xid, $2::text::pg_snapshot)))
			AND v.xid < pg_snapshot_xmax($3::text::pg_snapshot) AND pg_visible_in_snapshot(v.xid, $3::text::pg_snapshot)
			AND (v.xid, v.id) > ($4::text::xid8, $5::bigint)
		ORDER BY v.xid, v.id
		LIMIT $6`
)
