package booking_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/origin/seats"
	"github.com/waitroom/waitroom/origin/ticketcode"
)

// fixture is the booking flow over real Redis and PostgreSQL, charging
// through fakepay, whose events the tests hand to the settlement
// themselves.
type fixture struct {
	t      *testing.T
	ledger *ledger.Ledger
	seats  *seats.Protocol
	fp     *payment.Fakepay
	svc    *booking.Service
	now    time.Time
	ev     *seats.Event
	// skew moves the clock; background loops read it.
	skew atomic.Int64
	// unresolved is the gauge of payments unresolved past the window a
	// create may be repeated in.
	unresolved prometheus.Gauge
}

func newFixture(t *testing.T) *fixture { return newFixturePaying(t, nil) }

// newFixturePaying is newFixture charging through the provider pay
// returns (fakepay when nil).
func newFixturePaying(t *testing.T, pay func(*payment.Fakepay) payment.Provider) *fixture {
	t.Helper()
	ctx := context.Background()
	rdb, err := redisurl.New(testenv.RedisURL(t), redisurl.Defaults{PoolSize: 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	l, err := ledger.Open(ctx, testenv.Postgres(t), ledger.Options{})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	f := &fixture{t: t, ledger: l, now: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC),
		unresolved: prometheus.NewGauge(prometheus.GaugeOpts{Name: "u"})}
	clock := func() time.Time { return f.now.Add(time.Duration(f.skew.Load())) }
	f.seats, err = seats.New(seats.Config{Ledger: l, Redis: rdb, Idempotency: idem.New(rdb), Clock: clock,
		HoldWriteTimeout: 20 * time.Second})
	require.NoError(t, err)
	fctx, cancel := context.WithCancel(ctx)
	f.fp, err = payment.NewFakepay(fctx, payment.FakepayConfig{Now: clock, Seed: 7})
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); _ = f.fp.Close() })
	signer, err := ticketcode.NewSigner([]byte("ticket-key-0123456789abcdef-0123456789"))
	require.NoError(t, err)
	counter := func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c"}, []string{"l"})
	}
	var provider payment.Provider = f.fp
	if pay != nil {
		provider = pay(f.fp)
	}
	f.svc, err = booking.New(booking.Config{Ledger: l, Seats: f.seats, Redis: rdb, Payments: provider, Tickets: signer, Clock: clock,
		Render: func(ledger.Booking, []ledger.Ticket) []byte { return []byte("{}") },
		Metrics: &booking.Metrics{Bookings: counter(), LatePayments: counter(), PaymentChecks: counter(),
			Refunds: counter(), RefundsFailed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}),
			PaymentsUnresolved: f.unresolved}})
	require.NoError(t, err)

	e, err := l.CreateEvent(ctx, ledger.Event{ID: testenv.EventID(), Name: "settle", Capacity: 10, Sellable: 10,
		Price: 100, Currency: "inr", HoldTTLSeconds: 600, MaxPerUser: 4, CreatedAt: f.now})
	require.NoError(t, err)
	require.NoError(t, f.seats.Recovery().LoadNewEvent(ctx, e.ID))
	f.ev, err = f.seats.Registry().Event(ctx, e.ID)
	require.NoError(t, err)
	return f
}

// hold places a hold of one seat for user.
func (f *fixture) hold(user string) ledger.Hold {
	f.t.Helper()
	key := uuid.NewString()
	res := f.seats.Place(context.Background(), seats.PlaceRequest{Event: f.ev, User: user, Quantity: 1, Key: key,
		Scope: idem.Scope{Kind: "holds", Event: f.ev.ID, User: user, Key: key}, Digest: "d",
		Render: func(ledger.Hold) []byte { return []byte("{}") }})
	require.Equal(f.t, seats.Held, res.Outcome, "%+v", res)
	return res.Hold
}

// book makes a booking of h paid with method.
func (f *fixture) book(h ledger.Hold, method string) ledger.Booking {
	f.t.Helper()
	res := f.svc.Create(context.Background(), booking.Request{Event: f.ev, Hold: h, User: h.UserID,
		Key: uuid.NewString(), Digest: "d", Method: method})
	require.Equal(f.t, booking.Created, res.Outcome, "%+v", res)
	return res.Booking
}

