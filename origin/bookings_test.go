package origin_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/makiuchi-d/gozxing"
	zxqr "github.com/makiuchi-d/gozxing/qrcode"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/origin/ticketcode"
	"github.com/waitroom/waitroom/waitroom"
)

func TestPurchaseWithTickets(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10})
	hold := h.holdOne(ev.ID, "ann", 2)

	b := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodVisa)
	assert.Equal(t, "payment_pending", b.Status)
	assert.Equal(t, hold.HoldID, b.HoldID)
	assert.Equal(t, int64(180000), b.Amount)
	assert.Equal(t, "inr", b.Currency)
	assert.NotEmpty(t, b.PaymentID)
	assert.NotNil(t, b.Tickets)
	assert.Empty(t, b.Tickets)

	got := h.settled(ev.ID, "ann", b.BookingID)
	require.Equal(t, "confirmed", got.Status, "%+v", got)
	require.Len(t, got.Tickets, 2)
	assert.NotEqual(t, got.Tickets[0].Seat, got.Tickets[1].Seat)
	verifier, otherKey := ticketVerifier(t, ticketKey), ticketVerifier(t, []byte(strings.Repeat("k", 32)))
	for _, tk := range got.Tickets {
		claims, err := verifier.Verify(tk.Code, h.clock.Now())
		require.NoError(t, err, "a ticket verifies offline with the public key")
		assert.Equal(t, ticketcode.Claims{BookingID: b.BookingID, EventID: ev.ID, Seat: strconv.FormatInt(tk.Seat, 10)}, claims)
		assert.Equal(t, ev.ID, tk.EventID)
		_, err = otherKey.Verify(tk.Code, h.clock.Now())
		assert.ErrorIs(t, err, ticketcode.ErrInvalid, "not with another key")
	}

	res := h.do(http.MethodGet, "/v1/tickets/"+got.Tickets[0].Code+".png", nil, nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	assert.Equal(t, "image/png", res.header.Get("Content-Type"))
	img, err := png.Decode(bytes.NewReader(res.body))
	require.NoError(t, err, "the QR code is a PNG image")
	assert.Equal(t, image.Rect(0, 0, 384, 384), img.Bounds())
	bmp, err := gozxing.NewBinaryBitmapFromImage(img)
	require.NoError(t, err)
	// Read as the pure symbol it is (see origin/qrpng's test).
	read, err := zxqr.NewQRCodeReader().Decode(bmp, map[gozxing.DecodeHintType]any{gozxing.DecodeHintType_PURE_BARCODE: true})
	require.NoError(t, err, "a QR reader reads the code from the image")
	assert.Equal(t, got.Tickets[0].Code, read.GetText())
	for _, path := range []string{
		"/v1/tickets/" + got.Tickets[0].Code, // not .png
		"/v1/tickets/" + tamper(got.Tickets[0].Code) + ".png",
		"/v1/tickets/not-a-ticket.png",
	} {
		assert.Equal(t, http.StatusNotFound, h.do(http.MethodGet, path, nil, nil).status, path)
	}

	var hj holdJSON
	h.do(http.MethodGet, "/v1/holds/"+hold.HoldID, nil, h.auth("ann", ev.ID)).json(t, &hj)
	assert.Equal(t, "confirmed", hj.Status)
	inv := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(2), inv.Confirmed)
	assert.Equal(t, int64(8), inv.Remaining)
	assert.Equal(t, int64(1), h.fp.Charges())

	other := h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, h.auth("bob", ev.ID))
	assert.Equal(t, http.StatusNotFound, other.status, "another user's booking")
	elsewhere := h.createEvent(map[string]any{"capacity": 2, "price": 100})
	assert.Equal(t, http.StatusNotFound, h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, h.auth("bob", elsewhere.ID)).status,
		"another user's booking, with his token of another event")
	assert.Equal(t, http.StatusUnauthorized, h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, nil).status)
	assert.Equal(t, http.StatusNotFound, h.do(http.MethodGet, "/v1/bookings/"+uuid.NewString(), nil, h.auth("ann", ev.ID)).status)
}

