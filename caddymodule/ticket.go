package caddymodule

import (
	"context"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/waitroom/waitroom/waitroom"
)

// The ticket path: a request with a valid queue token of the event is
// admitted, kept waiting or turned away by its position.

// What a valid token's position still gives its bearer.
type ticketHold int

const (
	// ticketHolds: the position is judged by the state (serveTicket).
	ticketHolds ticketHold = iota
	// ticketSpent: revoked, or its admission window ended; the bearer is
	// a new arrival at the back.
	ticketSpent
	// ticketCompleted: an account whose admission the site revoked.
	ticketCompleted
	// ticketRevoked: an anonymous visitor's position the site revoked:
	// spent, but on the buyer's pages after the purchase (after_purchase)
	// its bearer is completed, as an account is.
	ticketRevoked
)

// holds tells what t's position still gives: nothing once the site revoked
// it (an account: nothing at any position, for as long as its revocation
// lasts) or once its admission window ended. A pre-queue token is judged
// by the position it yielded, so it never admits where that position's
// token would not.
func (h *Handler) holds(r *http.Request, s waitroom.State, t waitroom.Ticket) ticketHold {
	account := h.isAccount(t)
	if takenBy, revoked := h.room.room.RevokedFor(t.Subject, t.Position); revoked {
		switch {
		case account:
			return ticketCompleted
		case takenBy != "":
			// An account took the place over (account.go): no purchase,
			// only a place no longer the token's.
			return ticketSpent
		}
		// An anonymous visitor may queue again, at the back.
		return ticketRevoked
	}
	if account {
		if _, revoked := h.room.room.SubjectRevoked(t.Subject); revoked {
			return ticketCompleted
		}
	}
	if s.Reached(t.Position) && h.windowOver(r, t) {
		// Its turn came and went: a place at the back. Paused too, as an
		// account's place is given up (Room.JoinAccountAt): otherwise the
		// bearer would wait at a place that no longer admits once entry
		// resumes.
		h.m.windowOver.Inc()
		return ticketSpent
	}
	return ticketHolds
}

// serveTicket answers a bearer of a valid token.
func (h *Handler) serveTicket(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *placeholders, s waitroom.State, t waitroom.Ticket) error {
	// Should the store lose its counter, it is put back above every
	// position a token proves was handed out.
	h.room.room.Seen(t.Position)
	switch {
	case s.Admits(t.Position):
		return h.admit(w, r, next, repl, h.renew(w, r, t))
	case s.BeyondCap(t.Position) || (s.SoldOut && t.Position > s.Watermark && h.availability(s).SoldOut):
		// Never to be admitted. A position at or below the watermark of a
		// paused, sold-out event waits instead: its holder may have seats
		// to pay for once entry resumes. While held seats may come back,
		// it is not sold out yet.
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
	if !h.room.room.AdmissionOverSince(t.Position, t.HandedOut) {
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

// isAccount tells whether t is an account's token (its user id from
// user_id) rather than an anonymous visitor's.
func (h *Handler) isAccount(t waitroom.Ticket) bool {
	return h.UserID != "" && t.IsAccount()
}

// issue signs a token with a position for user, an account's (marked so)
// or an anonymous visitor's, that tells when the position was handed out
// (zero: not known), so every gateway counts its admission window from
// the same moment. Only a token that s admits is remembered as verified.
func (h *Handler) issue(user string, account bool, pos int64, handedOut time.Time, s waitroom.State) (waitroom.Ticket, error) {
	t, err := h.keys.IssueHandedOut(user, h.Event, pos, account, handedOut, h.ttl)
	if err == nil && s.Admits(pos) {
		// Its page's requests follow within moments. A waiting token is
		// next shown at its poll, Retry-After (3 s at least) later: above
		// about 21,000 arrivals a second the cache has dropped it by then,
		// and remembering it was a write per arrival that pushed out the
		// tokens being shown (docs/scale.md).
		h.keys.Remember(t)
	}
	return t, err
}

// availability is what positions not yet admitted are answered by at
// state s: sold out once nothing can come back, or all held while seats
// in live holds may (docs/api.md §3); with sold_out_at_zero, sold out by
// the flag alone, as soon as no seat is left to hold.
func (h *Handler) availability(s waitroom.State) waitroom.Availability {
	inv, fresh := h.room.room.Inventory()
	a := waitroom.Judge(s, inv, fresh)
	if h.SoldOutAtZero {
		a.SoldOut = s.SoldOut
	}
	return a
}
