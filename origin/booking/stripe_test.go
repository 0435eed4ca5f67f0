package booking_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// stripeAnswer is one canned answer of the fake Stripe API.
type stripeAnswer struct {
	status int
	body   string
}

// fakeStripe answers the PaymentIntent calls as the test scripts them:
// the creates in turn (the last one again and again), every read alike.
type fakeStripe struct {
	mu      sync.Mutex
	creates []stripeAnswer
	read    stripeAnswer
	// found is what the search by metadata finds: intents' JSON.
	found []string
	query string
	// created counts the create calls.
	created int
	// refund answers the refund creates (404 when unset); refunds counts
	// them.
	refund  stripeAnswer
	refunds int
}

func (s *fakeStripe) script(read stripeAnswer, creates ...stripeAnswer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.read, s.creates = read, creates
}

func (s *fakeStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	var a stripeAnswer
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" && len(s.creates) > 0:
		s.created++
		a = s.creates[0]
		if len(s.creates) > 1 {
			s.creates = s.creates[1:]
		}
	case r.Method == http.MethodPost && r.URL.Path == "/v1/refunds" && s.refund.status != 0:
		s.refunds++
		a = s.refund
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents/search":
		s.query = r.URL.Query().Get("query")
		a = stripeAnswer{http.StatusOK, `{"object":"search_result","url":"/v1/payment_intents/search","has_more":false,"data":[` +
			strings.Join(s.found, ",") + `]}`}
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/payment_intents/"):
		a = s.read
	default:
		a = stripeAnswer{http.StatusNotFound, stripeErr("invalid_request_error", "resource_missing")}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

// newStripeFixture is the booking flow charging through the Stripe adapter
// against the fake Stripe API.
func newStripeFixture(t *testing.T) (*fixture, *fakeStripe) {
	t.Helper()
	fs := &fakeStripe{}
	srv := httptest.NewServer(fs)
	t.Cleanup(srv.Close)
	noRetry := int64(0)
	f := newFixturePaying(t, func(*payment.Fakepay) payment.Provider {
		s, err := payment.NewStripe(payment.StripeConfig{APIKey: "sk_test_123", WebhookSecret: "whsec_test",
			BackendURL: srv.URL, MaxNetworkRetries: &noRetry, Quiet: true})
		require.NoError(t, err)
		return s
	})
	return f, fs
}

func stripeErr(typ, code string) string {
	return `{"error":{"type":"` + typ + `","code":"` + code + `","message":"canned"}}`
}

func intent(id, status string) stripeAnswer {
	return stripeAnswer{http.StatusOK, `{"id":"` + id + `","object":"payment_intent","amount":100,"currency":"inr",` +
		`"created":1777629600,"status":"` + status + `"}`}
}

var stripe500 = stripeAnswer{http.StatusInternalServerError, stripeErr("api_error", "")}

// stripeEvent hands the settlement a signed payment_intent.succeeded for
// paymentID naming b in its metadata, of no API request (as a payment that
// succeeds later).
func stripeEvent(t *testing.T, f *fixture, b ledger.Booking, paymentID string) (string, error) {
	t.Helper()
	return f.svc.Settlement().HandlePaymentEvent(context.Background(), payment.Event{ID: "evt_" + uuid.NewString(),
		Type: "payment_intent.succeeded", Kind: payment.KindPaymentSucceeded, PaymentID: paymentID, BookingID: b.ID,
		Amount: b.Amount, Currency: b.Currency})
}

// TestStripeRefusalOfARepeatedCreate: the create whose answer was lost
// (a 500) may have charged. A repeat of it that Stripe refuses without
// saying what the first did (the key reused with other parameters, the
// API key refused) is no evidence that nothing was charged: the booking is
// not failed, and the success event of its payment is not ignored, but
// answered as not handled (Stripe sends it again). Once Stripe answers,
// the booking settles.
func TestStripeRefusalOfARepeatedCreate(t *testing.T) {
	tests := []struct {
		name   string
		repeat stripeAnswer
	}{
		{"key reused with other parameters", stripeAnswer{http.StatusBadRequest, stripeErr("idempotency_error", "")}},
		{"idempotency conflict", stripeAnswer{http.StatusConflict, stripeErr("idempotency_error", "")}},
		{"api key revoked", stripeAnswer{http.StatusUnauthorized, stripeErr("invalid_request_error", "")}},
		{"restricted key without the permission", stripeAnswer{http.StatusForbidden, stripeErr("invalid_request_error", "")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, fs := newStripeFixture(t)
			ctx := context.Background()
			fs.script(intent("pi_1", "succeeded"), stripe500, tc.repeat)
			b := f.book(f.hold("ann"), "pm_card_visa")
			require.Equal(t, ledger.BookingPaymentPending, b.Status)

			out, err := stripeEvent(t, f, b, "pi_1")
			assert.Error(t, err, "the event is not handled now (%s)", out)
			assert.NotEqual(t, "ignored", out)
			assert.Equal(t, ledger.BookingPaymentPending, f.booking(b.ID).Status)

			assert.Error(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)))
			got := f.booking(b.ID)
			assert.Equal(t, ledger.BookingPaymentPending, got.Status, "not failed: %+v", got)

			// Stripe answers again (the key fixed): the payment settles it.
			fs.script(intent("pi_1", "succeeded"), intent("pi_1", "succeeded"))
			require.NoError(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)))
			got = f.booking(b.ID)
			assert.Equal(t, ledger.BookingConfirmed, got.Status, "%+v", got)
			assert.Equal(t, "pi_1", got.PaymentID)
		})
	}

	t.Run("first call", func(t *testing.T) {
		// The booking's payment key is its own: a conflict on it means an
		// earlier call under it reached Stripe.
		f, fs := newStripeFixture(t)
		fs.script(intent("pi_1", "succeeded"), stripeAnswer{http.StatusBadRequest, stripeErr("idempotency_error", "")})
		b := f.book(f.hold("ann"), "pm_card_visa")
		assert.Equal(t, ledger.BookingPaymentPending, b.Status, "%+v", b)
		assert.Equal(t, ledger.BookingPaymentPending, f.booking(b.ID).Status)
	})

	t.Run("first call with a revoked key", func(t *testing.T) {
		// Nothing was charged: the booking fails at once, as documented.
		f, fs := newStripeFixture(t)
		fs.script(intent("pi_1", "succeeded"), stripeAnswer{http.StatusUnauthorized, stripeErr("invalid_request_error", "")})
		res := f.svc.Create(context.Background(), bookingRequest(f, f.hold("ann")))
		assert.Equal(t, ledger.BookingFailed, res.Booking.Status, "%+v", res)
	})
}