// tamper changes one character in the middle of a code.
func tamper(code string) string {
	b := []byte(code)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func TestSuccessWebhookDeliveredFiveTimes(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10})
	hold := h.holdOne(ev.ID, "ann", 2)
	b := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodSilent)
	require.NotEmpty(t, b.PaymentID)
	declined := h.mustBook(ev.ID, "bob", h.holdOne(ev.ID, "bob", 1).HoldID, payment.MethodDeclined)
	require.Equal(t, "failed", declined.Status)
	ctx := context.Background()
	require.NoError(t, h.fp.WaitIdle(ctx))

	// Five copies of the success, concurrently, mixed with other events:
	// the declined payment's event again, an unknown type, a payment no
	// booking knows.
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { assert.NoError(t, h.fp.Redeliver(ctx, b.PaymentID)) })
	}
	wg.Go(func() { assert.NoError(t, h.fp.Redeliver(ctx, declined.PaymentID)) })
	wg.Go(func() {
		res := h.webhook([]byte(`{"id":"evt_other","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`))
		assert.Equal(t, http.StatusOK, res.status, "%s", res.body)
	})
	wg.Go(func() {
		res := h.webhook(intentEvent("evt_stranger", "payment_intent.succeeded", "pi_nobody", uuid.NewString(), 100))
		assert.Equal(t, http.StatusOK, res.status, "%s", res.body)
	})
	wg.Wait()

	got := h.booking(ev.ID, "ann", b.BookingID)
	require.Equal(t, "confirmed", got.Status)
	assert.Len(t, got.Tickets, 2, "one set of tickets")
	assert.Equal(t, 2, h.count(`SELECT count(*) FROM tickets WHERE booking_id = $1`, b.BookingID))
	assert.Equal(t, int64(1), h.fp.Charges(), "one charge")
	assert.Equal(t, 1, h.count(recordedEvents+` WHERE payment_id = $1`, b.PaymentID), "the event recorded once")
	assert.Equal(t, "failed", h.booking(ev.ID, "bob", declined.BookingID).Status)
	inv := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(2), inv.Confirmed)
	assert.Equal(t, int64(10-2-1), inv.Remaining, "seats taken once (bob's hold is still his)")

	// Later copies answer 200 and change nothing.
	require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
	assert.Equal(t, got, h.booking(ev.ID, "ann", b.BookingID))
	assert.Equal(t, inv, h.requireSeatsOnce(ev.ID))
}

func TestWebhookBeforeThePaymentIDIsKnown(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5})
	hold := h.holdOne(ev.ID, "ann", 1)
	// The create call's answer is lost (the payment was made): the booking
	// does not know its payment id yet when the provider's event comes.
	require.NoError(t, h.fp.SetFaults(0, 1))
	b := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodSilent)
	require.NoError(t, h.fp.SetFaults(0, 0))
	assert.Equal(t, "payment_pending", b.Status)
	assert.Empty(t, b.PaymentID)
	pays := h.fp.PaymentsForBooking(b.BookingID)
	require.Len(t, pays, 1)

	// Another payment whose metadata names the booking is not its payment:
	// it settles nothing.
	foreign := h.fp.ForeignPayment(b.BookingID, b.Amount, "inr")
	res := h.webhook(intentEvent("evt_foreign", "payment_intent.succeeded", foreign.ID, b.BookingID, b.Amount))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	got := h.booking(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "payment_pending", got.Status, "a payment the booking did not make confirms nothing")
	assert.Empty(t, got.PaymentID)

	res = h.webhook(intentEvent("evt_early", "payment_intent.succeeded", pays[0].ID, b.BookingID, b.Amount))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	got = h.booking(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "confirmed", got.Status, "matched by metadata.booking_id, and the provider's word that it is its payment")
	assert.Equal(t, pays[0].ID, got.PaymentID)
	assert.Len(t, got.Tickets, 1)
	h.requireSeatsOnce(ev.ID)
}

// expireHold moves the clock to 2 s after the hold's (extended) expiry.
func (h *payHarness) expireHold(event int64, user, holdID string) {
	h.t.Helper()
	var hj holdJSON
	h.do(http.MethodGet, "/v1/holds/"+holdID, nil, h.auth(user, event)).json(h.t, &hj)
	exp, err := time.Parse(time.RFC3339, hj.ExpiresAt)
	require.NoError(h.t, err)
	h.clock.Advance(exp.Sub(h.clock.Now()) + 2*time.Second)
}

