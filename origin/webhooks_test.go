package origin_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/waitroom"
)

func TestWebhookBadInput(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5})
	b := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, payment.MethodSilent)
	secret := h.fp.WebhookSecret()
	now := h.clock.Now()
	good := intentEvent("evt_good", "payment_intent.succeeded", b.PaymentID, b.BookingID, b.Amount)
	changed := []byte(strings.Replace(string(good), `"amount":90000`, `"amount":1`, 1))
	require.NotEqual(t, string(good), string(changed))

	tests := []struct {
		name    string
		path    string
		body    []byte
		sig     string
		status  int
		code    string
		outcome string
	}{
		{"bad signature", "fakepay", good, payment.SignWebhook(good, "whsec_wrong", now), 400, "invalid_signature", ""},
		{"no signature", "fakepay", good, "", 400, "invalid_signature", ""},
		{"garbage signature", "fakepay", good, "t=abc,v1=zz", 400, "invalid_signature", ""},
		{"stale timestamp", "fakepay", good, payment.SignWebhook(good, secret, now.Add(-301*time.Second)), 400, "invalid_signature", ""},
		{"a day-old signature behind a fresh t=", "fakepay", good,
			"t=" + strconv.FormatInt(now.Unix(), 10) + "," + payment.SignWebhook(good, secret, now.Add(-24*time.Hour)), 400, "invalid_signature", ""},
		{"two t= elements", "fakepay", good, payment.SignWebhook(good, secret, now) + ",t=" + strconv.FormatInt(now.Unix(), 10),
			400, "invalid_signature", ""},
		{"body changed after signing", "fakepay", changed, payment.SignWebhook(good, secret, now), 400, "invalid_signature", ""},
		{"signed but not an event", "fakepay", []byte(`{"hello":1}`), payment.SignWebhook([]byte(`{"hello":1}`), secret, now), 400, "invalid_request", ""},
		{"signed but not JSON", "fakepay", []byte(`nope`), payment.SignWebhook([]byte(`nope`), secret, now), 400, "invalid_request", ""},
		{"unknown event type", "fakepay",
			[]byte(`{"id":"evt_x","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1"}}}`), "", 200, "", "ignored"},
		{"unknown payment", "fakepay",
			intentEvent("evt_u", "payment_intent.succeeded", "pi_unknown", "not-a-booking", 100), "", 200, "", "ignored"},
		{"unknown payment, someone's booking id", "fakepay",
			intentEvent("evt_v", "payment_intent.succeeded", "pi_unknown", "00000000-0000-0000-0000-000000000000", 100), "", 200, "", "ignored"},
		{"another payment of a known booking", "fakepay",
			intentEvent("evt_w", "payment_intent.succeeded", "pi_other", b.BookingID, b.Amount), "", 200, "", "ignored"},
		{"unknown provider", "paypal", good, "", 404, "not_found", ""},
		{"provider not configured", "stripe", good, "", 404, "not_found", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sig := tt.sig
			if sig == "" && tt.status == 200 {
				sig = payment.SignWebhook(tt.body, secret, now)
			}
			headers := map[string]string{}
			if sig != "" {
				headers[payment.SignatureHeader] = sig
			}
			res := h.with(t).do(http.MethodPost, "/v1/webhooks/"+tt.path, tt.body, headers)
			require.Equal(t, tt.status, res.status, "%s", res.body)
			if tt.code != "" {
				assert.Equal(t, tt.code, res.errorCode(t))
			}
			if tt.outcome != "" {
				assert.Contains(t, string(res.body), `"outcome":"`+tt.outcome+`"`)
			}
		})
	}
	// Two header lines are one list of elements, two t= among them.
	for _, second := range []string{
		"t=" + strconv.FormatInt(now.Unix()+1, 10) + ",v1=" + strings.Repeat("0", 64),
		payment.SignWebhook(good, secret, now),
	} {
		req, err := http.NewRequest(http.MethodPost, h.url+"/v1/webhooks/fakepay", bytes.NewReader(good))
		require.NoError(t, err)
		req.Header.Add(payment.SignatureHeader, payment.SignWebhook(good, secret, now))
		req.Header.Add(payment.SignatureHeader, second)
		resp, err := h.client.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "two Stripe-Signature lines: %s", raw)
		assert.Contains(t, string(raw), `"invalid_signature"`)
	}

	big := h.do(http.MethodPost, "/v1/webhooks/fakepay", strings.Repeat("x", 70<<10), nil)
	assert.Equal(t, http.StatusRequestEntityTooLarge, big.status)

	// Nothing changed.
	got := h.booking(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "payment_pending", got.Status)
	assert.Equal(t, b.PaymentID, got.PaymentID)
	assert.Zero(t, h.count(`SELECT count(*) FROM payment_events`))
	assert.Zero(t, h.count(`SELECT count(*) FROM tickets`))
	inv := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(1), inv.Pending)

	// The genuine event still works afterwards.
	res := h.webhook(good)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	assert.Equal(t, "confirmed", h.booking(ev.ID, "ann", b.BookingID).Status)
}

