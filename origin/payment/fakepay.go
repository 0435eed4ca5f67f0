package payment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v85"
)

// Fakepay's payment-method tokens: Stripe's test names, plus one of its own.
const (
	// MethodVisa succeeds.
	MethodVisa = "pm_card_visa"
	// MethodDeclined fails with card_declined/generic_decline.
	MethodDeclined = "pm_card_chargeDeclined"
	// MethodSilent succeeds at the provider but sends no webhook of the
	// payment or of the origin's refunds: the reconciliation (GetPayment)
	// or a test (Redeliver) has to find it. A refund at the provider
	// (RefundAtProvider) still sends charge.refunded.
	MethodSilent = "pm_fakepay_silent"
	// MethodRefundFails pays normally, and every refund of the payment
	// fails (status failed, with a refund.failed webhook), until
	// SetRefundOutcome says otherwise.
	MethodRefundFails = "pm_fakepay_refund_fails"
	// MethodFailThenSucceed is declined at once (payment_intent.payment_failed)
	// and then, FlipAfter later by the provider's clock, succeeds
	// (payment_intent.succeeded): a real provider's asynchronous
	// authentication that changes its mind.
	MethodFailThenSucceed = "pm_fakepay_fail_then_succeed"
	// MethodRefundRefused pays normally, and every refund of the payment is
	// refused as an invalid request (ErrInvalidRequest: nothing refunded),
	// until SetRefundsRefused says otherwise.
	MethodRefundRefused = "pm_fakepay_refund_refused"
)

type methodOutcome struct {
	silent       bool
	refundFails  bool
	refundRefuse bool
	// flips: declined now, succeeded FlipAfter later.
	flips       bool
	code        stripe.ErrorCode
	declineCode stripe.DeclineCode
	message     string // set for declines only
}

var fakepayMethods = map[string]methodOutcome{
	MethodVisa:           {},
	"pm_card_visa_debit": {},
	"pm_card_mastercard": {},
	"pm_card_amex":       {},
	MethodSilent:         {silent: true},
	MethodRefundFails:    {refundFails: true},
	MethodRefundRefused:  {refundRefuse: true},
	MethodFailThenSucceed: {flips: true, code: stripe.ErrorCodeAuthenticationRequired,
		message: "The payment could not be authenticated."},
	MethodDeclined: {code: stripe.ErrorCodeCardDeclined, declineCode: stripe.DeclineCodeGenericDecline,
		message: "Your card was declined."},
	"pm_card_chargeDeclinedInsufficientFunds": {code: stripe.ErrorCodeCardDeclined, declineCode: stripe.DeclineCodeInsufficientFunds,
		message: "Your card has insufficient funds."},
	"pm_card_chargeDeclinedExpiredCard": {code: stripe.ErrorCodeExpiredCard, declineCode: stripe.DeclineCodeExpiredCard,
		message: "Your card has expired."},
	"pm_card_chargeDeclinedIncorrectCvc": {code: stripe.ErrorCodeIncorrectCVC, declineCode: stripe.DeclineCodeIncorrectCVC,
		message: "Your card's security code is incorrect."},
}

// FakepayConfig configures the simulated provider. Zero values give a fast,
// faultless provider that delivers each event once, at once.
type FakepayConfig struct {
	// WebhookSecret signs the webhooks (and verifies them in ParseWebhook).
	// Empty: a random one, enough when the origin is the only receiver.
	WebhookSecret string
	// WebhookURL receives the signed events (the origin's
	// /v1/webhooks/fakepay). Empty: no automatic deliveries until
	// SetWebhookURL; Redeliver and DeliverAfter still need one.
	WebhookURL string
	// Now is the clock of event timestamps and signatures; time.Now when nil.
	Now func() time.Time

	// Latency is how long each API call takes, plus a random part up to
	// LatencyJitter.
	Latency, LatencyJitter time.Duration
	// FailureRate is the fraction of API calls that fail before reaching the
	// provider: ErrAmbiguous, and nothing happened.
	FailureRate float64
	// TimeoutRate is the fraction of creates and refunds that do their work
	// and then lose the answer: ErrAmbiguous, and the money moved.
	TimeoutRate float64

	// Each event is delivered between MinCopies and MaxCopies times (both
	// default 1): at least once, as real providers promise.
	MinCopies, MaxCopies int
	// MaxDelay delays every copy by a random time up to it, so copies and
	// events arrive out of order.
	MaxDelay time.Duration
	// A copy answered with anything but 2xx is retried after RetryBase
	// (default 100ms), doubling up to RetryMax (default 10s), MaxAttempts
	// times in all (default 12; negative: until Close).
	RetryBase, RetryMax time.Duration
	MaxAttempts         int
	// HTTPClient posts the webhooks; one with a 10 s timeout when nil.
	HTTPClient *http.Client

	// Seed makes the random choices (faults, copies, delays) repeatable;
	// 0 seeds at random. Ids are always random.
	Seed uint64
	// FlipAfter is how long, by Now, a pm_fakepay_fail_then_succeed payment
	// stays failed before it succeeds (default 5s). The flip happens at the
	// first API call or Tick after that; with the real clock (Now nil) a
	// background tick every second makes it happen on time.
	FlipAfter time.Duration
	// Logger reports failed deliveries; silent when nil.
	Logger *slog.Logger
}

