package payment

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v85"
)

// Stripe's event envelope and the parts of its objects a booking reads. The
// bodies are built once per event: a redelivery is the same bytes, signed
// anew.
type (
	eventJSON struct {
		ID              string           `json:"id"`
		Object          string           `json:"object"`
		APIVersion      string           `json:"api_version"`
		Created         int64            `json:"created"`
		Livemode        bool             `json:"livemode"`
		PendingWebhooks int              `json:"pending_webhooks"`
		Type            stripe.EventType `json:"type"`
		Request         requestJSON      `json:"request"`
		Data            struct {
			Object any `json:"object"`
		} `json:"data"`
	}
	// requestJSON is the API request that caused the event: the create
	// call's for its payment's outcome, none (nulls) for what the provider
	// did on its own.
	requestJSON struct {
		ID             *string `json:"id"`
		IdempotencyKey *string `json:"idempotency_key"`
	}
	intentJSON struct {
		ID               string                     `json:"id"`
		Object           string                     `json:"object"`
		Amount           int64                      `json:"amount"`
		AmountReceived   int64                      `json:"amount_received"`
		Currency         string                     `json:"currency"`
		Status           stripe.PaymentIntentStatus `json:"status"`
		Created          int64                      `json:"created"`
		Livemode         bool                       `json:"livemode"`
		PaymentMethod    string                     `json:"payment_method"`
		LatestCharge     *string                    `json:"latest_charge"`
		LastPaymentError *errorJSON                 `json:"last_payment_error"`
		Metadata         map[string]string          `json:"metadata"`
	}
	errorJSON struct {
		Type        stripe.ErrorType `json:"type"`
		Code        string           `json:"code,omitempty"`
		DeclineCode string           `json:"decline_code,omitempty"`
		Message     string           `json:"message"`
	}
	chargeJSON struct {
		ID             string            `json:"id"`
		Object         string            `json:"object"`
		Amount         int64             `json:"amount"`
		AmountRefunded int64             `json:"amount_refunded"`
		Currency       string            `json:"currency"`
		Created        int64             `json:"created"`
		Livemode       bool              `json:"livemode"`
		Paid           bool              `json:"paid"`
		Refunded       bool              `json:"refunded"`
		Status         string            `json:"status"`
		PaymentIntent  string            `json:"payment_intent"`
		Metadata       map[string]string `json:"metadata"`
	}
)

type refundJSON struct {
	ID            string              `json:"id"`
	Object        string              `json:"object"`
	Amount        int64               `json:"amount"`
	Currency      string              `json:"currency"`
	Created       int64               `json:"created"`
	Charge        string              `json:"charge"`
	PaymentIntent string              `json:"payment_intent"`
	Status        stripe.RefundStatus `json:"status"`
	FailureReason string              `json:"failure_reason,omitempty"`
	Metadata      map[string]string   `json:"metadata"`
}

func refundObject(r *fakeRefund, p *fakePayment) refundJSON {
	return refundJSON{ID: r.ID, Object: "refund", Amount: r.Amount, Currency: r.Currency, Created: r.created.Unix(),
		Charge: p.chargeID, PaymentIntent: p.ID, Status: stripe.RefundStatus(r.Status), FailureReason: r.FailureReason,
		Metadata: map[string]string{MetadataBookingID: r.bookingID}}
}

func intentObject(p *fakePayment) intentJSON {
	o := intentJSON{ID: p.ID, Object: "payment_intent", Amount: p.Amount, Currency: p.Currency,
		Created: p.Created.Unix(), PaymentMethod: p.method, Metadata: p.metadata}
	if p.Status == StatusSucceeded {
		o.Status, o.AmountReceived, o.LatestCharge = stripe.PaymentIntentStatusSucceeded, p.Amount, &p.chargeID
	} else {
		// After a declined confirmation Stripe puts the intent back to
		// waiting for another payment method.
		o.Status = stripe.PaymentIntentStatusRequiresPaymentMethod
		o.LastPaymentError = &errorJSON{Type: stripe.ErrorTypeCard, Code: p.decline.Code,
			DeclineCode: p.decline.DeclineCode, Message: p.decline.Message}
	}
	return o
}