// TestSignedSuccessTheProviderContradicts: a correctly signed
// payment_intent.succeeded for a payment the provider has as declined (the
// webhook secret leaked, or the provider's own mistake) sells no seat and
// issues no ticket: the provider's present word decides, and the event is
// answered as not handled, so it would come again. The declined booking's
// genuine retry is untouched by it.
func TestSignedSuccessTheProviderContradicts(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5})
	hold := h.holdOne(ev.ID, "ann", 1)
	declined := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodDeclined)
	require.Equal(t, "failed", declined.Status)
	require.NotEmpty(t, declined.PaymentID)

	forged := intentEvent("evt_forged", "payment_intent.succeeded", declined.PaymentID, declined.BookingID, declined.Amount)
	for range 2 {
		res := h.webhook(forged)
		assert.Equal(t, http.StatusServiceUnavailable, res.status, "%s", res.body)
	}
	assert.Equal(t, "failed", h.booking(ev.ID, "ann", declined.BookingID).Status)
	assert.Zero(t, h.count(`SELECT count(*) FROM tickets`))
	assert.Zero(t, h.count(`SELECT count(*) FROM (SELECT event_id FROM payment_events
		UNION ALL SELECT settled_event FROM bookings) e WHERE event_id = 'evt_forged'`),
		"the event is not recorded as acted on (the decline's own webhook may be)")
	inv := h.requireSeatsOnce(ev.ID)
	assert.Equal(t, int64(0), inv.Confirmed)
	assert.Equal(t, int64(1), inv.Pending, "the hold is still the buyer's to pay for")

	paid := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodVisa)
	assert.Equal(t, "confirmed", h.settled(ev.ID, "ann", paid.BookingID).Status)
	h.requireSeatsOnce(ev.ID)
}

// recordedEvents counts the webhook events the ledger recorded as acted on:
// rows of payment_events, and the events that confirmed their bookings.
const recordedEvents = `SELECT count(*) FROM (
		SELECT provider, payment_id FROM payment_events
		UNION ALL
		SELECT provider, payment_id FROM bookings WHERE settled_event IS NOT NULL) e`

// TestWebhookRecordedWithItsConfirmation: the payment_intent.succeeded that
// confirms a booking is recorded on the booking by the confirmation itself,
// not as a row of payment_events; of copies arriving together exactly one
// is processed, and a redelivery is a duplicate. Other events acted on are
// still rows of payment_events.
func TestWebhookRecordedWithItsConfirmation(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5})
	b := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, payment.MethodSilent)
	paid := intentEvent("evt_paid", "payment_intent.succeeded", b.PaymentID, b.BookingID, b.Amount)

	outcomes := make([]string, 5)
	var wg sync.WaitGroup
	for i := range outcomes {
		wg.Go(func() {
			res := h.webhook(paid)
			if assert.Equal(t, http.StatusOK, res.status, "%s", res.body) {
				var body struct{ Outcome string }
				res.json(t, &body)
				outcomes[i] = body.Outcome
			}
		})
	}
	wg.Wait()
	slices.Sort(outcomes)
	assert.Equal(t, []string{"duplicate", "duplicate", "duplicate", "duplicate", "processed"}, outcomes)
	assert.Equal(t, "confirmed", h.booking(ev.ID, "ann", b.BookingID).Status)
	assert.Equal(t, 1, h.count(`SELECT count(*) FROM bookings WHERE settled_event = 'evt_paid'`))
	assert.Zero(t, h.count(`SELECT count(*) FROM payment_events`), "no row of its own")
	assert.Contains(t, string(h.webhook(paid).body), `"outcome":"duplicate"`)

	other := h.mustBook(ev.ID, "bob", h.holdOne(ev.ID, "bob", 1).HoldID, payment.MethodSilent)
	failed := intentEvent("evt_failed", "payment_intent.payment_failed", other.PaymentID, other.BookingID, other.Amount)
	assert.Contains(t, string(h.webhook(failed).body), `"outcome":"processed"`)
	assert.Equal(t, 1, h.count(`SELECT count(*) FROM payment_events WHERE event_id = 'evt_failed'`))
	assert.Contains(t, string(h.webhook(failed).body), `"outcome":"duplicate"`)
}

