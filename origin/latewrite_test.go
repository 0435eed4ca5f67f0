package origin_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/waitroom"
)

// A hold's INSERT held up in the network reaches PostgreSQL after the
// origin gave up on it, and after Redis was rebuilt from the ledger: it
// must not be committed then, or the ledger ends with more live seats than
// the sellable pool.
func TestLateHoldWriteAfterRebuild(t *testing.T) {
	for _, by := range []string{"this node", "another node"} {
		t.Run("rebuilt by "+by, func(t *testing.T) {
			redisServer := testenv.StartRedis(t)
			direct := testenv.Postgres(t)
			dbURL, proxy := testenv.Proxied(t, direct)
			h := newPayHarness(t, payOptions{redisURL: redisServer.URL(), dbURL: dbURL, config: func(c *origin.Config) {
				c.HoldWriteTimeout = time.Second
			}})
			// 10 seats: 8 sellable, 2 in the overflow reserve.
			ev := h.createEvent(map[string]any{"capacity": 10, "overflow_pct": 20})
			require.Equal(t, int64(8), ev.Sellable)
			h.holdAll(ev.ID, 3, "before")

			rebuilder := h.srv
			if by == "another node" {
				// Its ledger does not go through the stalled path.
				lg, err := ledger.Open(context.Background(), direct, ledger.Options{})
				require.NoError(t, err)
				t.Cleanup(lg.Close)
				rebuilder, err = origin.New(origin.Config{Keys: h.keys, Clock: h.clock.Now, HoldWriteTimeout: time.Second,
					ClockSkewMargin: 10 * time.Millisecond, Logger: testLogger(t)}, lg, h.rdb)
				require.NoError(t, err)
				require.NoError(t, rebuilder.Start(t.Context()))
			}

			// The path to PostgreSQL stalls: the hold's row is sent and
			// held; the origin gives up on it.
			proxy.Stall()
			res := h.hold(ev.ID, "late", 2, "k")
			require.Equal(t, http.StatusServiceUnavailable, res.status, "%s", res.body)

			// Redis restarts empty and is rebuilt from the ledger while the
			// row is still on its way.
			require.NoError(t, h.rdb.FlushAll(context.Background()).Err())
			_, err := rebuilder.Rebuild(context.Background(), ev.ID)
			require.NoError(t, err)
			h.admit(ev.ID, 1_000_000)

			// The row reaches PostgreSQL now.
			proxy.Unstall()
			h.srv.WaitUncertainFinal()
			_, err = h.srv.ResolveUncertain(context.Background())
			require.NoError(t, err)

			inv := h.requireSeatsOnce(ev.ID)
			require.Equal(t, int64(3), inv.ActiveHolds, "the late row was not committed: %+v", inv)

			// The rest of the sale: every seat Redis still sells is a seat
			// of the ledger, and every payment ends with a ticket or its
			// money back.
			for i := range 8 {
				res := h.hold(ev.ID, fmt.Sprintf("after-%d", i), 1, "k")
				require.Contains(t, []int{http.StatusCreated, http.StatusConflict}, res.status, "%s", res.body)
			}
			inv = h.requireSeatsOnce(ev.ID)
			require.LessOrEqual(t, inv.ActiveHolds, inv.Sellable, "live seats within the sellable pool: %+v", inv)
			h.payEveryLiveHold(ev.ID)
			inv = h.requireSeatsOnce(ev.ID)
			assert.Equal(t, inv.Sellable, inv.Confirmed)
		})
	}
}

// payEveryLiveHold books every live hold of the event and delivers each
// payment's success, then checks that no booking is left waiting with the
// money taken.
func (h *payHarness) payEveryLiveHold(event int64) {
	h.t.Helper()
	rows, err := h.ledger.Pool().Query(context.Background(),
		`SELECT id::text, user_id FROM holds WHERE event_id = $1 AND status = 'pending'`, event)
	require.NoError(h.t, err)
	type live struct{ hold, user string }
	var holds []live
	for rows.Next() {
		var l live
		require.NoError(h.t, rows.Scan(&l.hold, &l.user))
		holds = append(holds, l)
	}
	require.NoError(h.t, rows.Err())
	for _, l := range holds {
		b := h.mustBook(event, l.user, l.hold, payment.MethodSilent)
		assert.NoError(h.t, h.fp.Redeliver(context.Background(), b.PaymentID), "the success webhook is taken")
		got := h.booking(event, l.user, b.BookingID)
		switch got.Status {
		case "confirmed":
		case "refunded":
			assert.Equal(h.t, "succeeded", got.RefundStatus, "%+v", got)
		default:
			assert.Failf(h.t, "a payment without an outcome", "%+v", got)
		}
	}
}