func TestLatePaymentOverflowThenRefund(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	// 2 seats: 1 sellable, 1 in the overflow reserve.
	ev := h.createEvent(map[string]any{"capacity": 2, "overflow_pct": 50, "hold_ttl_seconds": 60})
	require.Equal(t, int64(1), ev.Sellable)
	ctx := context.Background()

	// ann pays; the success lands 2 s after her hold expired, when bob has
	// taken the seat.
	ann := h.holdOne(ev.ID, "ann", 1)
	ab := h.mustBook(ev.ID, "ann", ann.HoldID, payment.MethodSilent)
	h.expireHold(ev.ID, "ann", ann.HoldID)
	bob := h.holdOne(ev.ID, "bob", 1)
	require.NoError(t, h.fp.Redeliver(ctx, ab.PaymentID))

	got := h.booking(ev.ID, "ann", ab.BookingID)
	require.Equal(t, "confirmed", got.Status, "%+v", got)
	assert.True(t, got.Overflow)
	assert.Equal(t, booking.ReasonLateOverflow, got.StatusReason)
	require.Len(t, got.Tickets, 1)
	inv := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(1), inv.OverflowUsed)
	assert.Equal(t, int64(1), inv.ActiveHolds, "bob's hold")
	assert.Equal(t, int64(1), inv.Confirmed)
	assert.Zero(t, inv.Remaining)
	var annHold holdJSON
	h.do(http.MethodGet, "/v1/holds/"+ann.HoldID, nil, h.auth("ann", ev.ID)).json(t, &annHold)
	assert.Equal(t, "expired", annHold.Status, "the hold itself expired; the reserve took the sale")

	// bob pays late too, with the reserve used up: refunded.
	bb := h.mustBook(ev.ID, "bob", bob.HoldID, payment.MethodSilent)
	h.expireHold(ev.ID, "bob", bob.HoldID)
	h.holdOne(ev.ID, "cat", 1)
	require.NoError(t, h.fp.Redeliver(ctx, bb.PaymentID))
	refunded := h.booking(ev.ID, "bob", bb.BookingID)
	assert.Equal(t, "refunded", refunded.Status, "%+v", refunded)
	assert.Equal(t, booking.ReasonLateSoldOut, refunded.StatusReason)
	assert.Equal(t, "succeeded", refunded.RefundStatus)
	assert.Empty(t, refunded.Tickets, "no ticket without a seat")
	assert.Equal(t, int64(1), h.fp.Refunds())
	pays := h.fp.PaymentsForBooking(bb.BookingID)
	require.Len(t, pays, 1)
	assert.Equal(t, pays[0].Amount, pays[0].AmountRefunded, "no money without a ticket")
	inv = h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(1), inv.OverflowUsed)
	assert.Equal(t, int64(1), inv.Confirmed)
	assert.Equal(t, int64(1), inv.ActiveHolds, "cat's hold")

	// Redelivered: nothing moves again.
	require.NoError(t, h.fp.Redeliver(ctx, bb.PaymentID))
	require.NoError(t, h.fp.Redeliver(ctx, ab.PaymentID))
	assert.Equal(t, int64(1), h.fp.Refunds())
	_, err := h.srv.ReapOnce(ctx)
	require.NoError(t, err)
	h.requireSeatsOnce(ev.ID)

	// ann cancels: the seat goes back to the reserve, not to the pool.
	res := h.do(http.MethodPost, "/v1/bookings/"+ab.BookingID+"/cancellation", nil, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	inv = h.requireSeatsOnce(ev.ID)
	assert.Zero(t, inv.OverflowUsed)
	assert.Zero(t, inv.Confirmed)
	assert.Zero(t, inv.Remaining, "cat still holds the one sellable seat")
}

func TestReaperRacingWebhooks(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 40, "overflow_pct": 25, "hold_ttl_seconds": 60})
	const n = 30
	bookings := make([]bookingJSON, n)
	for i := range n {
		user := fmt.Sprintf("racer-%d", i)
		bookings[i] = h.mustBook(ev.ID, user, h.holdOne(ev.ID, user, 1).HoldID, payment.MethodSilent)
	}
	ctx := context.Background()
	// The webhooks land at the very last instant of the holds; the reaper,
	// on a node whose clock is a second ahead, sees them all expired.
	h.clock.Advance(60 * time.Second)
	ahead := newClock()
	ahead.t = h.clock.Now().Add(time.Second)
	reaper := h.newServer(ahead, func(c *origin.Config) { c.Reaper.Batch = 3 })

	var wg sync.WaitGroup
	for _, b := range bookings {
		wg.Go(func() { assert.NoError(t, h.fp.Redeliver(ctx, b.PaymentID)) })
	}
	wg.Go(func() {
		for range 4 {
			_, err := reaper.ReapOnce(ctx)
			assert.NoError(t, err)
		}
	})
	wg.Wait()

	won, late, refunded := 0, 0, 0
	for i, b := range bookings {
		got := h.booking(ev.ID, fmt.Sprintf("racer-%d", i), b.BookingID)
		row, err := h.ledger.Hold(ctx, got.HoldID)
		require.NoError(t, err)
		switch {
		case row.Status == ledger.StatusConfirmed:
			won++
			assert.Equal(t, "confirmed", got.Status)
			assert.False(t, got.Overflow)
		case got.Status == "confirmed":
			late++
			assert.Equal(t, ledger.StatusExpired, row.Status)
			assert.True(t, got.Overflow)
		default:
			refunded++
			assert.Equal(t, "refunded", got.Status, "%+v", got)
			assert.Equal(t, ledger.StatusExpired, row.Status)
		}
	}
	t.Logf("webhook first: %d, reaper first: %d absorbed, %d refunded", won, late, refunded)
	assert.Equal(t, n, won+late+refunded)
	assert.LessOrEqual(t, late, 10, "never more than the reserve")

	// A day later the reaper still leaves the confirmed holds alone.
	ahead.Advance(24 * time.Hour)
	h.clock.Advance(24 * time.Hour)
	_, err := reaper.ReapOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, won, h.count(`SELECT count(*) FROM holds WHERE event_id = $1 AND status IN ('pending', 'confirmed')`, ev.ID))
	inv := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(won+late), inv.Confirmed)
	assert.Equal(t, int64(late), inv.OverflowUsed)
	assert.Equal(t, ev.Sellable-int64(won), inv.Remaining)
}

