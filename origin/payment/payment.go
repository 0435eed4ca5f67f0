package payment

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Provider is a payment service the booking flow charges and refunds through.
//
// Every call that moves money takes an idempotency key, so a call whose
// outcome is unknown (ErrAmbiguous) is retried with the same key and can never
// charge or refund twice. Calls are made outside any database transaction.
type Provider interface {
	// Name is the provider's route name: "fakepay" or "stripe".
	Name() string
	// CreatePayment charges the payment method at once. A declined charge
	// returns the failed Payment (with its id) together with a *DeclineError.
	CreatePayment(ctx context.Context, req CreateRequest) (Payment, error)
	// GetPayment reads a payment's current state, for the reconciliation of
	// bookings whose webhook never came. Unknown ids give ErrNotFound.
	GetPayment(ctx context.Context, paymentID string) (Payment, error)
	// NotFoundIsFinal reports whether GetPayment's ErrNotFound, for an id
	// the provider itself gave, proves that the payment does not exist and
	// took nothing: true for a provider that forgets its payments
	// (fakepay, on restart), false where it rather means the credentials
	// are of another account or mode than the payment (Stripe).
	NotFoundIsFinal() bool
	// Refund returns money of a succeeded payment. The refund it makes may
	// not be over yet (RefundPending) or may have failed at once
	// (RefundFailed): its Status says, and a refund that fails later is
	// reported by GetRefund and the refund webhooks.
	Refund(ctx context.Context, req RefundRequest) (Refund, error)
	// GetRefund reads a refund's current state, for following a pending
	// refund to its end. Unknown ids give ErrNotFound.
	GetRefund(ctx context.Context, refundID string) (Refund, error)
	// ParseWebhook verifies a webhook's Stripe-Signature header against the
	// raw body and the provider's secret, then parses the event. Signature
	// failures are ErrInvalidSignature; a signed body that isn't an event is
	// ErrMalformedEvent.
	ParseWebhook(body []byte, signature string) (Event, error)
	// Close stops background work (webhook deliveries); later calls fail.
	Close() error
}

// Provider names, as used in PAYMENT_PROVIDER and /v1/webhooks/{provider}.
const (
	NameFakepay = "fakepay"
	NameStripe  = "stripe"
)

// MetadataBookingID is the metadata key carrying the booking id on payments,
// refunds and therefore on every webhook event (data.object.metadata).
const MetadataBookingID = "booking_id"

// PaymentKey is the idempotency key of a booking's payment. Deriving it from
// the booking id makes every retry — a client double-click, a timed-out call,
// the reconciler — land on the same payment.
func PaymentKey(bookingID string) string { return "waitroom-booking-" + bookingID + "-payment" }

// RefundKey is the idempotency key of a booking's refund, shared by the
// cancellation and the late-payment paths so that racing them refunds once.
func RefundKey(bookingID string) string { return "waitroom-booking-" + bookingID + "-refund" }

// RefundAttemptKey is the idempotency key of a booking's refund after
// attempt failed ones: a failed refund is final at the provider, and its key
// would only return it again, so trying once more is a new refund under a
// new key. Attempt 0 is RefundKey. A new attempt is made only once the
// previous one is known to have failed, so no two attempts can both return
// money (and the provider refuses to refund more than was charged anyway).
func RefundAttemptKey(bookingID string, attempt int) string {
	if attempt <= 0 {
		return RefundKey(bookingID)
	}
	return RefundKey(bookingID) + "-" + strconv.Itoa(attempt)
}

// CreateRequest describes a charge.
type CreateRequest struct {
	// BookingID is required; it goes into the metadata (booking_id) and
	// derives the idempotency key.
	BookingID string
	// Amount in the currency's smallest unit, > 0.
	Amount int64
	// Currency is a three-letter ISO code, lower case ("inr").
	Currency string
	// PaymentMethod is the buyer's payment-method token ("pm_card_visa").
	PaymentMethod string
	// Metadata is extra key/values stored with the payment; booking_id is
	// always set from BookingID.
	Metadata map[string]string
	// IdempotencyKey defaults to PaymentKey(BookingID).
	IdempotencyKey string
}