// A hold script that ran in Redis but whose reply was lost takes seats no
// request will give back: they are returned once no run of it can take
// seats any more, like those of an uncertain write.
func TestHoldScriptReplyLost(t *testing.T) {
	redisServer := testenv.StartRedis(t)
	proxy := testenv.NewProxy(t, redisServer.Addr())
	// Short timeouts, and no retry: the reply is lost, not recovered by a
	// second run that finds the first one's claim.
	h := newHarness(t, harnessOptions{
		redisURL: "redis://" + proxy.Addr() + "/0?read_timeout=300ms&write_timeout=300ms&max_retries=-1",
		config:   func(c *origin.Config) { c.HoldWriteTimeout = time.Second },
	})
	ev := h.createEvent(map[string]any{"capacity": 5})
	h.holdAll(ev.ID, 2, "before")

	proxy.StallReplies()
	res := h.hold(ev.ID, "lost", 2, "k")
	require.Equal(t, http.StatusServiceUnavailable, res.status, "%s", res.body)
	proxy.Unstall()
	n, _, err := h.srv.Inventory().Remaining(context.Background(), ev.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the script ran: its seats are taken")

	h.srv.WaitUncertainFinal()
	settled, err := h.srv.ResolveUncertain(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, settled)
	inv := h.requireInvariant(ev.ID, 2)
	assert.Equal(t, int64(3), inv.Remaining, "the lost hold's seats are back")
	// (Its key stays claimed until the claim is taken over: it names a hold
	// without a row.)
	res = h.hold(ev.ID, "lost", 2, "k2")
	assert.Equal(t, http.StatusCreated, res.status, "the buyer can hold again: %s", res.body)
}

// A buyer's release whose COMMIT went out and whose answer never came may
// have ended the hold in the ledger, where no pass looks for it again: its
// seats go back in Redis once the release is final and the ledger has it
// released, and not before. Its answer lost, or the COMMIT itself held up
// in the network past the release's deadline and delivered later.
func TestReleaseCommitAnswerLost(t *testing.T) {
	for _, heldUp := range []bool{false, true} {
		t.Run(map[bool]string{false: "answer lost", true: "commit held up"}[heldUp], func(t *testing.T) {
			dbURL, proxy := testenv.Proxied(t, testenv.Postgres(t))
			h := newHarness(t, harnessOptions{dbURL: dbURL, config: func(c *origin.Config) { c.HoldWriteTimeout = time.Second }})
			ev := h.createEvent(map[string]any{"capacity": 5})
			h.holdAll(ev.ID, 1, "other")
			res := h.hold(ev.ID, "ann", 2, "k")
			require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
			var ann holdJSON
			res.json(t, &ann)
			remaining := func() int64 {
				n, _, err := h.srv.Inventory().Remaining(context.Background(), ev.ID)
				require.NoError(t, err)
				return n
			}

			var released atomic.Bool
			proxy.OnSend(func(b []byte) {
				if bytes.Contains(b, []byte("status = 'released'")) {
					released.Store(true)
				}
				if released.Load() && bytes.Contains(b, []byte("commit")) {
					proxy.OnSend(nil)
					if heldUp {
						proxy.Stall()
					} else {
						proxy.StallReplies()
					}
				}
			})
			del := h.do(http.MethodDelete, "/v1/holds/"+ann.HoldID, nil, map[string]string{waitroom.TokenHeader: h.token("ann", ev.ID, 1)})
			require.Equal(t, http.StatusServiceUnavailable, del.status, "%s", del.body)
			h.srv.WaitUncertainFinal()
			if heldUp {
				// Past the deadline, the transaction is still open: the
				// resolver waits for it rather than take the hold for
				// pending.
				settled, err := h.srv.ResolveUncertain(context.Background())
				require.NoError(t, err)
				assert.Zero(t, settled)
				assert.Equal(t, int64(2), remaining(), "the seats stay taken while the release may still commit")
			}
			proxy.Unstall()

			got, err := h.ledger.Hold(context.Background(), ann.HoldID)
			require.NoError(t, err)
			require.Equal(t, ledger.StatusReleased, got.Status, "the COMMIT was applied")
			if !heldUp {
				assert.Equal(t, int64(2), remaining(), "the seats stay taken until the resolver's pass")
			}
			settled, err := h.srv.ResolveUncertain(context.Background())
			require.NoError(t, err)
			assert.Equal(t, 1, settled)
			inv := h.requireInvariant(ev.ID, 1)
			assert.Equal(t, int64(4), inv.Remaining, "the released seats are back")
		})
	}
}

// A payment that no seat number is left for (more holds were live than the
// event has seats: the invariant was broken) is refunded, not answered 503
// until the provider gives up with the money taken. Both ways a payment
// gets its seats: its own hold, and the overflow reserve for a late one.
func TestPaymentWithoutASeatIsRefunded(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	// 4 seats: 3 sellable, 1 in the overflow reserve.
	ev := h.createEvent(map[string]any{"capacity": 4, "overflow_pct": 25, "hold_ttl_seconds": 60})
	require.Equal(t, int64(3), ev.Sellable)
	ctx := context.Background()
	remaining := inventory.KeysFor(ev.ID).Remaining

	// eve books, then her hold lapses and her seat is sold again: her
	// payment will come late.
	eve := h.mustBook(ev.ID, "eve", h.holdOne(ev.ID, "eve", 1).HoldID, payment.MethodSilent)
	h.clock.Advance(30 * time.Second)
	var paid []bookingJSON
	for _, user := range []string{"ann", "bob"} {
		paid = append(paid, h.mustBook(ev.ID, user, h.holdOne(ev.ID, user, 1).HoldID, payment.MethodSilent))
	}
	h.expireHold(ev.ID, "eve", eve.HoldID)
	paid = append(paid, h.mustBook(ev.ID, "cat", h.holdOne(ev.ID, "cat", 1).HoldID, payment.MethodSilent))
	// Redis sells a seat more than there are; all four pay and take every
	// seat number, the reserve's too.
	require.NoError(t, h.rdb.IncrBy(ctx, remaining, 1).Err())
	paid = append(paid, h.mustBook(ev.ID, "dan", h.holdOne(ev.ID, "dan", 1).HoldID, payment.MethodSilent))
	for _, b := range paid {
		require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
		require.Equal(t, "confirmed", h.booking(ev.ID, b.UserID, b.BookingID).Status)
	}

	// eve's late payment: the reserve has a seat, but no seat number is left.
	require.NoError(t, h.fp.Redeliver(ctx, eve.PaymentID), "the webhook is taken, not refused")
	// fay's payment for her own hold, another seat Redis sold too many.
	require.NoError(t, h.rdb.IncrBy(ctx, remaining, 1).Err())
	fayHold := h.holdOne(ev.ID, "fay", 1)
	fay := h.mustBook(ev.ID, "fay", fayHold.HoldID, payment.MethodSilent)
	require.NoError(t, h.fp.Redeliver(ctx, fay.PaymentID), "the webhook is taken, not refused")

	for _, b := range []bookingJSON{eve, fay} {
		got := h.booking(ev.ID, b.UserID, b.BookingID)
		assert.Equal(t, "refunded", got.Status, "%+v", got)
		assert.Equal(t, booking.ReasonNoSeatLeft, got.StatusReason)
		assert.Equal(t, "succeeded", got.RefundStatus)
		assert.Empty(t, got.Tickets)
		pays := h.fp.PaymentsForBooking(b.BookingID)
		require.Len(t, pays, 1)
		assert.Equal(t, pays[0].Amount, pays[0].AmountRefunded, "no money without a ticket")
	}
	assert.Equal(t, int64(2), h.fp.Refunds())
	var hj holdJSON
	h.do(http.MethodGet, "/v1/holds/"+fayHold.HoldID, nil, h.auth("fay", ev.ID)).json(t, &hj)
	assert.Equal(t, "released", hj.Status, "the refunded hold takes no seat in the ledger")
	inv := h.invariant(ev.ID)
	assert.Equal(t, int64(4), inv.Tickets)
	assert.Zero(t, inv.OverflowUsed, "the reserve's seat was given back")
	assert.Zero(t, h.count(`SELECT count(*) FROM (SELECT seat FROM tickets WHERE event_id = $1 AND valid
		GROUP BY seat HAVING count(*) > 1) x`, ev.ID), "no seat twice")
}
