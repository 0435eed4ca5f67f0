package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

func outboxLedger(t *testing.T, dbURL string, on bool) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), dbURL, Options{Outbox: on})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	return l
}

type eventBody struct {
	ID      string         `json:"id"`
	Type    string         `json:"type"`
	Created int64          `json:"created"`
	Data    map[string]any `json:"data"`
}

// drainOutbox takes every event due, in the order the deliverer would send
// them (a booking's next once its previous one is gone), and deletes each.
func drainOutbox(t *testing.T, l *Ledger) []eventBody {
	t.Helper()
	ctx := context.Background()
	var got []eventBody
	for range 100 {
		evs, err := l.ClaimOutbox(ctx, writerNow.Add(time.Hour), writerNow.Add(2*time.Hour), 100)
		require.NoError(t, err)
		if len(evs) == 0 {
			return got
		}
		for _, ev := range evs {
			var b eventBody
			require.NoError(t, json.Unmarshal([]byte(ev.Body), &b))
			assert.Equal(t, ev.ID, b.ID)
			assert.Equal(t, ev.Type, b.Type)
			got = append(got, b)
			require.NoError(t, l.OutboxDelivered(ctx, ev.Seq))
		}
		// Every lease ended: what was taken and not delivered is due again.
		_, err = l.pool.Exec(ctx, `UPDATE outbox SET next_at = $1`, writerNow)
		require.NoError(t, err)
	}
	t.Fatal("the outbox never emptied")
	return nil
}

