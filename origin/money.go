package origin

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/waitroom/waitroom/origin/payment"
)

// Refunds are followed to the provider's word. A refund call that answers
// is not a refund done: the provider may say pending (it ends later, one way
// or the other), failed, or succeeded and fail days later. So:
//
//	decided ─► pending ─► Refund call ─► succeeded: booking refunded
//	                          │       └► pending: refund id kept; the refund
//	                          │          webhooks and the payment
//	                          │          reconciliation (GetRefund) follow it
//	                          └► failed: booking cancelled, refund_status
//	                             failed (visible, and in a gauge); the payment
//	                             reconciliation makes a new attempt, under a
//	                             new key, until one succeeds
//
// Webhooks about refunds come in any order, so they only say "ask": what is
// recorded is what the provider answers when asked, never what an event
// says. Every change names the attempt it is about, so an answer about an
// attempt given up on changes nothing.
//
// A refund made at the provider (charge.refunded for a confirmed booking)
// ends the sale as a cancellation does: the tickets are void and the seats
// back on sale.

// refundOutcome records what the provider said of booking b's current
// refund attempt.
func (s *Server) refundOutcome(ctx context.Context, b Booking, r payment.Refund) error {
	ctx = context.WithoutCancel(ctx)
	var sql string
	switch r.Status {
	case payment.RefundSucceeded:
		s.metrics.refunds.WithLabelValues(RefundSucceeded).Inc()
		sql = sqlRefundDone
	case payment.RefundFailed:
		s.metrics.refunds.WithLabelValues(RefundFailed).Inc()
		sql = sqlRefundFailed
	default:
		s.metrics.refunds.WithLabelValues(RefundPending).Inc()
		if b.RefundID != "" || r.ID == "" {
			return nil
		}
		sql = sqlRefundMade
	}
	got, changed, err := updateBooking(ctx, s.ledger.pool, "record refund of booking "+b.ID, sql, b.ID, r.ID, s.now(), b.RefundAttempts)
	if err != nil || !changed {
		// Not changed: another settlement recorded it first, or it is about
		// an attempt given up on.
		return err
	}
	switch r.Status {
	case payment.RefundSucceeded:
		s.metrics.bookings.WithLabelValues(BookingRefunded).Inc()
	case payment.RefundFailed:
		s.log.Warn("refund failed at the provider; the payment reconciliation makes a new one", "booking", b.ID,
			"refund", got.RefundID, "attempt", got.RefundAttempts, "reason", r.FailureReason, "was", b.RefundStatus)
	default:
		return nil
	}
	s.countFailedRefunds(ctx)
	return nil
}

// retryRefund makes a new refund for a booking whose refund failed.
func (s *Server) retryRefund(ctx context.Context, b Booking) error {
	next, ok, err := updateBooking(ctx, s.ledger.pool, "retry refund of booking "+b.ID, sqlRetryRefund, b.ID, b.RefundAttempts, s.now())
	if err != nil || !ok {
		return err
	}
	s.log.Info("refund made again", "booking", b.ID, "attempt", next.RefundAttempts)
	return s.refundBooking(ctx, next)
}

// countFailedRefunds sets the gauge of failed refunds from the ledger, so
// every node reports the whole figure.
func (s *Server) countFailedRefunds(ctx context.Context) {
	var n int64
	if err := s.ledger.pool.QueryRow(ctx, sqlCountFailedRefunds).Scan(&n); err != nil {
		s.log.Warn("failed refunds not counted", "error", err)
		return
	}
	s.metrics.refundsFailed.Set(float64(n))
}

// chargeRefunded acts on charge.refunded: the charge's money went back. For
// a confirmed booking that is a refund made at the provider; for a booking
// owing a refund, possibly its own refund ending, or someone else's making
// it good. Partial refunds leave the booking as it is.
func (s *Server) chargeRefunded(ctx context.Context, b Booking, ev payment.Event) error {
	if b.Amount == 0 || ev.AmountRefunded < b.Amount {
		if b.Amount > 0 {
			s.log.Info("partial refund at the provider: the booking is kept", "booking", b.ID,
				"refunded", ev.AmountRefunded, "amount", b.Amount)
		}
		return nil
	}
	switch {
	case b.RefundStatus == RefundPending:
		return s.refundBooking(ctx, b)
	case b.Status != BookingConfirmed && b.RefundStatus != RefundFailed:
		return nil
	}
	// The event may be older than a refund that failed since: the payment
	// as the provider has it now decides.
	pctx, cancel := s.paymentContext(ctx)
	p, err := s.cfg.Payments.GetPayment(pctx, b.PaymentID)
	cancel()
	if err != nil {
		return fmt.Errorf("charge refunded, booking %s: %w", b.ID, err)
	}
	if p.AmountRefunded < b.Amount {
		s.log.Info("charge.refunded for a payment no longer refunded: ignored", "booking", b.ID, "event", ev.ID)
		return nil
	}
	if b.Status == BookingConfirmed {
		return s.refundedAtProvider(ctx, b.ID)
	}
	return s.refundOutcome(ctx, b, payment.Refund{Status: payment.RefundSucceeded})
}

// refundUpdated acts on a refund event (created, updated, failed) about the
// booking's current refund attempt, by asking the provider how it stands.
func (s *Server) refundUpdated(ctx context.Context, b Booking, ev payment.Event) error {
	switch {
	case b.RefundStatus == "":
		// Not a refund the origin made: charge.refunded says what it did.
		return nil
	case b.RefundID != "" && ev.RefundID != b.RefundID:
		// An attempt given up on, or a refund the origin did not make.
		return nil
	case b.RefundID == "" && b.RefundStatus != RefundPending:
		return nil
	}
	return s.refundBooking(ctx, b)
}