// FuzzWebhookHandler posts arbitrary bodies, signed correctly or not, to the
// webhook route of an origin over real Redis and Postgres: never a panic,
// never a 5xx, and no ticket ever issued for a booking that does not exist.
func FuzzWebhookHandler(f *testing.F) {
	for _, seed := range [][]byte{
		intentEvent("evt_1", "payment_intent.succeeded", "pi_1", "00000000-0000-0000-0000-000000000001", 100),
		intentEvent("evt_2", "payment_intent.payment_failed", "pi_2", "", 0),
		[]byte(`{"id":"evt_3","object":"event","type":"charge.refunded","data":{"object":{"id":"ch_1","payment_intent":"pi_1","amount":5,"amount_refunded":5}}}`),
		[]byte(`{"id":"evt_3r","object":"event","type":"refund.failed","data":{"object":{"id":"re_1","object":"refund","payment_intent":"pi_1","status":"failed","metadata":{"booking_id":"00000000-0000-0000-0000-000000000001"}}}}`),
		[]byte(`{"id":"evt_3u","object":"event","type":"charge.refund.updated","data":{"object":{"id":"re_1","charge":{"id":"ch_1","payment_intent":"pi_1"},"status":"succeeded"}}}`),
		[]byte(`{"id":"evt_3c","object":"event","type":"refund.created","data":{"object":"re_1"}}`),
		[]byte(`{"id":"evt_4","object":"event","type":"payment_intent.succeeded","data":{"object":null}}`),
		[]byte(`{"id":"evt_5","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":7}}}`),
		[]byte(`{"id":"","type":""}`),
		[]byte(`[]`),
		[]byte(`null`),
		[]byte("\xff\xfe"),
		{},
	} {
		f.Add(seed, true)
		f.Add(seed, false)
	}
	handler, fp, c := fuzzOrigin(f)
	f.Fuzz(func(t *testing.T, body []byte, sign bool) {
		req := httptest.NewRequest(http.MethodPost, "/v1/webhooks/fakepay", strings.NewReader(string(body)))
		if sign {
			req.Header.Set(payment.SignatureHeader, payment.SignWebhook(body, fp.WebhookSecret(), c.Now()))
		} else {
			req.Header.Set(payment.SignatureHeader, string(body))
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("answered %d to %q: %s", rec.Code, body, rec.Body.String())
		}
		if !sign && rec.Code != http.StatusBadRequest {
			t.Fatalf("an unsigned body was accepted (%d): %q", rec.Code, body)
		}
	})
}

// fuzzOrigin is one origin for the whole fuzz run (the harness belongs to
// a single test).
func fuzzOrigin(tb testing.TB) (http.Handler, *payment.Fakepay, *clock) {
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	rdb, err := redisurl.New(testenv.RedisURL(tb), redisurl.Defaults{})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = rdb.Close() })
	lg, err := ledger.Open(ctx, testenv.Postgres(tb), ledger.Options{})
	require.NoError(tb, err)
	tb.Cleanup(lg.Close)
	c := newClock()
	fp, err := payment.NewFakepay(ctx, payment.FakepayConfig{Now: c.Now, Seed: 1})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = fp.Close() })
	keys, err := waitroom.NewKeySet(c.Now, waitroom.Key{ID: "k1", Secret: secret})
	require.NoError(tb, err)
	srv, err := origin.New(origin.Config{Keys: keys, Clock: c.Now, Payments: fp, TicketKey: ticketKey}, lg, rdb)
	require.NoError(tb, err)
	require.NoError(tb, srv.Start(ctx))
	return srv.Handler(), fp, c
}

