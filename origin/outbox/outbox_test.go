package outbox_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/outbox"
)

func newDeliverer(t *testing.T, l *ledger.Ledger, url string, clock *testenv.Clock, tune func(*outbox.Config)) (*outbox.Deliverer, *outbox.Metrics) {
	t.Helper()
	m, err := outbox.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	cfg := outbox.Config{URL: url, Secret: secret, Timeout: 2 * time.Second, Clock: clock.Now,
		Rand: func() float64 { return 0 }, Metrics: m}
	if tune != nil {
		tune(&cfg)
	}
	d, err := outbox.New(cfg, l)
	require.NoError(t, err)
	return d, m
}

// drain runs passes, moving the clock on past every backoff, until nothing
// is left to send.
func drain(t *testing.T, l *ledger.Ledger, d *outbox.Deliverer, clock *testenv.Clock) {
	t.Helper()
	ctx := context.Background()
	for range 200 {
		_, err := d.RunOnce(ctx)
		require.NoError(t, err)
		b, err := l.OutboxBacklog(ctx)
		require.NoError(t, err)
		if b.Pending == 0 {
			return
		}
		clock.Advance(time.Minute)
	}
	t.Fatal("the outbox never emptied")
}

// TestReceiverThatFailsTimesOutAndAnswersSlowly: a 500 and a request never
// answered are tried again after their backoff, not before; a slow answer
// within the timeout acknowledges. Every event ends acknowledged once.
func TestReceiverThatFailsTimesOutAndAnswersSlowly(t *testing.T) {
	s := newSale(t, testenv.Postgres(t))
	clock := testenv.NewClock(saleStart)
	failing, hanging, slow := s.confirm(), s.confirm(), s.confirm()
	rcv := newReceiver(t, clock.Now)
	rcv.arrived = make(chan received, 10)
	rcv.hold = make(chan struct{})
	first := map[string]bool{}
	rcv.setAnswer(func(_ int, ev received) int {
		if first[ev.Data.Booking] {
			return http.StatusOK
		}
		first[ev.Data.Booking] = true
		switch ev.Data.Booking {
		case failing:
			return http.StatusInternalServerError
		case hanging:
			return 0
		}
		return http.StatusOK
	})
	d, m := newDeliverer(t, s.l, rcv.srv.URL, clock, nil)

	type result struct {
		p   outbox.Pass
		err error
	}
	done := make(chan result)
	go func() {
		p, err := d.RunOnce(context.Background())
		done <- result{p, err}
	}()
	for range 3 {
		<-rcv.arrived
	}
	// All three are in flight: the slow one answers now, well after the
	// failing one was answered.
	close(rcv.hold)
	res := <-done
	require.NoError(t, res.err)
	assert.Equal(t, 2.0, gauge(t, m.Pending), "the two to try again")
	assert.Equal(t, 0.0, gauge(t, m.OldestAge), "written at the clock's time")
	assert.Equal(t, outbox.Pass{Taken: 3, Delivered: 1, Retried: 2}, res.p)
	require.Len(t, rcv.events(), 1)
	assert.Equal(t, slow, rcv.events()[0].Data.Booking)

	// Not again before the backoff (1 s, no jitter here).
	p, err := d.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Zero(t, p.Taken)
	clock.Advance(time.Second)
	go func() {
		for range rcv.arrived {
		}
	}()
	p, err = d.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, outbox.Pass{Taken: 2, Delivered: 2}, p)
	assert.Len(t, rcv.events(), 3)
	for _, ev := range rcv.events() {
		want := map[string]int{failing: 2, hanging: 2, slow: 1}[ev.Data.Booking]
		assert.Equal(t, want, rcv.seenCounts()[ev.ID], "requests of %s", ev.Data.Booking)
	}
	assert.Zero(t, rcv.badSigs)
	assert.Equal(t, 3.0, count(t, m.Delivered))
	assert.Equal(t, 2.0, count(t, m.Retried))
	assert.Zero(t, count(t, m.Dead))
}

