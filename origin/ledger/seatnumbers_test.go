package ledger

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

var errUndo = errors.New("undo")

// TestSeatNumbersUnderConcurrentConfirmations takes every seat number of
// events through concurrent transactions that issue tickets for them, as
// concurrent confirmations of one event do, some of which roll back: the
// numbers committed are unique, within the capacity, and all of
// 1..capacity (a rolled-back confirmation gives its numbers back), bookings
// of several seats included; then no number is left, every block is marked
// run out, and freed seats are handed out again.
func TestSeatNumbersUnderConcurrentConfirmations(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	for _, capacity := range []int64{5, 300, 1000} {
		t.Run("", func(t *testing.T) {
			ev, err := l.CreateEvent(ctx, Event{ID: testenv.EventID(), Name: "numbers", Capacity: capacity,
				Sellable: capacity, Price: 1, Currency: "inr", HoldTTLSeconds: 60, MaxPerUser: 4, CreatedAt: writerNow})
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(uint64(capacity), 7))
			var quantities []int64
			for left := capacity; left > 0; {
				q := min(left, 1+rng.Int64N(4))
				quantities = append(quantities, q)
				left -= q
			}
			// A booking's tickets are issued once: each take has its own
			// (one rolled back leaves its booking without tickets).
			carriers := make(chan string, len(quantities)+2)
			for range cap(carriers) {
				carriers <- carrierBooking(t, l, ev)
			}

			var mu sync.Mutex
			var taken []int32
			take := func(q int64, undo bool) error {
				return l.InTx(ctx, writerNow.AddDate(100, 0, 0), func(tx Tx) error {
					seats, err := tx.TakeSeats(ctx, ev.ID, q)
					if err != nil {
						return err
					}
					if int64(len(seats)) != q {
						return errors.New("wrong count of seat numbers")
					}
					codes := make([]string, len(seats))
					for i := range codes {
						codes[i] = uuid.NewString()
					}
					carrier := <-carriers
					if err := tx.IssueTickets(ctx, carrier, codes, seats, nil, writerNow); err != nil {
						return err
					}
					if undo {
						carriers <- carrier
						return errUndo
					}
					mu.Lock()
					taken = append(taken, seats...)
					mu.Unlock()
					return nil
				})
			}
			var wg sync.WaitGroup
			work := make(chan int)
			for range 50 {
				wg.Go(func() {
					for i := range work {
						q := quantities[i]
						if i%5 == 0 {
							assert.ErrorIs(t, take(q, true), errUndo)
						}
						assert.NoError(t, take(q, false))
					}
				})
			}
			for i := range quantities {
				work <- i
			}
			close(work)
			wg.Wait()

			want := make([]int32, capacity)
			for i := range want {
				want[i] = int32(i + 1)
			}
			slices.Sort(taken)
			require.Equal(t, want, taken, "every number of 1..capacity once")
			require.ErrorIs(t, take(1, false), ErrNoSeatLeft)
			var open int
			require.NoError(t, l.pool.QueryRow(ctx, `SELECT count(*) FROM seat_blocks WHERE event_id = $1 AND next < stop`, ev.ID).Scan(&open))
			assert.Zero(t, open, "blocks not marked run out")

			_, err = l.pool.Exec(ctx, `UPDATE bookings SET tickets_valid = false WHERE event_id = $1 AND ticket_seats && $2`, ev.ID, []int32{2, int32(capacity)})
			require.NoError(t, err)
			_, err = l.pool.Exec(ctx, sqlFreeSeats, ev.ID, []int32{2, int32(capacity)})
			require.NoError(t, err)
			require.ErrorIs(t, take(3, false), ErrNoSeatLeft, "two freed seats are not three")
			taken = nil
			require.NoError(t, take(2, false))
			assert.ElementsMatch(t, []int32{2, int32(capacity)}, taken)
		})
	}
}

// carrierBooking is a booking for the event's tickets in tests of the
// numbering alone.
func carrierBooking(t *testing.T, l *Ledger, ev Event) string {
	t.Helper()
	return payable(t, l, ev).BookingID
}

// TestSeatNumbersLeaveTheBlocksRowsAlone: a confirmation locks the block it
// takes from but does not rewrite it (the numbers handed out are read from
// the tickets), until the block runs out; the next one goes on from the
// tickets, voided ones included.
func TestSeatNumbersLeaveTheBlocksRowsAlone(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	ev, err := l.CreateEvent(ctx, Event{ID: testenv.EventID(), Name: "rows", Capacity: 8,
		Sellable: 8, Price: 1, Currency: "inr", HoldTTLSeconds: 60, MaxPerUser: 4, CreatedAt: writerNow})
	require.NoError(t, err)
	blocks := func() (next, stop int32) {
		t.Helper()
		require.NoError(t, l.pool.QueryRow(ctx, `SELECT next, stop FROM seat_blocks WHERE event_id = $1`, ev.ID).Scan(&next, &stop))
		return
	}
	take := func(q int64) []int32 {
		t.Helper()
		var seats []int32
		require.NoError(t, l.InTx(ctx, writerNow.AddDate(100, 0, 0), func(tx Tx) error {
			var err error
			if seats, err = tx.TakeSeats(ctx, ev.ID, q); err != nil {
				return err
			}
			codes := make([]string, len(seats))
			for i := range codes {
				codes[i] = uuid.NewString()
			}
			return tx.IssueTickets(ctx, carrierBooking(t, l, ev), codes, seats, nil, writerNow)
		}))
		return seats
	}
	assert.Equal(t, []int32{1, 2, 3}, take(3))
	next, stop := blocks()
	assert.Equal(t, []int32{1, 9}, []int32{next, stop}, "one block of 8, its row as the event made it")
	_, err = l.pool.Exec(ctx, `UPDATE bookings SET tickets_valid = false WHERE event_id = $1 AND ticket_seats && '{3}'`, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, []int32{4, 5, 6, 7}, take(4), "a voided ticket's number is not the block's to hand out")
	next, _ = blocks()
	assert.EqualValues(t, 1, next)
	assert.Equal(t, []int32{8}, take(1))
	next, stop = blocks()
	assert.Equal(t, stop, next, "the block ran out: marked")
}

// TestSeatNumbersFromFreeBlocksFirst: a take larger than any free block
// has left takes across the free blocks, one after another, and does not
// wait for a block another confirmation holds (the take runs under a lock
// timeout: a wait would fail it).
func TestSeatNumbersFromFreeBlocksFirst(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	ev := confirmEvent(t, l, 24)
	holding, release := make(chan []int32), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.InTx(ctx, time.Time{}, func(tx Tx) error {
			seats, err := tx.TakeSeats(ctx, ev.ID, 2)
			if err != nil {
				close(holding)
				return err
			}
			holding <- seats
			<-release
			return errUndo
		})
	}()
	held, ok := <-holding
	if !ok {
		t.Fatalf("the first take failed: %v", <-done)
	}

	var seats []int32
	err := l.InTx(ctx, time.Time{}, func(tx Tx) error {
		if _, err := tx.tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
			return err
		}
		var err error
		seats, err = tx.TakeSeats(ctx, ev.ID, 12)
		return err
	})
	close(release)
	require.NoError(t, err)
	assert.ErrorIs(t, <-done, errUndo)
	require.Len(t, seats, 12)
	heldBlock := (held[0] - 1) / 8
	for _, s := range seats {
		assert.NotEqual(t, heldBlock, (s-1)/8, "seat %d is of the block the other take holds", s)
	}
}
