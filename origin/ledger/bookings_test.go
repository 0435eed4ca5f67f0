package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// waitBlocked waits until a statement of another session matching like
// waits for a lock: a race built step by step, not hoped for.
func waitBlocked(t *testing.T, l *Ledger, like string) {
	t.Helper()
	for range 10_000 {
		var n int
		require.NoError(t, l.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE $1`, like).Scan(&n))
		if n > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no statement like %q ever waited for a lock", like)
}

// newBooking is a booking of hold h waiting for its payment.
func newBooking(h Hold) NewBooking {
	return NewBooking{ID: uuid.NewString(), HoldID: h.ID, EventID: h.EventID, UserID: h.UserID, Quantity: h.Quantity,
		Amount: h.Amount, Currency: "inr", Provider: "fakepay", PaymentMethod: "pm_card_visa",
		IdempotencyKey: uuid.NewString(), RequestDigest: "d", CreatedAt: writerNow}
}

// TestReleaseWaitsForTheBookingBeingWritten: a release that ran while a
// booking of the hold was being written (the hold extended, the booking not
// committed yet) used to release the hold under the booking, since its NOT
// EXISTS read the bookings as they were before it waited.
func TestReleaseWaitsForTheBookingBeingWritten(t *testing.T) {
	l, _, h := heldEvent(t)
	ctx := context.Background()
	tx := bookingInFlight(t, l, h, writerNow.Add(2*time.Minute))

	released := make(chan error, 1)
	go func() {
		_, err := l.ReleaseHold(ctx, h.ID, writerNow.Add(time.Second), time.Time{})
		released <- err
	}()
	waitBlocked(t, l, "%holds%")
	require.NoError(t, tx.Commit(ctx))
	err := <-released
	assert.ErrorIs(t, err, ErrHoldNotActive, "a hold whose payment is under way is not released")
	got, err := l.Hold(ctx, h.ID)
	require.NoError(t, err)
	assert.Equal(t, StatusPending, got.Status)
}

// heldEvent is a ledger with an event of 10 seats and a pending hold of
// one of them.
func heldEvent(t *testing.T) (*Ledger, Event, Hold) {
	t.Helper()
	l := testLedger(t, testenv.Postgres(t))
	ev := confirmEvent(t, l, 10)
	h := pendingRow(ev.ID, "u-"+uuid.NewString(), uuid.NewString())
	_, err := l.InsertHold(context.Background(), h, writerNow)
	require.NoError(t, err)
	return l, ev, h
}

// bookingInFlight is a booking's transaction as seats.ExtendHold runs it
// (the hold locked, the booking that keeps it until until inserted),
// paused before its commit.
func bookingInFlight(t *testing.T, l *Ledger, h Hold, until time.Time) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	held, err := Tx{tx}.LockHoldForBooking(ctx, h.ID, writerNow, until)
	require.NoError(t, err)
	require.False(t, held.ExpiresAt.Before(until), "the hold as the booking leaves it")
	b := newBooking(h)
	b.HoldUntil = held.ExpiresAt
	_, err = Tx{tx}.Bookings().Insert(ctx, b)
	require.NoError(t, err)
	return tx
}

// TestBookingKeepsItsHold: the booking's row carries its hold's extension,
// the hold's own row is not rewritten, and every reader of the hold's
// expiry (the hold, the reaper, the invariant's counts, the rebuild's live
// holds) takes the later one.
func TestBookingKeepsItsHold(t *testing.T) {
	l, ev, h := heldEvent(t) // h expires at writerNow + 10 min
	ctx := context.Background()
	until := writerNow.Add(20 * time.Minute)
	require.NoError(t, bookingInFlight(t, l, h, until).Commit(ctx))

	var own time.Time
	require.NoError(t, l.pool.QueryRow(ctx, `SELECT expires_at FROM holds WHERE id = $1`, h.ID).Scan(&own))
	assert.True(t, h.ExpiresAt.Equal(own), "the hold's row as it was written: %v", own)
	got, err := l.Hold(ctx, h.ID)
	require.NoError(t, err)
	assert.True(t, until.Equal(got.ExpiresAt), "%v", got.ExpiresAt)

	between := writerNow.Add(15 * time.Minute)
	ended, err := l.ExpireDue(ctx, between, time.Time{}, 100)
	require.NoError(t, err)
	assert.Empty(t, ended, "past its own expiry, not its booking's")
	counts, err := l.SeatCounts(ctx, ev.ID, between)
	require.NoError(t, err)
	assert.EqualValues(t, 1, counts.Pending)
	live, _, err := l.LiveHoldsNow(ctx, ev.ID, between)
	require.NoError(t, err)
	require.Len(t, live, 1)
	assert.True(t, until.Equal(live[0].ExpiresAt), "the rebuild gives Redis the booking's expiry: %v", live[0].ExpiresAt)

	ended, err = l.ExpireDue(ctx, until.Add(time.Second), time.Time{}, 100)
	require.NoError(t, err)
	require.Len(t, ended, 1)
	assert.Equal(t, StatusExpired, ended[0].Status)
}

// TestNewHoldOfTheBuyerWaitsForTheBookingBeingWritten: the buyer's new
// hold, past the old hold's own expiry, ends the old one only if it is
// still past its expiry once the booking keeping it committed. Ended in the
// statement that waited for the lock, it read the bookings from before it
// waited, and ended the hold under the payment.
func TestNewHoldOfTheBuyerWaitsForTheBookingBeingWritten(t *testing.T) {
	l, ev, h := heldEvent(t)
	ctx := context.Background()
	tx := bookingInFlight(t, l, h, writerNow.Add(20*time.Minute))

	later := writerNow.Add(15 * time.Minute)
	again := pendingRow(ev.ID, h.UserID, uuid.NewString())
	again.CreatedAt, again.ExpiresAt = later, later.Add(10*time.Minute)
	inserted := make(chan error, 1)
	go func() {
		_, err := l.InsertHold(ctx, again, later)
		inserted <- err
	}()
	waitBlocked(t, l, "%holds%")
	require.NoError(t, tx.Commit(ctx))
	assert.ErrorIs(t, <-inserted, ErrLiveHoldExists, "the buyer still holds the first")
	got, err := l.Hold(ctx, h.ID)
	require.NoError(t, err)
	assert.Equal(t, StatusPending, got.Status)
}

// TestRefundOfAFailedBookingBesideALiveOne: a failed booking whose payment
// succeeded after all is refunded while the buyer pays through a second
// booking of the same hold. Its move to cancelled used to break the
// one-booking-per-hold index (23505).
func TestRefundOfAFailedBookingBesideALiveOne(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	ev := confirmEvent(t, l, 10)
	h := pendingRow(ev.ID, "u-"+uuid.NewString(), uuid.NewString())
	_, err := l.InsertHold(ctx, h, writerNow)
	require.NoError(t, err)
	b1, err := l.Bookings().Insert(ctx, newBooking(h))
	require.NoError(t, err)
	_, ok, err := l.Bookings().Fail(ctx, b1.ID, "pay_1", "card_declined", nil, writerNow)
	require.NoError(t, err)
	require.True(t, ok)
	b2, err := l.Bookings().Insert(ctx, newBooking(h))
	require.NoError(t, err)

	refunded, ok, err := l.Bookings().RefundPayment(ctx, b1.ID, "paid_after_failure", "pay_1", writerNow)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, BookingCancelled, refunded.Status)
	assert.Equal(t, RefundPending, refunded.RefundStatus)

	live, err := l.Bookings().LiveOfHold(ctx, h.ID)
	require.NoError(t, err)
	assert.Equal(t, b2.ID, live.ID, "the live booking of the hold is the second")
	_, err = l.Bookings().Insert(ctx, newBooking(h))
	assert.ErrorIs(t, err, ErrBookingExists, "still one live booking per hold")
}

// TestNewHoldRowWaitsForTheBuyersLatePayment: a late payment confirmed from
// the overflow reserve under the buyer's lock, and a new hold's row of the
// same buyer written meanwhile: the row waits for the lock and is refused
// once the sale is committed, so the buyer never ends with the reserve's
// seats and a hold on top of them. Whichever batch the row goes in.
func TestNewHoldRowWaitsForTheBuyersLatePayment(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "batched"}[batched], func(t *testing.T) {
			l := testLedger(t, testenv.Postgres(t))
			ctx := context.Background()
			ev := confirmEvent(t, l, 10)
			user := "u-" + uuid.NewString()
			h := pendingRow(ev.ID, user, uuid.NewString())
			_, err := l.InsertHold(ctx, h, writerNow)
			require.NoError(t, err)
			b, err := l.Bookings().Insert(ctx, newBooking(h))
			require.NoError(t, err)
			_, err = l.pool.Exec(ctx, `UPDATE holds SET status = 'expired' WHERE id = $1`, h.ID)
			require.NoError(t, err)

			// The late payment, under the buyer's lock, paused before its
			// commit.
			tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{})
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			require.NoError(t, Tx{tx}.LockBuyer(ctx, ev.ID, user))
			_, err = tx.Exec(ctx, `UPDATE bookings SET status = 'confirmed', overflow = true WHERE id = $1`, b.ID)
			require.NoError(t, err)

			again := pendingRow(ev.ID, user, uuid.NewString())
			other := pendingRow(ev.ID, "u-"+uuid.NewString(), uuid.NewString())
			written := make(chan error, 1)
			var inserted []bool
			go func() {
				if batched {
					var err error
					inserted, _, err = l.InsertHolds(ctx, []Hold{again, other}, []*time.Time{nil, nil})
					written <- err
					return
				}
				_, err := l.InsertHold(ctx, again, writerNow)
				written <- err
			}()
			waitBlocked(t, l, "%advisory%")
			require.NoError(t, tx.Commit(ctx))
			err = <-written
			if batched {
				require.NoError(t, err)
				assert.Equal(t, []bool{false, true}, inserted, "the buyer's row is refused, the other's written")
			} else {
				assert.ErrorIs(t, err, ErrBuyerHasSeats)
			}
			_, err = l.Hold(ctx, again.ID)
			assert.ErrorIs(t, err, ErrNotFound, "no hold on top of the reserve's seats")
		})
	}
}

// TestUnsettledAskedLessAndLess: a booking waiting for its payment is
// taken by the reconciliation every PendingAfter while it keeps its hold;
// after that, and for a refund pending at the provider, each wait is twice
// the one before, at most an hour.
func TestUnsettledAskedLessAndLess(t *testing.T) {
	ctx := context.Background()
	l := testLedger(t, testenv.Postgres(t))
	ev := confirmEvent(t, l, 10)
	const pendingAfter = time.Minute
	book := func(holdUntil time.Time) string {
		t.Helper()
		h := pendingRow(ev.ID, "u-"+uuid.NewString(), uuid.NewString())
		_, err := l.InsertHold(ctx, h, writerNow)
		require.NoError(t, err)
		b, err := l.Bookings().Insert(ctx, NewBooking{ID: uuid.NewString(), HoldID: h.ID, EventID: ev.ID, UserID: h.UserID,
			Quantity: 1, Amount: h.Amount, Currency: "inr", Provider: "fakepay", PaymentMethod: "pm_card_visa",
			IdempotencyKey: uuid.NewString(), RequestDigest: "d", CreatedAt: writerNow, HoldUntil: holdUntil})
		require.NoError(t, err)
		return b.ID
	}
	claimed := func(id string, after time.Duration) bool {
		t.Helper()
		at := writerNow.Add(after)
		got, err := l.Bookings().ClaimUnsettled(ctx, at, at.Add(-pendingAfter), 100)
		require.NoError(t, err)
		for _, b := range got {
			if b.ID == id {
				return true
			}
		}
		return false
	}
	type look struct {
		after time.Duration // since the booking was made
		took  bool
	}
	check := func(id string, looks []look) {
		t.Helper()
		for _, look := range looks {
			assert.Equal(t, look.took, claimed(id, look.after), "%v after the booking was made", look.after)
		}
	}

	// Its hold kept for 10 minutes.
	check(book(writerNow.Add(10*time.Minute)), []look{
		{50 * time.Second, false},
		{61 * time.Second, true},
		{2*time.Minute + 2*time.Second, true}, // PendingAfter apart
		{9 * time.Minute, true},
		{10*time.Minute + 30*time.Second, true}, // the keep over: PendingAfter since the look before
		{11*time.Minute + 20*time.Second, false},
		{11*time.Minute + 31*time.Second, true}, // 91 s after the hold's end
		{12*time.Minute + 40*time.Second, false},
		{13*time.Minute + 3*time.Second, true}, // 92 s: the wait before
		{16 * time.Minute, false},
		{16*time.Minute + 7*time.Second, true},
		{5 * time.Hour, true},
		{5*time.Hour + 30*time.Minute, false}, // at most an hour
		{5*time.Hour + 59*time.Minute, false},
		{6*time.Hour + time.Minute, true},
		{6*time.Hour + 30*time.Minute, false},
		{7*time.Hour + 2*time.Minute, true},
	})

	// A refund made and pending at the provider, from 20 minutes on.
	id := book(writerNow.Add(10 * time.Minute))
	_, ok, err := l.Bookings().RefundPayment(ctx, id, "payment_mismatch", "pay_"+id, writerNow.Add(20*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	check(id, []look{{20*time.Minute + 30*time.Second, true}}) // not made yet: as soon as it is due
	_, ok, err = l.Bookings().RecordRefund(ctx, id, 0, RefundWasMade, "re_"+id, writerNow.Add(21*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	check(id, []look{
		{21*time.Minute + 31*time.Second, true},
		{22*time.Minute + 20*time.Second, false},
		{22*time.Minute + 32*time.Second, true}, // 61 s
		{23*time.Minute + 40*time.Second, false},
		{24*time.Minute + 5*time.Second, true}, // 93 s: the wait before
		{3 * time.Hour, true},
		{3*time.Hour + 50*time.Minute, false},
		{4*time.Hour + time.Minute, true},
	})
}
