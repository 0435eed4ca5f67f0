package origin_test

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/payment"
)

// paymentFailed is a payment_intent.payment_failed event for a payment.
func paymentFailed(id, paymentID, bookingID string, amount int64) []byte {
	return bytes.Replace(intentEvent(id, "payment_intent.payment_failed", paymentID, bookingID, amount),
		[]byte(`"status":"succeeded"`), []byte(`"status":"requires_payment_method"`), 1)
}

// requireMoneyBack checks that the money of a booking's payment went back.
func (h *payHarness) requireMoneyBack(bookingID string) {
	h.t.Helper()
	pays := h.fp.PaymentsForBooking(bookingID)
	require.Len(h.t, pays, 1)
	assert.Equal(h.t, pays[0].Amount, pays[0].AmountRefunded, "the money went back")
}

// A booking whose payment failed, then succeeded after the buyer paid
// through a second booking of the same hold, used to keep the money: its
// refund moved it to cancelled, which the one-booking-per-hold index
// refused (23505), and the webhook answered 503 on every redelivery.
func TestPaidAfterFailureWhileAnotherBookingPays(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10, "hold_ttl_seconds": 600})
	hold := h.holdOne(ev.ID, "ann", 1)

	b1 := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodSilent)
	res := h.webhook(paymentFailed("evt_f1", b1.PaymentID, b1.BookingID, b1.Amount))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, "failed", h.booking(ev.ID, "ann", b1.BookingID).Status)

	b2 := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodSilent)
	res = h.webhook(intentEvent("evt_s1", "payment_intent.succeeded", b1.PaymentID, b1.BookingID, b1.Amount))
	require.Equal(t, http.StatusOK, res.status, "the success of the failed booking: %s", res.body)
	got := h.settled(ev.ID, "ann", b1.BookingID)
	assert.Equal(t, "refunded", got.Status, "%+v", got)
	assert.Equal(t, booking.ReasonPaidAfterFailure, got.StatusReason)
	h.requireMoneyBack(b1.BookingID)

	require.NoError(t, h.fp.Redeliver(context.Background(), b2.PaymentID))
	second := h.settled(ev.ID, "ann", b2.BookingID)
	assert.Equal(t, "confirmed", second.Status, "%+v", second)
	assert.Len(t, second.Tickets, 1)
	h.requireSeatsOnce(ev.ID)
	h.money(ev.ID)
}

// A payment that failed and then succeeded, with no other booking of its
// hold, is the buyer's sale: confirmed, with its tickets.
func TestPaidAfterFailureAloneIsConfirmed(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10, "hold_ttl_seconds": 600})
	hold := h.holdOne(ev.ID, "ann", 1)
	b1 := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodSilent)
	require.Equal(t, http.StatusOK, h.webhook(paymentFailed("evt_f1", b1.PaymentID, b1.BookingID, b1.Amount)).status)
	res := h.webhook(intentEvent("evt_s1", "payment_intent.succeeded", b1.PaymentID, b1.BookingID, b1.Amount))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	got := h.settled(ev.ID, "ann", b1.BookingID)
	assert.Equal(t, "confirmed", got.Status, "%+v", got)
	assert.Len(t, got.Tickets, 1)
	h.requireSeatsOnce(ev.ID)
	h.money(ev.ID)
}

// A failed payment whose later success no webhook reported is found by the
// payment reconciliation, which asks the provider about failed bookings for
// a while.
func TestPaidAfterFailureFoundByTheReconciliation(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10, "hold_ttl_seconds": 600})
	hold := h.holdOne(ev.ID, "ann", 1)
	b1 := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodSilent)
	require.Equal(t, http.StatusOK, h.webhook(paymentFailed("evt_f1", b1.PaymentID, b1.BookingID, b1.Amount)).status)
	b2 := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodVisa)
	require.Equal(t, "confirmed", h.settled(ev.ID, "ann", b2.BookingID).Status)

	h.reconcile()
	got := h.settled(ev.ID, "ann", b1.BookingID)
	assert.Equal(t, "refunded", got.Status, "%+v", got)
	h.requireMoneyBack(b1.BookingID)
	h.requireSeatsOnce(ev.ID)
	h.money(ev.ID)
}

