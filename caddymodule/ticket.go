package caddymodule

import (
	"context"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/waitroom/waitroom/waitroom"
)

// The ticket path: a request with a valid queue token of the event is
// admitted, kept waiting or turned away by its position.

// serveTicket answers a bearer of a valid token.
func (h *Handler) serveTicket(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *caddy.Replacer, s waitroom.State, t waitroom.Ticket) error {
	// Should the store lose its counter, it is put back above every
	// position a token proves was handed out.
	h.room.room.Seen(t.Position)
	switch {
	case s.Admits(t.Position):
		return h.admit(w, r, next, repl, h.renew(w, r, t))
	case s.BeyondCap(t.Position) || (s.SoldOut && t.Position > s.Watermark):
		// Never to be admitted. A position at or below the watermark of a
		// paused, sold-out event waits instead: its holder may have seats
		// to pay for once entry resumes.
		return h.soldOut(w, r, repl, t.Position, true)
	default:
		h.room.room.Polled(t.Position)
		return h.wait(w, r, repl, s, h.renew(w, r, t))
	}
}

// windowOver tells whether t's admission window has passed and the origin
// did not extend it. A store that cannot say keeps the holder admitted: it
// may be paying.
func (h *Handler) windowOver(r *http.Request, t waitroom.Ticket) bool {
	if !h.room.room.AdmissionOver(t.Position) {
		return false
	}
	ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
	defer cancel()
	extended, err := h.room.room.Extended(ctx, t.Subject)
	if err != nil {
		h.logger.Debug("reading an admission's extension", zap.Int64("event", h.Event), zap.Error(err))
		return false
	}
	return !extended
}

// isAccount tells whether subject, a token's, is an account's id (from
// user_id) rather than an anonymous visitor's.
func (h *Handler) isAccount(subject string) bool {
	return h.UserID != "" && !waitroom.IsVisitorID(subject)
}