func (r CreateRequest) normalise() (CreateRequest, error) {
	r.Currency = strings.ToLower(strings.TrimSpace(r.Currency))
	switch {
	case r.BookingID == "":
		return r, fmt.Errorf("create payment: %w: booking id is required", ErrInvalidRequest)
	case r.Amount <= 0:
		return r, fmt.Errorf("create payment for booking %s: %w: amount %d is not positive", r.BookingID, ErrInvalidRequest, r.Amount)
	case len(r.Currency) != 3:
		return r, fmt.Errorf("create payment for booking %s: %w: currency %q is not a three-letter code", r.BookingID, ErrInvalidRequest, r.Currency)
	case r.PaymentMethod == "":
		return r, fmt.Errorf("create payment for booking %s: %w: payment method token is required", r.BookingID, ErrInvalidRequest)
	}
	if r.IdempotencyKey == "" {
		r.IdempotencyKey = PaymentKey(r.BookingID)
	}
	md := make(map[string]string, len(r.Metadata)+1)
	for k, v := range r.Metadata {
		md[k] = v
	}
	md[MetadataBookingID] = r.BookingID
	r.Metadata = md
	return r, nil
}

// Status is a payment's state, reduced from the provider's to what a booking
// needs to decide.
type Status string

const (
	// StatusPending: not decided yet (processing, or waiting on the buyer).
	StatusPending Status = "pending"
	// StatusSucceeded: the money was taken.
	StatusSucceeded Status = "succeeded"
	// StatusFailed: the charge was declined; no money was taken.
	StatusFailed Status = "failed"
	// StatusCanceled: the payment was abandoned; no money was taken.
	StatusCanceled Status = "canceled"
)

// Payment is a provider's payment (a Stripe PaymentIntent).
type Payment struct {
	ID        string
	BookingID string
	Amount    int64
	Currency  string
	Status    Status
	// AmountRefunded is the part of Amount returned so far, when the provider
	// reports it: as at Stripe, refunds still pending count in it until they
	// fail.
	AmountRefunded int64
	// RefundPending is the part of AmountRefunded in refunds still pending
	// at the provider, which may yet fail and leave the money where it is.
	RefundPending int64
	// FailureCode and FailureMessage explain a failed payment.
	FailureCode    string
	FailureMessage string
	Created        time.Time
}

// Pays reports whether the payment is for amount in currency, as far as
// the provider said (a payment known only by an event reports neither).
func (p Payment) Pays(amount int64, currency string) bool {
	if p.Amount == 0 && p.Currency == "" {
		return true
	}
	return p.Amount == amount && strings.EqualFold(p.Currency, currency)
}

// Returned is the part of Amount the provider reports back with the buyer
// for good: refunded, less what is refunded by refunds still pending.
func (p Payment) Returned() int64 { return p.AmountRefunded - p.RefundPending }

// RefundRequest describes a refund.
type RefundRequest struct {
	// PaymentID is the payment to refund, required.
	PaymentID string
	// BookingID is required; it goes into the metadata and derives the key.
	BookingID string
	// Amount to refund; 0 refunds all that is left. The reason for a refund
	// is the booking's to keep: the cancellation and the late-payment paths
	// share RefundKey, and any parameter that differs between them would make
	// the provider reject the second as a reused key.
	Amount int64
	// IdempotencyKey defaults to RefundKey(BookingID).
	IdempotencyKey string
}

func (r RefundRequest) normalise() (RefundRequest, error) {
	switch {
	case r.PaymentID == "":
		return r, fmt.Errorf("refund: %w: payment id is required", ErrInvalidRequest)
	case r.BookingID == "":
		return r, fmt.Errorf("refund payment %s: %w: booking id is required", r.PaymentID, ErrInvalidRequest)
	case r.Amount < 0:
		return r, fmt.Errorf("refund payment %s: %w: amount %d is negative", r.PaymentID, ErrInvalidRequest, r.Amount)
	}
	if r.IdempotencyKey == "" {
		r.IdempotencyKey = RefundKey(r.BookingID)
	}
	return r, nil
}

