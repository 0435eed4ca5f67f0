package origin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seats"
)

var integerLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// holdsAPI serves the holds (docs/api.md §7).
type holdsAPI struct{ *Server }

// holdAsk is what a hold request asks for: a quantity of general
// admission, reserved seats by id, the best seats available of a section,
// or places of a general-admission section of the seat map (docs/api.md
// §15).
type holdAsk struct {
	quantity int64
	// seats are the reserved seats asked for, sorted.
	seats []string
	// best: seats chosen by the origin, of section ("" for any).
	best    bool
	section string
	// places: a quantity of general-admission section's places.
	places bool
}

// canonical is the request's digest input: what it asks, so the same ask
// in another JSON spelling is the same request.
func (a holdAsk) canonical() string {
	switch {
	case len(a.seats) > 0:
		return "seats=" + strings.Join(a.seats, ",")
	case a.places:
		return "section=" + a.section + ":" + strconv.FormatInt(a.quantity, 10)
	case a.best:
		return "best=" + a.section + ":" + strconv.FormatInt(a.quantity, 10)
	}
	return canonicalHold(a.quantity)
}

// parseHold reads a hold request's body for ev: {"quantity": n}, and on a
// reserved-seating event {"seat_ids": [...]}, {"best_available":
// {"section": "A", "quantity": n}} (a bare quantity there is the best
// available of any section) or, for a general-admission section of the
// map, {"section": "GA-East", "quantity": n} (best_available of it is the
// same).
func parseHold(body []byte, ev ledger.Event) (holdAsk, *response) {
	var req struct {
		Quantity      json.RawMessage `json:"quantity"`
		Section       *string         `json:"section"`
		SeatIDs       []string        `json:"seat_ids"`
		BestAvailable *struct {
			Section  string          `json:"section"`
			Quantity json.RawMessage `json:"quantity"`
		} `json:"best_available"`
	}
	if bad := decodeStrict(body, &req); bad != nil {
		return holdAsk{}, bad
	}
	bad := func(msg string) (holdAsk, *response) {
		r := errorResponse(http.StatusBadRequest, "invalid_request", msg)
		return holdAsk{}, &r
	}
	asks := 0
	for _, set := range []bool{req.Quantity != nil, req.SeatIDs != nil, req.BestAvailable != nil} {
		if set {
			asks++
		}
	}
	if asks > 1 {
		return bad("give one of quantity, seat_ids and best_available")
	}
	if (req.SeatIDs != nil || req.BestAvailable != nil || req.Section != nil) && !ev.Seated() {
		return bad("this event is general admission: give a quantity")
	}
	switch {
	case req.Section != nil:
		if req.SeatIDs != nil || req.BestAvailable != nil {
			return bad("give one of quantity, seat_ids and best_available (section goes with a quantity)")
		}
		s, ok := ev.Seating.Section(*req.Section)
		switch {
		case !ok:
			return bad(fmt.Sprintf("section %q is not a section of the event", *req.Section))
		case !s.GA():
			return bad(fmt.Sprintf("section %s has reserved seats: give seat_ids, or best_available with the section", s.ID))
		}
		q, r := parseQuantity(req.Quantity, ev.MaxPerUser)
		if r != nil {
			return holdAsk{}, r
		}
		return holdAsk{quantity: q, section: s.ID, places: true}, nil
	case req.SeatIDs != nil:
		if len(req.SeatIDs) == 0 {
			return bad("seat_ids must name at least one seat")
		}
		// Each seat is checked first (400), the count then (422), in the
		// order of docs/api.md §7 and §15.
		seats := slices.Sorted(slices.Values(req.SeatIDs))
		for i, id := range seats {
			if s, ok := ev.Seating.Section(strings.Split(id, "/")[0]); ok && s.GA() {
				return bad(fmt.Sprintf("%s is a general-admission section: its places are held by quantity, "+
					`{"section":%q,"quantity":n}`, s.ID, s.ID))
			}
			if _, _, _, ok := ev.Seating.Locate(id); !ok {
				return bad(fmt.Sprintf("seat %q is not on the event's seat map", id))
			}
			if i > 0 && seats[i-1] == id {
				return bad(fmt.Sprintf("seat %s is named twice", id))
			}
		}
		if int64(len(seats)) > ev.MaxPerUser {
			r := errorResponse(http.StatusUnprocessableEntity, "exceeds_per_user_limit",
				fmt.Sprintf("at most %d seats per user", ev.MaxPerUser))
			return holdAsk{}, &r
		}
		return holdAsk{quantity: int64(len(seats)), seats: seats}, nil
	case req.BestAvailable != nil:
		s, ok := ev.Seating.Section(req.BestAvailable.Section)
		if !ok {
			return bad(fmt.Sprintf("best_available.section %q is not a section of the event", req.BestAvailable.Section))
		}
		q, r := parseQuantity(req.BestAvailable.Quantity, ev.MaxPerUser)
		if r != nil {
			return holdAsk{}, r
		}
		// The best places of a general-admission section are any of them.
		return holdAsk{quantity: q, best: !s.GA(), places: s.GA(), section: s.ID}, nil
	}
	q, r := parseQuantity(req.Quantity, ev.MaxPerUser)
	if r != nil {
		return holdAsk{}, r
	}
	return holdAsk{quantity: q, best: ev.Seated()}, nil
}

