package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// gauge reads an unlabelled metric of the origin.
func (h *harness) gauge(name string) float64 {
	h.t.Helper()
	v, ok := h.series(name)
	if !ok {
		h.t.Fatalf("no metric %s", name)
	}
	return v
}

// series reads one series of the origin's metrics, named as the
// exposition writes it (name{labels}); ok false when it is not there.
func (h *harness) series(series string) (v float64, ok bool) {
	h.t.Helper()
	res := h.metrics()
	require.Equal(h.t, http.StatusOK, res.status)
	for line := range strings.Lines(string(res.body)) {
		if s, found := strings.CutPrefix(strings.TrimSpace(line), series+" "); found {
			_, err := fmt.Sscan(s, &v)
			require.NoError(h.t, err)
			return v, true
		}
	}
	return 0, false
}

func (h *payHarness) money(event int64) ledger.MoneyReport {
	h.t.Helper()
	r, err := h.ledger.MoneyReport(context.Background(), event)
	require.NoError(h.t, err)
	require.NoError(h.t, r.Err(), "%+v", r)
	return r
}

// reconcile runs the payment reconciliation once the bookings are due.
func (h *payHarness) reconcile() int {
	h.t.Helper()
	h.clock.Advance(time.Minute + time.Second)
	n, err := h.srv.ReconcilePaymentsOnce(context.Background())
	require.NoError(h.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(h.t, h.fp.WaitIdle(ctx))
	return n
}

func (h *payHarness) cancel(event int64, user, bookingID string) bookingJSON {
	h.t.Helper()
	res := h.do(http.MethodPost, "/v1/bookings/"+bookingID+"/cancellation", nil, h.auth(user, event))
	require.Equal(h.t, http.StatusOK, res.status, "%s", res.body)
	var b bookingJSON
	res.json(h.t, &b)
	return b
}

// A refund the provider reports failed used to make the booking refunded
// all the same: the money kept, the buyer told it was returned.
func TestRefundThatFailsStaysVisibleAndIsRetried(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 4})
	b := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 2).HoldID, payment.MethodRefundFails)
	require.Equal(t, "confirmed", h.settled(ev.ID, "ann", b.BookingID).Status, "the payment itself goes through")

	c := h.cancel(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "cancelled", c.Status, "not refunded: the provider said the refund failed")
	assert.Equal(t, "failed", c.RefundStatus)
	assert.Equal(t, booking.ReasonCancelled, c.StatusReason)
	assert.Empty(t, c.Tickets)
	got := h.settled(ev.ID, "ann", b.BookingID) // the refund.failed webhook changes nothing more
	assert.Equal(t, "cancelled", got.Status)
	assert.Equal(t, "failed", got.RefundStatus)
	res := h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, h.auth("ann", ev.ID))
	assert.Contains(t, string(res.body), `"refund_status":"failed"`)
	assert.Equal(t, float64(1), h.gauge("waitroom_origin_refunds_failed"))
	m := h.money(ev.ID)
	assert.Equal(t, ledger.MoneyCount{Count: 1, Amount: 180000}, m.RefundFailed, "%+v", m)
	assert.Zero(t, m.Kept.Count)
	assert.Equal(t, m.RefundFailed, m.Captured)
	assert.EqualValues(t, 1, h.fp.RefundFailures())
	assert.Zero(t, h.fp.Refunds())
	h.requireSeatsOnce(ev.ID)

	// Cancelling again does not make another attempt; the reconciliation
	// does, under a new key, and it fails again.
	assert.Equal(t, got, h.cancel(ev.ID, "ann", b.BookingID))
	assert.EqualValues(t, 1, h.fp.RefundFailures())
	assert.Equal(t, 1, h.reconcile())
	assert.EqualValues(t, 2, h.fp.RefundFailures())
	got = h.booking(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "failed", got.RefundStatus)
	assert.Equal(t, float64(1), h.gauge("waitroom_origin_refunds_failed"))
	refunds := h.fp.RefundsForPayment(b.PaymentID)
	require.Len(t, refunds, 2)

	// The card is fixed: the next attempt succeeds.
	require.NoError(t, h.fp.SetRefundOutcome(b.PaymentID, payment.RefundSucceeded))
	assert.Equal(t, 1, h.reconcile())
	got = h.booking(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "refunded", got.Status, "%+v", got)
	assert.Equal(t, "succeeded", got.RefundStatus)
	assert.Equal(t, float64(0), h.gauge("waitroom_origin_refunds_failed"))
	m = h.money(ev.ID)
	assert.Equal(t, ledger.MoneyCount{Count: 1, Amount: 180000}, m.Refunded, "%+v", m)
	assert.True(t, m.Settled())
	fm := h.fp.Money(ev.ID)
	assert.Equal(t, fm.Charged, fm.Refunded, "all the money went back: %+v", fm)

	// A late copy of an earlier attempt's failure changes nothing.
	late := []byte(fmt.Sprintf(`{"id":"evt_late_failure","object":"event","type":"refund.failed","created":1777629600,`+
		`"data":{"object":{"id":%q,"object":"refund","amount":180000,"currency":"inr","payment_intent":%q,"status":"failed",`+
		`"metadata":{"booking_id":%q}}}}`, refunds[0].ID, b.PaymentID, b.BookingID))
	require.Equal(t, http.StatusOK, h.webhook(late).status)
	assert.Equal(t, got, h.booking(ev.ID, "ann", b.BookingID))
	assert.Zero(t, h.reconcile(), "nothing owed any more")
	assert.Len(t, h.fp.RefundsForPayment(b.PaymentID), 3, "one refund succeeded, after two failed")
	h.requireSeatsOnce(ev.ID)
}

