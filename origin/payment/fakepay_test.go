package payment

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// receiver is a webhook endpoint that verifies what it gets, the way the
// origin will.
type receiver struct {
	t      *testing.T
	clock  *fakeClock
	srv    *httptest.Server
	answer func(n int) int // status for the n-th request (1-based)

	mu       sync.Mutex
	requests int
	events   []Event
	bodies   [][]byte
	bad      []error
	arrived  chan struct{} // one value per request
}

func newReceiver(t *testing.T, clock *fakeClock) *receiver {
	r := &receiver{t: t, clock: clock, arrived: make(chan struct{}, 1024), answer: func(int) int { return http.StatusOK }}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		ev, err := VerifyWebhook(body, req.Header.Get(SignatureHeader), testSecret, clock.Now())
		r.mu.Lock()
		r.requests++
		n := r.requests
		if err != nil {
			r.bad = append(r.bad, err)
		} else {
			r.events = append(r.events, ev)
			r.bodies = append(r.bodies, body)
		}
		answer := r.answer
		r.mu.Unlock()
		w.WriteHeader(answer(n))
		r.arrived <- struct{}{}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) setAnswer(f func(n int) int) {
	r.mu.Lock()
	r.answer = f
	r.mu.Unlock()
}

// waitFor blocks until n more requests arrived; the deadline only stops a
// broken test from hanging.
func (r *receiver) waitFor(n int) {
	r.t.Helper()
	deadline := time.After(30 * time.Second)
	for range n {
		select {
		case <-r.arrived:
		case <-deadline:
			r.t.Fatalf("webhook endpoint: expected %d more requests", n)
		}
	}
}

func (r *receiver) snapshot() (requests int, events []Event, bad []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, append([]Event(nil), r.events...), append([]error(nil), r.bad...)
}

func newFakepay(t *testing.T, cfg FakepayConfig) *Fakepay {
	t.Helper()
	if cfg.WebhookSecret == "" {
		cfg.WebhookSecret = testSecret
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = time.Millisecond
	}
	if cfg.Seed == 0 {
		cfg.Seed = 42
	}
	fp, err := NewFakepay(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fp.Close() })
	return fp
}

func waitIdle(t *testing.T, fp *Fakepay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, fp.WaitIdle(ctx))
}

func visa(booking string) CreateRequest {
	return CreateRequest{BookingID: booking, Amount: 90000, Currency: "INR", PaymentMethod: MethodVisa}
}

func TestFakepayChargesOnceUnderConcurrentRetries(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})

	const callers = 20
	var wg sync.WaitGroup
	got := make([]Payment, callers)
	errs := make([]error, callers)
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			got[i], errs[i] = fp.CreatePayment(t.Context(), visa("b_1"))
		})
	}
	close(start)
	wg.Wait()

	for i := range callers {
		require.NoError(t, errs[i])
		assert.Equal(t, got[0], got[i], "every retry returns the first payment")
	}
	p := got[0]
	assert.Regexp(t, `^pi_`, p.ID)
	assert.Equal(t, Payment{ID: p.ID, BookingID: "b_1", Amount: 90000, Currency: "inr", Status: StatusSucceeded,
		Created: clock.Now()}, p)
	assert.EqualValues(t, 1, fp.Charges())

	waitIdle(t, fp)
	n, events, bad := rcv.snapshot()
	assert.Empty(t, bad)
	require.Equal(t, 1, n, "one payment, one event, delivered once")
	assert.Equal(t, Event{ID: events[0].ID, Type: "payment_intent.succeeded", Kind: KindPaymentSucceeded, PaymentID: p.ID,
		BookingID: "b_1", Amount: 90000, Currency: "inr", Created: clock.Now(), RequestKey: PaymentKey("b_1")}, events[0])
	assert.EqualValues(t, 1, fp.WebhooksSent())
}

