package origin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/origin/seats"
)

// A booking turns a hold into a sale:
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
)

// Booking errors.
var (
	// ErrBookingNotCancellable: only a confirmed booking can be cancelled.
	ErrBookingNotCancellable = errors.New("booking is not cancellable")
	// errBookingSettled: the booking no longer waits for its payment.
	errBookingSettled = errors.New("booking is no longer waiting for its payment")
	// errPerUserLimit: the buyer holds other seats, or these would exceed
	// the event's max_per_user.
	errPerUserLimit = errors.New("over the per-user limit")
)

// bookingJSON is <booking> of API.md, with a few fields added.
type bookingJSON struct {
	BookingID string       `json:"booking_id"`
	HoldID    string       `json:"hold_id"`
	EventID   int64        `json:"event_id"`
	UserID    string       `json:"user_id"`
	Status    string       `json:"status"`
	Amount    int64        `json:"amount"`
	Currency  string       `json:"currency"`
	PaymentID string       `json:"payment_id"`
	Tickets   []ticketJSON `json:"tickets"`
	Quantity  int64        `json:"quantity"`
	// StatusReason says why (a decline code, late_payment_overflow,
	// late_payment_sold_out, cancelled_by_buyer, …); "" when nothing needs
	// saying.
	StatusReason string `json:"status_reason"`
	// Overflow: confirmed from the overflow reserve (a late payment).
	Overflow bool `json:"overflow"`
	// RefundStatus: null (none due), "pending", "succeeded" or "failed".
	RefundStatus *string `json:"refund_status"`
	CreatedAt    string  `json:"created_at"`
}

func bookingBody(b Booking, tickets []ticketJSON) []byte {
	if tickets == nil {
		tickets = []ticketJSON{}
	}
	var refund *string
	if b.RefundStatus != "" {
		refund = &b.RefundStatus
	}
	out, _ := json.Marshal(bookingJSON{
		BookingID: b.ID, HoldID: b.HoldID, EventID: b.EventID, UserID: b.UserID, Status: b.Status,
		Amount: b.Amount, Currency: b.Currency, PaymentID: b.PaymentID, Tickets: tickets, Quantity: b.Quantity,
		StatusReason: b.StatusReason, Overflow: b.Overflow, RefundStatus: refund, CreatedAt: rfc3339(b.CreatedAt),
	})
	return append(out, '\n')
}

// fullBody is the booking's body with its tickets, as GET answers it.
func (s *Server) fullBody(ctx context.Context, b Booking) ([]byte, error) {
	var tickets []ticketJSON
	if b.Status == BookingConfirmed {
		var err error
		rows, err := s.ledger.TicketsOf(ctx, b.ID)
		if err != nil {
			return nil, err
		}
		tickets = ticketsJSON(rows)
	}
	return bookingBody(b, tickets), nil
}

// The booking request.

// bookingRequest is a validated POST /v1/bookings.
type bookingRequest struct {
	user   string
	key    string
	method string
	digest string
}

func canonicalBooking(holdID, method string) string {
	return "hold_id=" + holdID + "\x00payment_method_token=" + method
}

