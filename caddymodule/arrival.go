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

// The arrival path: a request without a valid token is given a place in
// the queue, after the join rate, the challenge and the pre-queue allow it.

// serveArrival gives a request without a valid token its place in the
// queue. presented tells whether it carried a token nonetheless (expired,
// forged, of an older key).
//
// With a join rate, a client over it is told when to come back (429) before
// anything else; with a challenge, an arrival without a valid solution gets
// one; before the opening, one with a solution (or without a challenge)
// enters the pre-queue.
func (h *Handler) serveArrival(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *placeholders, s waitroom.State, presented bool, solution string) error {
	user := h.requestUser(repl)
	// An account (a user id from the site) holds one position per event.
	account := user != ""
	if account {
		// An account done with its purchase, on another device or with
		// another token, is itself, sold out or not: passed on to its
		// bookings, told it is done everywhere else, for as long as its
		// revocation lasts (not even a new place once it gave one up).
		if pos, revoked := h.room.room.SubjectRevoked(user); revoked {
			if h.isAfterPurchase(r, repl) {
				return h.passCompleted(w, r, next, repl, user, pos, "")
			}
			return h.completed(w, r, repl, pos)
		}
	}
	if s.SoldOut && h.availability(s).SoldOut {
		return h.soldOut(w, r, repl, 0, presented)
	}
	var client string
	if h.limiter != nil {
		client = clientKey(r)
		if ok, wait := h.limiter.ready(client, h.now()); !ok {
			return h.rateLimited(w, r, repl, wait)
		}
	}
	var solved waitroom.Solved
	if h.challenger != nil {
		var err error
		if solution == "" {
			return h.challenge(w, r, repl)
		}
		if solved, err = h.challenger.Verify(solution); err != nil {
			h.logger.Debug("challenge not solved", zap.Int64("event", h.Event), zap.Error(err))
			h.m.challengesFailed.Inc()
			return h.challenge(w, r, repl)
		}
	}
	if h.limiter != nil {
		if ok, wait := h.limiter.take(client, h.now()); !ok {
			return h.rateLimited(w, r, repl, wait)
		}
	}
	if h.challenger != nil {
		ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
		fresh, err := h.nonces.UseNonce(ctx, h.Event, solved.ID(), solved.ExpiresAt)
		cancel()
		if err != nil {
			return h.unavailable(w, r, repl, err)
		}
		if !fresh {
			h.logger.Debug("challenge solution used again", zap.Int64("event", h.Event))
			h.m.challengesFailed.Inc()
			return h.challenge(w, r, repl)
		}
	}
	if !account {
		user = waitroom.NewVisitorID()
	}
	if h.room.room.PreQueue() {
		ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
		err := h.room.room.Enter(ctx, user)
		cancel()
		switch {
		case err == nil:
			return h.enterPreQueue(w, r, repl, user, account)
		case !errors.Is(err, waitroom.ErrEntriesClosed):
			return h.unavailable(w, r, repl, err)
		}
		// The opening came meanwhile: a place after the entrants.
	}
	return h.join(w, r, next, repl, user, account, presented)
}

// join gives user the next position, or, for an account, the one it holds.
func (h *Handler) join(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *placeholders, user string, account, presented bool) error {
	var pos int64
	var handedOut time.Time
	var err error
	if account {
		ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
		pos, handedOut, _, err = h.room.room.JoinAccountAt(ctx, user, h.ttl)
		cancel()
	} else if at, ok := h.room.room.JoinAtHand(); ok {
		// No call to wait on, so no timer to set.
		pos, handedOut = at, h.now()
	} else {
		pos, err = h.room.room.JoinWithin(r.Context(), joinTimeout)
		handedOut = h.now()
	}
	if err != nil {
		// A store down, or one that lost the event's state and is having
		// it put back: never a position it might have handed out before.
		return h.unavailable(w, r, repl, err)
	}
	if _, revoked := h.room.room.SubjectRevoked(user); account && revoked {
		return h.completed(w, r, repl, pos)
	}
	h.m.arrivals.Inc()

	s := h.room.room.State()
	if s.BeyondCap(pos) {
		return h.soldOut(w, r, repl, pos, presented)
	}
	// The token tells when its position was handed out: now for a new
	// one, for an account's the moment the store kept (zero: unknown).
	t, err := h.issue(user, account, pos, handedOut, s)
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	h.giveToken(w, r, t)
	if s.Admits(pos) {
		return h.admit(w, r, next, repl, t)
	}
	h.room.room.Polled(pos)
	return h.wait(w, r, repl, s, t)
}