func TestFakepayIdempotencyKeyWithOtherParameters(t *testing.T) {
	fp := newFakepay(t, FakepayConfig{})
	first, err := fp.CreatePayment(t.Context(), visa("b_1"))
	require.NoError(t, err)

	for name, req := range map[string]CreateRequest{
		"amount":   {BookingID: "b_1", Amount: 1, Currency: "inr", PaymentMethod: MethodVisa},
		"currency": {BookingID: "b_1", Amount: 90000, Currency: "usd", PaymentMethod: MethodVisa},
		"method":   {BookingID: "b_1", Amount: 90000, Currency: "inr", PaymentMethod: MethodDeclined},
		"metadata": {BookingID: "b_1", Amount: 90000, Currency: "inr", PaymentMethod: MethodVisa, Metadata: map[string]string{"seat": "1"}},
		"booking":  {BookingID: "b_2", Amount: 90000, Currency: "inr", PaymentMethod: MethodVisa, IdempotencyKey: PaymentKey("b_1")},
	} {
		_, err := fp.CreatePayment(t.Context(), req)
		assert.ErrorIs(t, err, ErrIdempotencyConflict, name)
	}
	again, err := fp.CreatePayment(t.Context(), visa("b_1"))
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.EqualValues(t, 1, fp.Charges())

	other, err := fp.CreatePayment(t.Context(), visa("b_2"))
	require.NoError(t, err)
	assert.NotEqual(t, first.ID, other.ID, "another booking is another key")
	assert.EqualValues(t, 2, fp.Charges())
}

func TestFakepayRejectsInvalidRequests(t *testing.T) {
	fp := newFakepay(t, FakepayConfig{})
	for name, req := range map[string]CreateRequest{
		"no booking":  {Amount: 1, Currency: "inr", PaymentMethod: MethodVisa},
		"zero amount": {BookingID: "b", Currency: "inr", PaymentMethod: MethodVisa},
		"currency":    {BookingID: "b", Amount: 1, Currency: "rupees", PaymentMethod: MethodVisa},
		"no method":   {BookingID: "b", Amount: 1, Currency: "inr"},
	} {
		_, err := fp.CreatePayment(t.Context(), req)
		assert.ErrorIs(t, err, ErrInvalidRequest, name)
	}
	assert.Zero(t, fp.Stats())
}

func TestFakepayDeclines(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})

	tests := []struct {
		method, code, declineCode string
		reason                    string
	}{
		{MethodDeclined, "card_declined", "generic_decline", "Your card was declined."},
		{"pm_card_chargeDeclinedInsufficientFunds", "card_declined", "insufficient_funds", "insufficient funds"},
		{"pm_card_bogus", "unknown_payment_method", "", `unknown payment method "pm_card_bogus"`},
	}
	for i, tt := range tests {
		booking := "b_" + tt.method
		req := CreateRequest{BookingID: booking, Amount: 500, Currency: "inr", PaymentMethod: tt.method}
		p, err := fp.CreatePayment(t.Context(), req)
		require.ErrorIs(t, err, ErrDeclined, tt.method)
		var d *DeclineError
		require.ErrorAs(t, err, &d)
		assert.Equal(t, tt.code, d.Code)
		assert.Equal(t, tt.declineCode, d.DeclineCode)
		assert.Contains(t, d.Message, tt.reason)
		assert.Equal(t, p.ID, d.PaymentID, "the failed payment comes with the decline")
		assert.Equal(t, StatusFailed, p.Status)

		again, err2 := fp.CreatePayment(t.Context(), req)
		assert.ErrorIs(t, err2, ErrDeclined, "a retry replays the decline")
		assert.Equal(t, p, again)

		rcv.waitFor(1)
		_, events, bad := rcv.snapshot()
		require.Empty(t, bad)
		ev := events[i]
		assert.Equal(t, KindPaymentFailed, ev.Kind)
		assert.Equal(t, p.ID, ev.PaymentID)
		assert.Equal(t, booking, ev.BookingID)
		assert.NotEmpty(t, ev.FailureMessage)

		got, err := fp.GetPayment(t.Context(), p.ID)
		require.NoError(t, err)
		assert.Equal(t, StatusFailed, got.Status)
	}
	st := fp.Stats()
	assert.EqualValues(t, 0, st.Charges, "no money taken")
	assert.EqualValues(t, len(tests), st.Declines)
}

