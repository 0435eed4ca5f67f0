package payment

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"go/build"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v85"
)

// stripeMockInstall is how CI (and a developer) gets the binary.
const stripeMockInstall = "go install github.com/stripe/stripe-mock@v0.203.0"

// findStripeMock looks on PATH, then in GOBIN and GOPATH/bin.
func findStripeMock() string {
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p
	}
	var dirs []string
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) > 0 && strings.TrimSpace(lines[0]) != "" {
			dirs = append(dirs, strings.TrimSpace(lines[0]))
		}
		if len(lines) > 1 {
			for _, gp := range filepath.SplitList(strings.TrimSpace(lines[1])) {
				dirs = append(dirs, filepath.Join(gp, "bin"))
			}
		}
	}
	for _, gp := range filepath.SplitList(build.Default.GOPATH) {
		dirs = append(dirs, filepath.Join(gp, "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "stripe-mock")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

// startStripeMock runs stripe-mock on a port the system picks and returns its
// base URL. Without the binary the test fails in CI and skips elsewhere.
func startStripeMock(t *testing.T) string {
	t.Helper()
	bin := findStripeMock()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("stripe-mock not found on PATH or in GOPATH/bin (CI=true: install it with `%s`)", stripeMockInstall)
		}
		t.Skipf("stripe-mock not found; install it with `%s`", stripeMockInstall)
	}
	// -http-port 0 lets the system choose, and turns off stripe-mock's
	// default HTTPS listener on a fixed port.
	cmd := exec.Command(bin, "-http-port", "0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start(), "start %s", bin)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok {
				addr <- a
			}
		}
		close(addr)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case a, ok := <-addr:
		require.True(t, ok, "stripe-mock exited before listening")
		_, port, err := net.SplitHostPort(a)
		require.NoError(t, err, "stripe-mock address %q", a)
		return "http://127.0.0.1:" + port
	case <-time.After(60 * time.Second):
		t.Fatal("stripe-mock did not start listening")
		return ""
	}
}

type recordedRequest struct {
	Method, Path string
	Header       http.Header
	Form         url.Values
}

// recorder keeps what the adapter sends, since stripe-mock doesn't echo
// headers or check idempotency.
type recorder struct {
	mu   sync.Mutex
	reqs []recordedRequest
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	form, _ := url.ParseQuery(string(body))
	if req.Method == http.MethodGet {
		form = req.URL.Query()
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, recordedRequest{Method: req.Method, Path: req.URL.Path, Header: req.Header.Clone(), Form: form})
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) last(t *testing.T) recordedRequest {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.reqs)
	return r.reqs[len(r.reqs)-1]
}

func newTestStripe(t *testing.T, backend string, rt http.RoundTripper) *Stripe {
	t.Helper()
	s, err := NewStripe(StripeConfig{APIKey: "sk_test_123", WebhookSecret: testSecret, BackendURL: backend,
		HTTPClient: &http.Client{Transport: rt, Timeout: 30 * time.Second}, MaxNetworkRetries: stripe.Int64(0), Quiet: true})
	require.NoError(t, err)
	return s
}