// TestOutboxFollowsTheBookingsChanges: a confirmation (through the
// group-commit writer), a cancellation voiding its tickets and a scan each
// write their events in their own transaction, and a booking's events come
// out one at a time, in the order of its changes.
func TestOutboxFollowsTheBookingsChanges(t *testing.T) {
	ctx := context.Background()
	l := outboxLedger(t, testenv.Postgres(t), true)
	ev := confirmEvent(t, l, 10)
	c := payable(t, l, ev)
	w := NewConfirmWriter(l)
	require.NoError(t, w.Confirm(ctx, c))
	codes, err := l.TicketsOf(ctx, c.BookingID)
	require.NoError(t, err)
	require.Len(t, codes, 1)
	_, err = l.RecordScan(ctx, NewScan{Code: codes[0].Code, Booking: c.BookingID, Gate: "north-3", Event: ev.ID}, func() time.Time { return writerNow })
	require.NoError(t, err)
	require.NoError(t, l.InTx(ctx, time.Time{}, func(tx Tx) error {
		if _, ok, err := tx.Bookings().Cancel(ctx, c.BookingID, "cancelled_by_buyer", RefundPending, writerNow.Add(time.Minute)); err != nil || !ok {
			return errors.Join(err, errors.New("not cancelled"))
		}
		return tx.VoidTickets(ctx, c.BookingID, ev.ID)
	}))
	// A change rolled back leaves no event.
	err = l.InTx(ctx, time.Time{}, func(tx Tx) error {
		if _, _, err := tx.Bookings().RecordRefund(ctx, c.BookingID, 0, RefundWasDone, "re_1", writerNow); err != nil {
			return err
		}
		return errors.New("rolled back")
	})
	require.Error(t, err)
	_, ok, err := l.Bookings().RecordRefund(ctx, c.BookingID, 0, RefundWasDone, "re_1", writerNow.Add(2*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)

	// Only the first is due while it is pending.
	first, err := l.ClaimOutbox(ctx, writerNow.Add(time.Hour), writerNow.Add(2*time.Hour), 100)
	require.NoError(t, err)
	require.Len(t, first, 1)
	assert.Equal(t, "booking.confirmed", first[0].Type)
	_, err = l.pool.Exec(ctx, `UPDATE outbox SET next_at = $1`, writerNow)
	require.NoError(t, err)

	got := drainOutbox(t, l)
	var types []string
	for _, b := range got {
		types = append(types, b.Type)
		assert.Equal(t, c.BookingID, b.Data["booking"])
		assert.EqualValues(t, ev.ID, b.Data["event"])
	}
	assert.Equal(t, []string{"booking.confirmed", "ticket.admitted", "booking.cancelled", "ticket.voided", "booking.refunded"}, types)
	assert.Equal(t, writerNow.Add(2*time.Minute).Unix(), got[4].Created)
	assert.Len(t, got[0].Data["tickets"], 1, "a confirmation's event carries its tickets")
	assert.Equal(t, writerNow.Unix(), got[0].Created)
	assert.EqualValues(t, 100, got[0].Data["amount"])
}

// TestOutboxOffWritesNothing: without Options.Outbox the triggers write no
// row, so a sale that sends no events pays nothing for them.
func TestOutboxOffWritesNothing(t *testing.T) {
	ctx := context.Background()
	l := outboxLedger(t, testenv.Postgres(t), false)
	ev := confirmEvent(t, l, 10)
	require.NoError(t, NewConfirmWriter(l).Confirm(ctx, payable(t, l, ev)))
	b, err := l.OutboxBacklog(ctx)
	require.NoError(t, err)
	assert.Zero(t, b.Pending)
}

// TestOutboxDeadAndRedelivery: an event given up on no longer holds back
// its booking's next ones, is listed, and is sent again on request, once.
func TestOutboxDeadAndRedelivery(t *testing.T) {
	ctx := context.Background()
	l := outboxLedger(t, testenv.Postgres(t), true)
	ev := confirmEvent(t, l, 10)
	c := payable(t, l, ev)
	require.NoError(t, NewConfirmWriter(l).Confirm(ctx, c))
	require.NoError(t, l.InTx(ctx, time.Time{}, func(tx Tx) error {
		_, _, err := tx.Bookings().Cancel(ctx, c.BookingID, "cancelled_by_buyer", RefundPending, writerNow)
		return err
	}))
	now := writerNow.Add(time.Hour)
	evs, err := l.ClaimOutbox(ctx, now, now.Add(time.Minute), 10)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.NoError(t, l.OutboxFailed(ctx, evs[0].Seq, 1, "answered 500", now, true, now))

	_, err = l.RedeliverOutbox(ctx, "evt_nosuch", now)
	assert.ErrorIs(t, err, ErrNotFound)
	next, err := l.ClaimOutbox(ctx, now, now.Add(time.Minute), 10)
	require.NoError(t, err)
	require.Len(t, next, 1)
	assert.Equal(t, "booking.cancelled", next[0].Type)
	_, err = l.RedeliverOutbox(ctx, next[0].ID, now)
	assert.ErrorIs(t, err, ErrOutboxNotDead)

	dead, err := l.DeadOutbox(ctx, time.Time{}, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	assert.Equal(t, evs[0].ID, dead[0].ID)
	assert.Equal(t, "answered 500", dead[0].LastError)
	back, err := l.RedeliverOutbox(ctx, dead[0].ID, now)
	require.NoError(t, err)
	assert.Equal(t, OutboxPending, back.Status)
	assert.Zero(t, back.Attempts)
	_, err = l.RedeliverOutbox(ctx, dead[0].ID, now)
	assert.ErrorIs(t, err, ErrOutboxNotDead)
	bl, err := l.OutboxBacklog(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, bl.Pending)
	assert.Zero(t, bl.Dead)
}

// TestOutboxBacklogReadsOnlyWhatIsLeft: every node reads the backlog for
// its gauges after every pass, every second. Delivered events are deleted,
// but a table that carried a million of them keeps their pages, and reading
// the whole table took over a second a pass. The backlog is read through
// the indexes of the pending and the dead events, which stay as small as
// what is left.
func TestOutboxBacklogReadsOnlyWhatIsLeft(t *testing.T) {
	ctx := context.Background()
	l := outboxLedger(t, testenv.Postgres(t), true)
	_, err := l.Pool().Exec(ctx, `ALTER TABLE outbox SET (autovacuum_enabled = false);
		INSERT INTO outbox (event_id, booking_id, type, body, created_at, next_at)
			SELECT 'evt_' || g, gen_random_uuid(), 'booking.confirmed', repeat('x', 400),
				timestamptz '2026-06-01 18:00:00Z' + g * interval '1 second', now()
			FROM generate_series(1, 20000) g;
		DELETE FROM outbox WHERE id <= 19980;
		UPDATE outbox SET status = 'dead', dead_at = now() WHERE id > 19990`)
	require.NoError(t, err)
	_, err = l.Pool().Exec(ctx, `VACUUM ANALYZE outbox`)
	require.NoError(t, err)

	var raw []byte
	require.NoError(t, l.Pool().QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sqlOutboxBacklog).Scan(&raw))
	var plans []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(raw, &plans))
	var scans []string
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.Relation == "outbox" {
			scans = append(scans, n.NodeType+" "+n.Index)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plans[0].Plan)
	t.Log("scans of the outbox:", scans)
	assert.NotContains(t, scans, "Seq Scan ", "the backlog reads the whole outbox")

	b, err := l.OutboxBacklog(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 10, b.Pending)
	assert.EqualValues(t, 10, b.Dead)
	assert.Equal(t, time.Date(2026, 6, 1, 18, 0, 0, 0, time.UTC).Add(19981*time.Second), b.Oldest.UTC())
}