// parseQuantity reads a quantity: a JSON integer from 1 to max. Anything
// else that is not an integer, or below 1, is a bad request; an integer
// above max (however large) is over the per-user limit.
func parseQuantity(quantity json.RawMessage, maxPerUser int64) (int64, *response) {
	bad := func(msg string) (int64, *response) {
		r := errorResponse(http.StatusBadRequest, "invalid_request", msg)
		return 0, &r
	}
	lit := string(bytes.TrimSpace(quantity))
	switch {
	case lit == "" || lit == "null":
		return bad("quantity is required")
	case !integerLiteral.MatchString(lit):
		return bad("quantity must be an integer")
	case lit[0] == '-' || lit == "0":
		return bad("quantity must be at least 1")
	}
	q, err := strconv.ParseInt(lit, 10, 64)
	if err != nil || q > maxPerUser {
		r := errorResponse(http.StatusUnprocessableEntity, "exceeds_per_user_limit",
			fmt.Sprintf("at most %d seats per user", maxPerUser))
		return 0, &r
	}
	return q, nil
}

func canonicalHold(qty int64) string { return "quantity=" + strconv.FormatInt(qty, 10) }

// pausedRetryAfter is the Retry-After, in seconds, of a hold request made
// while the sale is paused.
const pausedRetryAfter = 5

func (s holdsAPI) handleCreateHold(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	resp := s.createHold(w, r)
	if resp.status == 0 {
		return // answered already
	}
	writeResponse(w, resp)
	outcome := resp.outcome
	if outcome == "exceeds_per_user_limit" {
		outcome = "per_user_limit"
	}
	s.metrics.holds.WithLabelValues(outcome).Inc()
	s.metrics.holdLatency.Observe(time.Since(start).Seconds())
}