// TestInOrderPerBooking: a booking's next event is sent only once its
// previous one was acknowledged, however often the site fails.
func TestInOrderPerBooking(t *testing.T) {
	s := newSale(t, testenv.Postgres(t))
	clock := testenv.NewClock(saleStart)
	var ids []string
	for range 6 {
		id := s.confirm()
		s.cancel(id)
		ids = append(ids, id)
	}
	rcv := newReceiver(t, clock.Now)
	rcv.setAnswer(func(n int, _ received) int {
		if n%3 != 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	d, _ := newDeliverer(t, s.l, rcv.srv.URL, clock, func(c *outbox.Config) { c.Concurrency = 3 })
	drain(t, s.l, d, clock)

	want := []string{"booking.confirmed", "booking.cancelled", "ticket.voided"}
	for _, id := range ids {
		var acked []string
		step := 0 // the index of the event the booking is at
		for _, r := range rcv.log {
			if r.ev.Data.Booking != id {
				continue
			}
			require.Less(t, step, len(want), "booking %s: an event after the last one", id)
			require.Equal(t, want[step], r.ev.Type, "booking %s: sent out of order", id)
			if r.status == http.StatusOK {
				acked = append(acked, r.ev.Type)
				step++
			}
		}
		assert.Equal(t, want, acked, "booking %s", id)
	}
	assert.Zero(t, rcv.badSigs)
}

// TestGivenUpThenSentAgain: an event failing every try is given up on after
// MaxAttempts, listed as dead, holds back nothing, and is sent again when
// asked.
func TestGivenUpThenSentAgain(t *testing.T) {
	ctx := context.Background()
	s := newSale(t, testenv.Postgres(t))
	clock := testenv.NewClock(saleStart)
	id := s.confirm()
	s.cancel(id)
	rcv := newReceiver(t, clock.Now)
	down := true
	rcv.setAnswer(func(_ int, ev received) int {
		if down && ev.Type == "booking.confirmed" {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	d, m := newDeliverer(t, s.l, rcv.srv.URL, clock, func(c *outbox.Config) { c.MaxAttempts = 3 })
	drain(t, s.l, d, clock)

	dead, err := s.l.DeadOutbox(ctx, time.Time{}, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	assert.Equal(t, "booking.confirmed", dead[0].Type)
	assert.Equal(t, 3, dead[0].Attempts)
	assert.Equal(t, "answered 502", dead[0].LastError)
	assert.Equal(t, 3, rcv.seenCounts()[dead[0].ID])
	assert.Equal(t, 1.0, count(t, m.Dead))
	assert.Equal(t, 1.0, gauge(t, m.DeadNow))
	assert.Zero(t, gauge(t, m.Pending))
	assert.Equal(t, []string{"booking.cancelled", "ticket.voided"}, types(rcv.events()),
		"an event given up on holds back nothing")

	down = false
	_, err = s.l.RedeliverOutbox(ctx, dead[0].ID, clock.Now())
	require.NoError(t, err)
	drain(t, s.l, d, clock)
	assert.Equal(t, []string{"booking.cancelled", "ticket.voided", "booking.confirmed"}, types(rcv.events()))
	b, err := s.l.OutboxBacklog(ctx)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutboxBacklog{}, b)
	assert.Zero(t, gauge(t, m.DeadNow))
}

// TestGivenUpWhenTooOld: an event older than MaxAge is given up on at its
// next failure, whatever its count of tries. Sent again by an operator, its
// tries start afresh, its age too: it fails on and is tried again until
// MaxAge after it was sent again.
func TestGivenUpWhenTooOld(t *testing.T) {
	ctx := context.Background()
	s := newSale(t, testenv.Postgres(t))
	clock := testenv.NewClock(saleStart.Add(2 * time.Hour))
	s.confirm()
	rcv := newReceiver(t, clock.Now)
	rcv.setAnswer(func(int, received) int { return http.StatusInternalServerError })
	d, _ := newDeliverer(t, s.l, rcv.srv.URL, clock, func(c *outbox.Config) { c.MaxAge = time.Hour })
	p, err := d.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.Pass{Taken: 1, Dead: 1}, p)

	dead, err := s.l.DeadOutbox(ctx, time.Time{}, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	again, err := s.l.RedeliverOutbox(ctx, dead[0].ID, clock.Now())
	require.NoError(t, err)
	assert.Zero(t, again.Attempts)
	assert.Empty(t, again.LastError, "no try of the new round failed yet")
	p, err = d.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.Pass{Taken: 1, Retried: 1}, p, "sent again, it is not too old at once")

	clock.Advance(time.Hour)
	p, err = d.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.Pass{Taken: 1, Dead: 1}, p, "an hour after it was sent again")
}

// TestNodesShareTheWork: deliverers of several nodes passing at once never
// send the same event twice while the site acknowledges.
func TestNodesShareTheWork(t *testing.T) {
	s := newSale(t, testenv.Postgres(t))
	clock := testenv.NewClock(saleStart.Add(time.Minute))
	for range 40 {
		s.cancel(s.confirm())
	}
	rcv := newReceiver(t, clock.Now)
	var ds []*outbox.Deliverer
	for range 3 {
		d, _ := newDeliverer(t, s.l, rcv.srv.URL, clock, func(c *outbox.Config) { c.Batch = 7 })
		ds = append(ds, d)
	}
	for range 50 {
		var wg sync.WaitGroup
		for _, d := range ds {
			wg.Go(func() {
				_, err := d.RunOnce(context.Background())
				assert.NoError(t, err)
			})
		}
		wg.Wait()
	}
	require.Len(t, rcv.events(), 120)
	for id, n := range rcv.seenCounts() {
		assert.Equal(t, 1, n, "event %s sent %d times", id, n)
	}
}

func types(evs []received) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

func TestBackoff(t *testing.T) {
	for _, tt := range []struct {
		attempts int
		rand     float64
		want     time.Duration
	}{
		{1, 0, time.Second},
		{2, 0, 2 * time.Second},
		{5, 0, 16 * time.Second},
		{5, 0.5, 12 * time.Second},
		{5, 0.999999, 8*time.Second + 8*time.Microsecond},
		{30, 0, 10 * time.Minute},
		{30, 1, 5 * time.Minute},
	} {
		d, err := outbox.New(outbox.Config{URL: "http://x", Secret: secret, Rand: func() float64 { return tt.rand }}, nil)
		require.NoError(t, err)
		assert.Equal(t, tt.want, d.Backoff(tt.attempts), "attempt %d, rand %v", tt.attempts, tt.rand)
	}
}

func count(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

func gauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, g.Write(&m))
	return m.GetGauge().GetValue()
}

type failingTransport struct{ err error }

func (f failingTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

// TestLongFailureReasonKeptAsText: a failure whose reason is cut to fit
// (a long URL with non-ASCII in its query, repeated by the client's
// error) is still recorded: the cut never splits a character, which the
// ledger's text column would refuse, leaving the event uncounted and
// retried without backoff for ever.
func TestLongFailureReasonKeptAsText(t *testing.T) {
	ctx := context.Background()
	s := newSale(t, testenv.Postgres(t))
	clock := testenv.NewClock(saleStart)
	s.confirm()
	d, _ := newDeliverer(t, s.l, "http://site.example/hooks", clock, func(c *outbox.Config) {
		c.Client = &http.Client{Transport: failingTransport{errors.New("x" + strings.Repeat("é", 400))}}
	})
	p, err := d.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.Pass{Taken: 1, Retried: 1}, p)
	clock.Advance(time.Hour)
	evs, err := s.l.ClaimOutbox(ctx, clock.Now(), clock.Now().Add(time.Minute), 10)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, 1, evs[0].Attempts)
	assert.True(t, utf8.ValidString(evs[0].LastError))
	assert.LessOrEqual(t, len(evs[0].LastError), 500)
}

type answeringTransport struct{ before func() }

func (a answeringTransport) RoundTrip(*http.Request) (*http.Response, error) {
	a.before()
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Header: http.Header{}}, nil
}

// TestAcknowledgedWhileStoppingIsRecorded: an event the site acknowledged
// just as the origin stops (a deploy) is recorded as delivered, not sent
// again by the next origin.
func TestAcknowledgedWhileStoppingIsRecorded(t *testing.T) {
	s := newSale(t, testenv.Postgres(t))
	clock := testenv.NewClock(saleStart)
	s.confirm()
	ctx, stop := context.WithCancel(context.Background())
	d, _ := newDeliverer(t, s.l, "http://site.example/hooks", clock, func(c *outbox.Config) {
		c.Client = &http.Client{Transport: answeringTransport{before: stop}}
	})
	p, err := d.RunOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.Pass{Taken: 1, Delivered: 1}, p)
	b, err := s.l.OutboxBacklog(context.Background())
	require.NoError(t, err)
	assert.Zero(t, b.Pending, "acknowledged, so not sent again")
}