func TestConcurrentConfirmationsOfOneHold(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 50})
	ids := h.holdAll(ev.ID, 20, "dup")
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, id := range ids {
		for range 4 {
			wg.Go(func() {
				hold, err := h.srv.ConfirmHold(ctx, id, nil)
				assert.NoError(t, err, "a duplicate confirmation is not a lost hold")
				assert.Equal(t, ledger.StatusConfirmed, hold.Status)
			})
		}
	}
	wg.Wait()
	inv := h.requireInvariant(ev.ID, 20)
	assert.Equal(t, int64(30), inv.Remaining, "no confirmed seat was released")
}

func TestDoubleClickOnPay(t *testing.T) {
	// A Redis of its own: the test empties it, which the tests of other
	// packages sharing a server must never see.
	h := newPayHarness(t, payOptions{redisURL: testenv.StartRedis(t).URL()})
	ev := h.createEvent(map[string]any{"capacity": 5})
	hold := h.holdOne(ev.ID, "ann", 1)

	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Go(func() { results[i] = h.book(ev.ID, "ann", hold.HoldID, payment.MethodVisa, "click") })
	}
	wg.Wait()
	var first []byte
	for _, r := range results {
		if r.status == http.StatusConflict {
			assert.Equal(t, "request_in_progress", r.errorCode(t))
			continue
		}
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
		if first == nil {
			first = r.body
		}
		assert.Equal(t, string(first), string(r.body), "the same bytes")
	}
	require.NotNil(t, first)
	again := h.book(ev.ID, "ann", hold.HoldID, payment.MethodVisa, "click")
	require.Equal(t, http.StatusAccepted, again.status)
	assert.Equal(t, string(first), string(again.body), "a later retry gets the first answer")
	assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"))

	other := h.book(ev.ID, "ann", hold.HoldID, payment.MethodDeclined, "click")
	assert.Equal(t, http.StatusUnprocessableEntity, other.status)
	assert.Equal(t, "idempotency_key_reused", other.errorCode(t))

	// Another key for the same hold: the same booking, not a second one.
	var b bookingJSON
	again.json(t, &b)
	dup := h.book(ev.ID, "ann", hold.HoldID, payment.MethodVisa, "another-click")
	require.Equal(t, http.StatusOK, dup.status, "%s", dup.body)
	var same bookingJSON
	dup.json(t, &same)
	assert.Equal(t, b.BookingID, same.BookingID)

	h.settled(ev.ID, "ann", b.BookingID)
	assert.Equal(t, 1, h.count(`SELECT count(*) FROM bookings WHERE hold_id = $1`, hold.HoldID), "one booking")
	assert.Len(t, h.fp.PaymentsForBooking(b.BookingID), 1, "one payment")
	assert.Equal(t, int64(1), h.fp.Charges())

	// Redis lost its idempotency records: the ledger answers the same bytes.
	require.NoError(t, h.rdb.FlushAll(context.Background()).Err())
	replay := h.book(ev.ID, "ann", hold.HoldID, payment.MethodVisa, "click")
	require.Equal(t, http.StatusAccepted, replay.status, "%s", replay.body)
	assert.Equal(t, string(first), string(replay.body))
}

// TestRetryOfConfirmedBookingWithoutItsAnswer: a retry of the request that
// made a booking whose answer the ledger does not keep (a charge the
// provider took, answered waiting for its payment), once the booking is
// confirmed and Redis has lost its records: the answer its create gave,
// byte for byte, never a confirmed booking without its tickets.
func TestRetryOfConfirmedBookingWithoutItsAnswer(t *testing.T) {
	// A Redis of its own, emptied below (a shared one, or one master of a
	// cluster, would keep the record the test means to lose).
	h := newPayHarness(t, payOptions{redisURL: testenv.StartRedis(t).URL()})
	ev := h.createEvent(map[string]any{"capacity": 5})
	hold := h.holdOne(ev.ID, "ann", 1)
	res := h.book(ev.ID, "ann", hold.HoldID, payment.MethodVisa, "click")
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	var b bookingJSON
	res.json(t, &b)
	require.Equal(t, "confirmed", h.settled(ev.ID, "ann", b.BookingID).Status)

	_, err := h.ledger.Pool().Exec(context.Background(), `UPDATE bookings SET response = NULL WHERE id = $1`, b.BookingID)
	require.NoError(t, err)
	require.NoError(t, h.rdb.FlushAll(context.Background()).Err())
	retry := h.book(ev.ID, "ann", hold.HoldID, payment.MethodVisa, "click")
	require.Less(t, retry.status, 300, "%s", retry.body)
	assert.Equal(t, string(res.body), string(retry.body))
	assert.Equal(t, "payment_pending", b.Status)
	assert.NotEmpty(t, b.PaymentID)
}

