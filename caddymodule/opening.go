package caddymodule

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/waitroom/waitroom/waitroom"
)

// The answers of a scheduled opening (opens_at), of the challenge and of the
// join rate: docs/opening.md.

// preQueueBody is the JSON form of the pre-queue answer.
type preQueueBody struct {
	Status            string `json:"status"`
	Event             int64  `json:"event"`
	OpensAt           string `json:"opens_at"`
	LotteryCommitment string `json:"lottery_commitment"`
	OpensInSeconds    int64  `json:"opens_in_seconds"`
	Token             string `json:"token"`
}

// challengeBody is the JSON form of the challenge answer.
type challengeBody struct {
	Status     string `json:"status"`
	Event      int64  `json:"event"`
	Challenge  string `json:"challenge"`
	Difficulty int    `json:"difficulty"`
	ExpiresAt  string `json:"expires_at"`
}

// maxPreQueueRetry caps the Retry-After of the pre-queue answer, so a
// client polling by it is never told to sleep through the opening by much.
const maxPreQueueRetry = 60

// enterPreQueue gives a new entrant its pre-queue token and the answer.
func (h *Handler) enterPreQueue(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, user string) error {
	// Valid from now until a token's life after the opening, so an entrant
	// who closes the page comes back to the place the draw gives it.
	t, err := h.keys.IssuePreQueue(user, h.Event, h.opensAt.Add(h.ttl))
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	h.giveToken(w, r, t)
	h.m.preQueue.Inc()
	return h.preQueue(w, r, repl, t)
}

// servePreQueueTicket answers the bearer of a pre-queue token: the pre-queue
// answer until the opening, then the position the draw gave it, on a token
// issued anew. It solved the challenge when it entered, so it never meets
// one again, nor the join rate.
func (h *Handler) servePreQueueTicket(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *caddy.Replacer, t waitroom.Ticket) error {
	if h.opensAt.IsZero() {
		// The opening was taken out of the config: nothing drawn, a place
		// at the back.
		return h.join(w, r, next, repl, t.Subject, true)
	}
	if h.room.room.PreQueue() {
		return h.preQueue(w, r, repl, t)
	}
	ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
	pos, err := h.room.room.DrawnPosition(ctx, t.Subject)
	cancel()
	switch {
	case errors.Is(err, waitroom.ErrNotOpen):
		return h.preQueue(w, r, repl, t)
	case errors.Is(err, waitroom.ErrNotEntrant):
		// The store lost the entry (or the draw): the work was done, so a
		// place at the back without another challenge.
		h.logger.Debug("pre-queue entrant not in the draw", zap.Int64("event", h.Event), zap.String("user", t.Subject))
		return h.join(w, r, next, repl, t.Subject, true)
	case err != nil:
		return h.unavailable(w, r, repl, err)
	}
	placed, err := h.keys.Issue(t.Subject, h.Event, pos, h.ttl)
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	h.giveToken(w, r, placed)
	return h.serveTicket(w, r, next, repl, h.room.room.State(), placed)
}

// preQueue answers with the pre-queue page or its JSON form.
func (h *Handler) preQueue(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, t waitroom.Ticket) error {
	ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
	commitment, err := h.room.room.Commitment(ctx)
	cancel()
	if err != nil {
		return h.unavailable(w, r, repl, err)
	}
	opensIn := int64(math.Ceil(h.opensAt.Sub(h.now()).Seconds()))
	opensIn = max(opensIn, 0)
	hdr := w.Header()
	hdr.Set(HeaderStatus, StatusPreQueue)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Retry-After", strconv.FormatInt(min(max(opensIn, 1), maxPreQueueRetry), 10))
	hdr.Add("Vary", "Accept")
	setPlaceholders(repl, StatusPreQueue, 0)
	opensAt := h.opensAt.Format(time.RFC3339Nano)
	if wantsJSON(r) {
		return writeJSON(w, http.StatusOK, preQueueBody{
			Status:            StatusPreQueue,
			Event:             h.Event,
			OpensAt:           opensAt,
			LotteryCommitment: commitment,
			OpensInSeconds:    opensIn,
			Token:             t.Raw,
		})
	}
	return h.render(w, http.StatusOK, h.preQueuePage, PreQueuePage{
		Event:             h.Event,
		OpensAt:           opensAt,
		OpensInSeconds:    opensIn,
		LotteryCommitment: commitment,
	})
}

// challenge answers a new arrival with a fresh challenge.
func (h *Handler) challenge(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer) error {
	c := h.challenger.Issue()
	hdr := w.Header()
	hdr.Set(HeaderStatus, StatusChallenge)
	hdr.Set("Cache-Control", "no-store")
	hdr.Add("Vary", "Accept")
	setPlaceholders(repl, StatusChallenge, 0)
	h.m.challenges.Inc()
	if wantsJSON(r) {
		return writeJSON(w, http.StatusOK, challengeBody{
			Status:     StatusChallenge,
			Event:      h.Event,
			Challenge:  c.Nonce,
			Difficulty: c.Difficulty,
			ExpiresAt:  c.ExpiresAt.UTC().Format(time.RFC3339),
		})
	}
	return h.render(w, http.StatusOK, h.challengePg, ChallengePage{
		Event:      h.Event,
		Challenge:  c.Nonce,
		Difficulty: c.Difficulty,
	})
}

// rateLimited answers 429: the client made more new arrivals than the join
// rate allows.
func (h *Handler) rateLimited(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, wait time.Duration) error {
	retry := max(int(math.Ceil(wait.Seconds())), 1)
	hdr := w.Header()
	hdr.Set(HeaderStatus, StatusRateLimited)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Retry-After", strconv.Itoa(retry))
	hdr.Add("Vary", "Accept")
	setPlaceholders(repl, StatusRateLimited, 0)
	h.m.rateLimited.Inc()
	if wantsJSON(r) {
		return writeJSON(w, http.StatusTooManyRequests, struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}{"rate_limited", "Too many new arrivals from this address; try again in " + strconv.Itoa(retry) + " s."})
	}
	return h.render(w, http.StatusTooManyRequests, h.limitedPage, UnavailablePage{Event: h.Event, RetryAfterSeconds: retry})
}
