package payment

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v85"
)

// StripeConfig configures the Stripe adapter.
type StripeConfig struct {
	// APIKey is the secret key (sk_…), required.
	APIKey string
	// WebhookSecret is the endpoint's signing secret (whsec_…), required.
	WebhookSecret string
	// BackendURL replaces Stripe's API address (stripe-mock in tests).
	BackendURL string
	// HTTPClient makes the API calls; stripe-go's default when nil.
	HTTPClient *http.Client
	// MaxNetworkRetries is how often stripe-go itself retries a call that
	// failed on the network or with a retryable status, always with the same
	// idempotency key; stripe-go's default (2) when nil.
	MaxNetworkRetries *int64
	// Now is the clock of the webhook tolerance; time.Now when nil.
	Now func() time.Time
	// Quiet silences stripe-go's own request logging.
	Quiet bool
}

// Stripe is the Provider backed by Stripe's PaymentIntents.
type Stripe struct {
	client *stripe.Client
	secret string
	now    func() time.Time
}

var _ Provider = (*Stripe)(nil)

// NewStripe returns the Stripe adapter. It makes no call.
func NewStripe(cfg StripeConfig) (*Stripe, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("stripe: api key is required")
	}
	if cfg.WebhookSecret == "" {
		return nil, errors.New("stripe: webhook secret is required")
	}
	bc := &stripe.BackendConfig{HTTPClient: cfg.HTTPClient, MaxNetworkRetries: cfg.MaxNetworkRetries}
	if cfg.BackendURL != "" {
		bc.URL = stripe.String(cfg.BackendURL)
	}
	if cfg.Quiet {
		bc.LeveledLogger = &stripe.LeveledLogger{Level: stripe.LevelNull}
	}
	s := &Stripe{
		client: stripe.NewClient(cfg.APIKey, stripe.WithBackends(stripe.NewBackendsWithConfig(bc))),
		secret: cfg.WebhookSecret,
		now:    cfg.Now,
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Name is "stripe".
func (s *Stripe) Name() string { return NameStripe }

// CreatePayment creates and confirms a PaymentIntent in one call, under the
// idempotency key.
func (s *Stripe) CreatePayment(ctx context.Context, req CreateRequest) (Payment, error) {
	req, err := req.normalise()
	if err != nil {
		return Payment{}, fmt.Errorf("stripe: %w", err)
	}
	params := &stripe.PaymentIntentCreateParams{
		Amount:        stripe.Int64(req.Amount),
		Currency:      stripe.String(req.Currency),
		PaymentMethod: stripe.String(req.PaymentMethod),
		Confirm:       stripe.Bool(true),
		// There is no buyer's browser to send to a bank's page: a payment
		// that would need one fails now instead of waiting forever.
		AutomaticPaymentMethods: &stripe.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled: stripe.Bool(true), AllowRedirects: stripe.String("never"),
		},
		ErrorOnRequiresAction: stripe.Bool(true),
		Metadata:              req.Metadata,
	}
	params.SetIdempotencyKey(req.IdempotencyKey)
	pi, err := s.client.V1PaymentIntents.Create(ctx, params)
	if err != nil {
		p, err := stripeError(err)
		return p, fmt.Errorf("stripe: create payment for booking %s: %w", req.BookingID, err)
	}
	return fromIntent(pi), nil
}

// GetPayment retrieves a PaymentIntent with its latest charge, for the
// amount refunded.
func (s *Stripe) GetPayment(ctx context.Context, paymentID string) (Payment, error) {
	params := &stripe.PaymentIntentRetrieveParams{}
	// The charge's refunds tell the pending ones, which its amount
	// refunded counts until they fail.
	params.AddExpand("latest_charge.refunds")
	pi, err := s.client.V1PaymentIntents.Retrieve(ctx, paymentID, params)
	if err != nil {
		_, err := stripeError(err)
		return Payment{}, fmt.Errorf("stripe: get payment %s: %w", paymentID, err)
	}
	p := fromIntent(pi)
	if c := pi.LatestCharge; c != nil && c.Refunds != nil {
		refunds := c.Refunds.Data
		if c.Refunds.HasMore {
			refunds = nil
			for r, err := range s.client.V1Refunds.List(ctx, &stripe.RefundListParams{PaymentIntent: stripe.String(paymentID)}).All(ctx) {
				if err != nil {
					_, err := stripeError(err)
					return Payment{}, fmt.Errorf("stripe: list the refunds of %s: %w", paymentID, err)
				}
				refunds = append(refunds, r)
			}
		}
		for _, r := range refunds {
			if refundStatus(r.Status) == RefundPending {
				p.RefundPending += r.Amount
			}
		}
	}
	return p, nil
}

// NotFoundIsFinal is false: Stripe keeps every payment it made, so a 404
// for an id it gave means the API key is of another account or mode (a
// test key for a live payment), not that nothing was charged.
func (s *Stripe) NotFoundIsFinal() bool { return false }

// FindPayments lists the PaymentIntents whose metadata names the booking,
// through Stripe's Search API, for a booking whose create call's answer
// Stripe keeps hidden (a saved 500). Search lags about a minute behind and
// is not offered to accounts in India: finding none proves nothing.
func (s *Stripe) FindPayments(ctx context.Context, bookingID string) ([]Payment, error) {
	params := &stripe.PaymentIntentSearchParams{}
	params.Query = "metadata['" + MetadataBookingID + "']:'" + strings.ReplaceAll(bookingID, "'", `\'`) + "'"
	var out []Payment
	for pi, err := range s.client.V1PaymentIntents.Search(ctx, params).All(ctx) {
		if err != nil {
			_, err := stripeError(err)
			return nil, fmt.Errorf("stripe: search the payments of booking %s: %w", bookingID, err)
		}
		out = append(out, fromIntent(pi))
	}
	return out, nil
}