// A payment's success used to be lost to a failure reported meanwhile: the
// success settlement confirmed the hold in Redis, the failure marked the
// booking failed before the ledger step, which then found the booking
// settled, and the settlement ended there: the money taken, no ticket, no
// refund, and the hold confirmed in Redis but pending in the ledger.
func TestSuccessNotLostToAConcurrentFailure(t *testing.T) {
	var armed atomic.Bool
	var fail func()
	h := newPayHarness(t, payOptions{config: func(cfg *origin.Config) {}})
	h.srv.AfterRedisStep(func() {
		if armed.CompareAndSwap(true, false) {
			fail()
		}
	})
	ev := h.createEvent(map[string]any{"capacity": 10, "hold_ttl_seconds": 600})
	hold := h.holdOne(ev.ID, "ann", 1)
	b1 := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodSilent)
	fail = func() {
		res := h.webhook(paymentFailed("evt_f-"+uuid.NewString(), b1.PaymentID, b1.BookingID, b1.Amount))
		assert.Equal(t, http.StatusOK, res.status, "%s", res.body)
	}
	armed.Store(true)
	res := h.webhook(intentEvent("evt_s1", "payment_intent.succeeded", b1.PaymentID, b1.BookingID, b1.Amount))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.False(t, armed.Load(), "the failure came between the two steps")

	got := h.settled(ev.ID, "ann", b1.BookingID)
	assert.Equal(t, "confirmed", got.Status, "%+v", got)
	assert.Len(t, got.Tickets, 1)
	var hj holdJSON
	h.do(http.MethodGet, "/v1/holds/"+hold.HoldID, nil, h.auth("ann", ev.ID)).json(t, &hj)
	assert.Equal(t, "confirmed", hj.Status, "the ledger's hold agrees with Redis's")
	h.requireSeatsOnce(ev.ID)
	h.money(ev.ID)
}

// A late payment used to count the buyer's other seats under the event's
// row lock, which a new hold never takes: a hold made in Redis whose ledger
// row was still on its way was not counted, the late payment was confirmed
// from the overflow reserve, and the row landed after it, leaving the buyer
// with twice max_per_user.
func TestLatePaymentAndANewHoldOfTheBuyerSerialised(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ctx := context.Background()
	ev := h.createEvent(map[string]any{"capacity": 8, "overflow_pct": 25, "hold_ttl_seconds": 600, "max_per_user": 1})
	first := h.holdOne(ev.ID, "ann", 1)
	fb := h.mustBook(ev.ID, "ann", first.HoldID, payment.MethodSilent)
	h.expireHold(ev.ID, "ann", first.HoldID)

	// The new hold is made in Redis; its ledger row waits.
	pause := origin.PauseHoldRows(h.srv)
	again := make(chan result, 1)
	go func() { again <- h.hold(ev.ID, "ann", 1, "again") }()
	<-pause.Held

	// The late payment lands meanwhile.
	require.NoError(t, h.fp.Redeliver(ctx, fb.PaymentID))
	late := h.settled(ev.ID, "ann", fb.BookingID)
	pause.Resume()
	res := <-again

	assert.LessOrEqual(t, h.seatsOf(ev.ID, "ann"), 1, "seats of one buyer; late booking %+v, new hold %d %s",
		late, res.status, res.body)
	if late.Status == "confirmed" {
		assert.Equal(t, http.StatusUnprocessableEntity, res.status, "a buyer served from the reserve holds no more: %s", res.body)
		assert.Equal(t, "exceeds_per_user_limit", res.errorCode(t))
	}
	h.requireSeatsOnce(ev.ID)
	h.money(ev.ID)
}