func TestDeclinedPaymentThenRetry(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5})
	hold := h.holdOne(ev.ID, "ann", 1)
	res := h.book(ev.ID, "ann", hold.HoldID, payment.MethodDeclined, "first")
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	var failed bookingJSON
	res.json(t, &failed)
	assert.Equal(t, "failed", failed.Status)
	assert.Equal(t, "generic_decline", failed.StatusReason)
	assert.Equal(t, "failed", h.settled(ev.ID, "ann", failed.BookingID).Status, "its webhook changes nothing")

	var hj holdJSON
	h.do(http.MethodGet, "/v1/holds/"+hold.HoldID, nil, h.auth("ann", ev.ID)).json(t, &hj)
	assert.Equal(t, "pending", hj.Status, "the hold is kept for another attempt")
	again := h.book(ev.ID, "ann", hold.HoldID, payment.MethodDeclined, "first")
	assert.Equal(t, string(res.body), string(again.body), "the same key replays the failure")
	row, err := h.ledger.Booking(context.Background(), failed.BookingID)
	require.NoError(t, err)
	assert.Equal(t, string(res.body), string(row.Response), "the answer kept with the failure, for a retry after Redis lost its records")

	retry := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodVisa)
	assert.NotEqual(t, failed.BookingID, retry.BookingID, "a retry is a new booking with its own payment")
	got := h.settled(ev.ID, "ann", retry.BookingID)
	assert.Equal(t, "confirmed", got.Status)
	assert.Len(t, got.Tickets, 1)
	assert.Equal(t, "failed", h.booking(ev.ID, "ann", failed.BookingID).Status)
	inv := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(1), inv.Confirmed)
}

func TestBookingBadInput(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5, "hold_ttl_seconds": 60})
	hold := h.holdOne(ev.ID, "ann", 1)
	h.clock.Advance(30 * time.Second)
	fresh := h.holdOne(ev.ID, "new", 1)
	h.clock.Advance(31 * time.Second) // ann's hold has lapsed, new's has not
	other := h.createEvent(map[string]any{"capacity": 5})
	body := func(hold string) string {
		return fmt.Sprintf(`{"hold_id":%q,"payment_method_token":"pm_card_visa"}`, hold)
	}
	with := func(user string, key string) map[string]string {
		m := map[string]string{}
		if user != "" {
			m[waitroom.TokenHeader] = h.token(user, ev.ID, 1)
		}
		if key != "" {
			m["Idempotency-Key"] = key
		}
		return m
	}
	tests := []struct {
		name    string
		body    string
		headers map[string]string
		status  int
		code    string
	}{
		{"no token", body(fresh.HoldID), with("", "k"), 401, "invalid_token"},
		{"garbage token", body(fresh.HoldID), map[string]string{waitroom.TokenHeader: "x.y.z", "Idempotency-Key": "k"}, 401, "invalid_token"},
		{"no idempotency key", body(fresh.HoldID), with("new", ""), 400, "missing_idempotency_key"},
		{"idempotency key not UTF-8", body(fresh.HoldID), with("new", "k\xff"), 400, "missing_idempotency_key"},
		{"not JSON", `hold=1`, with("new", "k"), 400, "invalid_request"},
		{"unknown field", `{"hold_id":"x","payment_method_token":"pm_card_visa","coupon":"free"}`, with("new", "k"), 400, "invalid_request"},
		{"no hold id", `{"payment_method_token":"pm_card_visa"}`, with("new", "k"), 400, "invalid_request"},
		{"no payment method", fmt.Sprintf(`{"hold_id":%q}`, fresh.HoldID), with("new", "k"), 400, "invalid_request"},
		{"hold id not a uuid", body("h_41"), with("new", "k"), 404, "not_found"},
		{"unknown hold", body(uuid.NewString()), with("new", "k"), 404, "not_found"},
		{"another user's hold", body(fresh.HoldID), with("ann", "k"), 404, "not_found"},
		{"another user's hold, with a token of another event", body(fresh.HoldID),
			map[string]string{waitroom.TokenHeader: h.token("ann", other.ID, 1), "Idempotency-Key": "k"}, 404, "not_found"},
		{"position above the watermark", body(fresh.HoldID),
			map[string]string{waitroom.TokenHeader: h.token("new", ev.ID, 2_000_000), "Idempotency-Key": "k"}, 403, "not_admitted"},
		{"expired hold", body(hold.HoldID), with("ann", "k2"), 410, "hold_expired"},
		{"body over 64 KiB", `{"hold_id":"` + strings.Repeat("x", 70<<10) + `"}`, with("new", "k"), 413, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := h.with(t).do(http.MethodPost, "/v1/bookings", tt.body, tt.headers)
			assert.Equal(t, tt.status, res.status, "%s", res.body)
			if tt.code != "" {
				assert.Equal(t, tt.code, res.errorCode(t))
			}
		})
	}
	assert.Zero(t, h.count(`SELECT count(*) FROM bookings`), "nothing booked")
	assert.Zero(t, h.fp.Charges())
	res := h.do(http.MethodPost, "/v1/bookings/"+uuid.NewString()+"/cancellation", nil, with("ann", ""))
	assert.Equal(t, http.StatusNotFound, res.status)
	assert.Equal(t, http.StatusMethodNotAllowed, h.do(http.MethodDelete, "/v1/bookings/"+uuid.NewString(), nil, nil).status)
}