// TestStripeSuccessOfAPaymentStripeDoesNotShow: a signed success event
// names the booking's own payment, which Stripe answers 404 for (an API
// key of another account or mode): nothing confirms the booking, nor
// fails it; the event is answered as not handled, and settles it once
// Stripe shows the payment.
func TestStripeSuccessOfAPaymentStripeDoesNotShow(t *testing.T) {
	f, fs := newStripeFixture(t)
	fs.script(stripeAnswer{http.StatusNotFound, stripeErr("invalid_request_error", "resource_missing")}, intent("pi_1", "processing"))
	b := f.book(f.hold("ann"), "pm_card_visa")
	require.Equal(t, ledger.BookingPaymentPending, b.Status)

	out, err := stripeEvent(t, f, b, "pi_1")
	assert.Error(t, err, "(%s)", out)
	got := f.booking(b.ID)
	assert.Equal(t, ledger.BookingPaymentPending, got.Status, "%+v", got)
	tickets, err := f.ledger.TicketsOf(context.Background(), b.ID)
	require.NoError(t, err)
	assert.Empty(t, tickets)

	fs.script(intent("pi_1", "succeeded"), intent("pi_1", "processing"))
	out, err = stripeEvent(t, f, b, "pi_1")
	require.NoError(t, err)
	assert.Equal(t, "processed", out)
	assert.Equal(t, ledger.BookingConfirmed, f.booking(b.ID).Status)
}