// createBooking is the booking flow after the request is authenticated,
// validated and its idempotency key claimed.
func (s *Server) createBooking(ctx context.Context, ev *seats.Event, h Hold, req bookingRequest) response {
	if b, err := s.ledger.Bookings().ByKey(ctx, req.user, req.key); err == nil {
		return s.resumeBooking(ctx, ev, b, req.digest)
	} else if !errors.Is(err, ErrNotFound) {
		return errUnavailable
	}
	if b, err := s.ledger.Bookings().LiveOfHold(ctx, h.ID); err == nil {
		return s.existingBooking(ctx, b)
	} else if !errors.Is(err, ErrNotFound) {
		return errUnavailable
	}
	now := s.now()
	switch h.StatusAt(now) {
	case StatusExpired:
		return errHoldExpired
	case StatusConfirmed, StatusReleased:
		return errHoldNotActive(h.StatusAt(now))
	}

	// The hold must outlast the payment: at least PaymentWindow from now,
	// never longer than a fresh hold would last.
	until := now.Add(min(s.cfg.PaymentWindow, ev.HoldTTL()))
	id := uuid.Must(uuid.NewV7()).String()
	var created Booking
	_, err := s.ExtendHold(ctx, h.ID, until, func(tx ledger.Tx, held Hold) error {
		var err error
		created, err = tx.Bookings().Insert(ctx, ledger.NewBooking{
			ID: id, HoldID: h.ID, EventID: ev.ID, UserID: req.user, Quantity: held.Quantity, Amount: held.Amount,
			Currency: ev.Currency, Provider: s.cfg.Payments.Name(), PaymentMethod: req.method,
			IdempotencyKey: req.key, RequestDigest: req.digest, CreatedAt: now,
		})
		return err
	})
	switch {
	case err == nil:
	case errors.Is(err, ledger.ErrBookingExists), errors.Is(err, ErrHoldNotActive):
		// A booking with another key won the hold a moment ago.
		if b, lerr := s.ledger.Bookings().LiveOfHold(ctx, h.ID); lerr == nil {
			return s.existingBooking(ctx, b)
		}
		if errors.Is(err, ledger.ErrBookingExists) {
			return errUnavailable
		}
		return errHoldNotActive("no longer pending")
	case errors.Is(err, ledger.ErrBookingKeyUsed):
		b, lerr := s.ledger.Bookings().ByKey(ctx, req.user, req.key)
		if lerr != nil {
			return errUnavailable
		}
		return s.resumeBooking(ctx, ev, b, req.digest)
	case errors.Is(err, seats.ErrHoldExpired):
		return errHoldExpired
	default:
		s.log.Warn("booking not recorded", "hold", h.ID, "error", err)
		return errUnavailable
	}
	s.metrics.bookings.WithLabelValues("created").Inc()
	return s.pay(ctx, ev, created)
}

var errHoldExpired = errorResponse(http.StatusGone, "hold_expired", "the hold has expired; its seats may be someone else's now")

func errHoldNotActive(status string) response {
	return errorResponse(http.StatusConflict, "hold_not_active", "the hold is "+status+", not active")
}

// existingBooking answers a booking request for a hold that has a booking
// already (made with another Idempotency-Key): 200 and that booking.
func (s *Server) existingBooking(ctx context.Context, b Booking) response {
	body, err := s.fullBody(ctx, b)
	if err != nil {
		return errUnavailable
	}
	return response{status: http.StatusOK, body: body, outcome: "existing"}
}

// resumeBooking answers a retry of the request that made b, whose
// idempotency record is gone: the stored answer, or, when the first attempt
// stopped before the provider answered, the payment carried on (the same
// payment key: the provider charges once).
func (s *Server) resumeBooking(ctx context.Context, ev *seats.Event, b Booking, digest string) response {
	if b.RequestDigest != digest {
		return errorResponse(http.StatusUnprocessableEntity, "idempotency_key_reused",
			"this Idempotency-Key was used with a different request body")
	}
	if b.Response != nil {
		return response{status: http.StatusAccepted, body: b.Response, outcome: "replayed"}
	}
	if b.Status == BookingPaymentPending && b.PaymentID == "" {
		return s.pay(ctx, ev, b)
	}
	body := bookingBody(b, nil)
	if err := s.ledger.Bookings().Answered(ctx, b.ID, b.PaymentID, body, s.now()); err != nil {
		s.log.Warn("booking response not kept", "booking", b.ID, "error", err)
	}
	return response{status: http.StatusAccepted, body: body, outcome: "replayed"}
}

func (s *Server) paymentRequest(b Booking) payment.CreateRequest {
	return payment.CreateRequest{
		BookingID: b.ID, Amount: b.Amount, Currency: b.Currency, PaymentMethod: b.PaymentMethod,
		Metadata: map[string]string{"hold_id": b.HoldID, "event_id": strconv.FormatInt(b.EventID, 10)},
	}
}

