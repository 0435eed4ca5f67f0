package origin_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/payment"
)

// A rebuild that runs between the Redis step and the ledger step of a
// hold's extension or confirmation must not load the hold as it was before
// the change: Redis would give its seats away at the old expiry while the
// ledger keeps them.
func TestHoldChangesRacingARebuild(t *testing.T) {
	for _, change := range []string{"confirm", "extend"} {
		for _, by := range []string{"this node", "another node"} {
			t.Run(change+", rebuilt by "+by, func(t *testing.T) {
				h := newPayHarness(t, payOptions{config: func(c *origin.Config) { c.HoldWriteTimeout = time.Second }})
				ev := h.createEvent(map[string]any{"capacity": 5, "hold_ttl_seconds": 60})
				ctx := context.Background()
				rebuilder := h.srv
				if by == "another node" {
					rebuilder = h.newServer(h.clock, func(c *origin.Config) {
						c.HoldWriteTimeout = time.Second
						c.RebuildSettle = 0 // its default: the write timeout of the other nodes
					})
				}

				// raceRebuild has the next change to the hold run a rebuild
				// between its two steps and wait until the rebuild is over
				// or (on this node) waits for the change.
				var once sync.Once
				rebuilt := make(chan error, 1)
				raceRebuild := func() {
					h.srv.AfterRedisStep(func() {
						once.Do(func() {
							go func() {
								_, err := rebuilder.Rebuild(ctx, ev.ID)
								rebuilt <- err
							}()
							for {
								if len(rebuilt) > 0 {
									return
								}
								frozen, err := h.srv.Inventory().Frozen(ctx, ev.ID)
								if assert.NoError(t, err) && frozen && by == "this node" && h.srv.InFlight(ev.ID) > 0 {
									return
								}
								time.Sleep(time.Millisecond)
							}
						})
					})
				}

				hold := h.holdOne(ev.ID, "ann", 1)
				switch change {
				case "confirm":
					b := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodSilent)
					h.clock.Advance(30 * time.Second)
					raceRebuild()
					if err := h.fp.Redeliver(ctx, b.PaymentID); err != nil {
						t.Logf("first delivery refused (the webhook is redelivered): %v", err)
					}
					require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
					require.Equal(t, "confirmed", h.booking(ev.ID, "ann", b.BookingID).Status)
				case "extend":
					// Booked half way through the hold: extended by 30 s.
					h.clock.Advance(30 * time.Second)
					raceRebuild()
					res := h.book(ev.ID, "ann", hold.HoldID, payment.MethodSilent, "b")
					if res.status == http.StatusServiceUnavailable {
						t.Logf("first booking attempt refused (the buyer retries): %s", res.body)
						res = h.book(ev.ID, "ann", hold.HoldID, payment.MethodSilent, "b")
					}
					require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
				}
				require.NoError(t, <-rebuilt)

				// Past the hold's first expiry: still the buyer's.
				h.clock.Advance(40 * time.Second)
				inv := h.requireSeatsOnce(ev.ID)
				assert.Equal(t, int64(1), inv.ActiveHolds, "%+v", inv)
				assert.Equal(t, int64(4), inv.Remaining, "%+v", inv)
			})
		}
	}
}