// TestStripeWebhooksThroughTheOrigin runs the booking flow with the Stripe
// adapter against stripe-mock, and the webhooks as Stripe signs them.
func TestStripeWebhooksThroughTheOrigin(t *testing.T) {
	base := paidStripeMock(t)
	const secret = "whsec_stripe_test"
	c := newClock()
	stripe, err := payment.NewStripe(payment.StripeConfig{APIKey: "sk_test_123", WebhookSecret: secret, BackendURL: base, Quiet: true, Now: c.Now})
	require.NoError(t, err)
	h := &payHarness{harness: newHarness(t, harnessOptions{clock: c, config: func(cfg *origin.Config) {
		cfg.Payments = stripe
		cfg.TicketKey = ticketKey
	}})}
	ev := h.createEvent(map[string]any{"capacity": 5})
	b := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, "pm_card_visa")
	require.Equal(t, "payment_pending", b.Status)
	require.NotEmpty(t, b.PaymentID, "stripe-mock's payment intent")

	post := func(body []byte, sig string) result {
		return h.do(http.MethodPost, "/v1/webhooks/stripe", body, map[string]string{payment.SignatureHeader: sig})
	}
	ok := intentEvent("evt_stripe_1", "payment_intent.succeeded", b.PaymentID, b.BookingID, b.Amount)
	assert.Equal(t, http.StatusBadRequest, post(ok, payment.SignWebhook(ok, "whsec_other", c.Now())).status)
	assert.Equal(t, http.StatusBadRequest, post(ok, payment.SignWebhook(ok, secret, c.Now().Add(-10*time.Minute))).status)
	assert.Equal(t, http.StatusNotFound, h.do(http.MethodPost, "/v1/webhooks/fakepay", ok, nil).status, "fakepay is not configured")
	assert.Equal(t, "payment_pending", h.booking(ev.ID, "ann", b.BookingID).Status)

	for range 3 {
		res := post(ok, payment.SignWebhook(ok, secret, c.Now()))
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	}
	got := h.booking(ev.ID, "ann", b.BookingID)
	assert.Equal(t, "confirmed", got.Status)
	assert.Len(t, got.Tickets, 1)
	assert.Equal(t, 1, h.count(recordedEvents+` WHERE provider = 'stripe'`))
	h.requireSeatsOnce(ev.ID)
}

// startStripeMock runs stripe-mock (go install
// github.com/stripe/stripe-mock@v0.203.0) on a port of its choosing. Without
// it the test fails in CI and skips elsewhere.
func startStripeMock(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("stripe-mock")
	if err != nil {
		out, _ := exec.Command("go", "env", "GOPATH").Output()
		for _, gp := range filepath.SplitList(strings.TrimSpace(string(out))) {
			if p := filepath.Join(gp, "bin", "stripe-mock"); fileExists(p) {
				bin = p
			}
		}
	}
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("stripe-mock not found (CI=true): go install github.com/stripe/stripe-mock@v0.203.0")
		}
		t.Skip("stripe-mock not found: go install github.com/stripe/stripe-mock@v0.203.0")
	}
	cmd := exec.Command(bin, "-http-port", "0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
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
		require.NoError(t, err)
		return fmt.Sprintf("http://127.0.0.1:%s", port)
	case <-time.After(60 * time.Second):
		t.Fatal("stripe-mock did not start")
		return ""
	}
}