func (s holdsAPI) createHold(w http.ResponseWriter, r *http.Request) response {
	if r.ContentLength > MaxBodyBytes {
		return errTooLarge
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return errorResponse(http.StatusNotFound, "not_found", "no such event")
	}
	ctx := r.Context()
	ev, err := s.seats.Registry().Event(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return errorResponse(http.StatusNotFound, "not_found", "no such event")
	} else if err != nil {
		return errUnavailable
	}
	ticket, bad := s.gate.ticket(r, id)
	if bad != nil {
		return *bad
	}
	if !s.gate.admitted(ctx, ev, ticket.Position) {
		if pausedOnly(ev, ticket.Position) {
			// Admitted, while the sale is paused: a wait, not a refusal.
			r := unavailableResponse("the sale is paused; retry shortly")
			r.retryAfter = pausedRetryAfter
			return r
		}
		return notAdmitted(ctx, ev)
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
	ask, bad := parseHold(body, ev.Event)
	if bad != nil {
		return *bad
	}
	req := seats.PlaceRequest{
		Event: ev, User: ticket.Subject, Quantity: ask.quantity, Seats: ask.seats, Position: ticket.Position, Key: key,
		Digest: idem.RequestDigest(ask.canonical()),
		Scope:  idem.Scope{Kind: "holds", Event: ev.ID, User: ticket.Subject, Key: key},
		Render: func(h ledger.Hold) []byte { return holdBodyAt(h, ev.Event, h.CreatedAt) },
	}
	var res seats.Result
	switch {
	case ask.best:
		res = s.seats.PlaceBest(ctx, req, ask.section)
	case ask.places:
		req.Section = ask.section
		res = s.seats.Place(ctx, req)
	default:
		res = s.seats.Place(ctx, req)
	}
	resp := holdAnswer(ev.Event, res)
	if res.Claim != "" && res.Outcome != seats.Held {
		s.keepAnswer(ctx, req.Scope, req.Digest, res.Claim, resp)
	}
	if resp.outcome == "replayed" {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	return resp
}

var errNoSuchHold = errorResponse(http.StatusNotFound, "not_found", "no such hold")

// holdForUser reads hold {id} for the token's owner: 401 without a valid
// token, 404 when it does not exist or belongs to someone else, 403 when
// the token's position is above the watermark (as for paying).
func (s holdsAPI) holdForUser(w http.ResponseWriter, r *http.Request) (ledger.Hold, *seats.Event, bool) {
	if !hasAnyToken(r) {
		writeResponse(w, errInvalidToken)
		return ledger.Hold{}, nil, false
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found", "no such hold")
		return ledger.Hold{}, nil, false
	}
	h, err := s.ledger.Hold(r.Context(), id.String())
	if err != nil {
		lookupFailed(w, err, "hold")
		return ledger.Hold{}, nil, false
	}
	ticket, bad := s.gate.ownerTicket(r, h.EventID, errNoSuchHold)
	if bad != nil {
		writeResponse(w, *bad)
		return ledger.Hold{}, nil, false
	}
	if ticket.Subject != h.UserID {
		writeResponse(w, errNoSuchHold)
		return ledger.Hold{}, nil, false
	}
	ev, err := s.seats.Registry().Event(r.Context(), h.EventID)
	if err != nil {
		lookupFailed(w, err, "event")
		return ledger.Hold{}, nil, false
	}
	if !s.gate.reachedWatermark(r.Context(), ev, ticket.Position) {
		writeResponse(w, notAdmitted(r.Context(), ev))
		return ledger.Hold{}, nil, false
	}
	return h, ev, true
}

func (s holdsAPI) handleGetHold(w http.ResponseWriter, r *http.Request) {
	h, ev, ok := s.holdForUser(w, r)
	if !ok {
		return
	}
	writeResponse(w, response{status: http.StatusOK, body: holdBodyAt(h, ev.Event, s.now())})
}

func (s holdsAPI) handleDeleteHold(w http.ResponseWriter, r *http.Request) {
	if noBodyTooLarge(w, r) {
		return
	}
	h, _, ok := s.holdForUser(w, r)
	if !ok {
		return
	}
	err := s.seats.ReleaseHold(r.Context(), h)
	switch {
	case errors.Is(err, ledger.ErrHoldNotActive):
		writeError(w, http.StatusConflict, "hold_not_active", "the hold is "+h.StatusAt(s.now())+", not active")
	case err != nil:
		writeResponse(w, errUnavailable)
	default:
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
	}
}

// keepAnswer keeps a hold request's answer under its Idempotency-Key,
// which the hold script claimed for it with claim. A new hold's answer is
// in its ledger row, which the claim names: nothing more to write. A 5xx
// gives the key up, so the client may retry.
func (s holdsAPI) keepAnswer(ctx context.Context, scope idem.Scope, digest, claim string, resp response) {
	ctx = context.WithoutCancel(ctx)
	var err error
	if resp.status >= 500 {
		err = s.idem.AbandonClaim(ctx, scope, claim)
	} else {
		err = s.idem.Finish(ctx, scope, digest, idem.StoredResponse{Status: resp.status, Body: resp.body})
	}
	if err != nil {
		s.log.Warn("idempotency record not kept", "error", err)
	}
}