func TestHolderPaysWhileAdmissionIsPaused(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5})
	hold := h.holdOne(ev.ID, "ann", 1)
	paused := true
	_, err := h.store.Update(context.Background(), ev.ID, waitroom.Change{Paused: &paused})
	require.NoError(t, err)
	// The origin follows the pause through the store's change notices.
	n := 0
	require.Eventually(t, func() bool {
		n++
		return h.hold(ev.ID, fmt.Sprintf("bob-%d", n), 1, "k").status == http.StatusServiceUnavailable
	}, 10*time.Second, 20*time.Millisecond, "no new holds while paused")
	b := h.mustBook(ev.ID, "ann", hold.HoldID, "pm_card_visa")
	assert.Equal(t, "confirmed", h.settled(ev.ID, "ann", b.BookingID).Status, "a buyer holding seats still pays")
}

func TestCancellation(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 4})
	hold := h.holdOne(ev.ID, "ann", 2)
	pending := h.mustBook(ev.ID, "bob", h.holdOne(ev.ID, "bob", 1).HoldID, payment.MethodSilent)

	// Not cancellable while the payment is pending, nor someone else's.
	res := h.do(http.MethodPost, "/v1/bookings/"+pending.BookingID+"/cancellation", nil, h.auth("bob", ev.ID))
	assert.Equal(t, http.StatusConflict, res.status)
	assert.Equal(t, "booking_not_cancellable", res.errorCode(t))
	del := h.do(http.MethodDelete, "/v1/holds/"+pending.HoldID, nil, h.auth("bob", ev.ID))
	assert.Equal(t, http.StatusConflict, del.status, "a hold being paid for is not given back")

	b := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodVisa)
	got := h.settled(ev.ID, "ann", b.BookingID)
	require.Equal(t, "confirmed", got.Status)
	assert.Equal(t, http.StatusNotFound,
		h.do(http.MethodPost, "/v1/bookings/"+b.BookingID+"/cancellation", nil, h.auth("bob", ev.ID)).status)
	assert.Equal(t, http.StatusUnauthorized,
		h.do(http.MethodPost, "/v1/bookings/"+b.BookingID+"/cancellation", nil, nil).status)
	before := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(1), before.Remaining, "ann's 2 and bob's 1 of 4")

	first := h.do(http.MethodPost, "/v1/bookings/"+b.BookingID+"/cancellation", nil, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusOK, first.status, "%s", first.body)
	var c bookingJSON
	first.json(t, &c)
	assert.Equal(t, "refunded", c.Status)
	assert.Equal(t, booking.ReasonCancelled, c.StatusReason)
	assert.Equal(t, "succeeded", c.RefundStatus)
	assert.Empty(t, c.Tickets)
	second := h.do(http.MethodPost, "/v1/bookings/"+b.BookingID+"/cancellation", nil, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusOK, second.status)
	assert.Equal(t, string(first.body), string(second.body), "idempotent")
	assert.Equal(t, int64(1), h.fp.Refunds(), "refunded once")

	after := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(3), after.Remaining, "the seats are back, once")
	assert.Zero(t, after.Confirmed)
	assert.Equal(t, http.StatusNotFound, h.do(http.MethodGet, "/v1/tickets/"+got.Tickets[0].Code+".png", nil, nil).status,
		"a cancelled ticket is no longer served")

	// The freed seats are sold again, to someone else, under the same numbers.
	cat := h.mustBook(ev.ID, "cat", h.holdOne(ev.ID, "cat", 2).HoldID, payment.MethodVisa)
	resold := h.settled(ev.ID, "cat", cat.BookingID)
	require.Len(t, resold.Tickets, 2)
	assert.ElementsMatch(t, []int64{got.Tickets[0].Seat, got.Tickets[1].Seat}, []int64{resold.Tickets[0].Seat, resold.Tickets[1].Seat})
	h.requireSeatsOnce(ev.ID)
}

