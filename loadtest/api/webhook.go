package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Signature is the Stripe-Signature header for body sent at t.
func Signature(secret string, body []byte, t time.Time) string {
	ts := fmt.Sprint(t.Unix())
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + string(body)))
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// PaymentEvent is a provider event in Stripe's format.
type PaymentEvent struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object PaymentIntent `json:"object"`
	} `json:"data"`
}

// PaymentIntent is the object of a payment event.
type PaymentIntent struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Amount   int64             `json:"amount"`
	Currency string            `json:"currency"`
	Status   string            `json:"status"`
	Metadata map[string]string `json:"metadata"`
}

// Succeeded is the payment_intent.succeeded event of b's payment.
func Succeeded(b Booking) PaymentEvent {
	var e PaymentEvent
	e.ID = "evt_lt_" + randomHex(12)
	e.Object = "event"
	e.Type = "payment_intent.succeeded"
	e.Created = time.Now().Unix()
	e.Data.Object = PaymentIntent{
		ID: b.PaymentID, Object: "payment_intent", Amount: b.Amount, Currency: b.Currency,
		Status: "succeeded", Metadata: map[string]string{"booking_id": b.BookingID},
	}
	return e
}

// Webhooks delivers signed events to the origin, as a provider would.
type Webhooks struct {
	Client
	Provider string
	Secret   string
}

// Deliver posts e once and reports the status the origin answered.
func (w Webhooks) Deliver(ctx context.Context, e PaymentEvent) (int, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return 0, err
	}
	resp, err := w.Do(ctx, Request{
		Method: http.MethodPost, Path: "/v1/webhooks/" + w.Provider, Raw: body,
		Header: http.Header{"Stripe-Signature": {Signature(w.Secret, body, time.Now())}},
	})
	if err != nil {
		return 0, fmt.Errorf("deliver webhook %s: %w", e.ID, err)
	}
	return resp.Status, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewKey returns a random idempotency key.
func NewKey() string { return randomHex(16) }
