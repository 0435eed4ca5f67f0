package payment

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/confcheck"
)

// Config chooses and configures a provider.
type Config struct {
	// Provider is NameFakepay (the default) or NameStripe.
	Provider string
	Fakepay  FakepayConfig
	Stripe   StripeConfig
}

// ConfigFromEnv reads the provider's environment variables with getenv
// (os.Getenv): PAYMENT_PROVIDER, FAKEPAY_WEBHOOK_SECRET, FAKEPAY_WEBHOOK_URL,
// FAKEPAY_LATENCY, FAKEPAY_LATENCY_JITTER, FAKEPAY_FAILURE_RATE,
// FAKEPAY_TIMEOUT_RATE, FAKEPAY_MIN_COPIES, FAKEPAY_MAX_COPIES,
// FAKEPAY_MAX_DELAY, FAKEPAY_RETRY_BASE, FAKEPAY_RETRY_MAX,
// FAKEPAY_MAX_ATTEMPTS, FAKEPAY_SEED, STRIPE_API_KEY, STRIPE_WEBHOOK_SECRET
// and STRIPE_API_BASE. Only the chosen provider's variables are read; a
// missing or malformed one is an error naming it.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{Provider: strings.TrimSpace(getenv("PAYMENT_PROVIDER"))}
	if cfg.Provider == "" {
		cfg.Provider = NameFakepay
	}
	switch cfg.Provider {
	case NameFakepay:
		f := &cfg.Fakepay
		e := envReader{getenv: getenv}
		f.WebhookSecret = e.secret("FAKEPAY_WEBHOOK_SECRET")
		f.WebhookURL = getenv("FAKEPAY_WEBHOOK_URL")
		f.Latency = e.duration("FAKEPAY_LATENCY")
		f.LatencyJitter = e.duration("FAKEPAY_LATENCY_JITTER")
		f.FailureRate = e.rate("FAKEPAY_FAILURE_RATE")
		f.TimeoutRate = e.rate("FAKEPAY_TIMEOUT_RATE")
		f.MinCopies = e.count("FAKEPAY_MIN_COPIES")
		f.MaxCopies = e.count("FAKEPAY_MAX_COPIES")
		f.MaxDelay = e.duration("FAKEPAY_MAX_DELAY")
		f.RetryBase = e.duration("FAKEPAY_RETRY_BASE")
		f.RetryMax = e.duration("FAKEPAY_RETRY_MAX")
		f.MaxAttempts = e.int("FAKEPAY_MAX_ATTEMPTS") // negative: until Close
		f.Seed = uint64(e.int("FAKEPAY_SEED"))
		if e.err != nil {
			return cfg, e.err
		}
	case NameStripe:
		s := &cfg.Stripe
		e := envReader{getenv: getenv}
		s.APIKey = e.secret("STRIPE_API_KEY")
		s.WebhookSecret = e.secret("STRIPE_WEBHOOK_SECRET")
		s.BackendURL = getenv("STRIPE_API_BASE")
		if s.APIKey == "" {
			return cfg, fmt.Errorf("PAYMENT_PROVIDER=stripe needs STRIPE_API_KEY")
		}
		if s.WebhookSecret == "" {
			return cfg, fmt.Errorf("PAYMENT_PROVIDER=stripe needs STRIPE_WEBHOOK_SECRET")
		}
		if e.err != nil {
			return cfg, e.err
		}
		// Stripe's keys say what they are; another one in their place would
		// only show at the first sale, as every call refused (401) or every
		// webhook failing its signature.
		if !strings.HasPrefix(s.APIKey, "sk_") && !strings.HasPrefix(s.APIKey, "rk_") {
			return cfg, fmt.Errorf("STRIPE_API_KEY is not a secret key: want Stripe's secret (sk_…) or restricted (rk_…) key, not the publishable one (pk_…)")
		}
		if !strings.HasPrefix(s.WebhookSecret, "whsec_") {
			return cfg, fmt.Errorf("STRIPE_WEBHOOK_SECRET is not a signing secret: want the webhook endpoint's signing secret (whsec_…)")
		}
		if s.BackendURL != "" {
			if confcheck.HTTPURL(s.BackendURL) != nil {
				return cfg, fmt.Errorf("STRIPE_API_BASE=%q: want an http or https URL, e.g. http://localhost:12111", s.BackendURL)
			}
		}
	default:
		return cfg, fmt.Errorf("PAYMENT_PROVIDER %q: want %s or %s", cfg.Provider, NameFakepay, NameStripe)
	}
	return cfg, nil
}

// New builds the configured provider. A fakepay's deliveries stop when ctx
// ends or on Close.
func New(ctx context.Context, cfg Config) (Provider, error) {
	switch cfg.Provider {
	case NameFakepay, "":
		return NewFakepay(ctx, cfg.Fakepay)
	case NameStripe:
		return NewStripe(cfg.Stripe)
	default:
		return nil, fmt.Errorf("payment provider %q: want %s or %s", cfg.Provider, NameFakepay, NameStripe)
	}
}

// envReader keeps the first malformed variable, so a config is read in one
// pass and reported whole.
type envReader struct {
	getenv func(string) string
	err    error
}

func (e *envReader) fail(name, v string, err error) {
	if e.err == nil {
		e.err = fmt.Errorf("%s=%q: %w", name, v, err)
	}
}

func (e *envReader) duration(name string) time.Duration {
	v := strings.TrimSpace(e.getenv(name))
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err == nil && d < 0 {
		err = fmt.Errorf("must not be negative")
	}
	if err != nil {
		e.fail(name, v, err)
	}
	return d
}

func (e *envReader) rate(name string) float64 {
	v := strings.TrimSpace(e.getenv(name))
	if v == "" {
		return 0
	}
	r, err := strconv.ParseFloat(v, 64)
	// Written so that NaN, which fails every comparison, is outside.
	if err == nil && !(r >= 0 && r <= 1) {
		err = fmt.Errorf("want a fraction within [0, 1]")
	}
	if err != nil {
		e.fail(name, v, err)
	}
	return r
}

// count is an int that must not be negative.
func (e *envReader) count(name string) int {
	n := e.int(name)
	if n < 0 {
		e.fail(name, e.getenv(name), fmt.Errorf("must not be negative"))
		return 0
	}
	return n
}

// secret is a secret taken as it is: whitespace around it (a secret file's
// trailing newline) or a control character in it would make every
// signature or API call fail, so it is refused, without showing the value.
func (e *envReader) secret(name string) string {
	v := e.getenv(name)
	if err := confcheck.Secret(v); err != nil && e.err == nil {
		e.err = fmt.Errorf("%s is malformed: %w", name, err)
	}
	return v
}

func (e *envReader) int(name string) int {
	v := strings.TrimSpace(e.getenv(name))
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.fail(name, v, err)
	}
	return n
}
