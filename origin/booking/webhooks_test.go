package booking_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// heldReads is fakepay whose next GetPayment, once armed, reads the
// payment and then waits for release before it answers: a settlement
// caught between the provider's answer and its own write.
type heldReads struct {
	*payment.Fakepay
	mu      sync.Mutex
	armed   bool
	read    chan struct{}
	release chan struct{}
}

func (h *heldReads) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.read, h.release = true, make(chan struct{}), make(chan struct{})
}

func (h *heldReads) GetPayment(ctx context.Context, id string) (payment.Payment, error) {
	p, err := h.Fakepay.GetPayment(ctx, id)
	h.mu.Lock()
	hold := h.armed
	h.armed = false
	read, release := h.read, h.release
	h.mu.Unlock()
	if hold {
		close(read)
		<-release
	}
	return p, err
}

// TestTwoRefundEventsOfOnePaymentAtOnce: a confirmed booking's payment is
// refunded at the provider in two parts, and the second charge.refunded
// arrives while the first is still being settled on the provider's answer
// read before the second refund. The second is settled on its own answer:
// all the money went back, so the sale ends, rather than being recorded as
// handled by the first's settlement.
func TestTwoRefundEventsOfOnePaymentAtOnce(t *testing.T) {
	var held *heldReads
	f := newFixturePaying(t, func(fp *payment.Fakepay) payment.Provider {
		held = &heldReads{Fakepay: fp}
		return held
	})
	ctx := context.Background()
	b := f.book(f.hold("ann"), payment.MethodVisa)
	require.Equal(t, "processed", f.event(payment.KindPaymentSucceeded, b))
	b = f.booking(b.ID)
	require.Equal(t, ledger.BookingConfirmed, b.Status)

	refunded := func(amount int64) payment.Event {
		return payment.Event{ID: "evt_" + uuid.NewString(), Type: "charge.refunded", Kind: payment.KindRefunded,
			PaymentID: b.PaymentID, BookingID: b.ID, Amount: b.Amount, Currency: b.Currency, AmountRefunded: amount}
	}
	_, err := f.fp.RefundAtProvider(b.PaymentID, 30)
	require.NoError(t, err)
	held.arm()
	first := make(chan error, 1)
	go func() {
		_, err := f.svc.Settlement().HandlePaymentEvent(ctx, refunded(30))
		first <- err
	}()
	<-held.read // the first settlement has the provider's answer: 30 back

	_, err = f.fp.RefundAtProvider(b.PaymentID, 70)
	require.NoError(t, err)
	second := make(chan string, 1)
	go func() {
		out, err := f.svc.Settlement().HandlePaymentEvent(ctx, refunded(100))
		assert.NoError(t, err)
		second <- out
	}()
	select {
	case out := <-second:
		assert.Equal(t, "processed", out)
	case <-time.After(20 * time.Second):
		t.Error("the second event waited for the first's settlement")
	}
	close(held.release)
	require.NoError(t, <-first)

	got := f.booking(b.ID)
	assert.Equal(t, ledger.BookingRefunded, got.Status, "all of it went back: %+v", got)
	tickets, err := f.ledger.TicketsOf(ctx, b.ID)
	require.NoError(t, err)
	assert.Empty(t, tickets, "no valid ticket")
	m, err := f.ledger.MoneyReport(ctx, f.ev.ID)
	require.NoError(t, err)
	assert.NoError(t, m.Err())
}

// refundEvent is a refund event (refund.updated, refund.failed) about
// refund r of b's payment.
func refundEvent(b ledger.Booking, typ string, r payment.Refund) payment.Event {
	return payment.Event{ID: "evt_" + uuid.NewString(), Type: typ, Kind: payment.KindRefundUpdated,
		PaymentID: b.PaymentID, BookingID: b.ID, Amount: b.Amount, Currency: b.Currency,
		RefundID: r.ID, RefundStatus: r.Status}
}

