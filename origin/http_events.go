package origin

import (
	"errors"
	"net/http"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seats"
)

// eventsAPI serves the events (docs/api.md §6).
type eventsAPI struct{ *Server }

func (s eventsAPI) handleCreateEvent(w http.ResponseWriter, r *http.Request) {
	if bodyTooLarge(w, r) || !s.gate.isAdmin(w, r) {
		return
	}
	body, bad := readBody(w, r)
	if bad != nil {
		writeResponse(w, *bad)
		return
	}
	var req createEventRequest
	if bad := decodeStrict(body, &req); bad != nil {
		writeResponse(w, *bad)
		return
	}
	e, err := req.event(s.now())
	var invalid errInvalid
	if errors.As(err, &invalid) {
		writeError(w, http.StatusBadRequest, "invalid_request", invalid.msg)
		return
	}
	created, err := s.CreateEvent(r.Context(), e)
	switch {
	case errors.Is(err, ledger.ErrEventExists):
		writeError(w, http.StatusConflict, "event_exists", "an event with this id exists already")
		return
	case err != nil:
		s.log.Warn("create event failed", "error", err)
		writeResponse(w, errUnavailable)
		return
	}
	remaining, err := s.seats.Recovery().Remaining(r.Context(), s.mustEvent(created))
	if err != nil {
		remaining = created.Sellable
	}
	writeJSON(w, http.StatusCreated, eventBody(created, remaining))
}

// mustEvent is the live event of one just created or read on this node.
func (s eventsAPI) mustEvent(e ledger.Event) *seats.Event { return s.seats.Registry().Serve(e) }

func (s eventsAPI) handleListEvents(w http.ResponseWriter, r *http.Request) {
	events, err := s.seats.Registry().LoadEvents(r.Context())
	if err != nil {
		writeResponse(w, errUnavailable)
		return
	}
	out := make([]eventJSON, 0, len(events))
	for _, ev := range events {
		n, err := s.seats.Recovery().Remaining(r.Context(), ev)
		if err != nil {
			writeResponse(w, errUnavailable)
			return
		}
		out = append(out, eventBody(ev.Event, n))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s eventsAPI) handleGetEvent(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "event")
	if !ok {
		return
	}
	ev, err := s.seats.Registry().Event(r.Context(), id)
	if err != nil {
		lookupFailed(w, err, "event")
		return
	}
	n, err := s.seats.Recovery().Remaining(r.Context(), ev)
	if err != nil {
		writeResponse(w, errUnavailable)
		return
	}
	writeJSON(w, http.StatusOK, eventBody(ev.Event, n))
}