// paymentContext bounds a provider call, detached from the client: a buyer
// who hangs up must not cut a charge in half.
func (s *Server) paymentContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.PaymentTimeout)
}

// declineReason is the reason a failed payment gives.
func declineReason(err error, p payment.Payment) (reason, paymentID string) {
	paymentID = p.ID
	var d *payment.DeclineError
	if errors.As(err, &d) {
		if d.PaymentID != "" {
			paymentID = d.PaymentID
		}
		switch {
		case d.DeclineCode != "":
			return d.DeclineCode, paymentID
		case d.Code != "":
			return d.Code, paymentID
		}
	}
	if p.FailureCode != "" {
		return p.FailureCode, paymentID
	}
	return "payment_declined", paymentID
}

// pay charges a new booking, outside any transaction, and answers 202 with
// the booking as this step leaves it: payment_pending (the webhook or the
// reconciliation settles it) or failed (declined).
func (s *Server) pay(ctx context.Context, ev *seats.Event, b Booking) response {
	if b.Amount == 0 {
		// Nothing to charge (a free event): confirmed at once.
		if err := s.settlePaid(ctx, b, ""); err != nil {
			s.log.Warn("free booking not confirmed yet", "booking", b.ID, "error", err)
		} else if cur, err := s.ledger.Booking(ctx, b.ID); err == nil {
			b = cur
		}
	} else {
		pctx, cancel := s.paymentContext(ctx)
		p, err := s.cfg.Payments.CreatePayment(pctx, s.paymentRequest(b))
		cancel()
		b.PaymentID = p.ID
		switch {
		case err == nil:
		case errors.Is(err, payment.ErrDeclined):
			reason, pid := declineReason(err, p)
			b.PaymentID = pid
			b = s.failPayment(ctx, b, pid, reason)
		case errors.Is(err, payment.ErrInvalidRequest), errors.Is(err, payment.ErrIdempotencyConflict):
			s.log.Error("payment request refused by the provider", "booking", b.ID, "error", err)
			b = s.failPayment(ctx, b, p.ID, ReasonPaymentRejected)
		default:
			// Unknown outcome: the booking waits; the webhook or the payment
			// reconciliation (same payment key) settles it.
			s.log.Warn("payment outcome unknown; left to the reconciliation", "booking", b.ID, "error", err)
		}
	}
	body := bookingBody(b, nil)
	if b.Status == BookingConfirmed {
		if full, err := s.fullBody(ctx, b); err == nil {
			body = full
		}
	}
	if err := s.ledger.Bookings().Answered(context.WithoutCancel(ctx), b.ID, b.PaymentID, body, s.now()); err != nil {
		s.log.Warn("booking response not kept", "booking", b.ID, "error", err)
	}
	outcome := "created"
	if b.Status == BookingFailed {
		outcome = "declined"
	}
	return response{status: http.StatusAccepted, body: body, outcome: outcome}
}

// failPayment marks a waiting booking failed and returns it as it is now.
// Its hold is left alone: the buyer may pay again (a new booking) until it
// expires.
func (s *Server) failPayment(ctx context.Context, b Booking, paymentID, reason string) Booking {
	failed, ok, err := s.ledger.Bookings().Fail(ctx, b.ID, paymentID, reason, s.now())
	switch {
	case err != nil:
		s.log.Warn("booking not marked failed", "booking", b.ID, "error", err)
		return b
	case ok:
		s.metrics.bookings.WithLabelValues(BookingFailed).Inc()
		return failed
	}
	if cur, err := s.ledger.Booking(ctx, b.ID); err == nil {
		return cur
	}
	return b
}

// Settling a payment: the same code for webhooks and the reconciliation.