// event hands the settlement a provider's event about b's payment.
func (f *fixture) event(kind payment.EventKind, b ledger.Booking) string {
	f.t.Helper()
	typ := map[payment.EventKind]string{payment.KindPaymentSucceeded: "payment_intent.succeeded",
		payment.KindPaymentFailed: "payment_intent.payment_failed"}[kind]
	out, err := f.svc.Settlement().HandlePaymentEvent(context.Background(), payment.Event{ID: "evt_" + uuid.NewString(),
		Type: typ, Kind: kind, PaymentID: b.PaymentID, BookingID: b.ID, Amount: b.Amount, Currency: b.Currency})
	require.NoError(f.t, err)
	return out
}

func (f *fixture) booking(id string) ledger.Booking {
	f.t.Helper()
	b, err := f.ledger.Booking(context.Background(), id)
	require.NoError(f.t, err)
	return b
}

// moneyBack waits for fakepay and checks the money of b's payment went back.
func (f *fixture) moneyBack(b ledger.Booking) {
	f.t.Helper()
	pays := f.fp.PaymentsForBooking(b.ID)
	require.Len(f.t, pays, 1)
	assert.Equal(f.t, pays[0].Amount, pays[0].AmountRefunded, "the money went back")
}

// TestPaidAfterFailure: whatever a payment's history, a success ends as a
// sale or a refund. The payment of booking 1 is reported failed, then (or
// between the success's Redis and ledger steps) succeeded.
func TestPaidAfterFailure(t *testing.T) {
	tests := []struct {
		name string
		// second: the buyer pays through a second booking of the hold
		// before the success lands.
		second bool
		// between: the failure is reported between the success's Redis
		// step and its ledger step, instead of before it.
		between bool
		// expired: the hold's expiry passes before the success lands, so
		// the success is a late payment (the event has no overflow
		// reserve: refunded).
		expired bool
		want    string
		reason  string
	}{
		{name: "failed, then succeeded", want: ledger.BookingConfirmed},
		{name: "failed, second booking, then succeeded", second: true, want: ledger.BookingRefunded,
			reason: booking.ReasonPaidAfterFailure},
		{name: "failure between the success's two steps", between: true, want: ledger.BookingConfirmed},
		{name: "failure between a late success's two steps", between: true, expired: true,
			want: ledger.BookingRefunded, reason: booking.ReasonLateSoldOut},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			h := f.hold("ann")
			b1 := f.book(h, payment.MethodSilent)
			var armed atomic.Bool
			f.seats.Hooks(func() {
				if armed.CompareAndSwap(true, false) {
					f.event(payment.KindPaymentFailed, b1)
				}
			}, nil)
			if tc.between {
				armed.Store(true)
			} else {
				f.event(payment.KindPaymentFailed, b1)
				require.Equal(t, ledger.BookingFailed, f.booking(b1.ID).Status)
			}
			var b2 ledger.Booking
			if tc.second {
				b2 = f.book(h, payment.MethodSilent)
			}
			if tc.expired {
				f.skew.Add(int64(time.Hour))
			}
			assert.Equal(t, "processed", f.event(payment.KindPaymentSucceeded, b1))
			assert.False(t, armed.Load())
			require.NoError(t, f.fp.WaitIdle(ctx))

			got := f.booking(b1.ID)
			assert.Equal(t, tc.want, got.Status, "%+v", got)
			tickets, err := f.ledger.TicketsOf(ctx, b1.ID)
			require.NoError(t, err)
			hold, err := f.ledger.Hold(ctx, h.ID)
			require.NoError(t, err)
			if tc.want == ledger.BookingConfirmed {
				assert.Len(t, tickets, 1)
				assert.Equal(t, ledger.StatusConfirmed, hold.Status)
			} else {
				assert.Empty(t, tickets)
				assert.Equal(t, tc.reason, got.StatusReason)
				f.moneyBack(b1)
				if tc.second {
					assert.Equal(t, ledger.BookingPaymentPending, f.booking(b2.ID).Status, "the second booking is the hold's")
				}
				if tc.expired {
					assert.Equal(t, ledger.StatusExpired, hold.Status)
				}
			}
			inv, err := f.seats.Recovery().CheckInvariant(ctx, f.ev.ID)
			require.NoError(t, err)
			assert.Zero(t, inv.Drift, "%+v", inv)
			assert.Equal(t, inv.Confirmed, inv.Tickets, "%+v", inv)
			m, err := f.ledger.MoneyReport(ctx, f.ev.ID)
			require.NoError(t, err)
			assert.NoError(t, m.Err())
		})
	}
}
