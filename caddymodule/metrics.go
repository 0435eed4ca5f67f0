package caddymodule

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
)

// The collectors are made once per process and registered with every
// config's registry, so counts carry on across reloads. The only label is the
// event id, which comes from the config: never a user, an address or a token.
var metrics = struct {
	arrivals, admitted, waiting, soldOut, invalidTokens *prometheus.CounterVec
	preQueue, challenges, challengesFailed, rateLimited *prometheus.CounterVec
	revoked, completed, windowOver                      *prometheus.CounterVec
	decisions                                           *prometheus.HistogramVec
	keyDisagreements                                    *prometheus.GaugeVec
}{
	arrivals: newCounter("arrivals_total",
		"New arrivals given a queue position."),
	admitted: newCounter("admitted_total",
		"Requests passed on to the next handler with an admitted token."),
	waiting: newCounter("waiting_total",
		"Waiting answers (position above the watermark, or the event paused)."),
	soldOut: newCounter("sold_out_total",
		"Sold-out answers (410)."),
	invalidTokens: newCounter("invalid_tokens_total",
		"Requests that presented a queue token that failed verification and were treated as new arrivals."),
	preQueue: newCounter("pre_queue_entries_total",
		"New arrivals entered in a scheduled opening's pre-queue."),
	challenges: newCounter("challenges_total",
		"Challenges handed out (proof of work at join), including those for wrong, expired or reused solutions."),
	challengesFailed: newCounter("challenges_failed_total",
		"Arrivals whose solution of a challenge was wrong, expired or used again, answered a new challenge instead of a place."),
	rateLimited: newCounter("rate_limited_total",
		"New arrivals refused with 429 for exceeding the join rate of their address."),
	revoked: newCounter("revoked_total",
		"Admitted tokens the site revoked (X-Waitroom-Command: revoke)."),
	completed: newCounter("completed_total",
		"Completed answers to accounts whose admission the site revoked."),
	windowOver: newCounter("admission_windows_over_total",
		"Admitted tokens sent to the back of the queue because their admission window passed unextended."),
	keyDisagreements: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "caddy",
		Subsystem: "waitroom",
		Name:      "key_disagreements",
		Help: "Key ids under which the event's key holders sharing a Redis store (its gateways, the origin) hold different " +
			"secrets, as this gateway last found (every 30 s): each takes the others' tokens for forgeries. 0 when they agree.",
	}, []string{"event"}),
	decisions: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "caddy",
		Subsystem: "waitroom",
		Name:      "decision_duration_seconds",
		Help: "Time the gateway took to decide a request, by outcome: until it passed an admitted one on, " +
			"until it had answered any other (the waiting page, sold out, …; error when it answered none).",
		// From a verified token judged in memory (microseconds) to a join
		// waiting on the store (up to joinTimeout).
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"event", "outcome"}),
}

// outcomes are the decision histogram's outcome values: the statuses the
// handler sets, and outcomeError for a request it answered with an error
// before setting one. A fixed set, so the labels stay few.
var outcomes = []string{StatusAdmitted, StatusWaiting, StatusSoldOut, StatusUnavailable, StatusPreQueue,
	StatusChallenge, StatusRateLimited, StatusCompleted, outcomeError}

const outcomeError = "error"

// Every loaded event's queue, read from its room when scraped (not
// counted along the request path, so the gauges are the state itself).
var queueGauges = struct {
	watermark, lastPosition, admitted, waiting *prometheus.Desc
}{
	watermark: newGaugeDesc("watermark", "The highest admitted position."),
	lastPosition: newGaugeDesc("last_position",
		"The highest position handed out."),
	admitted: newGaugeDesc("admitted_positions",
		"Positions handed out at or below the watermark, within the hard cap."),
	waiting: newGaugeDesc("waiting_positions",
		"Positions handed out above the watermark, within the hard cap, whose holders still poll (abandon_after); 0 once sold out."),
}

func newGaugeDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName("caddy", "waitroom", name), help, []string{"event"}, nil)
}

// queueCollector reports queueGauges for every event a loaded config
// guards.
type queueCollector struct{}