func TestFakepaySilentPaymentNeedsRedelivery(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now, MinCopies: 3, MaxCopies: 3})

	p, err := fp.CreatePayment(t.Context(), CreateRequest{BookingID: "b_s", Amount: 100, Currency: "inr", PaymentMethod: MethodSilent})
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, p.Status)
	assert.EqualValues(t, 1, fp.Charges())

	// A visible payment afterwards: once its copies are in, the silent one
	// would have been too.
	_, err = fp.CreatePayment(t.Context(), visa("b_v"))
	require.NoError(t, err)
	waitIdle(t, fp)
	_, events, _ := rcv.snapshot()
	require.Len(t, events, 3)
	for _, ev := range events {
		assert.Equal(t, "b_v", ev.BookingID, "nothing was sent for the silent payment")
	}

	got, err := fp.GetPayment(t.Context(), p.ID)
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, got.Status, "the reconciliation finds it succeeded")

	require.NoError(t, fp.Redeliver(t.Context(), p.ID))
	require.NoError(t, fp.Redeliver(t.Context(), p.ID))
	_, events, bad := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, events, 5)
	assert.Equal(t, p.ID, events[3].PaymentID)
	assert.Equal(t, KindPaymentSucceeded, events[3].Kind)
	assert.Equal(t, events[3].ID, events[4].ID, "a redelivery is the same event")

	err = fp.Redeliver(t.Context(), "pi_unknown")
	assert.ErrorIs(t, err, ErrNotFound)

	rcv.setAnswer(func(int) int { return http.StatusInternalServerError })
	assert.Error(t, fp.Redeliver(t.Context(), p.ID), "the endpoint's refusal is reported")
}

func TestFakepayTimeoutStillCharges(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now, TimeoutRate: 1})

	_, err := fp.CreatePayment(t.Context(), visa("b_t"))
	require.ErrorIs(t, err, ErrAmbiguous)
	_, err = fp.CreatePayment(t.Context(), visa("b_t"))
	require.ErrorIs(t, err, ErrAmbiguous)
	assert.EqualValues(t, 1, fp.Charges(), "the first call charged; its retry did not")
	assert.EqualValues(t, 2, fp.Stats().InjectedTimeouts)

	// The webhook tells the origin about the payment it never heard of.
	rcv.waitFor(1)
	_, events, _ := rcv.snapshot()
	require.Len(t, events, 1)
	assert.Equal(t, "b_t", events[0].BookingID)

	require.NoError(t, fp.SetFaults(0, 0))
	p, err := fp.CreatePayment(t.Context(), visa("b_t"))
	require.NoError(t, err)
	assert.Equal(t, events[0].PaymentID, p.ID, "the retry with the same key returns the first payment")
	assert.EqualValues(t, 1, fp.Charges())
	assert.Equal(t, []Payment{p}, fp.PaymentsForBooking("b_t"))
}

func TestFakepayFailureBeforeTheProvider(t *testing.T) {
	fp := newFakepay(t, FakepayConfig{FailureRate: 1})
	_, err := fp.CreatePayment(t.Context(), visa("b_f"))
	require.ErrorIs(t, err, ErrAmbiguous)
	assert.Zero(t, fp.Charges())
	assert.Empty(t, fp.PaymentsForBooking("b_f"))

	require.NoError(t, fp.SetFaults(0, 0))
	_, err = fp.CreatePayment(t.Context(), visa("b_f"))
	require.NoError(t, err)
	assert.EqualValues(t, 1, fp.Charges())
	assert.Error(t, fp.SetFaults(2, 0))
}

