package origin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
)

// maxPaymentMethodLen bounds payment_method_token.
const maxPaymentMethodLen = 255

var errPaymentsOff = errorResponse(http.StatusServiceUnavailable, "payments_unavailable",
	"this origin has no payment provider configured")

// parseBooking reads {"hold_id": "…", "payment_method_token": "pm_…"}.
// bookingsAPI serves the bookings, the webhooks and the tickets
// (docs/api.md §9–§11).
type bookingsAPI struct{ *Server }

func parseBooking(body []byte) (holdID, method string, bad *response) {
	var req struct {
		HoldID        *string `json:"hold_id"`
		PaymentMethod *string `json:"payment_method_token"`
	}
	if bad := decodeStrict(body, &req); bad != nil {
		return "", "", bad
	}
	invalid := func(msg string) (string, string, *response) {
		r := errorResponse(http.StatusBadRequest, "invalid_request", msg)
		return "", "", &r
	}
	switch {
	case req.HoldID == nil || strings.TrimSpace(*req.HoldID) == "":
		return invalid("hold_id is required")
	case req.PaymentMethod == nil || strings.TrimSpace(*req.PaymentMethod) == "":
		return invalid("payment_method_token is required")
	case len(*req.PaymentMethod) > maxPaymentMethodLen:
		return invalid(fmt.Sprintf("payment_method_token is longer than %d characters", maxPaymentMethodLen))
	case !tokenChars(*req.PaymentMethod):
		return invalid("payment_method_token must be printable ASCII without spaces")
	case !tokenChars(*req.HoldID):
		return invalid("hold_id must be printable ASCII without spaces")
	}
	return *req.HoldID, *req.PaymentMethod, nil
}

// tokenChars reports whether v is made of printable ASCII other than space,
// as every provider's token and every hold id is. Anything else is refused
// before the hold is touched: a NUL, which the ledger can't store, would
// otherwise fail the booking's row after the hold was extended; a control
// character or the replacement rune (JSON's stand-in for invalid UTF-8) can
// only be garbage.
func tokenChars(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return false
		}
	}
	return true
}

func (s bookingsAPI) handleCreateBooking(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	resp := s.createBookingRequest(w, r)
	revokeWhenConfirmed(w.Header(), bookingStatusOf(resp))
	writeResponse(w, resp)
	s.metrics.bookingRequests.WithLabelValues(resp.outcome).Inc()
	s.metrics.bookingLatency.Observe(time.Since(start).Seconds())
}

func (s bookingsAPI) createBookingRequest(w http.ResponseWriter, r *http.Request) response {
	if r.ContentLength > MaxBodyBytes {
		return errTooLarge
	}
	if s.cfg.Payments == nil {
		return errPaymentsOff
	}
	if !hasAnyToken(r) {
		return errInvalidToken
	}
	key := r.Header.Get("Idempotency-Key")
	if !validIdempotencyKey(key) {
		return errorResponse(http.StatusBadRequest, "missing_idempotency_key",
			fmt.Sprintf("an Idempotency-Key header of 1 to %d characters is required", MaxIdempotencyKeyLen))
	}
	body, bad := readBody(w, r)
	if bad != nil {
		return *bad
	}
	rawHold, method, bad := parseBooking(body)
	if bad != nil {
		return *bad
	}
	noHold := errorResponse(http.StatusNotFound, "not_found", "no such hold")
	holdID, err := uuid.Parse(rawHold)
	if err != nil {
		return noHold
	}
	ctx := r.Context()
	h, err := s.ledger.Hold(ctx, holdID.String())
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return noHold
	case err != nil:
		return errUnavailable
	}
	// A buyer who holds seats must be able to pay while admission is paused
	// (a rebuild) or the event is sold out, so only the watermark is checked.
	ticket, bad := s.gate.ownerTicket(r, h.EventID, noHold)
	if bad != nil {
		return *bad
	}
	if ticket.Subject != h.UserID {
		return noHold
	}
	ev, err := s.seats.Registry().Event(ctx, h.EventID)
	if err != nil {
		return errUnavailable
	}
	if !s.gate.reachedWatermark(ctx, ev, ticket.Position) {
		return notAdmitted(ctx, ev)
	}
	req := booking.Request{Event: ev, Hold: h, User: ticket.Subject, Key: key, Method: method,
		Digest: idem.RequestDigest(canonicalBooking(h.ID, method))}
	scope := idem.Scope{Kind: "bookings", Event: ev.ID, User: req.User, Key: key}
	stored, err := s.idem.Begin(ctx, scope, req.Digest)
	switch {
	case errors.Is(err, idem.ErrKeyReused):
		return errorResponse(http.StatusUnprocessableEntity, "idempotency_key_reused",
			"this Idempotency-Key was used with a different request body")
	case errors.Is(err, idem.ErrRequestInProgress):
		return errorResponse(http.StatusConflict, "request_in_progress",
			"a request with this Idempotency-Key is still being processed")
	case err != nil:
		s.log.Warn("idempotency store unavailable", "error", err)
		return errUnavailable
	case stored != nil:
		w.Header().Set("Idempotent-Replayed", "true")
		return response{status: stored.Status, body: stored.Body, outcome: "replayed"}
	}
	resp := s.bookingAnswer(ctx, s.bookings.Create(ctx, req))
	if resp.outcome == "replayed" {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if err := s.idem.Finish(context.WithoutCancel(ctx), scope, req.Digest, idem.StoredResponse{Status: resp.status, Body: resp.body}); err != nil {
		s.log.Warn("idempotency record not kept", "error", err)
	}
	return resp
}

