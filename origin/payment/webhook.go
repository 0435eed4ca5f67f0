package payment

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v85"
	"github.com/stripe/stripe-go/v85/webhook"
)

// WebhookTolerance is how old a webhook signature may be, as Stripe's
// libraries use it: older ones are replays.
const WebhookTolerance = webhook.DefaultTolerance

// SignatureHeader is the name of the header carrying the signature.
const SignatureHeader = "Stripe-Signature"

// EventKind is what an event means to a booking.
type EventKind string

const (
	// KindOther: an event type the booking flow ignores (answered 200).
	KindOther EventKind = ""
	// KindPaymentSucceeded: payment_intent.succeeded.
	KindPaymentSucceeded EventKind = "payment_succeeded"
	// KindPaymentFailed: payment_intent.payment_failed.
	KindPaymentFailed EventKind = "payment_failed"
	// KindRefunded: charge.refunded, money of the charge returned (by the
	// booking flow, or by someone at the provider, e.g. from the
	// dashboard).
	KindRefunded EventKind = "refunded"
	// KindRefundUpdated: a refund was made or changed state (refund.created,
	// refund.updated, refund.failed, charge.refund.updated).
	KindRefundUpdated EventKind = "refund_updated"
)

// Event is a verified webhook event in Stripe's format.
type Event struct {
	// ID is the provider's event id (evt_…), the key for deduplication: a
	// redelivered event keeps its id.
	ID string
	// Type is the provider's event type ("payment_intent.succeeded").
	Type string
	// Kind is Type reduced to what the booking flow acts on.
	Kind EventKind
	// PaymentID is the payment (data.object.id of payment_intent events,
	// data.object.payment_intent of charge events).
	PaymentID string
	// BookingID is data.object.metadata.booking_id; empty when missing.
	BookingID string
	Amount    int64
	Currency  string
	// AmountRefunded is set on charge.refunded: the charge's whole amount
	// returned so far.
	AmountRefunded int64
	// RefundID and RefundStatus are set on refund events (KindRefundUpdated).
	RefundID     string
	RefundStatus RefundStatus
	// FailureCode and FailureMessage explain a payment_failed event.
	FailureCode    string
	FailureMessage string
	Created        time.Time
	// RequestKey is the idempotency key of the API request that caused the
	// event (Stripe's request.idempotency_key); empty for an event of the
	// provider's own making (a payment that succeeded later, a dashboard
	// action). A payment's outcome caused by the booking's create call
	// carries the booking's PaymentKey.
	RequestKey string
}

// Known reports whether the booking flow acts on the event; other types are
// acknowledged and change nothing.
func (e Event) Known() bool { return e.Kind != KindOther }

var eventKinds = map[stripe.EventType]EventKind{
	stripe.EventTypePaymentIntentSucceeded:     KindPaymentSucceeded,
	stripe.EventTypePaymentIntentPaymentFailed: KindPaymentFailed,
	stripe.EventTypeChargeRefunded:             KindRefunded,
	stripe.EventTypeRefundCreated:              KindRefundUpdated,
	stripe.EventTypeRefundUpdated:              KindRefundUpdated,
	stripe.EventTypeRefundFailed:               KindRefundUpdated,
	stripe.EventTypeChargeRefundUpdated:        KindRefundUpdated,
}

// ActedOn reports whether events of type typ are ones the booking flow acts
// on (the others are acknowledged and change nothing).
func ActedOn(typ string) bool { return eventKinds[stripe.EventType(typ)] != KindOther }

// SignWebhook returns the Stripe-Signature header value for body signed with
// secret at time t: "t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">".
func SignWebhook(body []byte, secret string, t time.Time) string {
	return "t=" + strconv.FormatInt(t.Unix(), 10) + ",v1=" + hex.EncodeToString(webhook.ComputeSignature(t, body, secret))
}

// VerifyWebhook checks the Stripe-Signature header of a webhook against its
// raw body and secret, rejects signatures dated more than WebhookTolerance
// from now (before or ahead) and headers with more than one t= element, and parses the event. Both providers use it: fakepay signs as Stripe does.
//
// Events are accepted whatever their api_version: fakepay's events and hand
// signed test events carry none, and the fields read here are stable across
// Stripe's API versions.
func VerifyWebhook(body []byte, header, secret string, now time.Time) (Event, error) {
	if secret == "" {
		return Event{}, fmt.Errorf("verify webhook: %w: no webhook secret configured", ErrInvalidSignature)
	}
	// stripe-go measures the tolerance against the wall clock; the signature
	// is checked by it, the age against the injected clock below.
	if err := webhook.ValidatePayloadIgnoringTolerance(body, header, secret); err != nil {
		return Event{}, fmt.Errorf("verify webhook: %w: %w", ErrInvalidSignature, err)
	}
	signed, err := signedAt(header)
	if err != nil {
		return Event{}, fmt.Errorf("verify webhook: %w: %w", ErrInvalidSignature, err)
	}
	switch age := now.Sub(signed); {
	case age > WebhookTolerance:
		return Event{}, fmt.Errorf("verify webhook: %w: %w: signed %s ago", ErrInvalidSignature, ErrStaleSignature, age.Truncate(time.Second))
	case age < -WebhookTolerance:
		// Dated ahead past any clock skew: kept, it could be replayed for
		// as long as it stays ahead.
		return Event{}, fmt.Errorf("verify webhook: %w: %w: signed %s ahead", ErrInvalidSignature, ErrStaleSignature, (-age).Truncate(time.Second))
	}
	return parseEvent(body)
}

