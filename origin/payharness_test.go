package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/waitroom"
)

var ticketKey = []byte("ticket-key-0123456789abcdef-0123456789")

// payHarness is an origin charging through fakepay, whose clock is the
// origin's and whose webhooks come to the origin.
type payHarness struct {
	*harness
	fp *payment.Fakepay
}

type payOptions struct {
	fakepay payment.FakepayConfig
	config  func(*origin.Config)
	// redisURL and dbURL as in harnessOptions.
	redisURL, dbURL string
	// clock is the injected time; a new one when nil.
	clock *clock
	// outbox as in harnessOptions.
	outbox bool
}

func newPayHarness(t *testing.T, o payOptions) *payHarness {
	t.Helper()
	c := o.clock
	if c == nil {
		c = newClock()
	}
	fcfg := o.fakepay
	fcfg.Now = c.Now
	fcfg.WebhookSecret = "whsec_test_secret"
	if fcfg.HTTPClient == nil {
		fcfg.HTTPClient = &http.Client{Transport: checkedTransport(t, nil), Timeout: 10 * time.Second}
	}
	if fcfg.Seed == 0 {
		fcfg.Seed = 42
	}
	fcfg.Logger = testLogger(t)
	ctx, cancel := context.WithCancel(context.Background())
	fp, err := payment.NewFakepay(ctx, fcfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		_ = fp.Close()
	})
	h := newHarness(t, harnessOptions{clock: c, redisURL: o.redisURL, dbURL: o.dbURL, outbox: o.outbox, config: func(cfg *origin.Config) {
		cfg.Payments = fp
		cfg.TicketKey = ticketKey
		if o.config != nil {
			o.config(cfg)
		}
	}})
	fp.SetWebhookURL(h.url + "/v1/webhooks/fakepay")
	return &payHarness{harness: h, fp: fp}
}

type ticketJSON struct {
	Code    string `json:"code"`
	EventID int64  `json:"event_id"`
	Seat    int64  `json:"seat"`
}

type bookingJSON struct {
	BookingID    string       `json:"booking_id"`
	HoldID       string       `json:"hold_id"`
	EventID      int64        `json:"event_id"`
	UserID       string       `json:"user_id"`
	Status       string       `json:"status"`
	Amount       int64        `json:"amount"`
	Currency     string       `json:"currency"`
	PaymentID    string       `json:"payment_id"`
	Tickets      []ticketJSON `json:"tickets"`
	Quantity     int64        `json:"quantity"`
	StatusReason string       `json:"status_reason"`
	Overflow     bool         `json:"overflow"`
	RefundStatus string       `json:"refund_status"`
}

func (h *payHarness) auth(user string, event int64) map[string]string {
	return map[string]string{waitroom.TokenHeader: h.token(user, event, 1)}
}

// holdOne makes a hold of qty seats for user and returns it.
func (h *payHarness) holdOne(event int64, user string, qty int) holdJSON {
	h.t.Helper()
	res := h.hold(event, user, qty, "hold-"+user+"-"+uuid.NewString())
	require.Equal(h.t, http.StatusCreated, res.status, "hold: %s", res.body)
	var hj holdJSON
	res.json(h.t, &hj)
	return hj
}

func (h *payHarness) book(event int64, user, holdID, method, key string) result {
	h.t.Helper()
	headers := h.auth(user, event)
	headers["Idempotency-Key"] = key
	return h.do(http.MethodPost, "/v1/bookings", map[string]string{"hold_id": holdID, "payment_method_token": method}, headers)
}

// mustBook books and expects 202.
func (h *payHarness) mustBook(event int64, user, holdID, method string) bookingJSON {
	h.t.Helper()
	res := h.book(event, user, holdID, method, "book-"+uuid.NewString())
	require.Equal(h.t, http.StatusAccepted, res.status, "book: %s", res.body)
	var b bookingJSON
	res.json(h.t, &b)
	return b
}

func (h *payHarness) booking(event int64, user, id string) bookingJSON {
	h.t.Helper()
	res := h.do(http.MethodGet, "/v1/bookings/"+id, nil, h.auth(user, event))
	require.Equal(h.t, http.StatusOK, res.status, "get booking: %s", res.body)
	var b bookingJSON
	res.json(h.t, &b)
	return b
}

// settled waits for fakepay's deliveries to be over (no sleeping on a
// guess) and reads the booking.
func (h *payHarness) settled(event int64, user, id string) bookingJSON {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(h.t, h.fp.WaitIdle(ctx))
	return h.booking(event, user, id)
}

// webhook posts a Stripe-format event signed by fakepay's secret at the
// origin's clock.
func (h *payHarness) webhook(body []byte) result {
	h.t.Helper()
	return h.do(http.MethodPost, "/v1/webhooks/fakepay", body, map[string]string{
		payment.SignatureHeader: payment.SignWebhook(body, h.fp.WebhookSecret(), h.clock.Now()),
	})
}

func intentEvent(id, typ, paymentID, bookingID string, amount int64) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"created":1777629600,"data":{"object":{"id":%q,"object":"payment_intent","amount":%d,"currency":"inr","status":"succeeded","metadata":{"booking_id":%q}}}}`,
		id, typ, paymentID, amount, bookingID))
}

// requireSeatsOnce checks that no seat of the event has two valid tickets,
// and that tickets and the invariant agree.
func (h *payHarness) requireSeatsOnce(event int64) origin.Invariant {
	h.t.Helper()
	var dup int
	err := h.ledger.Pool().QueryRow(context.Background(), `SELECT count(*) FROM (
		SELECT seat FROM tickets WHERE event_id = $1 AND valid GROUP BY seat HAVING count(*) > 1) x`, event).Scan(&dup)
	require.NoError(h.t, err)
	require.Zero(h.t, dup, "a seat with two valid tickets")
	inv := h.invariant(event)
	require.Zero(h.t, inv.Drift, "%+v", inv)
	require.Equal(h.t, inv.Confirmed, inv.Tickets, "one ticket per confirmed seat: %+v", inv)
	require.LessOrEqual(h.t, inv.OverflowUsed, inv.OverflowReserve, "%+v", inv)
	require.LessOrEqual(h.t, inv.Confirmed+inv.Pending, inv.Capacity, "%+v", inv)
	return inv
}

func (h *payHarness) count(sql string, args ...any) int {
	h.t.Helper()
	var n int
	require.NoError(h.t, h.ledger.Pool().QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}
