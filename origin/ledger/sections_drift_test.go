package ledger

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// sectionSale is a hold of the section with a booking waiting for its
// payment on it, and the booking's confirmation.
func sectionSale(t *testing.T, l *Ledger, ev Event, user string, qty int64) Confirmation {
	t.Helper()
	ctx := context.Background()
	h := sectionRow(ev.ID, user, qty)
	_, err := l.InsertSectionHold(ctx, h, writerNow)
	require.NoError(t, err)
	b, err := l.Bookings().Insert(ctx, NewBooking{ID: uuid.NewString(), HoldID: h.ID, EventID: ev.ID, UserID: user,
		Quantity: qty, Amount: h.Amount, Currency: "inr", Provider: "fakepay", PaymentMethod: "pm_card_visa",
		IdempotencyKey: uuid.NewString(), RequestDigest: "d", CreatedAt: writerNow})
	require.NoError(t, err)
	return Confirmation{HoldID: h.ID, BookingID: b.ID, PaymentID: "pay_" + b.ID, EventID: ev.ID, Seated: true,
		Now: writerNow, Deadline: time.Now().Add(time.Minute),
		Sign: func(seats []int32, _ []string) ([]string, error) {
			codes := make([]string, len(seats))
			for i, s := range seats {
				codes[i] = b.ID + "/" + strconv.Itoa(int(s))
			}
			return codes, nil
		}}
}

func mustSound(t *testing.T, l *Ledger, event int64, msg string) SectionAudit {
	t.Helper()
	audit, err := l.CheckSections(context.Background(), event)
	require.NoError(t, err, msg)
	require.Len(t, audit, 1)
	return audit[0]
}

// TestSectionPlacesFollowTheirSale walks sales of a section through their
// ends (a cancellation, a refund at the provider, a late payment's expired
// hold) and checks after each step that the section's counts and place
// numbers agree: every place in a bucket or a live hold, a number for
// each place sold and only for those, every valid ticket's place its own.
func TestSectionPlacesFollowTheirSale(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	ev := sectionEvent(t, l, 4)
	w := NewConfirmWriter(l)

	ann := sectionSale(t, l, ev, "ann", 3)
	require.NoError(t, w.Confirm(ctx, ann))
	a := mustSound(t, l, ev.ID, "ann's 3 places sold")
	assert.Equal(t, SectionAudit{Section: "GA-East", Capacity: 4, Remaining: 1, Taken: 3, Sold: 3, Numbered: 3, Ticketed: 3}, a)

	// The sale is cancelled: its hold released and its tickets voided, in
	// one transaction, as booking.giveSeatsBack does.
	require.NoError(t, l.InTx(ctx, time.Time{}, func(tx Tx) error {
		ok, err := tx.ReleaseConfirmedHold(ctx, ann.HoldID, writerNow)
		if err == nil && !ok {
			t.Error("ann's hold was not confirmed")
		}
		if err != nil {
			return err
		}
		return tx.VoidTickets(ctx, ann.BookingID, ev.ID)
	}))
	a = mustSound(t, l, ev.ID, "ann's sale cancelled")
	assert.Equal(t, SectionAudit{Section: "GA-East", Capacity: 4, Remaining: 4}, a)

	// The places and their numbers are sold again, all four.
	bob := sectionSale(t, l, ev, "bob", 4)
	require.NoError(t, w.Confirm(ctx, bob))
	a = mustSound(t, l, ev.ID, "bob bought the section")
	assert.Equal(t, SectionAudit{Section: "GA-East", Capacity: 4, Remaining: 0, Taken: 4, Sold: 4, Numbered: 4, Ticketed: 4}, a)
	tickets, err := l.TicketsOf(ctx, bob.BookingID)
	require.NoError(t, err)
	assert.Len(t, tickets, 4)
}

// TestExpiredSectionHoldGetsNoNumbers: the numbers of a section's places
// go only to a confirmed hold. A hold that expired (its places back in the
// buckets, sold to others meanwhile) gets none, or a place would be both
// free in the buckets and numbered.
func TestExpiredSectionHoldGetsNoNumbers(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	ev := sectionEvent(t, l, 4)
	ann := sectionSale(t, l, ev, "ann", 2)
	require.NoError(t, l.InTx(ctx, time.Time{}, func(tx Tx) error {
		_, err := tx.ExpireLateHold(ctx, ann.HoldID, writerNow.Add(time.Hour))
		return err
	}))
	var numbers []int32
	require.NoError(t, l.InTx(ctx, time.Time{}, func(tx Tx) error {
		var err error
		numbers, _, err = tx.SeatsOfHold(ctx, ev.ID, ann.HoldID)
		return err
	}))
	assert.Empty(t, numbers, "an expired hold has no place to number")
	mustSound(t, l, ev.ID, "nothing sold, nothing numbered")
}

// TestSectionFallbackNotesTheHoldsItExpires builds the interleaving at the
// ledger's level: ann's hold of the section is confirmed in Redis and the
// ledger step of its confirmation fails (the row stays pending), then it
// lapses; bob's hold finds no bucket with his places and expires the
// section's lapsed holds itself, ann's with them. Nobody else will give
// ann's places back in Redis (the reaper releases only what it expires):
// the ledger notes the release owed, in the same transaction, until the
// origin says it is made.
func TestSectionFallbackNotesTheHoldsItExpires(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	ev := sectionEvent(t, l, 4)
	ann := sectionRow(ev.ID, "ann", 3)
	_, err := l.InsertSectionHold(ctx, ann, writerNow)
	require.NoError(t, err)

	lapsed := ann.ExpiresAt.Add(time.Minute)
	_, err = l.InsertSectionHold(ctx, sectionRow(ev.ID, "bob", 2), lapsed)
	require.NoError(t, err, "ann's lapsed places make up bob's")
	assert.Equal(t, StatusExpired, mustHold(t, l, ann.ID).Status)
	a := mustSound(t, l, ev.ID, "bob has 2 of the 4")
	assert.Equal(t, int64(2), a.Remaining)

	owed, err := l.ReleasesOwed(ctx, ev.ID, 10)
	require.NoError(t, err)
	assert.Equal(t, []OwedRelease{{HoldID: ann.ID, EventID: ev.ID}}, owed, "ann's release in redis is owed")
	other, err := l.ReleasesOwed(ctx, ev.ID+1, 10)
	require.NoError(t, err)
	assert.Empty(t, other, "of this event only")

	require.NoError(t, l.ReleasesMade(ctx, []string{ann.ID}))
	owed, err = l.ReleasesOwed(ctx, 0, 10)
	require.NoError(t, err)
	for _, o := range owed {
		assert.NotEqual(t, ann.ID, o.HoldID, "made, forgotten")
	}

	// A fallback that expires nothing notes nothing; the reaper's expiries
	// are released by the reaper itself and note nothing either.
	carol := sectionRow(ev.ID, "carol", 2)
	carol.ExpiresAt = lapsed
	_, err = l.InsertSectionHold(ctx, carol, lapsed)
	require.NoError(t, err)
	expired, err := l.ExpireDue(ctx, lapsed.Add(time.Second), time.Time{}, 100)
	require.NoError(t, err)
	n := 0
	for _, h := range expired {
		if h.EventID == ev.ID {
			n++
		}
	}
	require.Equal(t, 2, n, "bob's and carol's")
	owed, err = l.ReleasesOwed(ctx, ev.ID, 10)
	require.NoError(t, err)
	assert.Empty(t, owed)
	mustSound(t, l, ev.ID, "carol's hold expired by the reaper")
}
