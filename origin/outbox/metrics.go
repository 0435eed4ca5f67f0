package outbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waitroom/waitroom/origin/ledger"
)

// Metrics are the deliverer's collectors.
type Metrics struct {
	Delivered prometheus.Counter
	Retried   prometheus.Counter
	Dead      prometheus.Counter
	// Latency is the time from an event's change to the site's
	// acknowledgement.
	Latency prometheus.Histogram
	// Pending, OldestAge and DeadNow are read from the ledger after each
	// pass: what is left to send, how old the oldest of it is, and how many
	// were given up on and not sent again.
	Pending   prometheus.Gauge
	OldestAge prometheus.Gauge
	DeadNow   prometheus.Gauge
}

// NewMetrics makes the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_origin_events_delivered_total",
			Help: "Booking events the site acknowledged (2xx).",
		}),
		Retried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_origin_events_retried_total",
			Help: "Tries of booking events that failed (an error, a timeout, an answer not 2xx) and will be made again.",
		}),
		Dead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_origin_events_dead_total",
			Help: "Booking events given up on after their last try (GET /v1/admin/outbox?status=dead).",
		}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "waitroom_origin_events_delivery_seconds",
			Help:    "Time from a booking's change to the site's acknowledgement of its event.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600},
		}),
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "waitroom_origin_events_pending",
			Help: "Booking events not yet acknowledged by the site (given up ones apart).",
		}),
		OldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "waitroom_origin_events_oldest_pending_seconds",
			Help: "Age of the oldest booking event not yet acknowledged; 0 with none.",
		}),
		DeadNow: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "waitroom_origin_events_dead",
			Help: "Booking events given up on and not sent again since.",
		}),
	}
	for _, c := range []prometheus.Collector{m.Delivered, m.Retried, m.Dead, m.Latency, m.Pending, m.OldestAge, m.DeadNow} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) delivered(age time.Duration) {
	if m != nil {
		m.Delivered.Inc()
		m.Latency.Observe(max(age, 0).Seconds())
	}
}

func (m *Metrics) retried() {
	if m != nil {
		m.Retried.Inc()
	}
}

func (m *Metrics) dead() {
	if m != nil {
		m.Dead.Inc()
	}
}

func (m *Metrics) backlog(b ledger.OutboxBacklog, now time.Time) {
	m.Pending.Set(float64(b.Pending))
	m.DeadNow.Set(float64(b.Dead))
	if b.Oldest.IsZero() {
		m.OldestAge.Set(0)
	} else {
		m.OldestAge.Set(max(now.Sub(b.Oldest), 0).Seconds())
	}
}