// settleFailed records a failed payment.
func (s *Server) settleFailed(ctx context.Context, b Booking, paymentID, reason string) error {
	if b.Status != BookingPaymentPending {
		return nil
	}
	_, ok, err := s.ledger.Bookings().Fail(ctx, b.ID, paymentID, reason, s.now())
	if ok {
		s.metrics.bookings.WithLabelValues(BookingFailed).Inc()
	}
	return err
}

// settlePaid records a succeeded payment: the hold and the booking confirmed
// and the tickets issued, in one transaction; or, when the hold is gone, the
// late-payment policy; or, when the money went back at the provider before
// the payment was settled, the booking refunded. Calling it again changes
// nothing.
func (s *Server) settlePaid(ctx context.Context, b Booking, paymentID string) error {
	return s.settlePayment(ctx, b, paymentID, nil)
}

// settlePayment is settlePaid with the payment as the provider has it now,
// when the caller has just asked (nil: asked here).
func (s *Server) settlePayment(ctx context.Context, b Booking, paymentID string, known *payment.Payment) error {
	switch b.Status {
	case BookingConfirmed, BookingCancelled, BookingRefunded:
		return nil
	case BookingFailed:
		return s.refundUnbooked(ctx, b, paymentID, ReasonPaidAfterFailure)
	}
	if paymentID == "" {
		paymentID = b.PaymentID
	}
	if b.Amount > 0 && paymentID != "" {
		// A refund at the provider (its dashboard) may have returned the
		// money before the payment's success reached the origin: its
		// charge.refunded found nothing to end then. The success event may
		// be older than the refund, so the provider's present word decides.
		p := known
		if p == nil {
			pctx, cancel := s.paymentContext(ctx)
			got, err := s.cfg.Payments.GetPayment(pctx, paymentID)
			cancel()
			switch {
			case errors.Is(err, payment.ErrNotFound):
				// No refund to tell of: the signed event is the provider's
				// word that the payment succeeded.
				s.log.Warn("the provider does not know the payment its event names", "booking", b.ID, "payment", paymentID)
			case err != nil:
				return fmt.Errorf("settle payment of booking %s: %w", b.ID, err)
			}
			p = &got
		}
		if p.AmountRefunded >= b.Amount {
			return s.refundedBeforeSettled(ctx, b, paymentID)
		}
	}
	ev, err := s.seats.Event(ctx, b.EventID)
	if err != nil {
		return err
	}
	ran := false
	_, err = s.ConfirmHold(ctx, b.HoldID, func(tx ledger.Tx, _ Hold) error {
		ran = true
		_, err := s.confirmBookingTx(ctx, tx, b, paymentID, false, "", s.now())
		return err
	})
	switch {
	case err == nil && ran:
		s.metrics.bookings.WithLabelValues(BookingConfirmed).Inc()
		return nil
	case err == nil:
		// The hold was confirmed already, by a concurrent settlement of
		// this booking (which confirmed the booking with it).
		err = s.confirmAfterHold(ctx, b, paymentID)
	case errors.Is(err, seats.ErrHoldExpired), errors.Is(err, ErrHoldNotActive):
		return s.latePayment(ctx, ev, b, paymentID)
	case errors.Is(err, errBookingSettled):
		return nil
	}
	if errors.Is(err, ledger.ErrNoSeatLeft) {
		return s.refundUnseated(ctx, ev, b, paymentID)
	}
	return err
}