func TestStripeAgainstStripeMock(t *testing.T) {
	base := startStripeMock(t)
	rec := &recorder{}
	s := newTestStripe(t, base, rec)
	ctx := t.Context()

	p, err := s.CreatePayment(ctx, CreateRequest{BookingID: "b_1", Amount: 90000, Currency: "INR", PaymentMethod: "pm_card_visa",
		Metadata: map[string]string{"event_id": "42"}})
	require.NoError(t, err)
	assert.Regexp(t, `^pi_`, p.ID)
	assert.EqualValues(t, 90000, p.Amount)
	assert.Equal(t, "inr", p.Currency)

	req := rec.last(t)
	assert.Equal(t, "POST /v1/payment_intents", req.Method+" "+req.Path)
	assert.Equal(t, PaymentKey("b_1"), req.Header.Get("Idempotency-Key"))
	assert.Equal(t, "Bearer sk_test_123", req.Header.Get("Authorization"))
	assert.Equal(t, stripe.APIVersion, req.Header.Get("Stripe-Version"))
	assert.Equal(t, url.Values{
		"amount": {"90000"}, "currency": {"inr"}, "payment_method": {"pm_card_visa"}, "confirm": {"true"},
		"automatic_payment_methods[enabled]": {"true"}, "automatic_payment_methods[allow_redirects]": {"never"},
		"error_on_requires_action": {"true"}, "metadata[booking_id]": {"b_1"}, "metadata[event_id]": {"42"},
	}, req.Form)

	// A retry is the same request under the same key: Stripe answers it
	// with the first payment.
	_, err = s.CreatePayment(ctx, CreateRequest{BookingID: "b_1", Amount: 90000, Currency: "inr", PaymentMethod: "pm_card_visa",
		Metadata: map[string]string{"event_id": "42"}})
	require.NoError(t, err)
	retry := rec.last(t)
	assert.Equal(t, req.Header.Get("Idempotency-Key"), retry.Header.Get("Idempotency-Key"))
	assert.Equal(t, req.Form, retry.Form)

	got, err := s.GetPayment(ctx, p.ID)
	require.NoError(t, err)
	assert.Equal(t, p.ID, got.ID)
	req = rec.last(t)
	assert.Equal(t, "GET /v1/payment_intents/"+p.ID, req.Method+" "+req.Path)
	assert.Equal(t, url.Values{"expand[0]": {"latest_charge.refunds"}}, req.Form)
	// stripe-mock's fixture is an intent whose attempt failed.
	assert.Equal(t, StatusFailed, got.Status)

	r, err := s.Refund(ctx, RefundRequest{PaymentID: p.ID, BookingID: "b_1"})
	require.NoError(t, err)
	assert.Regexp(t, `^re_`, r.ID)
	assert.Equal(t, p.ID, r.PaymentID)
	assert.Equal(t, RefundSucceeded, r.Status)
	req = rec.last(t)
	assert.Equal(t, "POST /v1/refunds", req.Method+" "+req.Path)
	assert.Equal(t, RefundKey("b_1"), req.Header.Get("Idempotency-Key"))
	assert.Equal(t, url.Values{"payment_intent": {p.ID}, "metadata[booking_id]": {"b_1"}}, req.Form)

	r, err = s.Refund(ctx, RefundRequest{PaymentID: p.ID, BookingID: "b_1", Amount: 100, IdempotencyKey: "partial-1"})
	require.NoError(t, err)
	assert.EqualValues(t, 100, r.Amount)
	req = rec.last(t)
	assert.Equal(t, "partial-1", req.Header.Get("Idempotency-Key"))
	assert.Equal(t, []string{"100"}, req.Form["amount"])

	_, err = s.CreatePayment(ctx, CreateRequest{BookingID: "b_1", Amount: 0, Currency: "inr", PaymentMethod: "pm_card_visa"})
	assert.ErrorIs(t, err, ErrInvalidRequest, "refused before any call")
}

