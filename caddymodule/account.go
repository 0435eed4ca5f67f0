package caddymodule

import (
	"context"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/waitroom/waitroom/waitroom"
)

// A signed-in visitor is its account (docs/api.md §7, one position per
// account): with user_id, a token of anyone else never admits it under
// another name, or an account could wait at one place of its own and at
// as many more as it collected anonymous tokens for, each a buyer of its
// own to the site.

// requestUser is the account user_id names for r, "" for an anonymous
// visitor (or without user_id). An id no token can carry (a control
// character, from a query string say) names no account.
func (h *Handler) requestUser(repl *placeholders) string {
	if h.UserID == "" {
		return ""
	}
	id := strings.TrimSpace(repl.ReplaceAll(h.UserID, ""))
	if !waitroom.ValidSubject(id) {
		return ""
	}
	return id
}

// serveOthersToken answers user, signed in, who presented t, a valid token
// of another subject. The place an anonymous token holds is the account's
// when the account holds none yet: it signed in while waiting; one that
// holds a place gets that one. Anything else (another account's token, a
// pre-queue token, a place that is spent) leaves user to arrive as itself.
func (h *Handler) serveOthersToken(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *placeholders, s waitroom.State, t waitroom.Ticket, user, solution string) error {
	if t.PreQueue || t.IsAccount() || h.room.room.PreQueue() {
		return h.serveArrival(w, r, next, repl, s, true, solution)
	}
	hold := h.holds(r, s, t)
	if hold == ticketRevoked && h.isAfterPurchase(r, repl) {
		// Its purchase was made before the visitor signed in: its pages
		// are the visitor's, as they were.
		return h.passCompleted(w, r, next, repl, t.Subject, t.Position, t.Raw)
	}
	if _, done := h.room.room.SubjectRevoked(user); done || hold != ticketHolds {
		return h.serveArrival(w, r, next, repl, s, true, solution)
	}
	ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
	defer cancel()
	// First the place itself, in one store step: of accounts signing in
	// with one token at once (on any gateways), one gets it; the others
	// arrive as themselves, as after a take-over this node has seen.
	mine, err := h.room.room.ClaimPlace(ctx, t.Subject, t.Position, user, h.ttl+revokeLeeway)
	if err != nil {
		return h.unavailable(w, r, repl, err)
	}
	if !mine {
		cancel()
		return h.serveArrival(w, r, next, repl, s, true, solution)
	}
	took, err := h.room.room.TakeOverPlace(ctx, user, t.Position, t.HandedOut, h.ttl)
	if err != nil {
		return h.unavailable(w, r, repl, err)
	}
	if !took {
		// The account holds a place already (its own, or the draw's): that
		// one. The token proves the visitor was let in once, so no join
		// rate or challenge again.
		cancel()
		if s.SoldOut && h.availability(s).SoldOut {
			return h.soldOut(w, r, repl, 0, true)
		}
		return h.join(w, r, next, repl, user, true, true)
	}
	// The place is the account's now: the anonymous token admits no one
	// else there. Taken over again at each such request, so a record that
	// failed once is made when the visitor retries.
	if err := h.room.room.TakeOver(ctx, t.Subject, t.Position, user, h.ttl+revokeLeeway); err != nil {
		return h.unavailable(w, r, repl, err)
	}
	cancel()
	s = h.room.room.State()
	own, err := h.issue(user, true, t.Position, t.HandedOut, s)
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	h.giveToken(w, r, own)
	return h.serveTicket(w, r, next, repl, s, own)
}