// A late payment with the overflow reserve used up is refunded; when that
// refund fails, the money must not end kept without a ticket.
func TestLatePaymentRefundFailsThenSucceeds(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 1, "overflow_pct": 0, "hold_ttl_seconds": 60})
	hold := h.holdOne(ev.ID, "ann", 1)
	h.fp.Pause()
	b := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodRefundFails)
	h.expireHold(ev.ID, "ann", hold.HoldID)
	h.holdOne(ev.ID, "bob", 1)
	h.fp.Resume()

	got := h.settled(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "cancelled", got.Status, "%+v", got)
	assert.Equal(t, booking.ReasonLateSoldOut, got.StatusReason)
	assert.Equal(t, "failed", got.RefundStatus, "the provider said the refund failed")
	assert.Empty(t, got.Tickets)
	m := h.money(ev.ID)
	assert.EqualValues(t, 1, m.RefundFailed.Count, "visible: %+v", m)
	assert.Zero(t, m.Kept.Count)

	require.NoError(t, h.fp.SetRefundOutcome(b.PaymentID, payment.RefundSucceeded))
	h.reconcile()
	got = h.booking(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "refunded", got.Status)
	assert.Equal(t, "succeeded", got.RefundStatus)
	pays := h.fp.PaymentsForBooking(b.BookingID)
	require.Len(t, pays, 1)
	assert.Equal(t, pays[0].Amount, pays[0].AmountRefunded, "no money without a ticket")
	assert.EqualValues(t, 1, h.money(ev.ID).Refunded.Count)
	h.requireSeatsOnce(ev.ID)
}