// TestCancellationChunkedBodyTooLarge: the cancellation takes no body, and
// one over 64 KiB is 413 even when it is sent chunked, with no
// Content-Length to judge it by; the booking is left as it was.
func TestCancellationChunkedBodyTooLarge(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 4})
	b := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, payment.MethodVisa)
	require.Equal(t, "confirmed", h.settled(ev.ID, "ann", b.BookingID).Status)

	// A reader of no known length: the request goes out chunked.
	chunked := func(n int) io.Reader { return struct{ io.Reader }{strings.NewReader(strings.Repeat("x", n))} }
	res := h.do(http.MethodPost, "/v1/bookings/"+b.BookingID+"/cancellation", chunked(70_000), h.auth("ann", ev.ID))
	require.Equal(t, http.StatusRequestEntityTooLarge, res.status, "%s", res.body)
	assert.Equal(t, "request_too_large", res.errorCode(t))
	assert.Equal(t, "confirmed", h.booking(ev.ID, "ann", b.BookingID).Status, "the booking is unchanged")
	assert.Zero(t, h.fp.Refunds(), "nothing refunded")
	assert.Equal(t, int64(1), h.requireSeatsOnce(ev.ID).Confirmed, "the seat is still sold")

	// A small chunked body is read through and judged, as a declared one
	// is: the route has no fields, so anything but an empty object is 400.
	for _, body := range []string{"xxxxxxxxxx", `{"reason":"x"}`, `[]`, `{}{}`} {
		res = h.do(http.MethodPost, "/v1/bookings/"+b.BookingID+"/cancellation", struct{ io.Reader }{strings.NewReader(body)}, h.auth("ann", ev.ID))
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", body, res.body)
		assert.Equal(t, "invalid_request", res.errorCode(t))
	}
	assert.Zero(t, h.fp.Refunds(), "nothing refunded")
	res = h.do(http.MethodPost, "/v1/bookings/"+b.BookingID+"/cancellation", struct{ io.Reader }{strings.NewReader(" {} ")}, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	assert.Equal(t, int64(1), h.fp.Refunds())

	// The release of a hold takes no body either.
	held := h.holdOne(ev.ID, "bob", 1)
	res = h.do(http.MethodDelete, "/v1/holds/"+held.HoldID, chunked(70_000), h.auth("bob", ev.ID))
	require.Equal(t, http.StatusRequestEntityTooLarge, res.status, "%s", res.body)
	var kept holdJSON
	h.do(http.MethodGet, "/v1/holds/"+held.HoldID, nil, h.auth("bob", ev.ID)).json(t, &kept)
	assert.Equal(t, "pending", kept.Status, "the hold is kept")
	res = h.do(http.MethodDelete, "/v1/holds/"+held.HoldID, struct{ io.Reader }{strings.NewReader("{}")}, h.auth("bob", ev.ID))
	require.Equal(t, http.StatusNoContent, res.status, "%s", res.body)
}

func TestPaymentReconciliation(t *testing.T) {
	h := newPayHarness(t, payOptions{config: func(c *origin.Config) { c.PaymentReconciler.PendingAfter = time.Minute }})
	ev := h.createEvent(map[string]any{"capacity": 5, "hold_ttl_seconds": 600})
	ctx := context.Background()

	// A payment that succeeded without a webhook, and one whose create
	// call never reached the provider.
	silent := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, payment.MethodSilent)
	require.NoError(t, h.fp.SetFaults(1, 0))
	lost := h.mustBook(ev.ID, "bob", h.holdOne(ev.ID, "bob", 1).HoldID, payment.MethodVisa)
	require.NoError(t, h.fp.SetFaults(0, 0))
	require.Empty(t, lost.PaymentID)

	n, err := h.srv.ReconcilePaymentsOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "not before the bound")

	h.clock.Advance(61 * time.Second)
	n, err = h.srv.ReconcilePaymentsOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	got := h.settled(ev.ID, "ann", silent.BookingID)
	assert.Equal(t, "confirmed", got.Status)
	assert.Len(t, got.Tickets, 1)
	got = h.settled(ev.ID, "bob", lost.BookingID)
	assert.Equal(t, "confirmed", got.Status, "the create was repeated with the same key")
	assert.NotEmpty(t, got.PaymentID)
	assert.Equal(t, int64(2), h.fp.Charges())

	n, err = h.srv.ReconcilePaymentsOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing left to settle")
	h.requireSeatsOnce(ev.ID)
}