// refundedBeforeSettled ends a booking whose payment was refunded at the
// provider before the origin settled it: refunded, with no ticket, and its
// hold released, the seats back on sale. A settlement that confirmed it
// meanwhile leaves a confirmed booking, which ends as any confirmed booking
// refunded at the provider does.
func (s *Server) refundedBeforeSettled(ctx context.Context, b Booking, paymentID string) error {
	now := s.now()
	var done Booking
	var acted, release, confirmed bool
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		acted, release, confirmed = false, false, false
		cur, err := tx.Bookings().Lock(ctx, b.ID)
		if err != nil {
			return err
		}
		if cur.Status != BookingPaymentPending {
			confirmed = cur.Status == BookingConfirmed
			return nil
		}
		// A hold past its expiry ends expired, as it would have without
		// the payment; a live one is released.
		if release, err = tx.ExpireLateHold(ctx, cur.HoldID, now); err == nil && !release {
			release, err = tx.ReleaseUnseatedHold(ctx, cur.HoldID, now)
		}
		if err != nil {
			return err
		}
		done, acted, err = tx.Bookings().RefundedUnsettled(ctx, cur.ID, ReasonRefundedAtProvider, paymentID, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("booking %s refunded at the provider before it settled: %w", b.ID, err)
	}
	if confirmed {
		return s.refundedAtProvider(ctx, b.ID)
	}
	if !acted {
		return nil
	}
	s.metrics.bookings.WithLabelValues(BookingRefunded).Inc()
	s.log.Warn("payment refunded at the provider before it settled: the booking is refunded, its hold released",
		"booking", b.ID, "event", done.EventID, "seats", done.Quantity)
	if release {
		// Whatever Redis holds for the hold goes back, also a confirmation
		// whose ledger step never came.
		return s.returnSeats(ctx, done)
	}
	return nil
}

// confirmBookingTx confirms a waiting booking and issues its tickets, in tx.
func (s *Server) confirmBookingTx(ctx context.Context, tx ledger.Tx, b Booking, paymentID string, overflow bool, reason string, now time.Time) (Booking, error) {
	c, ok, err := tx.Bookings().Confirm(ctx, b.ID, paymentID, overflow, reason, now)
	if err != nil {
		return Booking{}, err
	}
	if !ok {
		return Booking{}, fmt.Errorf("confirm booking %s: %w", b.ID, errBookingSettled)
	}
	if err := s.issueTickets(ctx, tx, c, now); err != nil {
		return Booking{}, err
	}
	return c, nil
}

// issueTickets gives a confirmed booking one ticket per seat. Seat numbers
// of the event are handed out under its row lock: freed seats first, then
// new numbers, which a constraint keeps within the event's capacity
// (errNoSeatLeft, and tx is left aborted: the caller rolls back).
func (s *Server) issueTickets(ctx context.Context, tx ledger.Tx, b Booking, now time.Time) error {
	seats, err := tx.TakeSeats(ctx, b.EventID, b.Quantity)
	if err != nil {
		return fmt.Errorf("issue tickets of booking %s: %w", b.ID, err)
	}
	if int64(len(seats)) != b.Quantity {
		return fmt.Errorf("issue tickets of booking %s: %d seat numbers for %d seats", b.ID, len(seats), b.Quantity)
	}
	codes := make([]string, len(seats))
	for i, seat := range seats {
		code, err := SignTicket(s.cfg.TicketKey, TicketClaims{BookingID: b.ID, EventID: b.EventID, Seat: int64(seat)})
		if err != nil {
			return fmt.Errorf("issue tickets of booking %s: %w", b.ID, err)
		}
		codes[i] = code
	}
	return tx.InsertTickets(ctx, b.ID, b.EventID, codes, seats, now)
}

// confirmAfterHold confirms a booking whose hold is confirmed already.
func (s *Server) confirmAfterHold(ctx context.Context, b Booking, paymentID string) error {
	confirmed := false
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		cur, err := tx.Bookings().Lock(ctx, b.ID)
		if err != nil || cur.Status != BookingPaymentPending {
			return err
		}
		h, err := tx.LockHold(ctx, cur.HoldID)
		if err != nil {
			return err
		}
		if h.Status != StatusConfirmed {
			return fmt.Errorf("confirm booking %s: hold %s is %s: retry", b.ID, h.ID, h.Status)
		}
		_, err = s.confirmBookingTx(ctx, tx, cur, paymentID, false, "", s.now())
		confirmed = err == nil
		return err
	})
	if confirmed {
		s.metrics.bookings.WithLabelValues(BookingConfirmed).Inc()
	}
	return err
}

