package origin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
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
	if noBodyTooLarge(w, r) || !s.gate.isAdmin(w, r) {
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

// outboxEventJSON is a booking event of the outbox as the admin routes show
// it, with the body the site is sent.
type outboxEventJSON struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Booking   string          `json:"booking"`
	Status    string          `json:"status"`
	Created   string          `json:"created"`
	Attempts  int             `json:"attempts"`
	LastError string          `json:"last_error"`
	DeadAt    *string         `json:"dead_at"`
	Body      json.RawMessage `json:"body"`
}

func outboxEventBody(ev ledger.OutboxEvent) outboxEventJSON {
	out := outboxEventJSON{ID: ev.ID, Type: ev.Type, Booking: ev.BookingID, Status: ev.Status,
		Created: rfc3339(ev.CreatedAt), Attempts: ev.Attempts, LastError: ev.LastError, Body: json.RawMessage(ev.Body)}
	if ev.DeadAt != nil {
		d := rfc3339(*ev.DeadAt)
		out.DeadAt = &d
	}
	return out
}

// maxOutboxList is the most events GET /v1/admin/outbox lists at once.
const maxOutboxList = 1000

// handleOutbox serves GET /v1/admin/outbox?status=dead[&limit=n]: the
// booking events given up on, oldest first.
func (s opsAPI) handleOutbox(w http.ResponseWriter, r *http.Request) {
	if !s.gate.isAdmin(w, r) {
		return
	}
	q := r.URL.Query()
	if q.Get("status") != ledger.OutboxDead {
		writeError(w, http.StatusBadRequest, "invalid_request", "status must be dead")
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxOutboxList {
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("limit must be 1 to %d", maxOutboxList))
			return
		}
		limit = n
	}
	evs, err := s.ledger.DeadOutbox(r.Context(), time.Time{}, 0, limit)
	if err != nil {
		writeResponse(w, errUnavailable)
		return
	}
	out := make([]outboxEventJSON, len(evs))
	for i, ev := range evs {
		out[i] = outboxEventBody(ev)
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": out})
}

var (
	errEventsDisabled = errorResponse(http.StatusServiceUnavailable, "events_disabled",
		"booking events are not sent: ORIGIN_EVENTS_URL is not set")
	errNotDead = errorResponse(http.StatusConflict, "not_dead",
		"the event is still being sent; only an event given up on is sent again")
)

// handleRedelivery serves POST /v1/admin/outbox/{id}/redelivery: an event
// given up on is sent again, from its first try.
func (s opsAPI) handleRedelivery(w http.ResponseWriter, r *http.Request) {
	if noBodyTooLarge(w, r) || !s.gate.isAdmin(w, r) {
		return
	}
	if s.events == nil {
		writeResponse(w, errEventsDisabled)
		return
	}
	id := r.PathValue("id")
	if !ledger.IsText(id) {
		// No event's id holds a NUL or a byte that is not UTF-8, and the
		// ledger's text column would refuse it (a 503 retried for ever).
		writeError(w, http.StatusNotFound, "not_found", "no such outbox event")
		return
	}
	ev, err := s.ledger.RedeliverOutbox(r.Context(), id, s.cfg.Clock().UTC())
	switch {
	case errors.Is(err, ledger.ErrOutboxNotDead):
		writeResponse(w, errNotDead)
		return
	case err != nil:
		lookupFailed(w, err, "outbox event")
		return
	}
	s.log.Info("booking event sent again", "event", ev.ID, "type", ev.Type, "booking", ev.BookingID)
	writeJSON(w, http.StatusAccepted, outboxEventBody(ev))
}
