package origin

import (
	"errors"
	"net/http"
	"strings"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

type webhookJSON struct {
	Received bool   `json:"received"`
	Outcome  string `json:"outcome"`
}

func (s bookingsAPI) handleWebhook(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("provider")
	if name != payment.NameFakepay && name != payment.NameStripe {
		writeError(w, http.StatusNotFound, "not_found", "no such payment provider")
		return
	}
	if s.cfg.Payments == nil || s.cfg.Payments.Name() != name {
		writeError(w, http.StatusNotFound, "not_found", "payment provider "+name+" is not configured")
		return
	}
	if bodyTooLarge(w, r) {
		return
	}
	body, bad := readBody(w, r)
	if bad != nil {
		writeResponse(w, *bad)
		return
	}
	// Header lines of one name are one comma-separated list (RFC 9110
	// §5.3): a second Stripe-Signature line is more t= and v1= elements of
	// the one signature, judged with the first, not left unread.
	ev, err := s.cfg.Payments.ParseWebhook(body, strings.Join(r.Header.Values(payment.SignatureHeader), ","))
	switch {
	case errors.Is(err, payment.ErrInvalidSignature):
		s.metrics.webhooks.WithLabelValues("invalid").Inc()
		writeError(w, http.StatusBadRequest, "invalid_signature", "the webhook signature does not verify")
		return
	case err != nil:
		s.metrics.webhooks.WithLabelValues("invalid").Inc()
		writeError(w, http.StatusBadRequest, "invalid_request", "the webhook body is not an event: "+err.Error())
		return
	}
	// stripe-go keeps the raw bytes of an id given as a bare string (an
	// expandable field), and a \u0000 escape decodes to a NUL: left in, the
	// event would fail at the ledger on every redelivery.
	if !ledger.IsText(ev.ID, ev.Type, ev.PaymentID, ev.BookingID, ev.Currency, ev.RefundID, ev.FailureCode, ev.FailureMessage) {
		s.metrics.webhooks.WithLabelValues("invalid").Inc()
		writeError(w, http.StatusBadRequest, "invalid_request", "the webhook event holds a string that is not UTF-8 text")
		return
	}
	s.metrics.webhooksReceived.Inc()
	outcome, err := s.bookings.Settlement().HandlePaymentEvent(r.Context(), ev)
	if err != nil {
		s.metrics.webhooks.WithLabelValues("error").Inc()
		s.log.Warn("webhook not handled; the provider will redeliver it", "event", ev.ID, "type", ev.Type,
			"payment", ev.PaymentID, "error", err)
		writeResponse(w, unavailableResponse("the event could not be handled now; deliver it again"))
		return
	}
	s.metrics.webhooks.WithLabelValues(outcome).Inc()
	writeJSON(w, http.StatusOK, webhookJSON{Received: true, Outcome: outcome})
}
