package origin

import (
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/ledger"
)

// handleResolution serves POST /v1/admin/bookings/{id}/resolution: an
// operator settles a booking whose payment the origin cannot find out
// about by itself, by naming its payment ({"payment_id":"pi_…"}, asked
// about at the provider) or by saying the provider has none
// ({"charged":false}).
func (s bookingsAPI) handleResolution(w http.ResponseWriter, r *http.Request) {
	if bodyTooLarge(w, r) || !s.gate.isAdmin(w, r) {
		return
	}
	if s.cfg.Payments == nil {
		writeResponse(w, errPaymentsOff)
		return
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found", "no such booking")
		return
	}
	body, bad := readBody(w, r)
	if bad != nil {
		writeResponse(w, *bad)
		return
	}
	var req struct {
		PaymentID *string `json:"payment_id"`
		Charged   *bool   `json:"charged"`
	}
	if bad := decodeStrict(body, &req); bad != nil {
		writeResponse(w, *bad)
		return
	}
	settle := s.bookings.Settlement()
	var b ledger.Booking
	var outcome booking.ResolveOutcome
	switch {
	case req.PaymentID != nil && req.Charged != nil:
		writeError(w, http.StatusBadRequest, "invalid_request", `give either "payment_id" (the booking's payment) or "charged":false (none at the provider), not both`)
		return
	case req.PaymentID != nil:
		if pid := *req.PaymentID; pid == "" || len(pid) > maxPaymentIDLen || !tokenChars(pid) {
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf(`"payment_id" must be the provider's id of a payment (1–%d printable ASCII characters without spaces, e.g. pi_3Q…)`, maxPaymentIDLen))
			return
		}
		b, outcome, err = settle.ResolvePayment(r.Context(), id.String(), *req.PaymentID)
	case req.Charged != nil && !*req.Charged:
		b, outcome, err = settle.ResolveNotCharged(r.Context(), id.String())
	case req.Charged != nil:
		writeError(w, http.StatusBadRequest, "invalid_request", `a booking that was charged is resolved by naming its payment: "payment_id"`)
		return
	default:
		writeError(w, http.StatusBadRequest, "invalid_request", `give "payment_id" (the booking's payment at the provider) or "charged":false (none there)`)
		return
	}
	if err != nil {
		s.log.Warn("booking not resolved", "booking", id.String(), "error", err)
		lookupFailed(w, err, "booking")
		return
	}
	switch outcome {
	case booking.ResolveNotPending:
		writeError(w, http.StatusConflict, "booking_settled", "the booking no longer waits for its payment: it is "+b.Status)
		return
	case booking.ResolvePaymentKnown:
		writeError(w, http.StatusConflict, "payment_known",
			"the booking's payment is known ("+b.PaymentID+"): the reconciliation asks the provider about it; to settle it now, give it as payment_id")
		return
	case booking.ResolveStillAsking:
		writeError(w, http.StatusConflict, "payment_resolvable", fmt.Sprintf(
			"the reconciliation still repeats the booking's create call, which finds its payment, until %.0f hours after it was made",
			booking.CreateRepeatWindow.Hours()))
		return
	case booking.ResolveNotItsPayment:
		writeError(w, http.StatusUnprocessableEntity, "payment_not_of_booking",
			"that payment is not this booking's: its metadata names another booking, or the booking's create call got another")
		return
	case booking.ResolveNoSuchPayment:
		writeError(w, http.StatusUnprocessableEntity, "payment_not_found", "the provider does not know that payment")
		return
	}
	out, err := s.bookingBody(r.Context(), b)
	if err != nil {
		writeResponse(w, errUnavailable)
		return
	}
	writeResponse(w, response{status: http.StatusOK, body: out})
}

// maxPaymentIDLen bounds a payment id an operator gives: no provider's is
// longer.
const maxPaymentIDLen = 255