func TestFakepayLatencyHonoursTheContext(t *testing.T) {
	fp := newFakepay(t, FakepayConfig{Latency: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := fp.CreatePayment(ctx, visa("b_l"))
	require.ErrorIs(t, err, ErrAmbiguous)
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, fp.Charges())
}

func TestFakepayRefunds(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})

	p, err := fp.CreatePayment(t.Context(), visa("b_r"))
	require.NoError(t, err)
	rcv.waitFor(1)

	req := RefundRequest{PaymentID: p.ID, BookingID: "b_r"}
	r, err := fp.Refund(t.Context(), req)
	require.NoError(t, err)
	assert.Regexp(t, `^re_`, r.ID)
	assert.Equal(t, Refund{ID: r.ID, PaymentID: p.ID, Amount: 90000, Currency: "inr", Status: RefundSucceeded}, r)

	again, err := fp.Refund(t.Context(), req)
	require.NoError(t, err)
	assert.Equal(t, r, again, "the same key returns the first refund")
	assert.EqualValues(t, 1, fp.Refunds())

	_, err = fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_r", IdempotencyKey: "another"})
	assert.ErrorIs(t, err, ErrAlreadyRefunded)
	_, err = fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_r", Amount: 5})
	assert.ErrorIs(t, err, ErrIdempotencyConflict)
	_, err = fp.Refund(t.Context(), RefundRequest{PaymentID: "pi_unknown", BookingID: "b_r", IdempotencyKey: "k"})
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_other"})
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.EqualValues(t, 1, fp.Refunds())

	got, err := fp.GetPayment(t.Context(), p.ID)
	require.NoError(t, err)
	assert.EqualValues(t, 90000, got.AmountRefunded)

	rcv.waitFor(1)
	_, events, bad := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, events, 2)
	assert.Equal(t, Event{ID: events[1].ID, Type: "charge.refunded", Kind: KindRefunded, PaymentID: p.ID, BookingID: "b_r",
		Amount: 90000, AmountRefunded: 90000, Currency: "inr", Created: clock.Now()}, events[1])

	declined, err := fp.CreatePayment(t.Context(), CreateRequest{BookingID: "b_d", Amount: 1, Currency: "inr", PaymentMethod: MethodDeclined})
	require.ErrorIs(t, err, ErrDeclined)
	_, err = fp.Refund(t.Context(), RefundRequest{PaymentID: declined.ID, BookingID: "b_d"})
	assert.ErrorIs(t, err, ErrInvalidRequest, "nothing was charged")
}

func TestFakepayPartialRefunds(t *testing.T) {
	fp := newFakepay(t, FakepayConfig{})
	p, err := fp.CreatePayment(t.Context(), visa("b_p"))
	require.NoError(t, err)
	_, err = fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_p", Amount: 90000 + 1, IdempotencyKey: "k0"})
	assert.ErrorIs(t, err, ErrInvalidRequest)
	_, err = fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_p", Amount: 30000, IdempotencyKey: "k1"})
	require.NoError(t, err)
	r, err := fp.Refund(t.Context(), RefundRequest{PaymentID: p.ID, BookingID: "b_p", IdempotencyKey: "k2"})
	require.NoError(t, err)
	assert.EqualValues(t, 60000, r.Amount, "the rest")
	assert.EqualValues(t, 2, fp.Refunds())
}

func TestFakepayWebhooksDuplicatedAndSigned(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now, MinCopies: 1, MaxCopies: 4,
		MaxDelay: 5 * time.Millisecond})

	want := map[string]string{} // payment id -> booking
	for _, b := range []string{"b_1", "b_2", "b_3", "b_4", "b_5", "b_6"} {
		p, err := fp.CreatePayment(t.Context(), visa(b))
		require.NoError(t, err)
		want[p.ID] = b
	}
	waitIdle(t, fp)

	n, events, bad := rcv.snapshot()
	require.Empty(t, bad, "every delivery verifies")
	copies := map[string]int{}
	ids := map[string]string{}
	for _, ev := range events {
		assert.Equal(t, want[ev.PaymentID], ev.BookingID)
		copies[ev.PaymentID]++
		if id, ok := ids[ev.PaymentID]; ok {
			assert.Equal(t, id, ev.ID, "copies keep the event id")
		}
		ids[ev.PaymentID] = ev.ID
	}
	require.Len(t, copies, len(want), "every event arrived")
	for id, c := range copies {
		assert.True(t, c >= 1 && c <= 4, "payment %s delivered %d times", id, c)
	}
	st := fp.Stats()
	assert.EqualValues(t, n, st.WebhooksSent)
	assert.EqualValues(t, n, st.WebhookAttempts)
	assert.Greater(t, n, len(want), "with a seed of 42, some events are duplicated")
}