// latePayment settles a payment whose hold expired before it landed: the
// seats come from the overflow reserve if it has them (a conditional
// update: never oversold) and the buyer stays within max_per_user with
// them, otherwise the money goes back. The hold's own seats went (or go
// now) back to the sellable pool either way.
//
// The buyer may have held again after the hold expired, or have had
// another late payment confirmed: neither the one-live-hold index nor the
// one-hold-per-user guard in Redis knows this booking's expired hold, so
// the buyer's other seats are counted here, from the ledger, after the
// event's row is locked by taking the reserve's seats (which orders this
// count after any other late payment of the event). A buyer with any is
// refunded, even within max_per_user: the guard keeps one hold per buyer,
// and a second sale would be uncounted once the other hold ended, leaving
// the buyer free to hold the limit on top of it.
func (s *Server) latePayment(ctx context.Context, ev *seats.Event, b Booking, paymentID string) error {
	now := s.now()
	var settled Booking
	var expired, absorbed, refund bool
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		expired, absorbed, refund = false, false, false
		cur, err := tx.Bookings().Lock(ctx, b.ID)
		if err != nil || cur.Status != BookingPaymentPending {
			return err
		}
		h, err := tx.LockHold(ctx, cur.HoldID)
		if err != nil {
			return err
		}
		switch {
		case h.Status == StatusConfirmed:
			return fmt.Errorf("late payment of booking %s: hold %s was confirmed meanwhile: retry", b.ID, h.ID)
		case h.Status == StatusPending && !h.ExpiresAt.Before(now):
			return fmt.Errorf("late payment of booking %s: hold %s is live in the ledger, not in redis: retry", b.ID, h.ID)
		case h.Status == StatusPending:
			if _, err := tx.ExpireLateHold(ctx, h.ID, now); err != nil {
				return err
			}
			expired = true
		}
		// The reserve's seats and the tickets in a savepoint: without a
		// seat to give, they are undone and the money goes back.
		err = tx.Savepoint(ctx, func(sp ledger.Tx) error {
			if err := sp.TakeOverflow(ctx, ev.ID, cur.Quantity); err != nil {
				return err
			}
			others, err := sp.SeatsOfBuyer(ctx, ev.ID, cur.UserID, cur.ID, cur.HoldID, now)
			if err != nil {
				return err
			}
			if others > 0 || cur.Quantity > ev.MaxPerUser {
				return errPerUserLimit
			}
			settled, err = s.confirmBookingTx(ctx, sp, cur, paymentID, true, ReasonLateOverflow, now)
			return err
		})
		reason := ReasonLateSoldOut
		switch {
		case err == nil:
			absorbed = true
			return nil
		case errors.Is(err, ledger.ErrNoSeatLeft):
			reason = ReasonNoSeatLeft
		case errors.Is(err, errPerUserLimit):
			reason = ReasonLatePerUserLimit
		case !errors.Is(err, ledger.ErrOverflowUsedUp):
			return err
		}
		settled, refund, err = tx.Bookings().RefundPayment(ctx, b.ID, reason, paymentID, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("late payment of booking %s: %w", b.ID, err)
	}
	if expired || absorbed {
		// This call took the hold from pending to expired, so it returns
		// the seats, once (also when a failed confirmation left them
		// confirmed in Redis).
		s.seats.ReleaseLateHold(ctx, ev, b.HoldID, b.UserID, absorbed)
	}
	switch {
	case absorbed:
		s.metrics.latePayments.WithLabelValues("absorbed").Inc()
		s.metrics.bookings.WithLabelValues(BookingConfirmed).Inc()
		s.log.Info("late payment confirmed from the overflow reserve", "booking", b.ID, "event", ev.ID, "seats", b.Quantity)
	case refund:
		s.metrics.latePayments.WithLabelValues("refunded").Inc()
		switch settled.StatusReason {
		case ReasonNoSeatLeft:
			s.log.Error("late payment refunded: no seat number left although the overflow reserve had room; "+
				"the inventory invariant was broken", "booking", b.ID, "event", ev.ID)
		case ReasonLatePerUserLimit:
			s.log.Info("late payment refunded: the buyer holds other seats meanwhile",
				"booking", b.ID, "event", ev.ID, "user", b.UserID)
		default:
			s.log.Info("late payment refunded: the overflow reserve is used up", "booking", b.ID, "event", ev.ID)
		}
		if err := s.refundBooking(ctx, settled); err != nil {
			s.log.Warn("refund not made yet; the payment reconciliation retries it", "booking", b.ID, "error", err)
		}
	}
	return nil
}