func bookingRequest(f *fixture, h ledger.Hold) booking.Request {
	return booking.Request{Event: f.ev, Hold: h, User: h.UserID, Key: uuid.NewString(), Digest: "d", Method: "pm_card_visa"}
}

// TestStripePaymentFoundBySearch: a create Stripe answered 500 is answered
// 500 again for 24 hours, while the payment it made may have succeeded and
// its webhook never come: the reconciliation finds it by the booking id in
// its metadata and settles the booking with it; without a find, or with
// several, the booking waits.
func TestStripePaymentFoundBySearch(t *testing.T) {
	f, fs := newStripeFixture(t)
	ctx := context.Background()
	fs.script(intent("pi_1", "succeeded"), stripe500)
	b := f.book(f.hold("ann"), "pm_card_visa")
	require.Equal(t, ledger.BookingPaymentPending, b.Status)

	assert.Error(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)), "nothing found yet")
	assert.Equal(t, ledger.BookingPaymentPending, f.booking(b.ID).Status)

	fs.mu.Lock()
	fs.found = []string{intent("pi_1", "succeeded").body, intent("pi_2", "succeeded").body}
	fs.mu.Unlock()
	assert.Error(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)), "several found")
	assert.Equal(t, ledger.BookingPaymentPending, f.booking(b.ID).Status)

	fs.mu.Lock()
	fs.found = []string{intent("pi_1", "succeeded").body}
	fs.mu.Unlock()
	require.NoError(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)))
	got := f.booking(b.ID)
	assert.Equal(t, ledger.BookingConfirmed, got.Status, "%+v", got)
	assert.Equal(t, "pi_1", got.PaymentID)
	assert.Equal(t, "metadata['booking_id']:'"+b.ID+"'", fs.query)
}

func (s *fakeStripe) createCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created
}

// TestStripeNoCreateRepeatedPastTheWindow: Stripe keeps an idempotency key
// 24 hours; a create repeated after that is a new payment. A booking whose
// create's outcome is still unknown 23 hours after it was made is neither
// failed nor charged again, by the reconciliation, a webhook or the
// buyer's retry: it waits, counted, and only a search by its metadata is
// made, which settles it once it finds the payment.
func TestStripeNoCreateRepeatedPastTheWindow(t *testing.T) {
	f, fs := newStripeFixture(t)
	ctx := context.Background()
	fs.script(intent("pi_1", "succeeded"), stripe500, stripe500,
		stripeAnswer{http.StatusBadRequest, stripeErr("invalid_request_error", "")})
	req := bookingRequest(f, f.hold("ann"))
	res := f.svc.Create(ctx, req)
	require.Equal(t, booking.Created, res.Outcome, "%+v", res)
	b := res.Booking
	require.Equal(t, ledger.BookingPaymentPending, b.Status)

	f.skew.Store(int64(22 * time.Hour))
	assert.Error(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)), "a 500 again")
	require.Equal(t, 2, fs.createCalls(), "repeated within the window")
	f.svc.Settlement().AfterPass(ctx)
	assert.Zero(t, gauge(t, f.unresolved))

	f.skew.Store(int64(23*time.Hour + time.Minute))
	assert.NoError(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)))
	assert.Equal(t, ledger.BookingPaymentPending, f.booking(b.ID).Status, "not failed")
	assert.Equal(t, "metadata['booking_id']:'"+b.ID+"'", fs.query, "searched")
	f.svc.Settlement().AfterPass(ctx)
	assert.Equal(t, 1.0, gauge(t, f.unresolved))

	_, err := stripeEvent(t, f, b, "pi_1")
	assert.Error(t, err, "which payment is the booking's is not known")
	res = f.svc.Create(ctx, req)
	assert.Equal(t, booking.Replayed, res.Outcome, "%+v", res)
	assert.Equal(t, ledger.BookingPaymentPending, f.booking(b.ID).Status)
	assert.Equal(t, 2, fs.createCalls(), "no create repeated past the window")

	fs.mu.Lock()
	fs.found = []string{intent("pi_1", "succeeded").body}
	fs.mu.Unlock()
	require.NoError(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)))
	got := f.booking(b.ID)
	assert.Equal(t, "pi_1", got.PaymentID)
	assert.Equal(t, booking.ReasonLateSoldOut, got.StatusReason, "the hold's expiry passed long ago: %+v", got)
	assert.Equal(t, 2, fs.createCalls())
	f.svc.Settlement().AfterPass(ctx)
	assert.Zero(t, gauge(t, f.unresolved))
}