// paidStripeMock fronts stripe-mock, which keeps no state (its payment
// intents are never paid, and read back with its fixture's amount), with
// what Stripe answers once a payment succeeded: a payment intent read back
// is succeeded, for the amount and currency it was created with, and a
// refund of one returns all of it. The tests
// that use it deliver the payment_intent.succeeded Stripe would send then,
// and the origin settles a success only when the provider has it so.
func paidStripeMock(t *testing.T) string {
	t.Helper()
	target, err := url.Parse(startStripeMock(t))
	require.NoError(t, err)
	var mu sync.Mutex
	created := map[string][2]any{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(res *http.Response) error {
		const intents = "/v1/payment_intents"
		create := res.Request.Method == http.MethodPost && res.Request.URL.Path == intents
		read := res.Request.Method == http.MethodGet && strings.HasPrefix(res.Request.URL.Path, intents+"/")
		// A refund with no amount returns all of the payment; stripe-mock
		// answers its fixture's 100.
		refund := res.Request.Method == http.MethodPost && res.Request.URL.Path == "/v1/refunds"
		if res.StatusCode != http.StatusOK || !create && !read && !refund {
			return nil
		}
		var obj map[string]any
		err := json.NewDecoder(res.Body).Decode(&obj)
		res.Body.Close()
		if err != nil {
			return err
		}
		mu.Lock()
		if pi, ok := obj["payment_intent"].(string); ok && refund {
			if c, ok := created[pi]; ok {
				obj["amount"], obj["currency"] = c[0], c[1]
			}
		} else if id, ok := obj["id"].(string); ok && create {
			created[id] = [2]any{obj["amount"], obj["currency"]}
		} else if c, ok := created[strings.TrimPrefix(res.Request.URL.Path, intents+"/")]; ok {
			obj["amount"], obj["currency"] = c[0], c[1]
		}
		mu.Unlock()
		if read {
			obj["status"], obj["last_payment_error"] = "succeeded", nil
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		res.Body, res.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		res.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// countingProvider counts the create calls the origin makes.
type countingProvider struct {
	payment.Provider
	creates *atomic.Int64
}

func (p countingProvider) CreatePayment(ctx context.Context, req payment.CreateRequest) (payment.Payment, error) {
	p.creates.Add(1)
	return p.Provider.CreatePayment(ctx, req)
}

// TestPendingPaymentWritesNoAnswer: a charge the provider took is not
// written to the ledger before it settles. A GET shows its payment id all
// the same, its webhook settles it without asking the provider which
// payment is the booking's, and the confirmation records the payment id.
// With the Redis record gone the provider is asked, and a payment the
// record does not name is refused.
func TestPendingPaymentWritesNoAnswer(t *testing.T) {
	var creates atomic.Int64
	h := newPayHarness(t, payOptions{config: func(cfg *origin.Config) {
		cfg.Payments = countingProvider{Provider: cfg.Payments, creates: &creates}
	}})
	ev := h.createEvent(map[string]any{"capacity": 5})
	ann := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, payment.MethodSilent)
	require.NotEmpty(t, ann.PaymentID)
	require.Equal(t, int64(1), creates.Load())
	assert.Equal(t, 1, h.count(`SELECT count(*) FROM bookings WHERE id = $1 AND payment_id IS NULL AND response IS NULL
		AND updated_at = created_at`, ann.BookingID), "the booking's row as its insert left it")
	assert.Equal(t, ann.PaymentID, h.booking(ev.ID, "ann", ann.BookingID).PaymentID, "a GET shows the payment")

	// Another payment naming ann's booking settles nothing.
	forged := intentEvent("evt_forged", "payment_intent.succeeded", "pi_forged", ann.BookingID, ann.Amount)
	assert.Contains(t, string(h.webhook(forged).body), `"outcome":"ignored"`)
	assert.Equal(t, "payment_pending", h.booking(ev.ID, "ann", ann.BookingID).Status)

	assert.Contains(t, string(h.webhook(intentEvent("evt_ann", "payment_intent.succeeded", ann.PaymentID, ann.BookingID, ann.Amount)).body),
		`"outcome":"processed"`)
	assert.Equal(t, "confirmed", h.booking(ev.ID, "ann", ann.BookingID).Status)
	assert.Equal(t, int64(1), creates.Load(), "the provider was not asked which payment is the booking's")
	assert.Equal(t, 1, h.count(`SELECT count(*) FROM bookings WHERE id = $1 AND payment_id = $2`, ann.BookingID, ann.PaymentID))

	// Redis lost the record: the provider says which payment is bob's.
	bob := h.mustBook(ev.ID, "bob", h.holdOne(ev.ID, "bob", 1).HoldID, payment.MethodSilent)
	n, err := h.rdb.Del(context.Background(), hashtag.Event(ev.ID)+":payment:"+bob.BookingID).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the record's key")
	assert.Empty(t, h.booking(ev.ID, "bob", bob.BookingID).PaymentID, "nothing to show before it settles")
	forged = intentEvent("evt_forged_bob", "payment_intent.succeeded", "pi_forged", bob.BookingID, bob.Amount)
	assert.Contains(t, string(h.webhook(forged).body), `"outcome":"ignored"`)
	assert.Contains(t, string(h.webhook(intentEvent("evt_bob", "payment_intent.succeeded", bob.PaymentID, bob.BookingID, bob.Amount)).body),
		`"outcome":"processed"`)
	got := h.booking(ev.ID, "bob", bob.BookingID)
	assert.Equal(t, "confirmed", got.Status)
	assert.Equal(t, bob.PaymentID, got.PaymentID)
	h.requireSeatsOnce(ev.ID)
}

// TestPendingBookingShownWhileRedisIsDown: a booking waiting for its
// payment is shown from the ledger, without the payment id Redis keeps,
// while Redis does not answer.
func TestPendingBookingShownWhileRedisIsDown(t *testing.T) {
	redisServer := testenv.StartRedis(t)
	h := newPayHarness(t, payOptions{redisURL: redisServer.URL()})
	ev := h.createEvent(map[string]any{"capacity": 5})
	b := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, payment.MethodSilent)
	require.NotEmpty(t, b.PaymentID)

	redisServer.Stop()
	res := h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	var got bookingJSON
	res.json(t, &got)
	assert.Equal(t, "payment_pending", got.Status)
	assert.Empty(t, got.PaymentID)
}

// savedAnswerProvider answers every create call after the first as Stripe
// does a key whose first call it answered 500: the same 500, for 24 hours,
// whatever the payment that call made.
type savedAnswerProvider struct {
	payment.Provider
	creates *atomic.Int64
}

func (p savedAnswerProvider) CreatePayment(ctx context.Context, req payment.CreateRequest) (payment.Payment, error) {
	if p.creates.Add(1) == 1 {
		return p.Provider.CreatePayment(ctx, req)
	}
	return payment.Payment{}, fmt.Errorf("create payment for booking %s: %w: answered 500 (saved for its key)", req.BookingID, payment.ErrAmbiguous)
}

// TestOutcomeOfTheCreateCallSettlesWithoutAskingAgain: with the payment id
// not in Redis, a webhook's payment is the booking's when the provider
// names the booking's create call as its cause (its idempotency key); the
// create is not repeated, which Stripe would answer with its saved 500
// while the money is taken. An event naming no request, or another's, is
// still checked by asking.
func TestOutcomeOfTheCreateCallSettlesWithoutAskingAgain(t *testing.T) {
	var creates atomic.Int64
	h := newPayHarness(t, payOptions{config: func(cfg *origin.Config) {
		cfg.Payments = savedAnswerProvider{Provider: cfg.Payments, creates: &creates}
	}})
	ev := h.createEvent(map[string]any{"capacity": 5})
	ann := h.mustBook(ev.ID, "ann", h.holdOne(ev.ID, "ann", 1).HoldID, payment.MethodSilent)
	require.NotEmpty(t, ann.PaymentID)
	// Redis lost both records of the create call's answer (one key at a
	// time: on a cluster they are in different slots).
	for _, key := range []string{hashtag.Event(ev.ID) + ":payment:" + ann.BookingID, "payment:fakepay:" + ann.PaymentID} {
		n, err := h.rdb.Del(context.Background(), key).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "the record's key %s", key)
	}

	other := requestEvent("evt_other", ann.PaymentID, ann.BookingID, ann.Amount, payment.PaymentKey("another-booking"))
	assert.Equal(t, http.StatusServiceUnavailable, h.webhook(other).status, "another request's event: the provider is asked, and cannot say")
	assert.Equal(t, "payment_pending", h.booking(ev.ID, "ann", ann.BookingID).Status)

	own := requestEvent("evt_ann", ann.PaymentID, ann.BookingID, ann.Amount, payment.PaymentKey(ann.BookingID))
	res := h.webhook(own)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	assert.Contains(t, string(res.body), `"outcome":"processed"`)
	got := h.booking(ev.ID, "ann", ann.BookingID)
	assert.Equal(t, "confirmed", got.Status)
	assert.Equal(t, ann.PaymentID, got.PaymentID)
	assert.Equal(t, int64(2), creates.Load(), "the create was asked again only for the other request's event")
	h.requireSeatsOnce(ev.ID)
}

// requestEvent is a payment_intent.succeeded caused by an API request made
// with idempotency key key, as Stripe names it in the event's request.
func requestEvent(id, paymentID, bookingID string, amount int64, key string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"payment_intent.succeeded","created":1777629600,"request":{"id":"req_1","idempotency_key":%q},"data":{"object":{"id":%q,"object":"payment_intent","amount":%d,"currency":"inr","status":"succeeded","metadata":{"booking_id":%q}}}}`,
		id, key, paymentID, amount, bookingID))
}
