package ledger

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

func confirmEvent(t *testing.T, l *Ledger, capacity int64) Event {
	t.Helper()
	ev, err := l.CreateEvent(context.Background(), Event{ID: testenv.EventID(), Name: "confirmations", Capacity: capacity,
		Sellable: capacity, Price: 100, Currency: "inr", HoldTTLSeconds: 600, MaxPerUser: 4, CreatedAt: writerNow})
	require.NoError(t, err)
	return ev
}

// payable writes a pending hold of one seat and a booking waiting for its
// payment on it, and returns the booking's confirmation.
func payable(t *testing.T, l *Ledger, ev Event) Confirmation {
	t.Helper()
	ctx := context.Background()
	h := pendingRow(ev.ID, "u-"+uuid.NewString(), uuid.NewString())
	_, err := l.InsertHold(ctx, h, writerNow)
	require.NoError(t, err)
	b, err := l.Bookings().Insert(ctx, NewBooking{ID: uuid.NewString(), HoldID: h.ID, EventID: ev.ID, UserID: h.UserID,
		Quantity: 1, Amount: h.Amount, Currency: "inr", Provider: "fakepay", PaymentMethod: "pm_card_visa",
		IdempotencyKey: uuid.NewString(), RequestDigest: "d", CreatedAt: writerNow})
	require.NoError(t, err)
	return Confirmation{HoldID: h.ID, BookingID: b.ID, PaymentID: "pay_" + b.ID, EventID: ev.ID, Now: writerNow,
		Deadline: time.Now().Add(time.Minute),
		Sign: func(seats []int32, _ []string) ([]string, error) {
			codes := make([]string, len(seats))
			for i, s := range seats {
				codes[i] = b.ID + "/" + strconv.Itoa(int(s))
			}
			return codes, nil
		}}
}

// oneWriter is a ConfirmWriter with one batch in flight at a time, so that
// a batch held back holds back the others.
func oneWriter(l *Ledger) *ConfirmWriter {
	w := NewConfirmWriter(l)
	w.maxInFlight = 1
	return w
}

// confirmBatched confirms first alone, held back, and cs behind it in one
// batch, and returns the outcomes of cs.
func confirmBatched(t *testing.T, w *ConfirmWriter, first Confirmation, cs []Confirmation) []error {
	t.Helper()
	gate := gateBatches(w)
	ctx := context.Background()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, w.Confirm(ctx, first)) })
	gate.WaitQueued(t, 0)
	for i, c := range cs {
		wg.Go(func() { errs[i] = w.Confirm(ctx, c) })
	}
	gate.WaitQueued(t, len(cs))
	gate.Open()
	wg.Wait()
	require.Equal(t, len(cs), gate.Sizes()[1], "the confirmations went in one batch")
	return errs
}

// state is a confirmation's hold and booking statuses and its valid
// tickets' seats.
func state(t *testing.T, l *Ledger, c Confirmation) string {
	t.Helper()
	ctx := context.Background()
	h, err := l.Hold(ctx, c.HoldID)
	require.NoError(t, err)
	b, err := l.Booking(ctx, c.BookingID)
	require.NoError(t, err)
	tickets, err := l.TicketsOf(ctx, c.BookingID)
	require.NoError(t, err)
	return fmt.Sprintf("%s/%s/%d", h.Status, b.Status, len(tickets))
}

// TestConfirmWriterItemsFailAlone: in one batch, the confirmations whose
// conditions fail (hold not pending, booking settled, unknown booking) are
// answered with that condition and change nothing, and the others are
// confirmed with their tickets.
func TestConfirmWriterItemsFailAlone(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	ev := confirmEvent(t, l, 20)
	w := oneWriter(l)

	good1, good2, expired, settled, unknown := payable(t, l, ev), payable(t, l, ev), payable(t, l, ev), payable(t, l, ev), payable(t, l, ev)
	_, err := l.pool.Exec(ctx, `UPDATE holds SET status = 'expired' WHERE id = $1`, expired.HoldID)
	require.NoError(t, err)
	_, ok, err := l.Bookings().Fail(ctx, settled.BookingID, "", "card_declined", nil, writerNow)
	require.NoError(t, err)
	require.True(t, ok)
	unknown.BookingID = uuid.NewString()

	errs := confirmBatched(t, w, payable(t, l, ev), []Confirmation{good1, expired, settled, unknown, good2})
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], ErrHoldNotActive)
	assert.ErrorIs(t, errs[2], ErrBookingSettled)
	assert.ErrorIs(t, errs[3], ErrNotFound)
	assert.NoError(t, errs[4])

	assert.Equal(t, "confirmed/confirmed/1", state(t, l, good1))
	assert.Equal(t, "confirmed/confirmed/1", state(t, l, good2))
	assert.Equal(t, "expired/payment_pending/0", state(t, l, expired))
	assert.Equal(t, "pending/failed/0", state(t, l, settled))
	b, err := l.Booking(ctx, good1.BookingID)
	require.NoError(t, err)
	assert.Equal(t, good1.PaymentID, b.PaymentID)
	assertSeatNumbers(t, l, ev, 3)
}