// RefundStatus is a refund's state, reduced from the provider's to what a
// booking needs to decide.
type RefundStatus string

const (
	// RefundPending: not over yet (processing, or waiting on an action).
	RefundPending RefundStatus = "pending"
	// RefundSucceeded: the money went back to the buyer.
	RefundSucceeded RefundStatus = "succeeded"
	// RefundFailed: the money did not go back (failed or canceled at the
	// provider, possibly after it was reported succeeded); it is the
	// merchant's again, and a new refund has to be made.
	RefundFailed RefundStatus = "failed"
)

// Refund is a provider's refund.
type Refund struct {
	ID        string
	PaymentID string
	Amount    int64
	Currency  string
	Status    RefundStatus
	// FailureReason explains a failed refund, when the provider says.
	FailureReason string
}

// Errors, checked with errors.Is.
var (
	// ErrInvalidSignature: the webhook's Stripe-Signature header is missing,
	// malformed, doesn't match the body under the secret, or is too old.
	ErrInvalidSignature = errors.New("invalid webhook signature")
	// ErrStaleSignature: the signature's timestamp is further than
	// WebhookTolerance from now, before (a replay) or ahead. It is also an
	// ErrInvalidSignature.
	ErrStaleSignature = errors.New("webhook signature timestamp outside the tolerance")
	// ErrMalformedEvent: the body is correctly signed but isn't an event this
	// package can read.
	ErrMalformedEvent = errors.New("malformed webhook event")
	// ErrDeclined: the charge was refused; the error is a *DeclineError.
	ErrDeclined = errors.New("payment declined")
	// ErrAmbiguous: the call failed in a way that leaves its outcome unknown
	// (timeout, connection lost, provider error). The charge or refund may have
	// happened: retry with the same idempotency key, or wait for the webhook.
	ErrAmbiguous = errors.New("payment outcome unknown; retry with the same idempotency key")
	// ErrIdempotencyConflict: the key was first used with other parameters.
	ErrIdempotencyConflict = errors.New("idempotency key reused with different parameters")
	// ErrNotFound: no such payment at the provider.
	ErrNotFound = errors.New("payment not found")
	// ErrAlreadyRefunded: the payment has nothing left to refund.
	ErrAlreadyRefunded = errors.New("payment already refunded")
	// ErrInvalidRequest: the request can never succeed as given.
	ErrInvalidRequest = errors.New("invalid payment request")
	// ErrUnauthorized: the provider refused the credentials (a revoked or
	// rolled key, a key of another account or mode, a restricted key
	// without the permission). It is also an ErrInvalidRequest, but it is
	// checked before any idempotency key: it says nothing of what an
	// earlier request under the same key did.
	ErrUnauthorized = errors.New("payment provider refused the credentials")
	// ErrClosed: the provider was closed.
	ErrClosed = errors.New("payment provider closed")
)

// DeclineError is a refused charge. It matches ErrDeclined.
type DeclineError struct {
	// PaymentID is the failed payment, when the provider created one.
	PaymentID string
	// Code is the provider's error code ("card_declined"), DeclineCode the
	// issuer's reason ("insufficient_funds"), Message a human explanation.
	Code        string
	DeclineCode string
	Message     string
}

func (e *DeclineError) Error() string {
	s := "payment declined"
	if e.PaymentID != "" {
		s += " (" + e.PaymentID + ")"
	}
	if e.Code != "" {
		s += ": " + e.Code
		if e.DeclineCode != "" {
			s += "/" + e.DeclineCode
		}
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is makes errors.Is(err, ErrDeclined) true.
func (e *DeclineError) Is(target error) bool { return target == ErrDeclined }