// bookingForUser reads booking {id} for the token's owner: 401 without a
// valid token, 404 when it does not exist or belongs to someone else, 403
// when the token's position is above the watermark (the owner's, as for
// paying: a pause or the hard cap never stops a buyer reading a purchase).
func (s bookingsAPI) bookingForUser(w http.ResponseWriter, r *http.Request) (ledger.Booking, bool) {
	if !hasAnyToken(r) {
		writeResponse(w, errInvalidToken)
		return ledger.Booking{}, false
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found", "no such booking")
		return ledger.Booking{}, false
	}
	b, err := s.ledger.Booking(r.Context(), id.String())
	if err != nil {
		lookupFailed(w, err, "booking")
		return ledger.Booking{}, false
	}
	noBooking := errorResponse(http.StatusNotFound, "not_found", "no such booking")
	ticket, bad := s.gate.ownerTicket(r, b.EventID, noBooking)
	if bad != nil {
		writeResponse(w, *bad)
		return ledger.Booking{}, false
	}
	if ticket.Subject != b.UserID {
		writeResponse(w, noBooking)
		return ledger.Booking{}, false
	}
	ev, err := s.seats.Registry().Event(r.Context(), b.EventID)
	if err != nil {
		lookupFailed(w, err, "event")
		return ledger.Booking{}, false
	}
	if !s.gate.reachedWatermark(r.Context(), ev, ticket.Position) {
		writeResponse(w, notAdmitted(r.Context(), ev))
		return ledger.Booking{}, false
	}
	return b, true
}

func (s bookingsAPI) handleGetBooking(w http.ResponseWriter, r *http.Request) {
	b, ok := s.bookingForUser(w, r)
	if !ok {
		return
	}
	body, err := s.bookingBody(r.Context(), b)
	if err != nil {
		writeResponse(w, errUnavailable)
		return
	}
	revokeWhenConfirmed(w.Header(), b.Status)
	writeResponse(w, response{status: http.StatusOK, body: body})
}

func (s bookingsAPI) handleCancelBooking(w http.ResponseWriter, r *http.Request) {
	if noBodyTooLarge(w, r) {
		return
	}
	if s.cfg.Payments == nil {
		writeResponse(w, errPaymentsOff)
		return
	}
	b, ok := s.bookingForUser(w, r)
	if !ok {
		return
	}
	cancelled, err := s.bookings.Cancel(r.Context(), b.ID)
	switch {
	case errors.Is(err, booking.ErrBookingLetIn):
		writeError(w, http.StatusConflict, "booking_not_cancellable",
			"a ticket of this booking was let in at the gate: it can no longer be cancelled")
		return
	case errors.Is(err, booking.ErrBookingNotCancellable):
		writeError(w, http.StatusConflict, "booking_not_cancellable",
			"only a confirmed booking can be cancelled; this one is "+b.Status)
		return
	case err != nil:
		s.log.Warn("cancellation failed", "booking", b.ID, "error", err)
		writeResponse(w, errUnavailable)
		return
	}
	body, err := s.bookingBody(r.Context(), cancelled)
	if err != nil {
		writeResponse(w, errUnavailable)
		return
	}
	writeResponse(w, response{status: http.StatusOK, body: body})
}