// A payment_method_token the ledger can't store (NUL) or that is no token
// (control characters, invalid UTF-8) is refused before anything is
// touched: it used to extend the hold, then fail on the booking's row (503).
func TestBookingTokenWithControlCharacters(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5, "hold_ttl_seconds": 600})
	hold := h.holdOne(ev.ID, "ann", 1)
	h.clock.Advance(9 * time.Minute) // a booking would now extend the hold
	expiry := func() float64 {
		score, err := h.rdb.ZScore(context.Background(), inventory.KeysFor(ev.ID).Expiry, hold.HoldID).Result()
		require.NoError(t, err)
		return score
	}
	before := expiry()
	tests := []struct{ name, body string }{
		{"NUL", `{"hold_id":"` + hold.HoldID + `","payment_method_token":"pm_card_visa\u0000"}`},
		{"NUL only", `{"hold_id":"` + hold.HoldID + `","payment_method_token":"\u0000"}`},
		{"newline", `{"hold_id":"` + hold.HoldID + `","payment_method_token":"pm_card\nvisa"}`},
		{"DEL", `{"hold_id":"` + hold.HoldID + `","payment_method_token":"pm_card_visa\u007f"}`},
		{"C1 control", `{"hold_id":"` + hold.HoldID + `","payment_method_token":"pm_card_visa\u0085"}`},
		{"invalid UTF-8", "{\"hold_id\":\"" + hold.HoldID + "\",\"payment_method_token\":\"pm_card_visa\xff\"}"},
		{"space inside", `{"hold_id":"` + hold.HoldID + `","payment_method_token":"pm card visa"}`},
		{"NUL in hold_id", `{"hold_id":"` + hold.HoldID + `\u0000","payment_method_token":"pm_card_visa"}`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			headers := h.auth("ann", ev.ID)
			headers["Idempotency-Key"] = fmt.Sprintf("nul-%d", i)
			res := h.with(t).do(http.MethodPost, "/v1/bookings", tt.body, headers)
			require.Equal(t, http.StatusBadRequest, res.status, "%s", res.body)
			assert.Equal(t, "invalid_request", res.errorCode(t))
		})
	}
	var after holdJSON
	h.do(http.MethodGet, "/v1/holds/"+hold.HoldID, nil, h.auth("ann", ev.ID)).json(t, &after)
	assert.Equal(t, hold.ExpiresAt, after.ExpiresAt, "the hold was not extended")
	assert.Equal(t, before, expiry(), "nor its seats in Redis")
	assert.Equal(t, "pending", after.Status)
	assert.Zero(t, h.count(`SELECT count(*) FROM bookings`), "nothing booked")
	assert.Zero(t, h.fp.Charges())

	// The same key with a good token afterwards works: nothing was claimed.
	headers := h.auth("ann", ev.ID)
	headers["Idempotency-Key"] = "nul-0"
	res := h.do(http.MethodPost, "/v1/bookings", map[string]string{"hold_id": hold.HoldID, "payment_method_token": payment.MethodVisa}, headers)
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
}

// ticketVerifier verifies the codes signed with the key derived from secret.
func ticketVerifier(t *testing.T, secret []byte) *ticketcode.Verifier {
	t.Helper()
	s, err := ticketcode.NewSigner(secret)
	require.NoError(t, err)
	v, err := ticketcode.NewVerifier(s.PublicKey())
	require.NoError(t, err)
	return v
}

// TestOwnResourcesNeedTheWatermark: a buyer's reads, release and
// cancellation take the position at or below the watermark, as paying does
// (docs/api.md §5); a token of the same user above it is 403 not_admitted,
// and another user's resource is still 404 whatever the position.
func TestOwnResourcesNeedTheWatermark(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 4})
	held := h.holdOne(ev.ID, "ann", 1)
	b := h.mustBook(ev.ID, "bob", h.holdOne(ev.ID, "bob", 1).HoldID, payment.MethodVisa)
	require.Equal(t, "confirmed", h.settled(ev.ID, "bob", b.BookingID).Status)

	// createEvent admits up to position 1,000,000.
	above := func(user string) map[string]string {
		return map[string]string{waitroom.TokenHeader: h.token(user, ev.ID, 1_000_001)}
	}
	for _, c := range []struct {
		method, path, user string
		status             int
		code               string
	}{
		{http.MethodGet, "/v1/holds/" + held.HoldID, "ann", http.StatusForbidden, "not_admitted"},
		{http.MethodDelete, "/v1/holds/" + held.HoldID, "ann", http.StatusForbidden, "not_admitted"},
		{http.MethodGet, "/v1/bookings/" + b.BookingID, "bob", http.StatusForbidden, "not_admitted"},
		{http.MethodPost, "/v1/bookings/" + b.BookingID + "/cancellation", "bob", http.StatusForbidden, "not_admitted"},
		{http.MethodGet, "/v1/holds/" + held.HoldID, "bob", http.StatusNotFound, "not_found"},
		{http.MethodGet, "/v1/bookings/" + b.BookingID, "ann", http.StatusNotFound, "not_found"},
	} {
		res := h.do(c.method, c.path, nil, above(c.user))
		require.Equal(t, c.status, res.status, "%s %s as %s: %s", c.method, c.path, c.user, res.body)
		assert.Equal(t, c.code, res.errorCode(t))
	}
	// Nothing changed, and the admitted token still reads and acts.
	var kept holdJSON
	res := h.do(http.MethodGet, "/v1/holds/"+held.HoldID, nil, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res.json(t, &kept)
	assert.Equal(t, "pending", kept.Status)
	assert.Equal(t, "confirmed", h.booking(ev.ID, "bob", b.BookingID).Status)
	assert.Zero(t, h.fp.Refunds())
	require.Equal(t, http.StatusNoContent, h.do(http.MethodDelete, "/v1/holds/"+held.HoldID, nil, h.auth("ann", ev.ID)).status)
}