func TestFakepayEventFormat(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})
	p, err := fp.CreatePayment(t.Context(), CreateRequest{BookingID: "b_1", Amount: 90000, Currency: "inr",
		PaymentMethod: MethodVisa, Metadata: map[string]string{"event_id": "42"}})
	require.NoError(t, err)
	rcv.waitFor(1)
	rcv.mu.Lock()
	body := rcv.bodies[0]
	rcv.mu.Unlock()

	var got map[string]any
	require.NoError(t, json.Unmarshal(body, &got))
	obj := got["data"].(map[string]any)["object"].(map[string]any)
	assert.Regexp(t, `^evt_`, got["id"])
	assert.Equal(t, "event", got["object"])
	assert.Equal(t, "payment_intent.succeeded", got["type"])
	assert.EqualValues(t, clock.Now().Unix(), got["created"])
	assert.Equal(t, p.ID, obj["id"])
	assert.Equal(t, "payment_intent", obj["object"])
	assert.EqualValues(t, 90000, obj["amount"])
	assert.Equal(t, "inr", obj["currency"])
	assert.Equal(t, "succeeded", obj["status"])
	assert.Equal(t, map[string]any{"booking_id": "b_1", "event_id": "42"}, obj["metadata"])
	req := got["request"].(map[string]any)
	assert.Regexp(t, `^req_`, req["id"])
	assert.Equal(t, PaymentKey("b_1"), req["idempotency_key"], "the create call caused the outcome")

	ev, err := fp.ParseWebhook(body, SignWebhook(body, fp.WebhookSecret(), clock.Now()))
	require.NoError(t, err)
	assert.Equal(t, PaymentKey("b_1"), ev.RequestKey)
}

func TestFakepayRetriesUntil2xx(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	rcv.setAnswer(func(n int) int {
		if n <= 3 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})
	p, err := fp.CreatePayment(t.Context(), visa("b_1"))
	require.NoError(t, err)
	waitIdle(t, fp)

	n, events, bad := rcv.snapshot()
	require.Empty(t, bad)
	assert.Equal(t, 4, n)
	for _, ev := range events {
		assert.Equal(t, p.ID, ev.PaymentID)
		assert.Equal(t, events[0].ID, ev.ID)
	}
	st := fp.Stats()
	assert.EqualValues(t, 4, st.WebhookAttempts)
	assert.EqualValues(t, 3, st.WebhookFailures)
	assert.EqualValues(t, 1, st.WebhooksSent)
}

func TestFakepayGivesUpAfterMaxAttempts(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	rcv.setAnswer(func(int) int { return http.StatusBadRequest })
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now, MaxAttempts: 3})
	_, err := fp.CreatePayment(t.Context(), visa("b_1"))
	require.NoError(t, err)
	waitIdle(t, fp)
	n, _, _ := rcv.snapshot()
	assert.Equal(t, 3, n)
	assert.EqualValues(t, 0, fp.WebhooksSent())
}

// Signatures are made at sending time: a delivery retried long after the
// event still verifies, while a captured one goes stale.
func TestFakepaySignsEachAttemptAnew(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	rcv.setAnswer(func(n int) int {
		if n == 1 {
			clock.Advance(time.Hour)
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})
	p, err := fp.CreatePayment(t.Context(), visa("b_1"))
	require.NoError(t, err)
	waitIdle(t, fp)
	n, events, bad := rcv.snapshot()
	require.Equal(t, 2, n)
	assert.Len(t, events, 2, "both attempts verified against the clock of their time")
	assert.Empty(t, bad)
	assert.Equal(t, p.Created, events[1].Created, "the event keeps its creation time")
}

// Pause and Redeliver give a test the order of arrival: here the second
// payment's event lands before the first's.
func TestFakepayOutOfOrderOnDemand(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})

	fp.Pause()
	first, err := fp.CreatePayment(t.Context(), visa("b_1"))
	require.NoError(t, err)
	second, err := fp.CreatePayment(t.Context(), visa("b_2"))
	require.NoError(t, err)
	n, _, _ := rcv.snapshot()
	require.Zero(t, n, "nothing leaves while paused")

	require.NoError(t, fp.Redeliver(t.Context(), second.ID))
	clock.Advance(10 * time.Minute) // the first buyer's hold has expired meanwhile
	fp.Resume()
	waitIdle(t, fp)

	_, events, bad := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, events, 3)
	assert.Equal(t, second.ID, events[0].PaymentID)
	got := map[string]int{events[1].PaymentID: 1, events[2].PaymentID: 1}
	assert.Equal(t, map[string]int{first.ID: 1, second.ID: 1}, got)
}

