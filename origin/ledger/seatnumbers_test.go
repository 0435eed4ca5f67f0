package ledger

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

var errUndo = errors.New("undo")

// TestSeatNumbersUnderConcurrentConfirmations takes every seat number of
// events through concurrent transactions, as concurrent confirmations of
// one event do, some of which roll back: the numbers committed are unique,
// within the capacity, and all of 1..capacity (a rolled-back confirmation
// gives its numbers back), bookings of several seats included; then no
// number is left, and freed seats are handed out again.
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
					if undo {
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

			_, err = l.pool.Exec(ctx, sqlFreeSeats, ev.ID, []int32{2, int32(capacity)})
			require.NoError(t, err)
			require.ErrorIs(t, take(3, false), ErrNoSeatLeft, "two freed seats are not three")
			taken = nil
			require.NoError(t, take(2, false))
			assert.ElementsMatch(t, []int32{2, int32(capacity)}, taken)
		})
	}
}
