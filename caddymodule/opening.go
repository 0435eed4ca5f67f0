package caddymodule

import (
	"context"
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/waitroom/waitroom/waitroom"
)

// The decisions of a scheduled opening (opens_at): docs/opening.md. Their
// answers, and those of the challenge and the join rate, are in pages.go.

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
	// A place at the back, as any arrival gets it: never in a sold-out
	// event.
	back := func() error {
		if h.room.room.State().SoldOut {
			return h.soldOut(w, r, repl, 0, true)
		}
		return h.join(w, r, next, repl, t.Subject, h.isAccount(t.Subject), true)
	}
	if h.opensAt.IsZero() {
		// The opening was taken out of the config: nothing drawn.
		return back()
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
		return back()
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
