package caddymodule

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The collectors are made once per process and registered with every
// config's registry, so counts carry on across reloads. The only label is the
// event id, which comes from the config: never a user, an address or a token.
var metrics = struct {
	arrivals, admitted, waiting, soldOut, invalidTokens *prometheus.CounterVec
	preQueue, challenges, rateLimited                   *prometheus.CounterVec
	revoked, completed, windowOver                      *prometheus.CounterVec
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
	rateLimited: newCounter("rate_limited_total",
		"New arrivals refused with 429 for exceeding the join rate of their address."),
	revoked: newCounter("revoked_total",
		"Admitted tokens the site revoked (X-Waitroom-Command: revoke)."),
	completed: newCounter("completed_total",
		"Completed answers to accounts whose admission the site revoked."),
	windowOver: newCounter("admission_windows_over_total",
		"Admitted tokens sent to the back of the queue because their admission window passed unextended."),
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
		metrics.preQueue, metrics.challenges, metrics.rateLimited, metrics.revoked, metrics.completed, metrics.windowOver,
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
	preQueue, challenges, rateLimited                   prometheus.Counter
	revoked, completed, windowOver                      prometheus.Counter
}

func metricsFor(event string) eventMetrics {
	return eventMetrics{
		arrivals:      metrics.arrivals.WithLabelValues(event),
		admitted:      metrics.admitted.WithLabelValues(event),
		waiting:       metrics.waiting.WithLabelValues(event),
		soldOut:       metrics.soldOut.WithLabelValues(event),
		invalidTokens: metrics.invalidTokens.WithLabelValues(event),
		preQueue:      metrics.preQueue.WithLabelValues(event),
		challenges:    metrics.challenges.WithLabelValues(event),
		rateLimited:   metrics.rateLimited.WithLabelValues(event),
		revoked:       metrics.revoked.WithLabelValues(event),
		completed:     metrics.completed.WithLabelValues(event),
		windowOver:    metrics.windowOver.WithLabelValues(event),
	}
}