// Fakepay is an in-process payment service with Stripe's behaviour where it
// matters to bookings: idempotency keys, declines, ambiguous timeouts, and
// signed at-least-once webhooks in Stripe's event format.
type Fakepay struct {
	secret  string
	now     func() time.Time
	client  *http.Client
	log     *slog.Logger
	cfg     FakepayConfig
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
	closing sync.Once
	// fakeCounters are what fakepay did, for tests and reports.
	fakeCounters
	// webhookSender delivers the webhook events.
	*webhookSender

	mu          sync.Mutex
	closed      bool
	rng         *mrand.Rand
	url         string
	failureRate float64
	timeoutRate float64
	paused      chan struct{} // non-nil while paused; closed by Resume
	inflight    int
	idle        chan struct{} // closed when inflight drops to 0
	payments    map[string]*fakePayment
	refunds     map[string]*fakeRefund
	byBooking   map[string][]string
	paymentKeys map[string]*idemRecord
	refundKeys  map[string]*idemRecord
}

type fakePayment struct {
	Payment
	method   string
	silent   bool
	decline  *DeclineError
	chargeID string
	outcome  *fakeEvent // payment_intent.succeeded or payment_intent.payment_failed
	metadata map[string]string
	// refundOutcome is how the payment's next refunds end.
	refundOutcome RefundStatus
	// refuseRefunds: every refund request is refused as invalid.
	refuseRefunds bool
	// flipAt is when a declined pm_fakepay_fail_then_succeed payment
	// succeeds; zero when it never will (or did).
	flipAt    time.Time
	refundIDs []string
	// shown: a read the origin settles on (GetPayment, a repeated create)
	// has returned the payment succeeded. Its amount is fixed from then on,
	// as Stripe fixes a payment's once it succeeds (AmendAtProvider).
	shown bool
}

type fakeRefund struct {
	Refund
	bookingID string
	created   time.Time
	// atProvider marks a refund made from the dashboard (RefundAtProvider),
	// whose webhooks a silent payment sends too.
	atProvider bool
}

type fakeEvent struct {
	id        string
	paymentID string
	body      []byte
}

// idemRecord serialises the calls sharing one idempotency key, and keeps the
// first one's parameters and answer.
type idemRecord struct {
	mu          sync.Mutex
	done        bool
	fingerprint string
	paymentID   string
	refund      Refund
	err         error
}

var _ Provider = (*Fakepay)(nil)