func (queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueGauges.watermark
	ch <- queueGauges.lastPosition
	ch <- queueGauges.admitted
	ch <- queueGauges.waiting
}

func (queueCollector) Collect(ch chan<- prometheus.Metric) {
	for _, e := range eventRooms() {
		ev := strconv.FormatInt(e.key.Event, 10)
		s := e.room.State()
		admitted, waiting := queueCounts(e)
		for _, g := range []struct {
			desc *prometheus.Desc
			v    int64
		}{
			{queueGauges.watermark, s.Watermark}, {queueGauges.lastPosition, s.LastPosition},
			{queueGauges.admitted, admitted}, {queueGauges.waiting, waiting},
		} {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(g.v), ev)
		}
	}
}

func newCounter(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy",
		Subsystem: "waitroom",
		Name:      name,
		Help:      help,
	}, []string{"event"})
}

// registerMetrics adds the collectors to a config's registry; another handler
// of the same config may have done so already.
func registerMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{
		metrics.arrivals, metrics.admitted, metrics.waiting, metrics.soldOut, metrics.invalidTokens,
		metrics.preQueue, metrics.challenges, metrics.challengesFailed, metrics.rateLimited, metrics.revoked, metrics.completed, metrics.windowOver,
		metrics.decisions, metrics.keyDisagreements, queueCollector{},
	} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return err
			}
		}
	}
	return nil
}

// eventMetrics are the counters of one event, resolved once at Provision so
// the request path does no label lookup.
type eventMetrics struct {
	arrivals, admitted, waiting, soldOut, invalidTokens prometheus.Counter
	preQueue, challenges, challengesFailed, rateLimited prometheus.Counter
	revoked, completed, windowOver                      prometheus.Counter
	// decisions holds one observer per outcome, in the order of outcomes.
	decisions []prometheus.Observer
}

func metricsFor(event string) eventMetrics {
	decisions := make([]prometheus.Observer, len(outcomes))
	for i, o := range outcomes {
		decisions[i] = metrics.decisions.WithLabelValues(event, o)
	}
	return eventMetrics{
		decisions:        decisions,
		arrivals:         metrics.arrivals.WithLabelValues(event),
		admitted:         metrics.admitted.WithLabelValues(event),
		waiting:          metrics.waiting.WithLabelValues(event),
		soldOut:          metrics.soldOut.WithLabelValues(event),
		invalidTokens:    metrics.invalidTokens.WithLabelValues(event),
		preQueue:         metrics.preQueue.WithLabelValues(event),
		challenges:       metrics.challenges.WithLabelValues(event),
		challengesFailed: metrics.challengesFailed.WithLabelValues(event),
		rateLimited:      metrics.rateLimited.WithLabelValues(event),
		revoked:          metrics.revoked.WithLabelValues(event),
		completed:        metrics.completed.WithLabelValues(event),
		windowOver:       metrics.windowOver.WithLabelValues(event),
	}
}

// decision times one request's decision (the decision histogram): Done
// when it has answered, or when it passes the request on as next, whichever
// comes first. It holds the request's placeholders, so one allocation
// serves both.
type decision struct {
	start time.Time
	m     *eventMetrics
	repl  placeholders
	next  caddyhttp.Handler
	done  bool
}

func (m *eventMetrics) startDecision(repl *caddy.Replacer, event string, next caddyhttp.Handler) *decision {
	d := &decision{start: time.Now(), m: m, repl: placeholders{Replacer: repl, event: event}, next: next}
	repl.Map(d.repl.value)
	return d
}

// ServeHTTP passes an admitted request on, its decision taken.
func (d *decision) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	d.Done()
	d.repl.passed = true
	return d.next.ServeHTTP(w, r)
}

// Done records the decision's time under the status the handler set.
func (d *decision) Done() {
	if d.done {
		return
	}
	d.done = true
	i := len(outcomes) - 1
	for j, o := range outcomes[:len(outcomes)-1] {
		if o == d.repl.status {
			i = j
			break
		}
	}
	d.m.decisions[i].Observe(time.Since(d.start).Seconds())
}