// TestRefundsMadeAtTheProviderFollowed: a refund made at the provider's
// dashboard is followed past its first event. One pending when made
// (charge.refunded then finds nothing back for good) ends the sale when
// the refund event says it succeeded; one that ended the sale and fails
// days later is the origin's to make again, under its own key.
func TestRefundsMadeAtTheProviderFollowed(t *testing.T) {
	confirmed := func(t *testing.T, f *fixture) ledger.Booking {
		t.Helper()
		b := f.book(f.hold("ann"), payment.MethodVisa)
		require.Equal(t, "processed", f.event(payment.KindPaymentSucceeded, b))
		b = f.booking(b.ID)
		require.Equal(t, ledger.BookingConfirmed, b.Status)
		return b
	}
	handle := func(t *testing.T, f *fixture, ev payment.Event) {
		t.Helper()
		out, err := f.svc.Settlement().HandlePaymentEvent(context.Background(), ev)
		require.NoError(t, err)
		require.Equal(t, "processed", out)
	}
	chargeRefunded := func(b ledger.Booking) payment.Event {
		return payment.Event{ID: "evt_" + uuid.NewString(), Type: "charge.refunded", Kind: payment.KindRefunded,
			PaymentID: b.PaymentID, BookingID: b.ID, Amount: b.Amount, Currency: b.Currency, AmountRefunded: b.Amount}
	}

	t.Run("pending when made, succeeded later", func(t *testing.T) {
		f := newFixture(t)
		ctx := context.Background()
		b := confirmed(t, f)
		require.NoError(t, f.fp.SetRefundOutcome(b.PaymentID, payment.RefundPending))
		r, err := f.fp.RefundAtProvider(b.PaymentID, 0)
		require.NoError(t, err)
		require.Equal(t, payment.RefundPending, r.Status)
		handle(t, f, chargeRefunded(b))
		assert.Equal(t, ledger.BookingConfirmed, f.booking(b.ID).Status, "nothing back for good yet")

		require.NoError(t, f.fp.SettleRefund(r.ID, payment.RefundSucceeded))
		r.Status = payment.RefundSucceeded
		handle(t, f, refundEvent(b, "refund.updated", r))
		got := f.booking(b.ID)
		assert.Equal(t, ledger.BookingRefunded, got.Status, "%+v", got)
		assert.Equal(t, "refunded_at_provider", got.StatusReason)
		tickets, err := f.ledger.TicketsOf(ctx, b.ID)
		require.NoError(t, err)
		assert.Empty(t, tickets)
		m, err := f.ledger.MoneyReport(ctx, f.ev.ID)
		require.NoError(t, err)
		assert.NoError(t, m.Err())
	})

	t.Run("ended the sale, failed later", func(t *testing.T) {
		f := newFixture(t)
		ctx := context.Background()
		b := confirmed(t, f)
		r, err := f.fp.RefundAtProvider(b.PaymentID, 0)
		require.NoError(t, err)
		handle(t, f, chargeRefunded(b))
		require.Equal(t, ledger.BookingRefunded, f.booking(b.ID).Status)

		require.NoError(t, f.fp.SettleRefund(r.ID, payment.RefundFailed))
		r.Status = payment.RefundFailed
		handle(t, f, refundEvent(b, "refund.failed", r))
		got := f.booking(b.ID)
		assert.Equal(t, ledger.BookingRefunded, got.Status, "refunded again by the origin: %+v", got)
		assert.NotEmpty(t, got.RefundID, "the origin's own refund")
		pays := f.fp.PaymentsForBooking(b.ID)
		require.Len(t, pays, 1)
		assert.Equal(t, pays[0].Amount, pays[0].Returned(), "the money went back to the buyer")
		m, err := f.ledger.MoneyReport(ctx, f.ev.ID)
		require.NoError(t, err)
		assert.NoError(t, m.Err())
	})
}
