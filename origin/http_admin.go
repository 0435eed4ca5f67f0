package origin

import "net/http"

func (s opsAPI) handleInvariant(w http.ResponseWriter, r *http.Request) {
	if !s.gate.isAdmin(w, r) {
		return
	}
	id, ok := pathID(w, r, "event")
	if !ok {
		return
	}
	inv, err := s.CheckInvariant(r.Context(), id)
	if err != nil {
		lookupFailed(w, err, "event")
		return
	}
	writeJSON(w, http.StatusOK, inv)
}

func (s opsAPI) handleRebuild(w http.ResponseWriter, r *http.Request) {
	if bodyTooLarge(w, r) || !s.gate.isAdmin(w, r) {
		return
	}
	id, ok := pathID(w, r, "event")
	if !ok {
		return
	}
	inv, err := s.Rebuild(r.Context(), id)
	if err != nil {
		s.log.Warn("rebuild failed", "event", id, "error", err)
		lookupFailed(w, err, "event")
		return
	}
	writeJSON(w, http.StatusOK, inv)
}