func chargeObject(p *fakePayment) chargeJSON {
	return chargeJSON{ID: p.chargeID, Object: "charge", Amount: p.Amount, AmountRefunded: p.AmountRefunded,
		Currency: p.Currency, Created: p.Created.Unix(), Paid: true, Refunded: p.AmountRefunded == p.Amount,
		Status: "succeeded", PaymentIntent: p.ID, Metadata: p.metadata}
}

func (f *Fakepay) newEvent(typ stripe.EventType, paymentID string, object any, now time.Time) *fakeEvent {
	return f.newRequestEvent(typ, paymentID, object, now, "")
}

// newRequestEvent is newEvent for an event caused by an API request made
// with idempotency key key.
func (f *Fakepay) newRequestEvent(typ stripe.EventType, paymentID string, object any, now time.Time, key string) *fakeEvent {
	e := eventJSON{ID: "evt_" + randomID(), Object: "event", APIVersion: stripe.APIVersion,
		Created: now.Unix(), PendingWebhooks: 1, Type: typ}
	if key != "" {
		id := "req_" + randomID()
		e.Request = requestJSON{ID: &id, IdempotencyKey: &key}
	}
	e.Data.Object = object
	body, err := json.Marshal(e)
	if err != nil {
		// Only plain strings, numbers and maps of strings go in.
		panic(fmt.Sprintf("fakepay: marshal event: %v", err))
	}
	return &fakeEvent{id: e.ID, paymentID: paymentID, body: body}
}

// webhookSender delivers fakepay's webhook events: copies, delays and
// retries, the pause, and the count of deliveries under way. Its state is
// fakepay's, under fakepay's lock.
type webhookSender struct{ f *Fakepay }

// dispatch sends an event MinCopies..MaxCopies times, each copy after its own
// random delay and with its own retries.
func (w *webhookSender) dispatch(ev *fakeEvent) {
	f := w.f
	f.mu.Lock()
	if f.url == "" {
		f.mu.Unlock()
		return
	}
	copies := f.cfg.MinCopies + f.rng.IntN(f.cfg.MaxCopies-f.cfg.MinCopies+1)
	delays := make([]time.Duration, copies)
	for i := range delays {
		if f.cfg.MaxDelay > 0 {
			delays[i] = time.Duration(f.rng.Int64N(int64(f.cfg.MaxDelay) + 1))
		}
	}
	f.mu.Unlock()
	for _, d := range delays {
		f.deliverAsync(ev, d)
	}
}

// deliverAsync starts one copy's delivery; false when closed.
func (w *webhookSender) deliverAsync(ev *fakeEvent, delay time.Duration) bool {
	f := w.f
	f.mu.Lock()
	if f.closed || f.ctx.Err() != nil {
		f.mu.Unlock()
		return false
	}
	if f.inflight == 0 {
		f.idle = make(chan struct{})
	}
	f.inflight++
	f.wg.Add(1)
	f.mu.Unlock()
	go f.deliver(ev, delay)
	return true
}

func (w *webhookSender) deliver(ev *fakeEvent, delay time.Duration) {
	f := w.f
	defer func() {
		f.mu.Lock()
		f.inflight--
		if f.inflight == 0 {
			close(f.idle)
		}
		f.mu.Unlock()
		f.wg.Done()
	}()
	wait := delay
	for attempt := 1; ; attempt++ {
		if !f.sleep(wait) || !f.gate() {
			return
		}
		err := f.post(f.ctx, ev)
		if err == nil {
			return
		}
		if f.ctx.Err() != nil {
			return
		}
		if f.cfg.MaxAttempts > 0 && attempt >= f.cfg.MaxAttempts {
			f.log.Warn("fakepay: webhook given up", "event", ev.id, "payment", ev.paymentID, "attempts", attempt, "err", err)
			return
		}
		f.log.Info("fakepay: webhook will be retried", "event", ev.id, "payment", ev.paymentID, "attempt", attempt, "err", err)
		wait = f.backoff(attempt)
	}
}

// backoff doubles from RetryBase up to RetryMax, jittered so that retries of
// many events don't arrive in step.
func (w *webhookSender) backoff(attempt int) time.Duration {
	f := w.f
	d := f.cfg.RetryBase
	for i := 1; i < attempt && d < f.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, f.cfg.RetryMax)
	f.mu.Lock()
	defer f.mu.Unlock()
	return d/2 + time.Duration(f.rng.Int64N(int64(d/2)+1))
}

