package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// unmigrate012 puts the gate's tables back as they were before migration
// 012, and forgets it was applied.
const unmigrate012 = `
ALTER TABLE gate_devices DROP CONSTRAINT gate_devices_event;
ALTER TABLE gate_devices DROP COLUMN event_id;
ALTER TABLE scans DROP CONSTRAINT scans_own_event;
ALTER TABLE scans DROP CONSTRAINT scans_result_check;
ALTER TABLE scans DROP COLUMN gate_event_id;
ALTER TABLE scans ADD CONSTRAINT scans_result_check CHECK (result IN ('admitted', 'already_used', 'ticket_void'));
CREATE UNIQUE INDEX scans_uploaded_once ON scans (code, gate, scanned_at) WHERE offline;
DELETE FROM schema_migrations WHERE version = 12;
`

// The devices registered before a device had an event are revoked by the
// upgrade: nothing says which event's tickets they may admit. One revoked
// before keeps its time.
func TestMigration012RevokesDevicesWithoutEvent(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.Postgres(t)
	l := testLedger(t, dbURL)
	_, err := l.pool.Exec(ctx, unmigrate012)
	require.NoError(t, err)
	revokedAt := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
	active, revoked := uuid.NewString(), uuid.NewString()
	hash := make([]byte, 32)
	for _, d := range []struct {
		id        string
		revokedAt *time.Time
	}{{active, nil}, {revoked, &revokedAt}} {
		_, err := l.pool.Exec(ctx, `INSERT INTO gate_devices (id, gate, secret_hash, created_at, revoked_at) VALUES ($1, 'north-3', $2, $3, $4)`,
			d.id, hash, revokedAt.Add(-time.Hour), d.revokedAt)
		require.NoError(t, err)
	}

	upgraded := testLedger(t, dbURL)
	_, err = upgraded.GateCredential(ctx, active)
	require.ErrorIs(t, err, ErrNotFound, "the device with no event scans no more")
	ok, err := upgraded.AnyGateDevice(ctx)
	require.NoError(t, err)
	assert.False(t, ok)
	for _, id := range []string{active, revoked} {
		d, err := upgraded.GateDevice(ctx, id)
		require.NoError(t, err)
		assert.Nil(t, d.Event, id)
		require.NotNil(t, d.RevokedAt, id)
	}
	d, err := upgraded.GateDevice(ctx, revoked)
	require.NoError(t, err)
	assert.True(t, d.RevokedAt.Equal(revokedAt), "revoked before: its time kept")

	_, err = upgraded.pool.Exec(ctx, `UPDATE gate_devices SET revoked_at = NULL WHERE id = $1`, active)
	assert.Error(t, err, "a device scanning for no event cannot be made again")
}

// A voiding through VoidTicketsAt writes each void row once, stamped with
// the time it is given; a voiding after it, in another transaction, is
// stamped by the database's clock, not by the time given before.
func TestVoidTicketsAtWritesEachVoidOnce(t *testing.T) {
	ctx := context.Background()
	l := testLedger(t, testenv.Postgres(t))
	ev := confirmEvent(t, l, 10)
	w := NewConfirmWriter(l)
	given, later := payable(t, l, ev), payable(t, l, ev)
	require.NoError(t, w.Confirm(ctx, given))
	require.NoError(t, w.Confirm(ctx, later))

	at := writerNow.Add(3*time.Minute + 123456*time.Microsecond)
	var updated int64
	require.NoError(t, l.InTx(ctx, time.Time{}, func(tx Tx) error {
		if err := tx.VoidTicketsAt(ctx, given.BookingID, ev.ID, at); err != nil {
			return err
		}
		return tx.tx.QueryRow(ctx, `SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'ticket_voids'`).Scan(&updated)
	}))
	assert.Zero(t, updated, "a void row written twice")
	voidedAt := func(booking string) time.Time {
		t.Helper()
		var got time.Time
		require.NoError(t, l.pool.QueryRow(ctx, `SELECT v.voided_at FROM ticket_voids v JOIN tickets t ON t.code = v.code
			WHERE t.booking_id = $1`, booking).Scan(&got))
		return got
	}
	assert.True(t, voidedAt(given.BookingID).Equal(at), "stamped %v, given %v", voidedAt(given.BookingID), at)

	before := time.Now()
	require.NoError(t, l.InTx(ctx, time.Time{}, func(tx Tx) error {
		return tx.VoidTickets(ctx, later.BookingID, ev.ID)
	}))
	assert.WithinDuration(t, before, voidedAt(later.BookingID), time.Minute, "the database's clock")
}

// An offline scan sent again is its sender's: two devices at one gate
// scanning one code at the same moment make two scans, the second a double
// admission, and so does the shared token there; each sender's own scan
// sent again is recorded once, and a refusal is noted once per sender.
func TestOfflineScanSentAgainIsItsSenders(t *testing.T) {
	ctx := context.Background()
	l := testLedger(t, testenv.Postgres(t))
	ev := confirmEvent(t, l, 10)
	c := payable(t, l, ev)
	require.NoError(t, NewConfirmWriter(l).Confirm(ctx, c))
	var code string
	require.NoError(t, l.pool.QueryRow(ctx, `SELECT code FROM tickets WHERE booking_id = $1`, c.BookingID).Scan(&code))
	devices := make([]string, 2)
	for i := range devices {
		d, err := l.AddGateDevice(ctx, NewGateDevice{ID: uuid.NewString(), Gate: "field-1", Event: ev.ID,
			SecretHash: make([]byte, 32), CreatedAt: writerNow})
		require.NoError(t, err)
		devices[i] = d.ID
	}
	now := writerNow.Add(time.Hour)
	at := writerNow.Add(time.Minute)
	scan := func(device string) ScanOutcome {
		t.Helper()
		o, err := l.RecordScan(ctx, NewScan{Code: code, Booking: c.BookingID, Gate: "field-1", Event: ev.ID, ScannedAt: at, Offline: true,
			Device: device},
			func() time.Time { return now })
		require.NoError(t, err)
		return o
	}

	o := scan(devices[0])
	assert.Equal(t, ScanAdmitted, o.Result)
	for _, sender := range []string{devices[1], ""} {
		o = scan(sender)
		assert.False(t, o.Replayed, "%q: a scan of its own", sender)
		assert.True(t, o.LetInAgain, "%q: %+v", sender, o)
		assert.Equal(t, ScanAlreadyUsed, o.Result)
	}
	for _, sender := range []string{devices[0], devices[1], ""} {
		assert.True(t, scan(sender).Replayed, "%q: its own scan sent again", sender)
	}
	scans, err := l.ScansOf(ctx, code)
	require.NoError(t, err)
	require.Len(t, scans, 3)
	assert.Equal(t, []string{devices[0], devices[1], ""}, []string{scans[0].Device, scans[1].Device, scans[2].Device})
	totals, err := l.ScanTotals(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, ScanTotals{Admitted: 1, DoubleAdmissions: 1}, totals)

	forged := NewScan{Code: "not-a-ticket", Gate: "field-1", Event: ev.ID, ScannedAt: at, Offline: true}
	for _, sender := range []string{devices[0], devices[1], ""} {
		forged.Device = sender
		fresh, err := l.NoteOfflineRefusal(ctx, forged, "invalid_ticket", now)
		require.NoError(t, err)
		assert.True(t, fresh, "%q: noted", sender)
		fresh, err = l.NoteOfflineRefusal(ctx, forged, "invalid_ticket", now)
		require.NoError(t, err)
		assert.False(t, fresh, "%q: sent again", sender)
	}
}