// A pending refund is not a refund done: the booking is refunded when the
// provider says the refund succeeded, through its webhook or, without one,
// the reconciliation asking; and a refund that fails after it succeeded
// puts the booking back to owing it.
func TestPendingRefundFollowedToItsEnd(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 4})
	confirmed := func(user, method string) bookingJSON {
		b := h.mustBook(ev.ID, user, h.holdOne(ev.ID, user, 1).HoldID, method)
		if method == payment.MethodSilent {
			require.NoError(t, h.fp.Redeliver(context.Background(), b.PaymentID))
		}
		require.Equal(t, "confirmed", h.settled(ev.ID, user, b.BookingID).Status)
		require.NoError(t, h.fp.SetRefundOutcome(b.PaymentID, payment.RefundPending))
		return b
	}

	t.Run("webhook", func(t *testing.T) {
		h := &payHarness{harness: h.with(t), fp: h.fp}
		b := confirmed("ann", payment.MethodVisa)
		c := h.cancel(ev.ID, "ann", b.BookingID)
		assert.Equal(t, "cancelled", c.Status)
		assert.Equal(t, "pending", c.RefundStatus)
		assert.Equal(t, "pending", h.settled(ev.ID, "ann", b.BookingID).RefundStatus, "refund.created changes nothing")
		refunds := h.fp.RefundsForPayment(b.PaymentID)
		require.Len(t, refunds, 1)

		require.NoError(t, h.fp.SettleRefund(refunds[0].ID, payment.RefundSucceeded))
		got := h.settled(ev.ID, "ann", b.BookingID)
		assert.Equal(t, "refunded", got.Status, "%+v", got)
		assert.Equal(t, "succeeded", got.RefundStatus)

		// Days later the card refund fails: the money is the merchant's
		// again, the booking owes it, and a new refund is made.
		require.NoError(t, h.fp.SettleRefund(refunds[0].ID, payment.RefundFailed))
		got = h.settled(ev.ID, "ann", b.BookingID)
		assert.Equal(t, "cancelled", got.Status, "%+v", got)
		assert.Equal(t, "failed", got.RefundStatus)
		require.NoError(t, h.fp.SetRefundOutcome(b.PaymentID, payment.RefundSucceeded))
		h.reconcile()
		got = h.booking(ev.ID, "ann", b.BookingID)
		assert.Equal(t, "refunded", got.Status)
		assert.Equal(t, "succeeded", got.RefundStatus)
	})

	t.Run("reconciliation", func(t *testing.T) {
		h := &payHarness{harness: h.with(t), fp: h.fp}
		// A silent payment: its refunds send no webhook either.
		b := confirmed("bob", payment.MethodSilent)
		assert.Equal(t, "pending", h.cancel(ev.ID, "bob", b.BookingID).RefundStatus)
		h.reconcile()
		assert.Equal(t, "pending", h.booking(ev.ID, "bob", b.BookingID).RefundStatus, "still pending at the provider")
		refunds := h.fp.RefundsForPayment(b.PaymentID)
		require.Len(t, refunds, 1, "asked about, not made again")

		require.NoError(t, h.fp.SettleRefund(refunds[0].ID, payment.RefundSucceeded))
		h.reconcile()
		got := h.booking(ev.ID, "bob", b.BookingID)
		assert.Equal(t, "refunded", got.Status)
		assert.Equal(t, "succeeded", got.RefundStatus)
		assert.Len(t, h.fp.RefundsForPayment(b.PaymentID), 1)
	})

	m := h.money(ev.ID)
	assert.EqualValues(t, 2, m.Refunded.Count, "%+v", m)
	assert.True(t, m.Settled())
	fm := h.fp.Money(ev.ID)
	assert.Equal(t, fm.Charged, fm.Refunded, "%+v", fm)
	h.requireSeatsOnce(ev.ID)
}

