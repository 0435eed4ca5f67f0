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

// rowVersion is the transaction that wrote a hold's row last, and its
// status as stored.
func rowVersion(t *testing.T, l *Ledger, id string) (xmin, status string) {
	t.Helper()
	require.NoError(t, l.pool.QueryRow(context.Background(),
		`SELECT xmin::text, status FROM holds WHERE id = $1`, id).Scan(&xmin, &status))
	return xmin, status
}

// A paid booking's confirmation is the sale: the hold's row is not written
// again, and every reading of the ledger takes the hold for sold, for good.
func TestASaleWritesNoRowOfItsHold(t *testing.T) {
	ctx := context.Background()
	l := testLedger(t, testenv.Postgres(t))
	ev := confirmEvent(t, l, 10)
	sold, other := payable(t, l, ev), payable(t, l, ev)
	before, _ := rowVersion(t, l, sold.HoldID)

	require.NoError(t, NewConfirmWriter(l).Confirm(ctx, sold))

	after, stored := rowVersion(t, l, sold.HoldID)
	assert.Equal(t, before, after, "the hold's row was written by the sale")
	assert.Equal(t, StatusPending, stored)
	h, err := l.Hold(ctx, sold.HoldID)
	require.NoError(t, err)
	assert.Equal(t, StatusConfirmed, h.Status)

	// A day after every expiry: the sale stands, the other hold lapsed.
	later := writerNow.Add(24 * time.Hour)
	counts, err := l.SeatCounts(ctx, ev.ID, later)
	require.NoError(t, err)
	assert.Equal(t, int64(1), counts.Confirmed)
	assert.Zero(t, counts.Pending)
	live, _, err := l.LiveHolds(ctx, ev.ID, later)
	require.NoError(t, err)
	require.Len(t, live, 1)
	assert.Equal(t, sold.HoldID, live[0].ID)
	assert.Equal(t, StatusConfirmed, live[0].Status)

	ended, err := l.ExpireDue(ctx, later, time.Time{}, 100)
	require.NoError(t, err)
	require.Len(t, ended, 1, "only the unsold hold ends")
	assert.Equal(t, other.HoldID, ended[0].ID)
	h, err = l.Hold(ctx, sold.HoldID)
	require.NoError(t, err)
	assert.Equal(t, StatusConfirmed, h.Status)

	// Neither its buyer nor a new booking can take it back; a cancelled
	// sale releases it.
	_, err = l.ReleaseHold(ctx, sold.HoldID, writerNow, time.Time{})
	assert.ErrorIs(t, err, ErrHoldNotActive)
	require.NoError(t, l.InTx(ctx, time.Time{}, func(tx Tx) error {
		_, err := tx.LockHoldForBooking(ctx, sold.HoldID, writerNow, writerNow.Add(time.Minute))
		assert.ErrorIs(t, err, ErrHoldNotActive)
		return nil
	}))
	require.NoError(t, l.InTx(ctx, time.Time{}, func(tx Tx) error {
		ok, err := tx.ReleaseConfirmedHold(ctx, sold.HoldID, later)
		assert.True(t, ok)
		return err
	}))
	h, err = l.Hold(ctx, sold.HoldID)
	require.NoError(t, err)
	assert.Equal(t, StatusReleased, h.Status)
}

// The reaper's walk starts past the sold holds, and stops at a hold a
// payment still keeps, which may lapse yet.
func TestReapFromSkipsOnlySoldHolds(t *testing.T) {
	ctx := context.Background()
	l := testLedger(t, testenv.Postgres(t))
	ev := confirmEvent(t, l, 10)
	w := NewConfirmWriter(l)

	// Holds of one seat expiring a minute apart: the first sold, the
	// second kept by a payment until an hour later, the third sold.
	hold := func(expires time.Time) string {
		h := pendingRow(ev.ID, "u-"+uuid.NewString(), uuid.NewString())
		h.ExpiresAt = expires
		_, err := l.InsertHold(ctx, h, writerNow)
		require.NoError(t, err)
		return h.ID
	}
	book := func(holdID string, until time.Time) string {
		h, err := l.Hold(ctx, holdID)
		require.NoError(t, err)
		b, err := l.Bookings().Insert(ctx, NewBooking{ID: uuid.NewString(), HoldID: holdID, EventID: ev.ID, UserID: h.UserID,
			Quantity: 1, Amount: h.Amount, Currency: "inr", Provider: "fakepay", PaymentMethod: "pm_card_visa",
			IdempotencyKey: uuid.NewString(), RequestDigest: "d", CreatedAt: writerNow, HoldUntil: until})
		require.NoError(t, err)
		return b.ID
	}
	t1, t2, t3 := writerNow.Add(time.Minute), writerNow.Add(2*time.Minute), writerNow.Add(3*time.Minute)
	first, kept, third := hold(t1), hold(t2), hold(t3)
	for _, id := range []string{first, third} {
		c := Confirmation{HoldID: id, BookingID: book(id, time.Time{}), EventID: ev.ID, Now: writerNow,
			Sign: func(seats []int32, _ []string) ([]string, error) { return []string{id}, nil }}
		require.NoError(t, w.Confirm(ctx, c))
	}
	keptBooking := book(kept, t2.Add(time.Hour))

	now := writerNow.Add(10 * time.Minute)
	from, err := l.ReapFrom(ctx, now, time.Time{})
	require.NoError(t, err)
	assert.True(t, from.Equal(t2), "walk from %v, want the kept hold's expiry %v", from, t2)
	from, err = l.ReapFrom(ctx, now, t2.Add(time.Millisecond))
	require.NoError(t, err)
	assert.True(t, from.Equal(now), "walk from %v, want now: only sales behind it", from)

	// The payment fails: the hold lapses when its keep does, and a walk
	// from where ReapFrom said ends it.
	_, ok, err := l.Bookings().Fail(ctx, keptBooking, "", "card_declined", nil, now)
	require.NoError(t, err)
	require.True(t, ok)
	ended, err := l.ExpireDue(ctx, t2.Add(2*time.Hour), t2, 100)
	require.NoError(t, err)
	require.Len(t, ended, 1)
	assert.Equal(t, kept, ended[0].ID)
	from, err = l.ReapFrom(ctx, t2.Add(2*time.Hour), time.Time{})
	require.NoError(t, err)
	assert.True(t, from.Equal(t2.Add(2*time.Hour)), "walk from %v: nothing but sales behind", from)
}