// Refund refunds a PaymentIntent under the idempotency key.
func (s *Stripe) Refund(ctx context.Context, req RefundRequest) (Refund, error) {
	req, err := req.normalise()
	if err != nil {
		return Refund{}, fmt.Errorf("stripe: %w", err)
	}
	params := &stripe.RefundCreateParams{
		PaymentIntent: stripe.String(req.PaymentID),
		Metadata:      map[string]string{MetadataBookingID: req.BookingID},
	}
	if req.Amount > 0 {
		params.Amount = stripe.Int64(req.Amount)
	}
	params.SetIdempotencyKey(req.IdempotencyKey)
	r, err := s.client.V1Refunds.Create(ctx, params)
	if err != nil {
		_, err := stripeError(err)
		return Refund{}, fmt.Errorf("stripe: refund payment %s: %w", req.PaymentID, err)
	}
	return fromRefund(r, req.PaymentID), nil
}

// GetRefund retrieves a refund, for its current status: Stripe answers a
// repeated create under the same key with the refund as it was made, which
// says nothing of how it ended.
func (s *Stripe) GetRefund(ctx context.Context, refundID string) (Refund, error) {
	r, err := s.client.V1Refunds.Retrieve(ctx, refundID, &stripe.RefundRetrieveParams{})
	if err != nil {
		_, err := stripeError(err)
		return Refund{}, fmt.Errorf("stripe: get refund %s: %w", refundID, err)
	}
	return fromRefund(r, ""), nil
}

func fromRefund(r *stripe.Refund, paymentID string) Refund {
	out := Refund{ID: r.ID, PaymentID: paymentID, Amount: r.Amount, Currency: string(r.Currency),
		Status: refundStatus(r.Status), FailureReason: string(r.FailureReason)}
	if r.PaymentIntent != nil && r.PaymentIntent.ID != "" {
		out.PaymentID = r.PaymentIntent.ID
	}
	return out
}

// ParseWebhook verifies and parses a webhook from Stripe.
func (s *Stripe) ParseWebhook(body []byte, signature string) (Event, error) {
	ev, err := VerifyWebhook(body, signature, s.secret, s.now())
	if err != nil {
		return ev, fmt.Errorf("stripe: %w", err)
	}
	return ev, nil
}

// Close does nothing: the adapter holds no background work.
func (s *Stripe) Close() error { return nil }

func fromIntent(pi *stripe.PaymentIntent) Payment {
	p := Payment{ID: pi.ID, BookingID: pi.Metadata[MetadataBookingID], Amount: pi.Amount,
		Currency: string(pi.Currency), Created: time.Unix(pi.Created, 0).UTC()}
	if e := pi.LastPaymentError; e != nil {
		p.FailureCode, p.FailureMessage = failureCode(e), e.Msg
	}
	if pi.LatestCharge != nil {
		p.AmountRefunded = pi.LatestCharge.AmountRefunded
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		p.Status = StatusSucceeded
	case stripe.PaymentIntentStatusCanceled:
		p.Status = StatusCanceled
	case stripe.PaymentIntentStatusRequiresPaymentMethod:
		// A confirmed intent is back here only after its attempt failed.
		p.Status = StatusFailed
	default:
		p.Status = StatusPending
	}
	return p
}

// stripeError sorts a stripe-go error into this package's errors, keeping it
// wrapped for the details. A declined charge also yields the failed payment.
func stripeError(err error) (Payment, error) {
	var se *stripe.Error
	if !errors.As(err, &se) {
		// Transport errors, timeouts, a cancelled context: the request may
		// have reached Stripe.
		return Payment{}, fmt.Errorf("%w: %w", ErrAmbiguous, err)
	}
	switch {
	case se.Type == stripe.ErrorTypeCard:
		d := &DeclineError{Code: string(se.Code), DeclineCode: string(se.DeclineCode), Message: se.Msg}
		var p Payment
		if se.PaymentIntent != nil {
			p = fromIntent(se.PaymentIntent)
			p.Status = StatusFailed
			d.PaymentID = p.ID
		}
		return p, fmt.Errorf("%w: %w", d, se)
	case se.Code == stripe.ErrorCodeIdempotencyKeyInUse:
		// The first request with this key is still running.
		return Payment{}, fmt.Errorf("%w: %w", ErrAmbiguous, se)
	case se.Type == stripe.ErrorTypeIdempotency:
		return Payment{}, fmt.Errorf("%w: %w", ErrIdempotencyConflict, se)
	case se.Code == stripe.ErrorCodeChargeAlreadyRefunded:
		return Payment{}, fmt.Errorf("%w: %w", ErrAlreadyRefunded, se)
	case se.HTTPStatusCode == http.StatusUnauthorized || se.HTTPStatusCode == http.StatusForbidden:
		return Payment{}, fmt.Errorf("%w: %w: %w", ErrInvalidRequest, ErrUnauthorized, se)
	case se.HTTPStatusCode == http.StatusNotFound:
		// Only the object a request is about is missing with 404; an id in
		// a parameter that Stripe does not know (a payment-method token) is
		// a 400 with the same code, a request that can never succeed.
		return Payment{}, fmt.Errorf("%w: %w", ErrNotFound, se)
	case se.HTTPStatusCode == http.StatusTooManyRequests || se.HTTPStatusCode >= 500 ||
		se.Type == stripe.ErrorTypeAPI || se.Type == stripe.ErrorTypeRateLimit || se.HTTPStatusCode == 0:
		return Payment{}, fmt.Errorf("%w: %w", ErrAmbiguous, se)
	default:
		return Payment{}, fmt.Errorf("%w: %w", ErrInvalidRequest, se)
	}
}