// NewFakepay starts a simulated provider. Its deliveries stop when ctx ends
// or on Close.
func NewFakepay(ctx context.Context, cfg FakepayConfig) (*Fakepay, error) {
	if !(cfg.FailureRate >= 0 && cfg.FailureRate <= 1) || !(cfg.TimeoutRate >= 0 && cfg.TimeoutRate <= 1) { // NaN too
		return nil, fmt.Errorf("fakepay: failure rate %v and timeout rate %v must be within [0, 1]", cfg.FailureRate, cfg.TimeoutRate)
	}
	if cfg.Latency < 0 || cfg.LatencyJitter < 0 || cfg.MaxDelay < 0 || cfg.RetryBase < 0 || cfg.RetryMax < 0 {
		return nil, fmt.Errorf("fakepay: durations must not be negative")
	}
	if cfg.MinCopies < 0 || cfg.MaxCopies < 0 {
		return nil, fmt.Errorf("fakepay: copies %d..%d must not be negative", cfg.MinCopies, cfg.MaxCopies)
	}
	if cfg.MinCopies == 0 {
		cfg.MinCopies = 1
	}
	if cfg.MaxCopies < cfg.MinCopies {
		cfg.MaxCopies = cfg.MinCopies
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 100 * time.Millisecond
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 10 * time.Second
	}
	if cfg.RetryMax < cfg.RetryBase {
		cfg.RetryMax = cfg.RetryBase
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 12
	}
	if cfg.FlipAfter <= 0 {
		cfg.FlipAfter = 5 * time.Second
	}
	f := &Fakepay{
		secret: cfg.WebhookSecret, now: cfg.Now, client: cfg.HTTPClient, log: cfg.Logger, cfg: cfg,
		url: cfg.WebhookURL, failureRate: cfg.FailureRate, timeoutRate: cfg.TimeoutRate,
		payments: map[string]*fakePayment{}, refunds: map[string]*fakeRefund{}, byBooking: map[string][]string{},
		paymentKeys: map[string]*idemRecord{}, refundKeys: map[string]*idemRecord{},
	}
	if f.secret == "" {
		f.secret = "whsec_" + randomHex(24)
	}
	if f.now == nil {
		f.now = time.Now
	}
	if f.client == nil {
		f.client = &http.Client{Timeout: 10 * time.Second}
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	f.rng = mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	f.ctx, f.stop = context.WithCancel(ctx)
	f.webhookSender = &webhookSender{f: f}
	if cfg.Now == nil {
		f.wg.Add(1)
		go f.tickEverySecond()
	}
	return f, nil
}

// Name is "fakepay".
func (f *Fakepay) Name() string { return NameFakepay }

// WebhookSecret is the secret the webhooks are signed with.
func (f *Fakepay) WebhookSecret() string { return f.secret }

// SetWebhookURL points later deliveries at url (the origin knows its address
// only once it listens).
func (f *Fakepay) SetWebhookURL(url string) {
	f.mu.Lock()
	f.url = url
	f.mu.Unlock()
}

// CreatePayment charges req.PaymentMethod (see the Method constants). The
// first call with a key decides; later calls with the same key return the
// same payment (or decline) and never charge again, concurrent ones wait for
// the first. The same key with other parameters is ErrIdempotencyConflict.
func (f *Fakepay) CreatePayment(ctx context.Context, req CreateRequest) (Payment, error) {
	req, err := req.normalise()
	if err != nil {
		return Payment{}, fmt.Errorf("fakepay: %w", err)
	}
	if err := f.enter(ctx, "create payment for booking "+req.BookingID); err != nil {
		return Payment{}, err
	}
	fp := paymentFingerprint(req)
	rec := f.record(f.paymentKeys, req.IdempotencyKey)
	rec.mu.Lock()
	replay := rec.done
	if !rec.done {
		pay := f.charge(req)
		rec.done, rec.fingerprint, rec.paymentID = true, fp, pay.ID
		if pay.decline != nil {
			rec.err = pay.decline
		}
	} else if rec.fingerprint != fp {
		rec.mu.Unlock()
		return Payment{}, fmt.Errorf("fakepay: create payment for booking %s: %w (key %q)", req.BookingID, ErrIdempotencyConflict, req.IdempotencyKey)
	}
	// The first answer is only the create's; a replay is how the
	// reconciliation reads a payment whose id it never got.
	p, declined := f.snapshot(rec.paymentID, replay), rec.err
	rec.mu.Unlock()
	if p.Status == StatusSucceeded {
		// A declined payment that succeeded since: the replay reads it as
		// it is now.
		declined = nil
	}

	if f.roll(func() float64 { return f.timeoutRate }) {
		f.fakeCounters.timeouts.Add(1)
		return Payment{}, fmt.Errorf("fakepay: create payment for booking %s: %w: injected timeout after the charge", req.BookingID, ErrAmbiguous)
	}
	if declined != nil {
		return p, fmt.Errorf("fakepay: create payment for booking %s: %w", req.BookingID, declined)
	}
	return p, nil
}

// charge makes the payment for a request seen for the first time.
func (f *Fakepay) charge(req CreateRequest) *fakePayment {
	outcome, known := fakepayMethods[req.PaymentMethod]
	if !known {
		outcome = methodOutcome{code: "unknown_payment_method",
			message: fmt.Sprintf("unknown payment method %q: fakepay takes %s, %s, %s and Stripe's other pm_card_* test names",
				req.PaymentMethod, MethodVisa, MethodDeclined, MethodSilent)}
	}
	now := f.now()
	p := &fakePayment{
		Payment: Payment{ID: "pi_" + randomID(), BookingID: req.BookingID, Amount: req.Amount,
			Currency: req.Currency, Status: StatusSucceeded, Created: now.UTC().Truncate(time.Second)},
		method: req.PaymentMethod, silent: outcome.silent, metadata: req.Metadata, refundOutcome: RefundSucceeded,
	}
	if outcome.refundFails {
		p.refundOutcome = RefundFailed
	}
	p.refuseRefunds = outcome.refundRefuse
	if outcome.flips {
		p.flipAt = now.Add(f.cfg.FlipAfter)
	}
	typ := stripe.EventTypePaymentIntentSucceeded
	if outcome.message != "" {
		p.Status, p.FailureCode, p.FailureMessage = StatusFailed, string(outcome.code), outcome.message
		if outcome.declineCode != "" {
			p.FailureCode = string(outcome.declineCode)
		}
		p.decline = &DeclineError{PaymentID: p.ID, Code: string(outcome.code), DeclineCode: string(outcome.declineCode), Message: outcome.message}
		typ = stripe.EventTypePaymentIntentPaymentFailed
		f.fakeCounters.declines.Add(1)
	} else {
		p.chargeID = "ch_" + randomID()
		f.fakeCounters.charges.Add(1)
	}
	p.outcome = f.newRequestEvent(typ, p.ID, intentObject(p), now, req.IdempotencyKey)

	f.mu.Lock()
	f.payments[p.ID] = p
	f.byBooking[p.BookingID] = append(f.byBooking[p.BookingID], p.ID)
	f.mu.Unlock()
	if !p.silent {
		f.dispatch(p.outcome)
	}
	return p
}

// NotFoundIsFinal is true: fakepay's payments live in its memory, and a
// payment it does not know was lost with it (a restart) or never made.
func (f *Fakepay) NotFoundIsFinal() bool { return true }

// GetPayment reads a payment.
func (f *Fakepay) GetPayment(ctx context.Context, paymentID string) (Payment, error) {
	if err := f.enter(ctx, "get payment "+paymentID); err != nil {
		return Payment{}, err
	}
	f.mu.Lock()
	_, ok := f.payments[paymentID]
	f.mu.Unlock()
	if !ok {
		return Payment{}, fmt.Errorf("fakepay: get payment %s: %w", paymentID, ErrNotFound)
	}
	return f.snapshot(paymentID, true), nil
}

// PaymentsForBooking lists the payments made for a booking, oldest first:
// how a test (or the reconciliation) finds a payment whose create answered
// ErrAmbiguous.
func (f *Fakepay) PaymentsForBooking(bookingID string) []Payment {
	f.mu.Lock()
	ids := append([]string(nil), f.byBooking[bookingID]...)
	f.mu.Unlock()
	out := make([]Payment, 0, len(ids))
	for _, id := range ids {
		out = append(out, f.snapshot(id, false))
	}
	return out
}

// ParseWebhook verifies and parses a webhook signed with fakepay's secret.
func (f *Fakepay) ParseWebhook(body []byte, signature string) (Event, error) {
	ev, err := VerifyWebhook(body, signature, f.secret, f.now())
	if err != nil {
		return ev, fmt.Errorf("fakepay: %w", err)
	}
	return ev, nil
}

// Close stops every delivery and waits for them; later calls fail with
// ErrClosed.
func (f *Fakepay) Close() error {
	f.closing.Do(func() {
		f.mu.Lock()
		f.closed = true
		f.mu.Unlock()
		f.stop()
		f.wg.Wait()
	})
	return nil
}

// enter simulates the network in front of an API call: latency, then maybe
// a failure before the provider saw anything.
func (f *Fakepay) enter(ctx context.Context, what string) error {
	f.mu.Lock()
	closed := f.closed
	d := f.cfg.Latency
	if f.cfg.LatencyJitter > 0 {
		d += time.Duration(f.rng.Int64N(int64(f.cfg.LatencyJitter)))
	}
	f.mu.Unlock()
	if closed || f.ctx.Err() != nil {
		return fmt.Errorf("fakepay: %s: %w", what, ErrClosed)
	}
	f.Tick()
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("fakepay: %s: %w: %w", what, ErrAmbiguous, ctx.Err())
		case <-f.ctx.Done():
			return fmt.Errorf("fakepay: %s: %w", what, ErrClosed)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fakepay: %s: %w: %w", what, ErrAmbiguous, err)
	}
	if f.roll(func() float64 { return f.failureRate }) {
		f.fakeCounters.failures.Add(1)
		return fmt.Errorf("fakepay: %s: %w: injected failure before the provider", what, ErrAmbiguous)
	}
	return nil
}

func (f *Fakepay) roll(rate func() float64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := rate()
	return r > 0 && f.rng.Float64() < r
}

func (f *Fakepay) record(m map[string]*idemRecord, key string) *idemRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := m[key]
	if !ok {
		rec = &idemRecord{}
		m[key] = rec
	}
	return rec
}

// snapshot is the payment as it is now; show marks it shown to the origin
// if it succeeded, under the same lock, so no change of its amount lands
// between the read and the mark.
func (f *Fakepay) snapshot(paymentID string, show bool) Payment {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.payments[paymentID]
	if !ok {
		return Payment{}
	}
	if show && p.Status == StatusSucceeded {
		p.shown = true
	}
	out := p.Payment
	for _, id := range p.refundIDs {
		if r := f.refunds[id]; r.Status == RefundPending {
			out.RefundPending += r.Amount
		}
	}
	return out
}

func paymentFingerprint(r CreateRequest) string {
	keys := make([]string, 0, len(r.Metadata))
	for k := range r.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%s|%s", r.Amount, r.Currency, r.PaymentMethod)
	for _, k := range keys {
		fmt.Fprintf(&b, "|%q=%q", k, r.Metadata[k])
	}
	return b.String()
}

func randomID() string { return rand.Text() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
