// Package booking turns a hold into a sale:
//
//	POST /v1/bookings ─► booking payment_pending (hold extended, one tx) ─► provider charge (no tx)
//	webhook or payment reconciliation ─► succeeded: hold + booking confirmed, tickets issued (one tx)
//	                                  └► failed: booking failed, the hold stays the buyer's until it expires
//	succeeded after the hold expired ─► confirmed from the overflow reserve, or refunded
//
// Every status change is conditional on the status it leaves, and every
// provider call carries a key derived from the booking, so a webhook
// delivered five times, a reconciliation racing it, or a double-clicked
// request all settle a booking once and move money once.
//
// It answers the booking requests with outcomes (Result), settles the
// payments the provider reports (webhooks) or that the payment
// reconciliation asks about, makes and follows refunds, and issues the
// tickets.
package booking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/origin/seats"
	"github.com/waitroom/waitroom/origin/ticketcode"
)

// Reasons a booking gives for its status (status_reason); a failed payment
// gives the provider's decline code instead.
const (
	// ReasonLateOverflow: the payment landed after the hold expired and was
	// confirmed from the overflow reserve.
	ReasonLateOverflow = "late_payment_overflow"
	// ReasonLateSoldOut: the payment landed after the hold expired, with the
	// overflow reserve used up: refunded.
	ReasonLateSoldOut = "late_payment_sold_out"
	// ReasonLatePerUserLimit: the payment landed after the hold expired,
	// and the buyer holds other seats meanwhile (a new hold, or another
	// late payment confirmed first): refunded. A buyer holds one hold at a
	// time, which is what keeps them within max_per_user.
	ReasonLatePerUserLimit = "late_per_user_limit"
	// ReasonPaidAfterFailure: a payment succeeded for a booking already
	// failed (the buyer may have paid again through another booking):
	// refunded.
	ReasonPaidAfterFailure = "paid_after_failure"
	// ReasonCancelled: cancelled by the buyer.
	ReasonCancelled = "cancelled_by_buyer"
	// ReasonPaymentRejected: the provider refused the request itself.
	ReasonPaymentRejected = "payment_rejected"
	// ReasonPaymentNotFound: the provider does not know the payment.
	ReasonPaymentNotFound = "payment_not_found"
	// ReasonNoSeatLeft: the payment succeeded but every seat number of the
	// event is taken (more holds were live than the event has seats: the
	// invariant was broken): refunded.
	ReasonNoSeatLeft = "no_seat_left"
	// ReasonRefundedAtProvider: the payment of a confirmed booking was
	// refunded at the provider (its dashboard, say), not through the
	// origin: the tickets are void and the seats back on sale.
	ReasonRefundedAtProvider = "refunded_at_provider"
	// ReasonPaymentMismatch: the provider has the booking's payment
	// succeeded for another amount or currency than the booking's (changed
	// at the provider after the origin asked): refunded, never sold for it.
	ReasonPaymentMismatch = "payment_mismatch"
)

// Booking errors.
var (
	// ErrBookingNotCancellable: only a confirmed booking can be cancelled.
	ErrBookingNotCancellable = errors.New("booking is not cancellable")
	// ErrBookingLetIn: a gate let in a ticket of the booking, whose holder
	// is inside: cancelling would put an occupied seat back on sale.
	ErrBookingLetIn = fmt.Errorf("%w: a ticket of it was let in at the gate", ErrBookingNotCancellable)
	// errBookingSettled: the booking no longer waits for its payment.
	errBookingSettled = errors.New("booking is no longer waiting for its payment")
	// errNotSucceeded: a success was reported for a payment the provider
	// does not have as succeeded.
	errNotSucceeded = errors.New("the provider does not have the payment as succeeded")
	// errPerUserLimit: the buyer holds other seats, or these would exceed
	// the event's max_per_user.
	errPerUserLimit = errors.New("over the per-user limit")
)