// refundUnseated refunds a payment whose booking cannot get a seat number:
// every seat of the event is ticketed, so more holds were live than the
// event has seats (the inventory invariant was broken). Answering the
// webhook with an error would only have it retried until the provider gives
// up, the money taken and no ticket. The hold is released in the ledger;
// its seats are not given back to Redis, which sold more than there are:
// the reconciler corrects Redis from the ledger.
func (s *Server) refundUnseated(ctx context.Context, ev *seats.Event, b Booking, paymentID string) error {
	now := s.now()
	var settled Booking
	var refund bool
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		cur, err := tx.Bookings().Lock(ctx, b.ID)
		if err != nil || cur.Status != BookingPaymentPending {
			return err
		}
		if _, err := tx.ReleaseUnseatedHold(ctx, cur.HoldID, now); err != nil {
			return err
		}
		settled, refund, err = tx.Bookings().RefundPayment(ctx, b.ID, ReasonNoSeatLeft, paymentID, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("refund booking %s without a seat: %w", b.ID, err)
	}
	if !refund {
		return nil
	}
	s.log.Error("payment refunded: no seat number left for a paid booking; the inventory invariant was broken",
		"booking", b.ID, "event", ev.ID, "hold", b.HoldID, "seats", b.Quantity)
	if err := s.refundBooking(ctx, settled); err != nil {
		s.log.Warn("refund not made yet; the payment reconciliation retries it", "booking", b.ID, "error", err)
	}
	return nil
}

// refundUnbooked refunds a payment that no booking can use.
func (s *Server) refundUnbooked(ctx context.Context, b Booking, paymentID, reason string) error {
	settled, ok, err := s.ledger.Bookings().RefundPayment(ctx, b.ID, reason, paymentID, s.now())
	if err != nil || !ok {
		return err
	}
	s.log.Warn("payment without a booking to serve: refunded", "booking", b.ID, "reason", reason)
	if err := s.refundBooking(ctx, settled); err != nil {
		s.log.Warn("refund not made yet; the payment reconciliation retries it", "booking", b.ID, "error", err)
	}
	return nil
}

// refundBooking makes a decided refund at the provider, or asks about the
// one made already, and records what the provider says of it (see
// money.go). The key is derived from the booking and the attempt, so the
// cancellation, the late payment, the webhooks and their retries refund
// once.
func (s *Server) refundBooking(ctx context.Context, b Booking) error {
	if b.RefundStatus == "" {
		return nil
	}
	if b.PaymentID == "" {
		return fmt.Errorf("refund booking %s: no payment id known", b.ID)
	}
	pctx, cancel := s.paymentContext(ctx)
	defer cancel()
	var r payment.Refund
	var err error
	switch {
	case b.RefundID != "":
		r, err = s.cfg.Payments.GetRefund(pctx, b.RefundID)
	case b.RefundStatus == RefundPending:
		r, err = s.cfg.Payments.Refund(pctx, payment.RefundRequest{PaymentID: b.PaymentID, BookingID: b.ID,
			IdempotencyKey: payment.RefundAttemptKey(b.ID, b.RefundAttempts)})
	default:
		// Money returned by a refund the origin did not make: there is
		// nothing of its own to ask about.
		return nil
	}
	switch {
	case errors.Is(err, payment.ErrAlreadyRefunded):
		// Nothing is left to refund: the money went back already.
		r = payment.Refund{Status: payment.RefundSucceeded}
	case err != nil:
		s.metrics.refunds.WithLabelValues("error").Inc()
		return fmt.Errorf("refund booking %s: %w", b.ID, err)
	}
	return s.refundOutcome(ctx, b, r)
}

