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
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	ev := confirmEvent(t, l, 10)
	h := pendingRow(ev.ID, "u-"+uuid.NewString(), uuid.NewString())
	_, err := l.InsertHold(ctx, h, writerNow)
	require.NoError(t, err)

	// The booking's transaction, as ExtendHold runs it, paused before its
	// commit.
	tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = Tx{tx}.ExtendHold(ctx, h.ID, writerNow, writerNow.Add(2*time.Minute))
	require.NoError(t, err)
	_, err = Tx{tx}.Bookings().Insert(ctx, newBooking(h))
	require.NoError(t, err)

	released := make(chan error, 1)
	go func() {
		_, err := l.ReleaseHold(ctx, h.ID, writerNow.Add(time.Second))
		released <- err
	}()
	waitBlocked(t, l, "%holds%")
	require.NoError(t, tx.Commit(ctx))
	err = <-released
	assert.ErrorIs(t, err, ErrHoldNotActive, "a hold whose payment is under way is not released")
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
	_, ok, err := l.Bookings().Fail(ctx, b1.ID, "pay_1", "card_declined", writerNow)
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
