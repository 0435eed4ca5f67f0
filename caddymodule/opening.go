package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/waitroom/waitroom/waitroom"
)

// The decisions of a scheduled opening (opens_at): docs/opening.md. Their
// answers, and those of the challenge and the join rate, are in pages.go.

// enterPreQueue gives a new entrant its pre-queue token and the answer.
func (h *Handler) enterPreQueue(w http.ResponseWriter, r *http.Request, repl *placeholders, user string, account bool) error {
	// Valid from now until a token's life after the opening, so an entrant
	// who closes the page comes back to the place the draw gives it.
	issue := h.keys.IssuePreQueue
	if account {
		issue = h.keys.IssuePreQueueAccount
	}
	t, err := issue(user, h.Event, h.opensAt.Add(h.ttl))
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	h.giveToken(w, r, t)
	h.m.preQueue.Inc()
	return h.preQueue(w, r, repl, t)
}

// enterAgain puts the bearer of a pre-queue token back among the entrants
// when the store lost them after the token was issued (the room says so
// from what it read of the state, with no store call otherwise), and gives
// it the token anew, so its later polls are not asked again. Should the
// store fail, the token is kept and its next poll tries again.
func (h *Handler) enterAgain(w http.ResponseWriter, r *http.Request, t waitroom.Ticket, account bool) waitroom.Ticket {
	ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
	defer cancel()
	again, err := h.room.room.EnterAgain(ctx, t.Subject, t.IssuedAt)
	if err != nil {
		h.logger.Debug("entering the pre-queue again", zap.Int64("event", h.Event), zap.Error(err))
	}
	if !again {
		return t
	}
	issue := h.keys.IssuePreQueue
	if account {
		issue = h.keys.IssuePreQueueAccount
	}
	nt, err := issue(t.Subject, h.Event, h.opensAt.Add(h.ttl))
	if err != nil {
		return t
	}
	h.giveToken(w, r, nt)
	return nt
}

// outlastOpening gives the bearer of a pre-queue token its token anew when
// the token ends before a token's life after the opening: the opening was
// moved later (opens_at changed) since it was issued, and the token would
// otherwise end before the draw gives it its place, or soon after.
func (h *Handler) outlastOpening(w http.ResponseWriter, r *http.Request, t waitroom.Ticket, account bool) waitroom.Ticket {
	until := h.opensAt.Add(h.ttl)
	if !t.ExpiresAt.Before(until.Truncate(time.Second)) {
		return t
	}
	issue := h.keys.IssuePreQueue
	if account {
		issue = h.keys.IssuePreQueueAccount
	}
	nt, err := issue(t.Subject, h.Event, until)
	if err != nil {
		return t
	}
	h.giveToken(w, r, nt)
	return nt
}

// servePreQueueTicket answers the bearer of a pre-queue token: the pre-queue
// answer until the opening, then by the one position the token yields
// (docs/api.md §3), on a token issued anew: the position the draw gave it,
// or, when the draw has none for it (the opening was taken out of the
// config, or the store lost the entry), the one its first presentation was
// handed, without another challenge or join-rate check (it met both when it
// entered) and never a second. Once that position is revoked or its
// admission window ended, the token admits no more: its bearer is a new
// arrival (an account is done), as the position's own token would be.
func (h *Handler) servePreQueueTicket(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *placeholders, t waitroom.Ticket, solution string) error {
	account := h.isAccount(t)
	if _, revoked := h.room.room.SubjectRevoked(t.Subject); account && revoked {
		return h.completed(w, r, repl, 0)
	}
	if h.room.room.PreQueue() {
		return h.preQueue(w, r, repl, h.outlastOpening(w, r, h.enterAgain(w, r, t, account), account))
	}
	ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
	defer cancel()
	var pos int64
	var handedOut time.Time
	var drawn bool
	var err error
	if h.opensAt.IsZero() {
		// The opening was taken out of the config: nothing drawn.
		err = waitroom.ErrNotEntrant
	} else {
		pos, err = h.room.room.DrawnPosition(ctx, t.Subject)
	}
	switch {
	case errors.Is(err, waitroom.ErrNotOpen):
		return h.preQueue(w, r, repl, t)
	case errors.Is(err, waitroom.ErrNotEntrant):
		h.logger.Debug("pre-queue token without a drawn position", zap.Int64("event", h.Event), zap.String("user", t.Subject))
		var placed bool
		err = nil
		if account {
			// An account's token is judged by the position the account
			// holds, whatever gave it that one (the draw, another device).
			pos, handedOut, placed, err = h.room.room.AccountHeld(ctx, t.Subject)
		}
		if err == nil && !placed {
			pos, handedOut, placed, err = h.room.room.PreQueuePlaced(ctx, t.Subject)
		}
		switch {
		case err != nil:
			return h.unavailable(w, r, repl, err)
		case !placed && h.availability(h.room.room.State()).SoldOut:
			// Never a place in a sold-out event.
			return h.soldOut(w, r, repl, 0, true)
		case !placed:
			// Valid from now until the token can no longer be presented.
			keep := t.ExpiresAt.Sub(h.now()) + revokeLeeway
			if pos, handedOut, err = h.room.room.PlacePreQueue(ctx, t.Subject, account, keep); err != nil {
				return h.unavailable(w, r, repl, err)
			}
			h.m.arrivals.Inc()
		}
	case err != nil:
		return h.unavailable(w, r, repl, err)
	default:
		// The draw's position is the one the token yields, also once the
		// draw cannot say (a reload without the opening).
		keep := t.ExpiresAt.Sub(h.now()) + revokeLeeway
		if err = h.room.room.RecordDrawnPreQueue(ctx, t.Subject, account, pos, keep); err != nil {
			return h.unavailable(w, r, repl, err)
		}
		drawn = true
	}
	if account && drawn {
		// The drawn position is the account's, so its next arrival
		// without this token finds it, after a reload too.
		if pos, handedOut, err = h.room.room.HoldAccount(ctx, t.Subject, pos, time.Time{}, h.ttl); err != nil {
			return h.unavailable(w, r, repl, err)
		}
	}
	cancel()

	s := h.room.room.State()
	yielded := waitroom.Ticket{Subject: t.Subject, Event: h.Event, Position: pos, Account: t.Account, HandedOut: handedOut}
	switch h.holds(r, s, yielded) {
	case ticketCompleted:
		return h.completed(w, r, repl, pos)
	case ticketSpent, ticketRevoked:
		// A pre-queue token never reaches the buyer's pages: the token of
		// its drawn position does.
		return h.serveArrival(w, r, next, repl, s, true, solution)
	}
	placed, err := h.issue(t.Subject, account, pos, handedOut, s)
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	h.giveToken(w, r, placed)
	return h.serveTicket(w, r, next, repl, s, placed)
}
