package origin

import (
	"net/http"
	"time"
)

// opsAPI serves the admin routes, health and readiness (docs/api.md §12–§13).
type opsAPI struct{ *Server }

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

func (s opsAPI) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s opsAPI) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := contextWithTimeout(r, 2*time.Second)
	defer cancel()
	if err := s.Ready(ctx); err != nil {
		writeResponse(w, unavailableResponse("not ready: "+err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