func TestFakepayDeliverAfter(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now})
	p, err := fp.CreatePayment(t.Context(), CreateRequest{BookingID: "b_late", Amount: 100, Currency: "inr", PaymentMethod: MethodSilent})
	require.NoError(t, err)

	require.NoError(t, fp.DeliverAfter(p.ID, time.Millisecond))
	rcv.waitFor(1)
	_, events, _ := rcv.snapshot()
	require.Len(t, events, 1)
	assert.Equal(t, p.ID, events[0].PaymentID)
	assert.ErrorIs(t, fp.DeliverAfter("pi_unknown", 0), ErrNotFound)
}

func TestFakepayCloseStopsEverything(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	rcv.setAnswer(func(int) int { return http.StatusInternalServerError })
	fp := newFakepay(t, FakepayConfig{WebhookURL: rcv.srv.URL, Now: clock.Now, MaxAttempts: -1, MinCopies: 3, MaxCopies: 3})
	p, err := fp.CreatePayment(t.Context(), visa("b_1"))
	require.NoError(t, err)
	rcv.waitFor(6) // the copies are retrying

	require.NoError(t, fp.Close())
	// Close has waited for every delivery goroutine: none is left to post.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, fp.WaitIdle(ctx))

	_, err = fp.CreatePayment(t.Context(), visa("b_2"))
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, fp.DeliverAfter(p.ID, 0), ErrClosed)
	assert.ErrorIs(t, fp.Redeliver(t.Context(), p.ID), ErrClosed)
	require.NoError(t, fp.Close(), "closing twice is fine")
}

func TestFakepayStopsWithItsContext(t *testing.T) {
	clock := newClock()
	rcv := newReceiver(t, clock)
	rcv.setAnswer(func(int) int { return http.StatusInternalServerError })
	ctx, cancel := context.WithCancel(t.Context())
	fp, err := NewFakepay(ctx, FakepayConfig{WebhookSecret: testSecret, WebhookURL: rcv.srv.URL, Now: clock.Now,
		RetryBase: time.Millisecond, MaxAttempts: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = fp.Close() })
	_, err = fp.CreatePayment(t.Context(), visa("b_1"))
	require.NoError(t, err)
	rcv.waitFor(2)

	cancel()
	waitIdle(t, fp)
	_, err = fp.CreatePayment(t.Context(), visa("b_2"))
	assert.ErrorIs(t, err, ErrClosed)
}

func TestFakepayWithoutWebhookURL(t *testing.T) {
	clock := newClock()
	fp := newFakepay(t, FakepayConfig{Now: clock.Now})
	p, err := fp.CreatePayment(t.Context(), visa("b_1"))
	require.NoError(t, err)
	waitIdle(t, fp)
	assert.Zero(t, fp.Stats().WebhookAttempts)
	assert.Error(t, fp.Redeliver(t.Context(), p.ID))

	rcv := newReceiver(t, clock)
	fp.SetWebhookURL(rcv.srv.URL)
	require.NoError(t, fp.Redeliver(t.Context(), p.ID))
	_, events, _ := rcv.snapshot()
	require.Len(t, events, 1)
}

func TestFakepayGeneratesASecret(t *testing.T) {
	fp, err := NewFakepay(t.Context(), FakepayConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = fp.Close() })
	assert.Regexp(t, `^whsec_[0-9a-f]{48}$`, fp.WebhookSecret())

	body := eventBody("payment_intent.succeeded", succeededIntent)
	_, err = fp.ParseWebhook(body, SignWebhook(body, fp.WebhookSecret(), time.Now()))
	assert.NoError(t, err)
}

func TestNewFakepayRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]FakepayConfig{
		"failure rate": {FailureRate: 1.5},
		"timeout rate": {TimeoutRate: -0.1},
		"latency":      {Latency: -time.Second},
		"copies":       {MinCopies: -1},
	} {
		_, err := NewFakepay(t.Context(), cfg)
		assert.Error(t, err, name)
	}
}

func TestGetPaymentUnknown(t *testing.T) {
	fp := newFakepay(t, FakepayConfig{})
	_, err := fp.GetPayment(t.Context(), "pi_nope")
	assert.True(t, errors.Is(err, ErrNotFound))
}
