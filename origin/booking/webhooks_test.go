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