// cannedStripe answers every request with one Stripe-format body.
func cannedStripe(t *testing.T, status int, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestStripeErrorsAreSorted(t *testing.T) {
	declined := `{"error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds",` +
		`"message":"Your card has insufficient funds.","payment_intent":{"id":"pi_d","object":"payment_intent","amount":500,` +
		`"currency":"inr","status":"requires_payment_method","metadata":{"booking_id":"b_1"}}}}`
	apiError := func(typ, code string) string {
		return `{"error":{"type":"` + typ + `","code":"` + code + `","message":"canned"}}`
	}
	paramMissing := func(param, what, id string) string {
		return `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"` + param +
			`","message":"No such ` + what + `: '` + id + `'"}}`
	}
	tests := []struct {
		name   string
		status int
		body   string
		call   string // create, get, refund
		want   error
	}{
		{"declined", http.StatusPaymentRequired, declined, "create", ErrDeclined},
		{"key reused with other parameters", http.StatusBadRequest, apiError("idempotency_error", ""), "create", ErrIdempotencyConflict},
		{"key in use by a running request", http.StatusConflict, apiError("idempotency_error", "idempotency_key_in_use"), "create", ErrAmbiguous},
		{"server error", http.StatusInternalServerError, apiError("api_error", ""), "create", ErrAmbiguous},
		{"rate limited", http.StatusTooManyRequests, apiError("invalid_request_error", "rate_limit"), "create", ErrAmbiguous},
		{"bad parameter", http.StatusBadRequest, apiError("invalid_request_error", "parameter_invalid_integer"), "create", ErrInvalidRequest},
		{"unknown payment", http.StatusNotFound, apiError("invalid_request_error", "resource_missing"), "get", ErrNotFound},
		// A revoked or rolled key is refused before Stripe looks at the
		// idempotency key: unlike another invalid request, it says nothing
		// of an earlier call under that key.
		{"revoked key", http.StatusUnauthorized, apiError("invalid_request_error", ""), "create", ErrUnauthorized},
		{"restricted key without the permission", http.StatusForbidden, apiError("invalid_request_error", ""), "get", ErrUnauthorized},
		{"revoked key is an invalid request", http.StatusUnauthorized, apiError("invalid_request_error", ""), "refund", ErrInvalidRequest},
		// Stripe answers an id it does not know in a parameter (a buyer's
		// made-up payment-method token, a refund of a payment gone) with
		// 400 and the same code, naming the parameter: the request is bad,
		// not the thing asked about missing.
		{"unknown payment method", http.StatusBadRequest, paramMissing("payment_method", "PaymentMethod", "pm_nope"), "create", ErrInvalidRequest},
		{"refund of an unknown payment", http.StatusBadRequest, paramMissing("payment_intent", "payment_intent", "pi_nope"), "refund", ErrInvalidRequest},
		{"already refunded", http.StatusBadRequest, apiError("invalid_request_error", "charge_already_refunded"), "refund", ErrAlreadyRefunded},
		{"refund rate limited", http.StatusTooManyRequests, apiError("invalid_request_error", "rate_limit"), "refund", ErrAmbiguous},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStripe(t, cannedStripe(t, tt.status, tt.body), http.DefaultTransport)
			var err error
			switch tt.call {
			case "create":
				_, err = s.CreatePayment(t.Context(), visa("b_1"))
			case "get":
				_, err = s.GetPayment(t.Context(), "pi_1")
			case "refund":
				_, err = s.Refund(t.Context(), RefundRequest{PaymentID: "pi_1", BookingID: "b_1"})
			}
			require.ErrorIs(t, err, tt.want)
			var se *stripe.Error
			assert.ErrorAs(t, err, &se, "stripe-go's error stays wrapped for the details")
		})
	}

	t.Run("declined comes with the failed payment", func(t *testing.T) {
		s := newTestStripe(t, cannedStripe(t, http.StatusPaymentRequired, declined), http.DefaultTransport)
		p, err := s.CreatePayment(t.Context(), visa("b_1"))
		var d *DeclineError
		require.ErrorAs(t, err, &d)
		assert.Equal(t, DeclineError{PaymentID: "pi_d", Code: "card_declined", DeclineCode: "insufficient_funds",
			Message: "Your card has insufficient funds."}, *d)
		assert.Equal(t, "pi_d", p.ID)
		assert.Equal(t, "b_1", p.BookingID)
		assert.Equal(t, StatusFailed, p.Status)
	})

	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		s := newTestStripe(t, "http://"+addr, http.DefaultTransport)
		_, err = s.CreatePayment(t.Context(), visa("b_1"))
		assert.ErrorIs(t, err, ErrAmbiguous)
	})

	t.Run("caller's deadline", func(t *testing.T) {
		block := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(block) })
		s := newTestStripe(t, srv.URL, http.DefaultTransport)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := s.CreatePayment(ctx, visa("b_1"))
		assert.ErrorIs(t, err, ErrAmbiguous)
		assert.ErrorIs(t, err, context.Canceled)
	})
}

