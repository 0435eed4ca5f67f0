package payment

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Config
	}{
		{name: "fakepay by default", env: map[string]string{}, want: Config{Provider: NameFakepay}},
		{name: "fakepay knobs", env: map[string]string{
			"PAYMENT_PROVIDER": "fakepay", "FAKEPAY_WEBHOOK_SECRET": "whsec_1", "FAKEPAY_WEBHOOK_URL": "http://127.0.0.1:8081/v1/webhooks/fakepay",
			"FAKEPAY_LATENCY": "50ms", "FAKEPAY_LATENCY_JITTER": "20ms", "FAKEPAY_FAILURE_RATE": "0.01", "FAKEPAY_TIMEOUT_RATE": "0.02",
			"FAKEPAY_MIN_COPIES": "1", "FAKEPAY_MAX_COPIES": "3", "FAKEPAY_MAX_DELAY": "2s", "FAKEPAY_RETRY_BASE": "200ms",
			"FAKEPAY_RETRY_MAX": "5s", "FAKEPAY_MAX_ATTEMPTS": "8", "FAKEPAY_SEED": "7",
		}, want: Config{Provider: NameFakepay, Fakepay: FakepayConfig{
			WebhookSecret: "whsec_1", WebhookURL: "http://127.0.0.1:8081/v1/webhooks/fakepay",
			Latency: 50 * time.Millisecond, LatencyJitter: 20 * time.Millisecond, FailureRate: 0.01, TimeoutRate: 0.02,
			MinCopies: 1, MaxCopies: 3, MaxDelay: 2 * time.Second, RetryBase: 200 * time.Millisecond, RetryMax: 5 * time.Second,
			MaxAttempts: 8, Seed: 7,
		}}},
		{name: "stripe", env: map[string]string{
			"PAYMENT_PROVIDER": "stripe", "STRIPE_API_KEY": "sk_test_1", "STRIPE_WEBHOOK_SECRET": "whsec_2",
			"STRIPE_API_BASE": "http://127.0.0.1:12111", "FAKEPAY_LATENCY": "not read",
		}, want: Config{Provider: NameStripe, Stripe: StripeConfig{APIKey: "sk_test_1", WebhookSecret: "whsec_2",
			BackendURL: "http://127.0.0.1:12111"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ConfigFromEnv(env(tt.env))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestConfigFromEnvNamesTheBadVariable(t *testing.T) {
	tests := map[string]map[string]string{
		"PAYMENT_PROVIDER":      {"PAYMENT_PROVIDER": "paypal"},
		"STRIPE_API_KEY":        {"PAYMENT_PROVIDER": "stripe", "STRIPE_WEBHOOK_SECRET": "whsec_1"},
		"STRIPE_WEBHOOK_SECRET": {"PAYMENT_PROVIDER": "stripe", "STRIPE_API_KEY": "sk_test_1"},
		// The publishable key (pk_…) pasted for the secret one, or the
		// endpoint's id (we_…) for its signing secret: Stripe would refuse
		// every call (401), or every webhook would fail its signature.
		"STRIPE_API_KEY ":        {"PAYMENT_PROVIDER": "stripe", "STRIPE_API_KEY": "pk_live_1", "STRIPE_WEBHOOK_SECRET": "whsec_1"},
		"STRIPE_WEBHOOK_SECRET ": {"PAYMENT_PROVIDER": "stripe", "STRIPE_API_KEY": "rk_live_1", "STRIPE_WEBHOOK_SECRET": "we_1"},
		// Without a scheme every call would fail before it left, each
		// taken for an outcome unknown.
		"STRIPE_API_BASE": {"PAYMENT_PROVIDER": "stripe", "STRIPE_API_KEY": "sk_test_1", "STRIPE_WEBHOOK_SECRET": "whsec_1",
			"STRIPE_API_BASE": "localhost:12111"},
		"FAKEPAY_LATENCY":      {"FAKEPAY_LATENCY": "fast"},
		"FAKEPAY_MAX_DELAY":    {"FAKEPAY_MAX_DELAY": "-1s"},
		"FAKEPAY_FAILURE_RATE": {"FAKEPAY_FAILURE_RATE": "5%"},
		"FAKEPAY_TIMEOUT_RATE": {"FAKEPAY_TIMEOUT_RATE": "1.5"},
		"FAKEPAY_MAX_COPIES":   {"FAKEPAY_MAX_COPIES": "many"},
	}
	for name, e := range tests {
		_, err := ConfigFromEnv(env(e))
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), strings.TrimSpace(name))
	}
}

func TestNewBuildsTheConfiguredProvider(t *testing.T) {
	p, err := New(t.Context(), Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	assert.Equal(t, NameFakepay, p.Name())
	assert.IsType(t, &Fakepay{}, p)

	p, err = New(t.Context(), Config{Provider: NameStripe, Stripe: StripeConfig{APIKey: "sk_test_1", WebhookSecret: "whsec_1"}})
	require.NoError(t, err)
	assert.Equal(t, NameStripe, p.Name())
	assert.NoError(t, p.Close())

	_, err = New(t.Context(), Config{Provider: NameStripe})
	assert.Error(t, err)
	_, err = New(t.Context(), Config{Fakepay: FakepayConfig{FailureRate: math.NaN()}})
	assert.Error(t, err, "NaN is no fraction within [0, 1]")
	_, err = New(t.Context(), Config{Provider: "paypal"})
	assert.Error(t, err)
}

func TestKeysAreDerivedFromTheBooking(t *testing.T) {
	assert.Equal(t, PaymentKey("b_1"), PaymentKey("b_1"))
	assert.NotEqual(t, PaymentKey("b_1"), PaymentKey("b_2"))
	assert.NotEqual(t, PaymentKey("b_1"), RefundKey("b_1"))

	req, err := CreateRequest{BookingID: "b_1", Amount: 1, Currency: "INR", PaymentMethod: MethodVisa}.normalise()
	require.NoError(t, err)
	assert.Equal(t, PaymentKey("b_1"), req.IdempotencyKey)
	assert.Equal(t, "inr", req.Currency)
	assert.Equal(t, map[string]string{MetadataBookingID: "b_1"}, req.Metadata)

	r, err := RefundRequest{PaymentID: "pi_1", BookingID: "b_1"}.normalise()
	require.NoError(t, err)
	assert.Equal(t, RefundKey("b_1"), r.IdempotencyKey)
}