// TestStripeNotFoundOfARecordedPayment: Stripe answering 404 for a payment
// id it gave means the API key is of another account or mode, not that
// nothing was charged: the reconciliation leaves the booking waiting (and
// errs) instead of failing it payment_not_found, and settles it once
// Stripe shows the payment.
func TestStripeNotFoundOfARecordedPayment(t *testing.T) {
	f, fs := newStripeFixture(t)
	ctx := context.Background()
	fs.script(stripeAnswer{http.StatusNotFound, stripeErr("invalid_request_error", "resource_missing")}, intent("pi_1", "processing"))
	b := f.book(f.hold("ann"), "pm_card_visa")
	require.NoError(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)), "still processing")
	require.Equal(t, "pi_1", f.booking(b.ID).PaymentID, "recorded")

	assert.Error(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)))
	got := f.booking(b.ID)
	assert.Equal(t, ledger.BookingPaymentPending, got.Status, "not failed: %+v", got)

	fs.script(intent("pi_1", "succeeded"), intent("pi_1", "processing"))
	require.NoError(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)))
	assert.Equal(t, ledger.BookingConfirmed, f.booking(b.ID).Status)
}

func gauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, g.Write(&m))
	return m.GetGauge().GetValue()
}

// TestStripeRefundWithTheKeyRefused: a refund whose call Stripe answers 401
// or 403 (the API key rolled or revoked, a restricted key without the
// permission) is not a refund the provider refuses: it stays pending, with
// no wait put on it, and is made under the same key once the key is
// right.
func TestStripeRefundWithTheKeyRefused(t *testing.T) {
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			f, fs := newStripeFixture(t)
			ctx := context.Background()
			fs.script(intent("pi_1", "succeeded"), intent("pi_1", "succeeded"))
			b := f.book(f.hold("ann"), "pm_card_visa")
			out, err := stripeEvent(t, f, b, "pi_1")
			require.NoError(t, err, out)
			require.Equal(t, ledger.BookingConfirmed, f.booking(b.ID).Status)

			fs.mu.Lock()
			fs.refund = stripeAnswer{status, stripeErr("invalid_request_error", "")}
			fs.mu.Unlock()
			_, err = f.svc.Cancel(ctx, b.ID)
			require.NoError(t, err)
			got := f.booking(b.ID)
			assert.Equal(t, ledger.BookingCancelled, got.Status)
			assert.Equal(t, ledger.RefundPending, got.RefundStatus, "not failed: %+v", got)
			assert.Nil(t, got.RefundRetryAt, "no wait put on it")
			assert.Zero(t, got.RefundAttempts, "the same key again")

			fs.mu.Lock()
			fs.refund = stripeAnswer{http.StatusOK, `{"id":"re_1","object":"refund","amount":100,"currency":"inr","payment_intent":"pi_1","status":"succeeded"}`}
			fs.mu.Unlock()
			require.NoError(t, f.svc.Settlement().SettleUnsettled(ctx, f.booking(b.ID)))
			got = f.booking(b.ID)
			assert.Equal(t, ledger.BookingRefunded, got.Status, "%+v", got)
			assert.Equal(t, 2, fs.refunds)
		})
	}
}