// A refund made at the provider (its dashboard) for a confirmed booking used
// to leave the tickets valid: a free seat for the buyer, and a seat the
// inventory no longer had to sell.
func TestChargeRefundedAtTheProviderVoidsTheTickets(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 4, "overflow_pct": 25, "hold_ttl_seconds": 60})
	require.Equal(t, int64(3), ev.Sellable)
	ctx := context.Background()
	b := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 2).HoldID, payment.MethodVisa)
	got := h.settled(ev.ID, "ann", b.BookingID)
	require.Equal(t, "confirmed", got.Status)
	require.Len(t, got.Tickets, 2)
	before := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(1), before.Remaining)

	_, err := h.fp.Refund(ctx, payment.RefundRequest{PaymentID: b.PaymentID, BookingID: b.BookingID, IdempotencyKey: "dashboard"})
	require.NoError(t, err)
	refunded := h.settled(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "refunded", refunded.Status, "%+v", refunded)
	assert.Equal(t, "succeeded", refunded.RefundStatus)
	assert.Equal(t, booking.ReasonRefundedAtProvider, refunded.StatusReason)
	assert.Empty(t, refunded.Tickets)
	for _, tk := range got.Tickets {
		valid, err := h.ledger.Bookings().TicketIsValid(ctx, b.BookingID, tk.Code)
		require.NoError(t, err)
		assert.False(t, valid, "ticket %d is void", tk.Seat)
	}
	after := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(3), after.Remaining, "the seats are back on sale")
	assert.Zero(t, after.Confirmed)
	var hj holdJSON
	h.do(http.MethodGet, "/v1/holds/"+b.HoldID, nil, h.auth("ann", ev.ID)).json(t, &hj)
	assert.Equal(t, "released", hj.Status)
	res := h.do(http.MethodPost, "/v1/bookings/"+b.BookingID+"/cancellation", nil, h.auth("ann", ev.ID))
	assert.Equal(t, http.StatusConflict, res.status, "nothing left to cancel")
	assert.Equal(t, int64(1), h.fp.Refunds(), "the origin refunded nothing itself")

	// The same news again, under another event id: nothing changes.
	charge := func(id string, refundedAmount int64, paymentID, bookingID string, amount int64) []byte {
		return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"charge.refunded","created":1777629600,"data":{"object":`+
			`{"id":"ch_x","object":"charge","amount":%d,"amount_refunded":%d,"currency":"inr","refunded":true,`+
			`"payment_intent":%q,"metadata":{"booking_id":%q}}}}`, id, amount, refundedAmount, paymentID, bookingID))
	}
	for _, id := range []string{"evt_dup_1", "evt_dup_1", "evt_dup_2"} {
		res := h.webhook(charge(id, b.Amount, b.PaymentID, b.BookingID, b.Amount))
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	}
	assert.Equal(t, refunded, h.booking(ev.ID, "ann", b.BookingID))
	assert.Equal(t, after, h.requireSeatsOnce(ev.ID))
	assert.Equal(t, 1, h.count(`SELECT count(*) FROM payment_events WHERE event_id = 'evt_dup_1'`))

	// The seats sell again; a partial refund at the provider keeps a sale.
	cat := h.mustBook(ev.ID, "cat", h.holdOne(ev.ID, "cat", 2).HoldID, payment.MethodVisa)
	require.Equal(t, "confirmed", h.settled(ev.ID, "cat", cat.BookingID).Status)
	_, err = h.fp.Refund(ctx, payment.RefundRequest{PaymentID: cat.PaymentID, BookingID: cat.BookingID, Amount: 1000, IdempotencyKey: "goodwill"})
	require.NoError(t, err)
	kept := h.settled(ev.ID, "cat", cat.BookingID)
	assert.Equal(t, "confirmed", kept.Status)
	assert.Len(t, kept.Tickets, 2)

	// A charge.refunded signed but older than the payment's state (the
	// provider says it is not refunded) changes nothing.
	res = h.webhook(charge("evt_stale", cat.Amount, cat.PaymentID, cat.BookingID, cat.Amount))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	assert.Equal(t, "confirmed", h.booking(ev.ID, "cat", cat.BookingID).Status)
	m := h.money(ev.ID)
	assert.EqualValues(t, 1, m.Refunded.Count, "%+v", m)
	assert.EqualValues(t, 1, m.Confirmed.Count)
	h.requireSeatsOnce(ev.ID)
}

// Part of a payment returned at the provider (its dashboard) while its
// booking still waited for it is recorded on the sale however the sale is
// confirmed: here late, from the overflow reserve, once the hold had
// lapsed. Its charge.refunded came when there was no sale to record it on,
// and is not delivered again (one attempt); only a confirmation on the
// booking's own hold recorded it before.
func TestPartOfALatePaymentReturnedBeforeItSettled(t *testing.T) {
	ctx := context.Background()
	h := newPayHarness(t, payOptions{fakepay: payment.FakepayConfig{MaxAttempts: 1}})
	ev := h.createEvent(map[string]any{"capacity": 2, "overflow_pct": 50, "hold_ttl_seconds": 60})
	ann := h.holdOne(ev.ID, "ann", 1)
	b := h.mustBook(ev.ID, "ann", ann.HoldID, payment.MethodSilent)
	_, err := h.fp.RefundAtProvider(b.PaymentID, 300)
	require.NoError(t, err)
	require.NoError(t, h.fp.WaitIdle(ctx))
	require.Equal(t, "payment_pending", h.booking(ev.ID, "ann", b.BookingID).Status)

	h.expireHold(ev.ID, "ann", ann.HoldID)
	require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
	got := h.booking(ev.ID, "ann", b.BookingID)
	require.Equal(t, "confirmed", got.Status, "%+v", got)
	require.True(t, got.Overflow, "confirmed late, from the reserve")
	require.Len(t, got.Tickets, 1)
	row, err := h.ledger.Bookings().Get(ctx, b.BookingID)
	require.NoError(t, err)
	assert.Equal(t, int64(300), row.AmountRefunded, "the part returned before the sale")
	m := h.money(ev.ID)
	require.NoError(t, m.Err())
	assert.Equal(t, b.Amount-300, m.Confirmed.Amount, "the sale keeps what the provider kept: %+v", m)
	fm := h.fp.Money(ev.ID)
	assert.Equal(t, b.Amount-300, fm.Charged-fm.Refunded, "%+v", fm)
}

// A charge.refunded for part of a payment whose booking still waits for it
// marks the booking: a settlement may be confirming the sale on a word of
// the provider read before the refund, so once confirmed its refunds are
// asked about. Before, the event was recorded as handled having done
// nothing, and a sale confirmed on the older word kept the part returned
// unrecorded. Here the event comes before the provider shows the refund,
// which then happens with its own webhooks lost: only the mark tells.
func TestPartlyRefundedWhileWaitingIsAskedAbout(t *testing.T) {
	ctx := context.Background()
	h := newPayHarness(t, payOptions{fakepay: payment.FakepayConfig{MaxAttempts: 1}})
	ev := h.createEvent(map[string]any{"capacity": 2, "hold_ttl_seconds": 600})
	b := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, payment.MethodSilent)
	charge := []byte(fmt.Sprintf(`{"id":"evt_part","object":"event","type":"charge.refunded","created":1777629600,"data":{"object":`+
		`{"id":"ch_part","object":"charge","amount":%d,"amount_refunded":300,"currency":"inr","payment_intent":%q,`+
		`"metadata":{"booking_id":%q}}}}`, b.Amount, b.PaymentID, b.BookingID))
	res := h.webhook(charge)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	assert.Contains(t, string(res.body), `"processed"`)
	row, err := h.ledger.Bookings().Get(ctx, b.BookingID)
	require.NoError(t, err)
	require.Equal(t, "payment_pending", row.Status)
	require.True(t, row.ProviderRefundPending, "marked to be asked about")

	require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
	require.Equal(t, "confirmed", h.booking(ev.ID, "ann", b.BookingID).Status)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	h.fp.SetWebhookURL(down.URL + "/v1/webhooks/fakepay")
	_, err = h.fp.RefundAtProvider(b.PaymentID, 300)
	require.NoError(t, err)
	require.NoError(t, h.fp.WaitIdle(ctx))
	h.fp.SetWebhookURL(h.url + "/v1/webhooks/fakepay")

	h.reconcile()
	row, err = h.ledger.Bookings().Get(ctx, b.BookingID)
	require.NoError(t, err)
	assert.Equal(t, "confirmed", row.Status)
	assert.Equal(t, int64(300), row.AmountRefunded, "asked about once confirmed")
	assert.False(t, row.ProviderRefundPending, "nothing left to ask about")
	m := h.money(ev.ID)
	require.NoError(t, m.Err())
	assert.Equal(t, b.Amount-300, m.Confirmed.Amount, "%+v", m)
	assert.Zero(t, h.reconcile(), "nor asked about again")
}

// A late payment confirmed from the overflow reserve and then refunded at
// the provider gives its seat back to the reserve, as a cancellation does.
func TestChargeRefundedOfAnOverflowBooking(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 2, "overflow_pct": 50, "hold_ttl_seconds": 60})
	ann := h.holdOne(ev.ID, "ann", 1)
	b := h.mustBook(ev.ID, "ann", ann.HoldID, payment.MethodSilent)
	h.expireHold(ev.ID, "ann", ann.HoldID)
	h.holdOne(ev.ID, "bob", 1)
	require.NoError(t, h.fp.Redeliver(context.Background(), b.PaymentID))
	got := h.booking(ev.ID, "ann", b.BookingID)
	require.True(t, got.Overflow)
	require.Equal(t, int64(1), h.requireSeatsOnce(ev.ID).OverflowUsed)

	// A silent payment's refund sends no webhook: this one is signed by
	// hand, as the provider would send it.
	_, err := h.fp.Refund(context.Background(), payment.RefundRequest{PaymentID: b.PaymentID, BookingID: b.BookingID, IdempotencyKey: "dashboard"})
	require.NoError(t, err)
	res := h.webhook([]byte(fmt.Sprintf(`{"id":"evt_%s","object":"event","type":"charge.refunded","data":{"object":`+
		`{"id":"ch_1","object":"charge","amount":%d,"amount_refunded":%d,"payment_intent":%q}}}`,
		uuid.NewString(), b.Amount, b.Amount, b.PaymentID)))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	assert.Equal(t, "refunded", h.booking(ev.ID, "ann", b.BookingID).Status)
	inv := h.requireSeatsOnce(ev.ID)
	assert.Zero(t, inv.OverflowUsed, "the seat went back to the reserve")
	assert.Equal(t, int64(1), inv.ActiveHolds, "bob's hold")
}

// The money report puts a booking that took money and has neither tickets
// nor a refund where it shows.
func TestMoneyReportFindsMoneyKept(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5})
	ctx := context.Background()
	paid := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, payment.MethodVisa)
	h.settled(ev.ID, "ann", paid.BookingID)
	h.mustBook(ev.ID, "bob", h.holdOne(ev.ID, "bob", 1).HoldID, payment.MethodDeclined)
	waiting := h.mustBook(ev.ID, "cat", h.holdOne(ev.ID, "cat", 1).HoldID, payment.MethodSilent)
	m := h.money(ev.ID)
	assert.Equal(t, ledger.MoneyReport{Event: ev.ID, Captured: ledger.MoneyCount{Count: 1, Amount: 90000},
		Confirmed: ledger.MoneyCount{Count: 1, Amount: 90000}, PaymentPending: ledger.MoneyCount{Count: 1, Amount: 90000}}, m)
	assert.False(t, m.Settled())
	require.NoError(t, h.fp.Redeliver(ctx, waiting.PaymentID))
	assert.True(t, h.money(ev.ID).Settled())

	// The ledger's own account would catch a sale voided without a refund.
	_, err := h.ledger.Pool().Exec(ctx, `UPDATE bookings SET tickets_valid = false WHERE id = $1`, paid.BookingID)
	require.NoError(t, err)
	r, err := h.ledger.MoneyReport(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, ledger.MoneyCount{Count: 1, Amount: 90000}, r.Kept)
	assert.Error(t, r.Err())
}

// The Stripe adapter's refund path through the origin, against stripe-mock.
func TestStripeCancellationRefunds(t *testing.T) {
	base := paidStripeMock(t)
	c := newClock()
	stripe, err := payment.NewStripe(payment.StripeConfig{APIKey: "sk_test_123", WebhookSecret: "whsec_stripe_test",
		BackendURL: base, Quiet: true, Now: c.Now})
	require.NoError(t, err)
	h := &payHarness{harness: newHarness(t, harnessOptions{clock: c, config: func(cfg *origin.Config) {
		cfg.Payments = stripe
		cfg.TicketKey = ticketKey
	}})}
	ev := h.createEvent(map[string]any{"capacity": 5})
	b := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, "pm_card_visa")
	ok := intentEvent("evt_stripe_paid", "payment_intent.succeeded", b.PaymentID, b.BookingID, b.Amount)
	res := h.do(http.MethodPost, "/v1/webhooks/stripe", ok, map[string]string{
		payment.SignatureHeader: payment.SignWebhook(ok, "whsec_stripe_test", c.Now())})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)

	got := h.cancel(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "refunded", got.Status, "stripe-mock's refund succeeds: %+v", got)
	assert.Equal(t, "succeeded", got.RefundStatus)
	assert.EqualValues(t, 1, h.money(ev.ID).Refunded.Count)
	h.requireSeatsOnce(ev.ID)
}

// TestRefundsPendingAtTheProviderAreNoMoneyBack: a refund made at the
// provider (its dashboard) counts in the payment's amount refunded while it
// is pending, and may still fail; only money back for good ends a sale, or
// settles a refund owed. Each case ends with the provider's money and the
// ledger's agreeing.
func TestRefundsPendingAtTheProviderAreNoMoneyBack(t *testing.T) {
	ctx := context.Background()
	dashboard := func(h *payHarness, b bookingJSON, amount int64) payment.Refund {
		t.Helper()
		require.NoError(t, h.fp.SetRefundOutcome(b.PaymentID, payment.RefundPending))
		r, err := h.fp.Refund(ctx, payment.RefundRequest{PaymentID: b.PaymentID, BookingID: b.BookingID, Amount: amount,
			IdempotencyKey: "dashboard-" + uuid.NewString()})
		require.NoError(t, err)
		require.Equal(t, payment.RefundPending, r.Status)
		require.NoError(t, h.fp.SetRefundOutcome(b.PaymentID, payment.RefundSucceeded))
		require.NoError(t, h.fp.WaitIdle(ctx))
		return r
	}
	amountRefunded := func(h *payHarness, event int64, user, id string) int64 {
		t.Helper()
		var got struct {
			AmountRefunded int64 `json:"amount_refunded"`
		}
		h.do(http.MethodGet, "/v1/bookings/"+id, nil, h.auth(user, event)).json(t, &got)
		return got.AmountRefunded
	}
	// sale: ann's booking of two seats, paid with method, settled when the
	// provider says so at once (silent: by the reconciliation, later).
	sale := func(t *testing.T, method string, o ...payOptions) (*payHarness, eventJSON, bookingJSON) {
		t.Helper()
		h := newPayHarness(t, append(o, payOptions{})[0])
		ev := h.createEvent(map[string]any{"capacity": 8, "hold_ttl_seconds": 600})
		b := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 2).HoldID, method)
		if method != payment.MethodSilent {
			require.Equal(t, "confirmed", h.settled(ev.ID, "ann", b.BookingID).Status)
		}
		return h, ev, b
	}
	balanced := func(h *payHarness, event int64, kept int64) {
		t.Helper()
		m := h.money(event)
		require.NoError(t, m.Err())
		assert.Equal(t, kept, m.Confirmed.Amount, "the sales keep what the provider kept: %+v", m)
		fp := h.fp.Money(event)
		assert.Equal(t, kept, fp.Charged-fp.Refunded, "at the provider: %+v", fp)
	}

	t.Run("pending before the payment settled", func(t *testing.T) {
		h, ev, b := sale(t, payment.MethodSilent)
		r := dashboard(h, b, 0)
		h.reconcile()
		got := h.booking(ev.ID, "ann", b.BookingID)
		require.Equal(t, "confirmed", got.Status, "the money is still the merchant's: %+v", got)
		require.Len(t, got.Tickets, 2)

		require.NoError(t, h.fp.SettleRefund(r.ID, payment.RefundFailed))
		h.reconcile()
		assert.Equal(t, "confirmed", h.settled(ev.ID, "ann", b.BookingID).Status)
		balanced(h, ev.ID, b.Amount)
	})

	t.Run("pending, then a small one that succeeded", func(t *testing.T) {
		h, ev, b := sale(t, payment.MethodVisa)
		r := dashboard(h, b, b.Amount-100)
		_, err := h.fp.RefundAtProvider(b.PaymentID, 100)
		require.NoError(t, err)
		got := h.settled(ev.ID, "ann", b.BookingID)
		require.Equal(t, "confirmed", got.Status, "charge.refunded counted the pending refund: %+v", got)
		require.Len(t, got.Tickets, 2)
		assert.Equal(t, int64(100), amountRefunded(h, ev.ID, "ann", b.BookingID))

		require.NoError(t, h.fp.SettleRefund(r.ID, payment.RefundFailed))
		h.reconcile()
		balanced(h, ev.ID, b.Amount-100)
	})

	t.Run("pending, then succeeded", func(t *testing.T) {
		h, ev, b := sale(t, payment.MethodVisa)
		r := dashboard(h, b, 0)
		require.Equal(t, "confirmed", h.settled(ev.ID, "ann", b.BookingID).Status)
		require.NoError(t, h.fp.SettleRefund(r.ID, payment.RefundSucceeded))
		got := h.settled(ev.ID, "ann", b.BookingID)
		assert.Equal(t, "refunded", got.Status, "%+v", got)
		assert.Empty(t, got.Tickets)
		balanced(h, ev.ID, 0)
	})

	// One that ends while the provider's webhooks cannot reach the origin
	// (its endpoint down past the provider's retries) is found by the
	// reconciliation, which keeps asking about a sale with one pending.
	for _, amount := range []int64{0, 30000} {
		t.Run(fmt.Sprintf("pending, then succeeded, its webhooks lost: %d", amount), func(t *testing.T) {
			h, ev, b := sale(t, payment.MethodVisa, payOptions{fakepay: payment.FakepayConfig{MaxAttempts: 1}})
			r := dashboard(h, b, amount)
			require.Equal(t, "confirmed", h.settled(ev.ID, "ann", b.BookingID).Status)
			down := httptest.NewServer(http.NotFoundHandler())
			down.Close()
			h.fp.SetWebhookURL(down.URL + "/v1/webhooks/fakepay")
			require.NoError(t, h.fp.SettleRefund(r.ID, payment.RefundSucceeded))
			require.NoError(t, h.fp.WaitIdle(ctx))
			h.fp.SetWebhookURL(h.url + "/v1/webhooks/fakepay")
			require.Equal(t, "confirmed", h.booking(ev.ID, "ann", b.BookingID).Status, "not told")

			h.reconcile()
			got := h.settled(ev.ID, "ann", b.BookingID)
			if amount == 0 {
				assert.Equal(t, "refunded", got.Status, "%+v", got)
				assert.Empty(t, got.Tickets)
				balanced(h, ev.ID, 0)
			} else {
				assert.Equal(t, "confirmed", got.Status, "%+v", got)
				assert.Equal(t, amount, amountRefunded(h, ev.ID, "ann", b.BookingID))
				balanced(h, ev.ID, b.Amount-amount)
			}
			row, err := h.ledger.Bookings().Get(ctx, b.BookingID)
			require.NoError(t, err)
			assert.False(t, row.ProviderRefundPending, "nothing pending is left to ask about")
			assert.Zero(t, h.reconcile(), "nor asked about again")
		})
	}

	t.Run("the buyer cancels while one is pending", func(t *testing.T) {
		h, ev, b := sale(t, payment.MethodVisa)
		r := dashboard(h, b, 0)
		c := h.cancel(ev.ID, "ann", b.BookingID)
		assert.Equal(t, "cancelled", c.Status, "not refunded on a pending refund's word: %+v", c)
		assert.Equal(t, "pending", c.RefundStatus)

		require.NoError(t, h.fp.SettleRefund(r.ID, payment.RefundFailed))
		h.reconcile()
		got := h.settled(ev.ID, "ann", b.BookingID)
		assert.Equal(t, "refunded", got.Status, "the origin's own refund returned it: %+v", got)
		balanced(h, ev.ID, 0)
	})

	// The origin's refund returns what is left of the payment: with part of
	// it in a refund pending at the provider, its own succeeding is not all
	// of the money back. That one failing afterwards, with or without its
	// webhook, used to leave the booking refunded and the part kept.
	for _, method := range []string{payment.MethodVisa, payment.MethodSilent} {
		t.Run("the origin's refund of the rest, then the pending one fails: "+method, func(t *testing.T) {
			h, ev, b := sale(t, method)
			if method == payment.MethodSilent {
				require.NoError(t, h.fp.Redeliver(ctx, b.PaymentID))
				require.Equal(t, "confirmed", h.settled(ev.ID, "ann", b.BookingID).Status)
			}
			r := dashboard(h, b, 30000)
			c := h.cancel(ev.ID, "ann", b.BookingID)
			assert.Equal(t, "pending", c.RefundStatus, "part of the payment is not back yet: %+v", c)
			require.NoError(t, h.fp.WaitIdle(ctx))
			row, err := h.ledger.Bookings().Get(ctx, b.BookingID)
			require.NoError(t, err)
			own := h.fp.RefundsForPayment(b.PaymentID)
			require.Len(t, own, 2)
			require.Equal(t, payment.RefundSucceeded, own[1].Status)
			assert.Equal(t, b.Amount-30000, own[1].Amount)
			assert.Equal(t, own[1].ID, row.RefundID, "the origin's refund is kept, to ask about it")

			if method == payment.MethodSilent {
				// Its webhook lost: the provider's posts go nowhere.
				lost := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
				defer lost.Close()
				h.fp.SetWebhookURL(lost.URL)
				defer h.fp.SetWebhookURL(h.url + "/v1/webhooks/fakepay")
			}
			require.NoError(t, h.fp.SettleRefund(r.ID, payment.RefundFailed))
			require.NoError(t, h.fp.WaitIdle(ctx))
			if method != payment.MethodSilent {
				got := h.booking(ev.ID, "ann", b.BookingID)
				assert.Equal(t, "failed", got.RefundStatus, "told by the other refund's webhook: %+v", got)
			} else {
				got := h.booking(ev.ID, "ann", b.BookingID)
				assert.Equal(t, "pending", got.RefundStatus, "not told: %+v", got)
			}
			h.reconcile()
			h.reconcile()
			got := h.settled(ev.ID, "ann", b.BookingID)
			assert.Equal(t, "refunded", got.Status, "the rest refunded by a new attempt: %+v", got)
			assert.Equal(t, "succeeded", got.RefundStatus)
			assert.Len(t, h.fp.RefundsForPayment(b.PaymentID), 3)
			balanced(h, ev.ID, 0)
		})
	}

	t.Run("partly refunded before the payment settled", func(t *testing.T) {
		h, ev, b := sale(t, payment.MethodSilent)
		_, err := h.fp.RefundAtProvider(b.PaymentID, 30000)
		require.NoError(t, err)
		require.NoError(t, h.fp.WaitIdle(ctx))
		h.reconcile()
		require.Equal(t, "confirmed", h.booking(ev.ID, "ann", b.BookingID).Status)
		assert.Equal(t, int64(30000), amountRefunded(h, ev.ID, "ann", b.BookingID))
		assert.Equal(t, int64(30000), h.money(ev.ID).PartlyRefunded.Amount)
		balanced(h, ev.ID, b.Amount-30000)
	})

	t.Run("a partial refund that fails later", func(t *testing.T) {
		h, ev, b := sale(t, payment.MethodVisa)
		r := dashboard(h, b, 30000)
		require.NoError(t, h.fp.SettleRefund(r.ID, payment.RefundSucceeded))
		require.NoError(t, h.fp.WaitIdle(ctx))
		require.Equal(t, int64(30000), amountRefunded(h, ev.ID, "ann", b.BookingID))
		require.NoError(t, h.fp.SettleRefund(r.ID, payment.RefundFailed))
		require.NoError(t, h.fp.WaitIdle(ctx))
		assert.Zero(t, amountRefunded(h, ev.ID, "ann", b.BookingID), "the refund failed: nothing went back")
		balanced(h, ev.ID, b.Amount)
	})
}