// A partial refund at the provider used to leave the booking confirmed and
// counted in full in the money report, the returned money nowhere.
func TestPartialRefundAtTheProviderIsRecorded(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ctx := context.Background()
	ev := h.createEvent(map[string]any{"capacity": 10, "hold_ttl_seconds": 600})
	hold := h.holdOne(ev.ID, "ann", 2)
	b := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodVisa)
	require.Equal(t, "confirmed", h.settled(ev.ID, "ann", b.BookingID).Status)

	// A refund of part of it, made at the provider (its dashboard).
	_, err := h.fp.Refund(ctx, payment.RefundRequest{PaymentID: b.PaymentID, BookingID: b.BookingID,
		Amount: 30000, IdempotencyKey: "dashboard-" + uuid.NewString()})
	require.NoError(t, err)
	var got struct {
		bookingJSON
		AmountRefunded int64 `json:"amount_refunded"`
	}
	require.NoError(t, h.fp.WaitIdle(ctx))
	h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, h.auth("ann", ev.ID)).json(t, &got)
	assert.Equal(t, "confirmed", got.Status, "the sale stands")
	assert.Len(t, got.Tickets, 2)
	assert.Equal(t, int64(30000), got.AmountRefunded)

	m := h.money(ev.ID)
	assert.Equal(t, b.Amount-30000, m.Confirmed.Amount, "the sale keeps what was not returned: %+v", m)
	assert.Equal(t, int64(30000), m.PartlyRefunded.Amount, "%+v", m)
	assert.Equal(t, int64(1), m.PartlyRefunded.Count, "%+v", m)
	assert.Equal(t, b.Amount, m.Captured.Amount, "%+v", m)
	h.requireSeatsOnce(ev.ID)
}

// A refund the provider refused as an invalid request used to stay pending
// and be made again on every pass of the reconciliation, with no backoff
// and no reason anywhere. Here the provider refuses every refund of the
// payment (pm_fakepay_refund_refused), and the buyer cancels.
func TestRefusedRefundBacksOffVisibly(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10, "hold_ttl_seconds": 3600})
	hold := h.holdOne(ev.ID, "ann", 1)
	b1 := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodRefundRefused)
	require.Equal(t, "confirmed", h.settled(ev.ID, "ann", b1.BookingID).Status)
	h.cancel(ev.ID, "ann", b1.BookingID)
	row := func() (status, refund, reason string, attempts int) {
		require.NoError(t, h.ledger.Pool().QueryRow(context.Background(),
			`SELECT status, refund_status, refund_error, refund_attempts FROM bookings WHERE id = $1`, b1.BookingID).
			Scan(&status, &refund, &reason, &attempts))
		return
	}
	status, refund, reason, attempts := row()
	assert.Equal(t, "cancelled", status)
	assert.Equal(t, "failed", refund, "visible: the refund failed")
	assert.Contains(t, reason, "invalid payment request", "the provider's reason is kept")
	assert.Equal(t, 0, attempts)
	assert.Equal(t, 1.0, h.gauge("waitroom_origin_refunds_failed"))

	// The reconciliation does not make it again at once.
	h.reconcile()
	h.reconcile()
	_, refund, _, attempts = row()
	assert.Equal(t, "failed", refund)
	assert.Equal(t, 0, attempts, "no new attempt within the backoff")

	// After the wait, a new attempt (refused again: a longer wait).
	h.clock.Advance(time.Hour)
	h.reconcile()
	_, refund, _, attempts = row()
	assert.Equal(t, "failed", refund)
	assert.Equal(t, 1, attempts, "one new attempt after the wait")
	h.money(ev.ID)
}

// A pending hold whose failed booking was refunded (paid after failure)
// and whose other booking failed too is still the buyer's to pay for: the
// refunded booking does not stand in the way of a new one.
func TestNewBookingAfterARefundedOneOfTheHold(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10, "hold_ttl_seconds": 600})
	hold := h.holdOne(ev.ID, "ann", 1)
	b1 := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodSilent)
	require.Equal(t, http.StatusOK, h.webhook(paymentFailed("evt_f1", b1.PaymentID, b1.BookingID, b1.Amount)).status)
	b2 := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodSilent)
	require.Equal(t, http.StatusOK, h.webhook(intentEvent("evt_s1", "payment_intent.succeeded", b1.PaymentID, b1.BookingID, b1.Amount)).status)
	require.Equal(t, "refunded", h.settled(ev.ID, "ann", b1.BookingID).Status)
	require.Equal(t, http.StatusOK, h.webhook(paymentFailed("evt_f2", b2.PaymentID, b2.BookingID, b2.Amount)).status)

	b3 := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodVisa)
	assert.NotEqual(t, b1.BookingID, b3.BookingID, "a new booking")
	got := h.settled(ev.ID, "ann", b3.BookingID)
	assert.Equal(t, "confirmed", got.Status, "%+v", got)
	h.requireSeatsOnce(ev.ID)
	h.money(ev.ID)
}
