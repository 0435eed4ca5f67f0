package origin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seats"
)

var integerLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// parseQuantity reads {"quantity": n}: a JSON integer from 1 to max.
// Anything else that is not an integer, or below 1, is a bad request; an
// integer above max (however large) is over the per-user limit.
// holdsAPI serves the holds (docs/api.md §7).
type holdsAPI struct{ *Server }

func parseQuantity(body []byte, maxPerUser int64) (int64, *response) {
	var req struct {
		Quantity json.RawMessage `json:"quantity"`
	}
	if bad := decodeStrict(body, &req); bad != nil {
		return 0, bad
	}
	bad := func(msg string) (int64, *response) {
		r := errorResponse(http.StatusBadRequest, "invalid_request", msg)
		return 0, &r
	}
	lit := string(bytes.TrimSpace(req.Quantity))
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
		if st := ev.Room().State(); st.Paused && ticket.Position <= st.Watermark && !st.BeyondCap(ticket.Position) {
			// Admitted, while the sale is paused: a wait, not a refusal.
			r := unavailableResponse("the sale is paused; retry shortly")
			r.retryAfter = pausedRetryAfter
			return r
		}
		return errorResponse(http.StatusForbidden, "not_admitted", "your place in the queue has not been admitted yet")
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
	qty, bad := parseQuantity(body, ev.MaxPerUser)
	if bad != nil {
		return *bad
	}
	req := seats.PlaceRequest{
		Event: ev, User: ticket.Subject, Quantity: qty, Position: ticket.Position, Key: key, Digest: idem.RequestDigest(canonicalHold(qty)),
		Scope:  idem.Scope{Kind: "holds", Event: ev.ID, User: ticket.Subject, Key: key},
		Render: func(h ledger.Hold) []byte { return holdBodyAt(h, ev.Event, h.CreatedAt) },
	}
	res := s.seats.Place(ctx, req)
	resp := holdAnswer(ev.Event, res)
	if res.Claim != "" && res.Outcome != seats.Held {
		s.keepAnswer(ctx, req.Scope, req.Digest, res.Claim, resp)
	}
	if resp.outcome == "replayed" {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	return resp
}

// holdForUser reads hold {id} for the token's owner: 401 without a valid
// token, 404 when it does not exist or belongs to someone else.
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
	ticket, bad := s.gate.ticket(r, h.EventID)
	if bad != nil {
		writeResponse(w, *bad)
		return ledger.Hold{}, nil, false
	}
	if ticket.Subject != h.UserID {
		writeError(w, http.StatusNotFound, "not_found", "no such hold")
		return ledger.Hold{}, nil, false
	}
	ev, err := s.seats.Registry().Event(r.Context(), h.EventID)
	if err != nil {
		lookupFailed(w, err, "event")
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
