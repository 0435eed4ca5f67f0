package origin

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the origin's collectors. Labels come from configuration
// (event ids) and fixed outcome names, never from users or tokens.
type metrics struct {
	holds            *prometheus.CounterVec
	holdLatency      prometheus.Histogram
	compensations    prometheus.Counter
	reclaimedSeats   prometheus.Counter
	reaperHolds      prometheus.Counter
	reaperSeats      prometheus.Counter
	drift            *prometheus.GaugeVec
	remaining        *prometheus.GaugeVec
	keyDisagreements *prometheus.GaugeVec
	rebuilds         *prometheus.CounterVec
	driftCorrections prometheus.Counter

	bookingRequests  *prometheus.CounterVec
	bookingLatency   prometheus.Histogram
	bookings         *prometheus.CounterVec
	webhooksReceived prometheus.Counter
	webhooks         *prometheus.CounterVec
	latePayments     *prometheus.CounterVec
	paymentChecks    *prometheus.CounterVec
	refunds          *prometheus.CounterVec
	refundsFailed    prometheus.Gauge
	// paymentsUnresolved: bookings whose payment's outcome stays unknown
	// past the provider's idempotency window.
	paymentsUnresolved prometheus.Gauge

	scans *prometheus.CounterVec
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_origin_holds_total",
			Help: "Hold requests by outcome: held, already_held, replayed, sold_out, per_user_limit, not_admitted, invalid_token, invalid_request, unavailable, …",
		}, []string{"outcome"}),
		holdLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "waitroom_origin_hold_duration_seconds",
			Help:    "Time to answer a hold request, from the request to the response.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		compensations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_origin_hold_compensations_total",
			Help: "Holds whose seats were returned because their ledger row could not be written.",
		}),
		reclaimedSeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_origin_reclaimed_seats_total",
			Help: "Seats of expired holds returned by the hold script before the reaper got to them.",
		}),
		reaperHolds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_origin_reaper_expired_holds_total",
			Help: "Holds the reaper marked expired in the ledger.",
		}),
		reaperSeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_origin_reaper_released_seats_total",
			Help: "Seats the reaper returned to the inventory (the rest were reclaimed earlier by a hold).",
		}),
		drift: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "waitroom_inventory_drift",
			Help: "remaining (Redis) − (sellable − seats of active holds (Postgres)); 0 when the invariant holds.",
		}, []string{"event"}),
		remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "waitroom_inventory_remaining",
			Help: "Seats left to sell in Redis at the last invariant check.",
		}, []string{"event"}),
		keyDisagreements: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "waitroom_origin_key_disagreements",
			Help: "Key ids under which the event's key holders sharing its Redis (the gateways, the origin nodes) hold different secrets, as this node last found (every 30 s); 0 when they agree.",
		}, []string{"event"}),
		rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_origin_rebuilds_total",
			Help: "Rebuilds of an event's inventory from the ledger, by reason (admin, missing, created, drift).",
		}, []string{"reason"}),
		driftCorrections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_origin_drift_corrections_total",
			Help: "Corrections of an event's inventory from the ledger that changed something, made while its sale went on.",
		}),
		bookingRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_origin_booking_requests_total",
			Help: "POST /v1/bookings by outcome: created, declined, existing, replayed, hold_expired, hold_not_active, not_found, invalid_token, invalid_request, unavailable, …",
		}, []string{"outcome"}),
		bookingLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "waitroom_origin_booking_duration_seconds",
			Help:    "Time to answer a booking request, the provider's charge included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		bookings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_origin_bookings_total",
			Help: "Bookings by outcome: created, then confirmed, failed, cancelled or refunded.",
		}, []string{"outcome"}),
		webhooksReceived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_origin_webhooks_received_total",
			Help: "Payment webhooks whose signature verified.",
		}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_origin_webhooks_total",
			Help: "Payment webhooks by outcome: processed, duplicate, ignored (unknown type or payment), invalid (signature or body), error (answered 503, to be redelivered).",
		}, []string{"outcome"}),
		latePayments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_origin_late_payments_total",
			Help: "Payments that landed after their hold expired: absorbed (confirmed from the overflow reserve) or refunded.",
		}, []string{"outcome"}),
		paymentChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_origin_payment_checks_total",
			Help: "Bookings the payment reconciliation asked the provider about, by what it said: succeeded, failed, pending, not_found, unresolved (outcome unknown past the idempotency window), error.",
		}, []string{"outcome"}),
		refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_origin_refunds_total",
			Help: "What the provider said of the refunds the origin made or followed: succeeded, pending, failed, error (no answer; retried).",
		}, []string{"outcome"}),
		refundsFailed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "waitroom_origin_refunds_failed",
			Help: "Bookings whose refund the provider reported failed and that no refund has made good yet (the payment reconciliation retries them).",
		}),
		paymentsUnresolved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "waitroom_origin_payments_unresolved",
			Help: "Bookings waiting for a payment whose outcome is unknown 23 hours after they were made: the create call is not repeated (past the provider's idempotency window it would be a new payment), only searched for; an operator settles them.",
		}),
		scans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_origin_scans_total",
			Help: "Scans at the gates by result: admitted, already_used, ticket_void, wrong_event, expired, invalid_ticket, before_issue; double_admission counts the second uses uploads showed: an offline scan earlier than the admission, or later by another device; let_in_before_void the ticket_void scans a device let in offline before the ticket was voided.",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.holds, m.holdLatency, m.compensations, m.reclaimedSeats,
		m.reaperHolds, m.reaperSeats, m.drift, m.remaining, m.keyDisagreements, m.rebuilds, m.driftCorrections,
		m.bookingRequests, m.bookingLatency, m.bookings, m.webhooksReceived, m.webhooks, m.latePayments, m.paymentChecks,
		m.refunds, m.refundsFailed, m.paymentsUnresolved, m.scans} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register origin metrics: %w", err)
		}
	}
	return m, nil
}