func (w *webhookSender) sleep(d time.Duration) bool {
	f := w.f
	if d <= 0 {
		return f.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-f.ctx.Done():
		return false
	}
}

// gate blocks while deliveries are paused; false when closed meanwhile.
func (w *webhookSender) gate() bool {
	f := w.f
	f.mu.Lock()
	ch := f.paused
	f.mu.Unlock()
	if ch == nil {
		return f.ctx.Err() == nil
	}
	select {
	case <-ch:
		return true
	case <-f.ctx.Done():
		return false
	}
}

// post sends one signed copy of an event. The signature's timestamp is the
// time of sending, as with Stripe, so a retried event isn't stale.
func (w *webhookSender) post(ctx context.Context, ev *fakeEvent) error {
	f := w.f
	f.mu.Lock()
	url := f.url
	f.mu.Unlock()
	if url == "" {
		return fmt.Errorf("deliver event %s: no webhook url configured", ev.id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(ev.body))
	if err != nil {
		return fmt.Errorf("deliver event %s: %w", ev.id, err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "fakepay/1.0 (Stripe-compatible webhooks)")
	req.Header.Set(SignatureHeader, SignWebhook(ev.body, f.secret, f.now()))
	f.fakeCounters.attempts.Add(1)
	resp, err := f.client.Do(req)
	if err != nil {
		f.fakeCounters.failed.Add(1)
		return fmt.Errorf("deliver event %s: %w", ev.id, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		f.fakeCounters.failed.Add(1)
		return fmt.Errorf("deliver event %s: endpoint answered %s", ev.id, resp.Status)
	}
	f.fakeCounters.sent.Add(1)
	return nil
}

// Pause holds every automatic delivery (new copies and retries) until
// Resume, so a test can land a payment's webhook after, say, its hold
// expired. Redeliver is not held.
func (w *webhookSender) Pause() {
	f := w.f
	f.mu.Lock()
	if f.paused == nil {
		f.paused = make(chan struct{})
	}
	f.mu.Unlock()
}

// Resume releases the deliveries held by Pause, all at once (in no
// particular order).
func (w *webhookSender) Resume() {
	f := w.f
	f.mu.Lock()
	if f.paused != nil {
		close(f.paused)
		f.paused = nil
	}
	f.mu.Unlock()
}

// Redeliver posts a payment's outcome event (payment_intent.succeeded or
// payment_intent.payment_failed, with its original event id) once, now, and
// reports the endpoint's answer. It is how a pm_fakepay_silent payment's
// webhook arrives, and how a test duplicates one on purpose.
func (f *Fakepay) Redeliver(ctx context.Context, paymentID string) error {
	ev, err := f.outcomeEvent(paymentID)
	if err != nil {
		return err
	}
	if err := f.post(ctx, ev); err != nil {
		return fmt.Errorf("fakepay: redeliver payment %s: %w", paymentID, err)
	}
	return nil
}

// DeliverAfter sends a payment's outcome event once more after delay, with
// the usual retries, in the background.
func (f *Fakepay) DeliverAfter(paymentID string, delay time.Duration) error {
	ev, err := f.outcomeEvent(paymentID)
	if err != nil {
		return err
	}
	if !f.deliverAsync(ev, delay) {
		return fmt.Errorf("fakepay: deliver payment %s: %w", paymentID, ErrClosed)
	}
	return nil
}

func (f *Fakepay) outcomeEvent(paymentID string) (*fakeEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("fakepay: deliver payment %s: %w", paymentID, ErrClosed)
	}
	p, ok := f.payments[paymentID]
	if !ok {
		return nil, fmt.Errorf("fakepay: deliver payment %s: %w", paymentID, ErrNotFound)
	}
	return p.outcome, nil
}

// WaitIdle waits until no delivery is under way (each has succeeded or given
// up), or ctx ends. Deliveries held by Pause are under way.
func (w *webhookSender) WaitIdle(ctx context.Context) error {
	f := w.f
	f.mu.Lock()
	n, ch := f.inflight, f.idle
	f.mu.Unlock()
	if n == 0 {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fakepay: wait for deliveries: %w", ctx.Err())
	}
}