// refundedAtProvider ends a confirmed booking whose payment was refunded at
// the provider: refunded, its tickets void and its seats given back as a
// cancellation gives them.
func (s *Server) refundedAtProvider(ctx context.Context, bookingID string) error {
	now := s.now()
	var done Booking
	var acted, release bool
	err := pgx.BeginTxFunc(ctx, s.ledger.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		acted, release = false, false
		cur, err := lockBooking(ctx, tx, bookingID)
		if err != nil || cur.Status != BookingConfirmed {
			return err
		}
		if release, err = giveSeatsBack(ctx, tx, cur, now); err != nil {
			return err
		}
		done, acted, err = updateBooking(ctx, tx, "refund booking "+bookingID, sqlRefundedAtProvider, cur.ID,
			ReasonRefundedAtProvider, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("booking %s refunded at the provider: %w", bookingID, err)
	}
	if !acted {
		return nil
	}
	s.metrics.bookings.WithLabelValues(BookingRefunded).Inc()
	s.log.Warn("payment refunded at the provider: the booking's tickets are void and its seats back on sale",
		"booking", bookingID, "event", done.EventID, "seats", done.Quantity)
	if release {
		return s.returnSeats(ctx, done)
	}
	return nil
}

// The ledger's account of the money.

// MoneyCount is a number of bookings and the sum of their amounts, in the
// currency's smallest unit.
type MoneyCount struct {
	Count  int64 `json:"count"`
	Amount int64 `json:"amount"`
}

func (c MoneyCount) plus(o MoneyCount) MoneyCount {
	return MoneyCount{Count: c.Count + o.Count, Amount: c.Amount + o.Amount}
}

// MoneyReport is where the money of an event's bookings stands, as the
// ledger has it (bookings of amount 0 left out). Every payment taken ends
// confirmed with its tickets, refunded (the provider said so), or with its
// refund pending or visibly failed: Kept, money taken and none of those,
// is always 0.
type MoneyReport struct {
	Event int64 `json:"event"`
	// Captured is every booking whose payment the ledger knows was taken:
	// the sum of the five below.
	Captured MoneyCount `json:"captured"`
	// Confirmed: confirmed, with a valid ticket per seat.
	Confirmed MoneyCount `json:"confirmed"`
	// Refunded: the provider reported the refund succeeded; no valid
	// ticket.
	Refunded MoneyCount `json:"refunded"`
	// RefundPending: a refund decided or made, not over yet.
	RefundPending MoneyCount `json:"refund_pending"`
	// RefundFailed: the provider reported the refund failed; the payment
	// reconciliation tries again.
	RefundFailed MoneyCount `json:"refund_failed"`
	// Kept: money taken, and neither a sale with its tickets nor a refund.
	Kept MoneyCount `json:"kept"`
	// PaymentPending counts the bookings still waiting for their payment's
	// outcome (not in Captured).
	PaymentPending MoneyCount `json:"payment_pending"`
}

// Settled reports whether nothing is waiting for the provider: no payment
// and no refund whose outcome is unknown.
func (r MoneyReport) Settled() bool { return r.PaymentPending.Count == 0 && r.RefundPending.Count == 0 }

// Err says what is wrong with the account: money kept, or parts that do not
// add up.
func (r MoneyReport) Err() error {
	var errs []error
	if r.Kept.Count != 0 {
		errs = append(errs, fmt.Errorf("event %d: %d payments (%d) taken with neither tickets nor a refund",
			r.Event, r.Kept.Count, r.Kept.Amount))
	}
	if sum := r.Confirmed.plus(r.Refunded).plus(r.RefundPending).plus(r.RefundFailed).plus(r.Kept); sum != r.Captured {
		errs = append(errs, fmt.Errorf("event %d: captured %+v is not the sum of its parts %+v", r.Event, r.Captured, sum))
	}
	return errors.Join(errs...)
}

// MoneyReport reads where the money of an event's bookings stands.
func (l *Ledger) MoneyReport(ctx context.Context, eventID int64) (MoneyReport, error) {
	rows, err := l.pool.Query(ctx, sqlMoneyReport, eventID)
	if err != nil {
		return MoneyReport{}, fmt.Errorf("money report of event %d: %w", eventID, err)
	}
	type bucket struct {
		Bucket string `db:"bucket"`
		Count  int64  `db:"count"`
		Amount int64  `db:"amount"`
	}
	buckets, err := pgx.CollectRows(rows, pgx.RowToStructByName[bucket])
	if err != nil {
		return MoneyReport{}, fmt.Errorf("money report of event %d: %w", eventID, err)
	}
	r := MoneyReport{Event: eventID}
	for _, b := range buckets {
		c := MoneyCount{Count: b.Count, Amount: b.Amount}
		switch b.Bucket {
		case "payment_pending":
			r.PaymentPending = c
			continue
		case "not_taken":
			continue
		case "confirmed":
			r.Confirmed = c
		case "refunded":
			r.Refunded = c
		case "refund_pending":
			r.RefundPending = c
		case "refund_failed":
			r.RefundFailed = c
		default:
			r.Kept = r.Kept.plus(c)
		}
		r.Captured = r.Captured.plus(c)
	}
	return r, nil
}
