package origin

import (
	"net/http"
	"strconv"

	"github.com/waitroom/waitroom/origin/ledger"
)

// handleTrail answers a buyer's audit trail in an event (admin).
func (s opsAPI) handleTrail(w http.ResponseWriter, r *http.Request) {
	if !s.gate.isAdmin(w, r) {
		return
	}
	raw := r.URL.Query().Get("event")
	event, err := strconv.ParseInt(raw, 10, 64)
	if raw == "" || err != nil || event <= 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", "event must be an event id (a positive integer)")
		return
	}
	user := r.PathValue("id")
	if !ledger.IsText(user) {
		writeError(w, http.StatusBadRequest, "invalid_request", "the user id is not UTF-8 text")
		return
	}
	ctx := r.Context()
	if _, err := s.seats.Registry().Event(ctx, event); err != nil {
		lookupFailed(w, err, "event")
		return
	}
	rows, err := s.ledger.Trail(ctx, event, user)
	if err != nil {
		s.log.Warn("trail not read", "event", event, "error", err)
		writeResponse(w, errUnavailable)
		return
	}
	writeJSON(w, http.StatusOK, buildTrail(event, user, rows, s.now()))
}