// Config configures the bookings. Zero values take the defaults named.
type Config struct {
	Ledger *ledger.Ledger
	Seats  *seats.Protocol
	// Redis keeps the payment ids of bookings waiting for their payments.
	Redis redis.UniversalClient
	// Payments is the provider bookings are charged and refunded through.
	Payments payment.Provider
	// Tickets signs the ticket codes.
	Tickets *ticketcode.Signer
	// PaymentWindow is how long, at least, a booking keeps its hold from
	// now on to cover the payment; default 2 min.
	PaymentWindow time.Duration
	// PaymentTimeout bounds one call to the provider; default 20 s.
	PaymentTimeout time.Duration
	// Render is the answer a booking request gets, kept in the booking's
	// row for its retries.
	Render func(ledger.Booking, []ledger.Ticket) []byte
	// Clock; default time.Now.
	Clock func() time.Time
	// Logger; default discards.
	Logger *slog.Logger
	// Metrics; required.
	Metrics *Metrics
}

// Metrics are the bookings' collectors; the origin registers them.
type Metrics struct {
	Bookings      *prometheus.CounterVec // by status
	LatePayments  *prometheus.CounterVec // by outcome
	PaymentChecks *prometheus.CounterVec // by outcome
	Refunds       *prometheus.CounterVec // by status
	RefundsFailed prometheus.Gauge
	// PaymentsUnresolved counts the bookings whose payment's outcome is
	// unknown past the window a create call may be repeated in.
	PaymentsUnresolved prometheus.Gauge
}

// env is what the booking flow and the settlement of payments share.
type env struct {
	cfg      Config
	ledger   *ledger.Ledger
	seats    *seats.Protocol
	payments payment.Provider
	log      *slog.Logger
	metrics  *Metrics
	paid     paymentIDs
}

// Service is the booking flow: a booking made, paid for, cancelled.
type Service struct {
	*env
	settle *Settlement
}

// Settlement settles what the provider says of payments and refunds: the
// webhooks, the payment reconciliation's bookings, late payments.
type Settlement struct {
	*env
	// flight shares one settlement among the copies of a webhook event
	// that arrive together.
	flight singleflight.Group
}

// New returns the bookings over cfg.Ledger and cfg.Seats.
func New(cfg Config) (*Service, error) {
	if cfg.Payments == nil || cfg.Render == nil || cfg.Metrics == nil || cfg.Redis == nil {
		return nil, errors.New("booking: a payment provider, Redis, a renderer and metrics are required")
	}
	if cfg.Tickets == nil {
		return nil, errors.New("booking: a ticket signer is required")
	}
	if cfg.PaymentWindow <= 0 {
		cfg.PaymentWindow = 2 * time.Minute
	}
	if cfg.PaymentTimeout <= 0 {
		cfg.PaymentTimeout = 20 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &env{cfg: cfg, ledger: cfg.Ledger, seats: cfg.Seats, payments: cfg.Payments, log: cfg.Logger, metrics: cfg.Metrics,
		paid: paymentIDs{rdb: cfg.Redis, provider: cfg.Payments.Name(), keep: 72 * time.Hour}}
	return &Service{env: e, settle: &Settlement{env: e}}, nil
}

// Settlement is the settlement of the bookings' payments.
func (s *Service) Settlement() *Settlement { return s.settle }

func (s *env) now() time.Time { return s.cfg.Clock().UTC().Truncate(time.Millisecond) }

// Body is the booking's answer with its valid tickets, as a GET answers it.
// A booking waiting for its payment shows the payment id its charge got,
// which the ledger records only when the payment settles (none while Redis
// cannot say).
func (s *env) Body(ctx context.Context, b ledger.Booking) ([]byte, error) {
	var tickets []ledger.Ticket
	if b.Status == ledger.BookingPaymentPending && b.PaymentID == "" {
		id, err := s.paid.Of(ctx, b)
		if err != nil {
			s.log.Warn("payment id not read from Redis; the booking is shown without it", "booking", b.ID, "error", err)
		}
		b.PaymentID = id
	}
	if b.Status == ledger.BookingConfirmed {
		var err error
		if tickets, err = s.ledger.TicketsOf(ctx, b.ID); err != nil {
			return nil, err
		}
	}
	return s.cfg.Render(b, tickets), nil
}