func TestStripePaymentStatus(t *testing.T) {
	tests := []struct {
		status string
		extra  string
		want   Status
	}{
		{"succeeded", `,"latest_charge":{"id":"ch_1","object":"charge","amount_refunded":300}`, StatusSucceeded},
		{"processing", "", StatusPending},
		{"requires_action", "", StatusPending},
		{"requires_payment_method", `,"last_payment_error":{"type":"card_error","code":"card_declined","message":"no"}`, StatusFailed},
		{"canceled", "", StatusCanceled},
	}
	for _, tt := range tests {
		t.Run(tt.status, func(t *testing.T) {
			body := `{"id":"pi_1","object":"payment_intent","amount":900,"currency":"inr","created":1795946400,"status":"` +
				tt.status + `","metadata":{"booking_id":"b_1"}` + tt.extra + `}`
			s := newTestStripe(t, cannedStripe(t, http.StatusOK, body), http.DefaultTransport)
			p, err := s.GetPayment(t.Context(), "pi_1")
			require.NoError(t, err)
			assert.Equal(t, tt.want, p.Status)
			assert.Equal(t, "b_1", p.BookingID)
			assert.Equal(t, time.Unix(1795946400, 0).UTC(), p.Created)
			if tt.status == "succeeded" {
				assert.EqualValues(t, 300, p.AmountRefunded)
			}
		})
	}
}

// TestStripeRefundsPending: a charge's amount refunded counts its pending
// refunds; the adapter tells them apart, from the charge's refunds or, past
// their first page, from the list of the intent's refunds.
func TestStripeRefundsPending(t *testing.T) {
	refund := func(id, status string, amount int) string {
		return fmt.Sprintf(`{"id":%q,"object":"refund","amount":%d,"currency":"inr","status":%q,"payment_intent":"pi_1"}`, id, amount, status)
	}
	intent := func(hasMore bool, refunds ...string) string {
		return `{"id":"pi_1","object":"payment_intent","amount":900,"currency":"inr","created":1795946400,"status":"succeeded",` +
			`"metadata":{"booking_id":"b_1"},"latest_charge":{"id":"ch_1","object":"charge","amount_refunded":600,` +
			`"refunds":{"object":"list","url":"/v1/charges/ch_1/refunds","has_more":` + strconv.FormatBool(hasMore) +
			`,"data":[` + strings.Join(refunds, ",") + `]}}}`
	}
	t.Run("on the charge", func(t *testing.T) {
		s := newTestStripe(t, cannedStripe(t, http.StatusOK, intent(false,
			refund("re_1", "pending", 200), refund("re_2", "succeeded", 300), refund("re_3", "requires_action", 100))), http.DefaultTransport)
		p, err := s.GetPayment(t.Context(), "pi_1")
		require.NoError(t, err)
		assert.EqualValues(t, 600, p.AmountRefunded)
		assert.EqualValues(t, 300, p.RefundPending)
		assert.EqualValues(t, 300, p.Returned())
	})
	t.Run("past the first page", func(t *testing.T) {
		var listed url.Values
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			switch r.URL.Path {
			case "/v1/payment_intents/pi_1":
				_, _ = io.WriteString(w, intent(true, refund("re_1", "succeeded", 100)))
			case "/v1/refunds":
				listed = r.URL.Query()
				_, _ = io.WriteString(w, `{"object":"list","url":"/v1/refunds","has_more":false,"data":[`+
					refund("re_1", "succeeded", 100)+","+refund("re_2", "pending", 500)+`]}`)
			default:
				http.NotFound(w, r)
			}
		}))
		t.Cleanup(srv.Close)
		s := newTestStripe(t, srv.URL, http.DefaultTransport)
		p, err := s.GetPayment(t.Context(), "pi_1")
		require.NoError(t, err)
		assert.Equal(t, "pi_1", listed.Get("payment_intent"))
		assert.EqualValues(t, 500, p.RefundPending)
		assert.EqualValues(t, 100, p.Returned())
	})
}

func TestNewStripeNeedsItsSecrets(t *testing.T) {
	_, err := NewStripe(StripeConfig{WebhookSecret: "whsec_x"})
	assert.Error(t, err)
	_, err = NewStripe(StripeConfig{APIKey: "sk_test_x"})
	assert.Error(t, err)
}