// TestConfirmWriterSeatsRunOut: a batch that needs more seat numbers than
// are left is written again one by one, so only the confirmations no
// number is left for fail, with nothing written of them.
func TestConfirmWriterSeatsRunOut(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ev := confirmEvent(t, l, 3)
	w := oneWriter(l)
	cs := []Confirmation{payable(t, l, ev), payable(t, l, ev), payable(t, l, ev)}
	errs := confirmBatched(t, w, payable(t, l, ev), cs)
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			assert.ErrorIs(t, err, ErrNoSeatLeft)
			assert.Equal(t, "pending/payment_pending/0", state(t, l, cs[i]))
			continue
		}
		assert.Equal(t, "confirmed/confirmed/1", state(t, l, cs[i]))
	}
	assert.Equal(t, 1, failed, "one confirmation has no seat number left")
	assertSeatNumbers(t, l, ev, 3)
}

// TestConfirmWriterSameBookingTwice: two confirmations of one booking
// queued together (a webhook and the payment reconciliation) confirm it
// once; the second finds its hold confirmed.
func TestConfirmWriterSameBookingTwice(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ev := confirmEvent(t, l, 10)
	w := oneWriter(l)
	c := payable(t, l, ev)
	gate := gateBatches(w)
	ctx := context.Background()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, w.Confirm(ctx, payable(t, l, ev))) })
	gate.WaitQueued(t, 0)
	for i := range errs {
		wg.Go(func() { errs[i] = w.Confirm(ctx, c) })
	}
	gate.WaitQueued(t, 2)
	gate.Open()
	wg.Wait()
	assert.Equal(t, []int{1, 1, 1}, gate.Sizes(), "the copies went in batches of their own")
	if errs[0] != nil {
		errs[0], errs[1] = errs[1], errs[0]
	}
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], ErrHoldNotActive)
	assert.Equal(t, "confirmed/confirmed/1", state(t, l, c))
	assertSeatNumbers(t, l, ev, 2)
}

// TestConfirmDeadlineByServerClock: a confirmation the server gets after
// its deadline writes nothing, and the others of its transaction commit.
func TestConfirmDeadlineByServerClock(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ev := confirmEvent(t, l, 10)
	late, onTime := payable(t, l, ev), payable(t, l, ev)
	late.Deadline = time.Now().Add(-time.Second)
	errs, err := l.confirmAll(context.Background(), []Confirmation{late, onTime})
	require.NoError(t, err)
	assert.ErrorIs(t, errs[0], ErrPastDeadline)
	assert.NoError(t, errs[1])
	assert.Equal(t, "pending/payment_pending/0", state(t, l, late))
	assert.Equal(t, "confirmed/confirmed/1", state(t, l, onTime))
}

// TestConfirmWriterConcurrent: many concurrent confirmations of one event
// through the writer get every seat number once.
func TestConfirmWriterConcurrent(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	const n = 300
	ev := confirmEvent(t, l, n)
	w := NewConfirmWriter(l)
	cs := make([]Confirmation, n)
	for i := range cs {
		cs[i] = payable(t, l, ev)
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { assert.NoError(t, w.Confirm(context.Background(), c)) })
	}
	wg.Wait()
	assertSeatNumbers(t, l, ev, n)
}

// assertSeatNumbers checks that the event's valid tickets are n, with
// distinct seats within the capacity.
func assertSeatNumbers(t *testing.T, l *Ledger, ev Event, n int64) {
	t.Helper()
	var tickets, distinct, lowest, highest int64
	require.NoError(t, l.pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT seat), coalesce(min(seat), 0),
		coalesce(max(seat), 0) FROM tickets WHERE event_id = $1 AND valid`, ev.ID).Scan(&tickets, &distinct, &lowest, &highest))
	assert.Equal(t, n, tickets)
	assert.Equal(t, n, distinct)
	assert.GreaterOrEqual(t, lowest, int64(1))
	assert.LessOrEqual(t, highest, ev.Capacity)
}

// TestConfirmWriterPoisonItemFailsAlone: an item whose tickets cannot be
// signed used to fail the whole batch it joined, and every batch after it
// that it joined again; its fault is its own.
func TestConfirmWriterPoisonItemFailsAlone(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ev := confirmEvent(t, l, 20)
	w := oneWriter(l)

	good1, poison, good2 := payable(t, l, ev), payable(t, l, ev), payable(t, l, ev)
	errSign := fmt.Errorf("signing key unavailable")
	poison.Sign = func([]int32, []string) ([]string, error) { return nil, errSign }

	errs := confirmBatched(t, w, payable(t, l, ev), []Confirmation{good1, poison, good2})
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], errSign)
	assert.NoError(t, errs[2])
	assert.Equal(t, "confirmed/confirmed/1", state(t, l, good1))
	assert.Equal(t, "pending/payment_pending/0", state(t, l, poison), "nothing of the poison item is written")
	assert.Equal(t, "confirmed/confirmed/1", state(t, l, good2))
}
