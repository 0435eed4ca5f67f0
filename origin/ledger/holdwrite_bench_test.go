package ledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/internal/testenv"
)

// BenchmarkInsertHolds writes batches of hold rows, as the HoldWriter
// does, and single rows, as a hold written alone: the cost of the hold
// path's ledger step (with the buyers' locks taken in the same round trip).
func BenchmarkInsertHolds(b *testing.B) {
	ctx := context.Background()
	l, err := Open(ctx, testenv.Postgres(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	ev, err := l.CreateEvent(ctx, Event{ID: testenv.EventID(), Name: "bench", Capacity: 1_000_000, Sellable: 1_000_000,
		Price: 100, Currency: "inr", HoldTTLSeconds: 600, MaxPerUser: 4, CreatedAt: writerNow})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			for b.Loop() {
				hs := make([]Hold, n)
				for i := range hs {
					hs[i] = pendingRow(ev.ID, "u-"+uuid.NewString(), uuid.NewString())
				}
				if n == 1 {
					if _, err := l.InsertHold(ctx, hs[0], writerNow); err != nil {
						b.Fatal(err)
					}
					continue
				}
				if _, _, err := l.InsertHolds(ctx, hs, make([]*time.Time, n)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