// CancelBooking cancels a confirmed booking: its tickets are voided and its
// seats given back (to the inventory once, or to the overflow reserve) in
// one transaction, then the payment is refunded outside it. Cancelling a
// booking the buyer cancelled already returns it as it is (retrying a
// refund still due); anything else is ErrBookingNotCancellable.
func (s *Server) CancelBooking(ctx context.Context, bookingID string) (Booking, error) {
	now := s.now()
	var cancelled Booking
	var acted, release bool
	err := s.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		acted, release = false, false
		cur, err := tx.Bookings().Lock(ctx, bookingID)
		if err != nil {
			return err
		}
		switch {
		case cur.Status == BookingConfirmed:
		case (cur.Status == BookingCancelled || cur.Status == BookingRefunded) && cur.StatusReason == ReasonCancelled:
			cancelled = cur
			return nil
		default:
			return fmt.Errorf("cancel booking %s (%s): %w", bookingID, cur.Status, ErrBookingNotCancellable)
		}
		if release, err = giveSeatsBack(ctx, tx, cur, now); err != nil {
			return fmt.Errorf("cancel booking %s: %w", bookingID, err)
		}
		refund := ""
		if cur.Amount > 0 && cur.PaymentID != "" {
			refund = RefundPending
		}
		cancelled, acted, err = tx.Bookings().Cancel(ctx, cur.ID, ReasonCancelled, refund, now)
		return err
	})
	if err != nil {
		return Booking{}, err
	}
	if acted {
		s.metrics.bookings.WithLabelValues(BookingCancelled).Inc()
	}
	if release {
		if err := s.returnSeats(ctx, cancelled); err != nil {
			return Booking{}, err
		}
	}
	if cancelled.RefundStatus == RefundPending {
		if err := s.refundBooking(ctx, cancelled); err != nil {
			s.log.Warn("refund not made yet; the payment reconciliation retries it", "booking", bookingID, "error", err)
			return cancelled, nil
		}
		return s.ledger.Booking(ctx, bookingID)
	}
	return cancelled, nil
}

// giveSeatsBack takes a confirmed booking's seats back, in tx: its tickets
// are voided and their seat numbers freed, and its seats go to the overflow
// reserve (a late payment's) or, its hold released, to the inventory:
// release says the caller settles Redis (returnSeats) after the commit:
// the hold's seats returned, or the overflow buyer's record of no seats
// removed from the one-hold-per-user guard. A cancellation and a refund
// made at the provider both end a sale this way.
func giveSeatsBack(ctx context.Context, tx ledger.Tx, b Booking, now time.Time) (release bool, err error) {
	if b.Overflow {
		if err := tx.GiveOverflow(ctx, b.EventID, b.Quantity); err != nil {
			return false, err
		}
	} else {
		ok, err := tx.ReleaseConfirmedHold(ctx, b.HoldID, now)
		if err != nil {
			return false, err
		}
		if !ok {
			return false, fmt.Errorf("hold %s is not confirmed", b.HoldID)
		}
	}
	if err := tx.VoidTickets(ctx, b.ID, b.EventID); err != nil {
		return false, err
	}
	return true, nil
}

// returnSeats settles Redis for a sale giveSeatsBack ended: the seats of
// its hold back, or, for a sale served from the overflow reserve, the
// buyer's record of no seats gone, so the buyer, who has no seat any more,
// may hold again.
func (s *Server) returnSeats(ctx context.Context, b Booking) error {
	ev, err := s.seats.Event(ctx, b.EventID)
	if err != nil {
		return err
	}
	mode := inventory.AnyHold
	if b.Overflow {
		mode = inventory.DropBuyer
	}
	s.seats.ReleaseSeats(ctx, ev, b.HoldID, mode)
	return nil
}