// ErrRepeatedTimestamp: the Stripe-Signature header has more than one t=
// element. stripe-go checks the signature against the last one; reading the
// age from any other would let an old signed event through behind a fresh
// timestamp, so such a header is refused whatever it signs. It is also an
// ErrInvalidSignature.
var ErrRepeatedTimestamp = errors.New("signature header has more than one timestamp")

// signedAt reads the one t= element of a header stripe-go has already
// validated, split as stripe-go splits it; stripe-go accepts a header without
// one, which can't be aged and is refused.
func signedAt(header string) (time.Time, error) {
	var at time.Time
	seen := false
	for _, pair := range strings.Split(header, ",") {
		v, ok := strings.CutPrefix(pair, "t=")
		if !ok {
			continue
		}
		if seen {
			return time.Time{}, ErrRepeatedTimestamp
		}
		seen = true
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("signature timestamp %q: %w", v, err)
		}
		at = time.Unix(sec, 0)
	}
	if !seen {
		return time.Time{}, errors.New("signature header has no timestamp")
	}
	return at, nil
}

// parseEvent reads a Stripe event with stripe-go's types. It never panics on
// hostile input (the fuzz target holds it to that).
func parseEvent(body []byte) (Event, error) {
	var se stripe.Event
	if err := json.Unmarshal(body, &se); err != nil {
		return Event{}, fmt.Errorf("parse webhook event: %w: %w", ErrMalformedEvent, err)
	}
	if se.ID == "" || se.Type == "" {
		return Event{}, fmt.Errorf("parse webhook event: %w: id and type are required", ErrMalformedEvent)
	}
	if se.Object != "" && se.Object != "event" {
		return Event{}, fmt.Errorf("parse webhook event %s: %w: object is %q, not an event", se.ID, ErrMalformedEvent, se.Object)
	}
	ev := Event{ID: se.ID, Type: string(se.Type), Kind: eventKinds[se.Type], Created: time.Unix(se.Created, 0).UTC()}
	if se.Request != nil {
		ev.RequestKey = se.Request.IdempotencyKey
	}
	if !ev.Known() {
		return ev, nil
	}
	if se.Data == nil || len(se.Data.Raw) == 0 {
		return ev, fmt.Errorf("parse webhook event %s: %w: data.object is missing", se.ID, ErrMalformedEvent)
	}
	switch ev.Kind {
	case KindPaymentSucceeded, KindPaymentFailed:
		var pi stripe.PaymentIntent
		if err := json.Unmarshal(se.Data.Raw, &pi); err != nil {
			return ev, fmt.Errorf("parse webhook event %s: %w: payment intent: %w", se.ID, ErrMalformedEvent, err)
		}
		ev.PaymentID, ev.BookingID = pi.ID, pi.Metadata[MetadataBookingID]
		ev.Amount, ev.Currency = pi.Amount, string(pi.Currency)
		if e := pi.LastPaymentError; e != nil {
			ev.FailureCode, ev.FailureMessage = failureCode(e), e.Msg
		}
	case KindRefunded:
		var ch stripe.Charge
		if err := json.Unmarshal(se.Data.Raw, &ch); err != nil {
			return ev, fmt.Errorf("parse webhook event %s: %w: charge: %w", se.ID, ErrMalformedEvent, err)
		}
		if ch.PaymentIntent != nil {
			ev.PaymentID = ch.PaymentIntent.ID
		}
		if ev.PaymentID == "" && ch.ID != "" {
			return notOurs(ev), nil
		}
		ev.BookingID = ch.Metadata[MetadataBookingID]
		ev.Amount, ev.Currency, ev.AmountRefunded = ch.Amount, string(ch.Currency), ch.AmountRefunded
	case KindRefundUpdated:
		var r stripe.Refund
		if err := json.Unmarshal(se.Data.Raw, &r); err != nil {
			return ev, fmt.Errorf("parse webhook event %s: %w: refund: %w", se.ID, ErrMalformedEvent, err)
		}
		if r.ID == "" {
			return ev, fmt.Errorf("parse webhook event %s: %w: no refund id in data.object", se.ID, ErrMalformedEvent)
		}
		switch {
		case r.PaymentIntent != nil:
			ev.PaymentID = r.PaymentIntent.ID
		case r.Charge != nil && r.Charge.PaymentIntent != nil:
			ev.PaymentID = r.Charge.PaymentIntent.ID
		}
		if ev.PaymentID == "" {
			return notOurs(ev), nil
		}
		ev.RefundID, ev.RefundStatus = r.ID, refundStatus(r.Status)
		ev.BookingID = r.Metadata[MetadataBookingID]
		ev.Amount, ev.Currency = r.Amount, string(r.Currency)
	}
	if ev.PaymentID == "" {
		return ev, fmt.Errorf("parse webhook event %s: %w: no payment id in data.object", se.ID, ErrMalformedEvent)
	}
	return ev, nil
}

// notOurs is a charge or refund event of a charge made without a
// PaymentIntent (the Charges API, another integration on the account):
// Stripe sends it to every endpoint subscribed to its type, and it is no
// booking's payment, so it is acknowledged like an event of another type
// rather than refused, which Stripe would retry for days.
func notOurs(ev Event) Event {
	return Event{ID: ev.ID, Type: ev.Type, Kind: KindOther, Created: ev.Created}
}

// refundStatus reduces Stripe's refund status: canceled returns no money
// (failed), requires_action is not over yet (pending).
func refundStatus(s stripe.RefundStatus) RefundStatus {
	switch s {
	case stripe.RefundStatusSucceeded:
		return RefundSucceeded
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		return RefundFailed
	default:
		return RefundPending
	}
}

func failureCode(e *stripe.Error) string {
	if e.DeclineCode != "" {
		return string(e.DeclineCode)
	}
	return string(e.Code)
}
