package origin

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seats"
	"github.com/waitroom/waitroom/waitroom"
)

func rawToken(r *http.Request, event int64) string {
	if t := strings.TrimSpace(r.Header.Get(waitroom.TokenHeader)); t != "" {
		return t
	}
	if c, err := r.Cookie(waitroom.CookieName(event)); err == nil {
		return c.Value
	}
	return ""
}

// hasAnyToken reports whether the request carries a queue token at all
// (header or any waitroom cookie), before the event it is for is known.
func hasAnyToken(r *http.Request) bool {
	if strings.TrimSpace(r.Header.Get(waitroom.TokenHeader)) != "" {
		return true
	}
	for _, c := range r.Cookies() {
		if strings.HasPrefix(c.Name, waitroom.CookiePrefix) {
			return true
		}
	}
	return false
}

// gate is who may do what: buyers by their queue token and the event's
// admission state, event staff by the admin token.
type gate struct {
	keys       *waitroom.KeySet
	adminToken string
	// flight shares one admission read among the requests asking at once.
	flight singleflight.Group
}

var errInvalidToken = errorResponse(http.StatusUnauthorized, "invalid_token", "a valid queue token for this event is required")

// notAdmitted is the refusal of a buyer whose position is not admitted,
// or, when the origin has never found the event's admission state in its
// Redis, the reason it cannot know: the gateway keeps its queue elsewhere
// (store memory, another Redis), so nobody would ever be admitted here.
func notAdmitted(ctx context.Context, ev *seats.Event) response {
	if !ev.Room().Known() {
		ctx, cancel := context.WithTimeout(ctx, judgeTimeout)
		defer cancel()
		if _, err := ev.Room().Refresh(ctx); err != nil {
			// The store did not answer: nothing is known either way.
			return errUnavailable
		}
	}
	if !ev.Room().Known() {
		return errAdmissionUnknown
	}
	// Not "yet": a holder whose place the staff set the watermark back
	// below is refused its payment with this too (docs/gateway.md).
	return errorResponse(http.StatusForbidden, "not_admitted", "your place in the queue is not admitted: it is above the event's watermark or beyond its hard cap")
}

var errAdmissionUnknown = errorResponse(http.StatusForbidden, "admission_unknown",
	"the origin has never seen this event's admission state in its Redis: the gateway must keep its queue "+
		"in the origin's Redis (store redis://… in its waitroom block, the origin's REDIS_URL) for the same event id")

// ticket verifies the request's queue token for event.
func (g *gate) ticket(r *http.Request, event int64) (waitroom.Ticket, *response) {
	t, err := g.verify(r, event)
	if err != nil {
		return waitroom.Ticket{}, &errInvalidToken
	}
	return t, nil
}

// ownerTicket is ticket for a buyer's own hold or booking of event: a valid
// token of another event is the caller of another user's, answered
// notYours (404) as that one is, since to that caller the resource does
// not exist; only a caller without a valid token is 401.
func (g *gate) ownerTicket(r *http.Request, event int64, notYours response) (waitroom.Ticket, *response) {
	t, err := g.verify(r, event)
	switch {
	case errors.Is(err, waitroom.ErrWrongEvent):
		return waitroom.Ticket{}, &notYours
	case err != nil:
		return waitroom.Ticket{}, &errInvalidToken
	}
	return t, nil
}

func (g *gate) verify(r *http.Request, event int64) (waitroom.Ticket, error) {
	raw := rawToken(r, event)
	if raw == "" {
		return waitroom.Ticket{}, waitroom.ErrInvalidToken
	}
	return g.keys.Verify(raw, event)
}

// admitted decides from memory, like the gateway; only a "no" is checked
// against the store, so a watermark raised a moment ago is honoured at once.
func (g *gate) admitted(ctx context.Context, ev *seats.Event, position int64) bool {
	return g.judge(ctx, ev, func(st waitroom.State) bool { return st.Admits(position) })
}

// reachedWatermark is the admission check for buyers who already hold seats:
// their position must be at or below the watermark, but a pause
// or the hard cap must not stop them from paying.
func (g *gate) reachedWatermark(ctx context.Context, ev *seats.Event, position int64) bool {
	return g.judge(ctx, ev, func(st waitroom.State) bool { return position <= st.Watermark })
}

// pausedOnly reports whether position would be admitted but for a pause
// of the sale: a wait, not a refusal.
func pausedOnly(ev *seats.Event, position int64) bool {
	st := ev.Room().State()
	return st.Paused && position <= st.Watermark && !st.BeyondCap(position)
}

// judgeTimeout bounds the store read of an admission check shared by every
// request waiting on it.
const judgeTimeout = 2 * time.Second

func (g *gate) judge(ctx context.Context, ev *seats.Event, ok func(waitroom.State) bool) bool {
	if ok(ev.Room().State()) {
		return true
	}
	// One read for every request asking at once, detached from the first
	// caller: a client that hangs up must not fail the others waiting on it.
	ch := g.flight.DoChan(fmt.Sprintf("state:%d", ev.ID), func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), judgeTimeout)
		defer cancel()
		return ev.Room().Refresh(ctx)
	})
	select {
	case <-ctx.Done():
		return false
	case r := <-ch:
		if r.Err != nil {
			return false
		}
		return ok(r.Val.(waitroom.State))
	}
}

// isAdmin checks the admin bearer token, answering 401 when it is wrong.
func (g *gate) isAdmin(w http.ResponseWriter, r *http.Request) bool {
	return bearer(w, r, g.adminToken, "admin")
}

// bearer checks that the request carries "Authorization: Bearer <token>",
// answering 401 when it does not; an empty token admits nobody.
func bearer(w http.ResponseWriter, r *http.Request, token, whose string) bool {
	if isToken(bearerToken(r), token) {
		return true
	}
	unauthorized(w, whose)
	return false
}

// bearerToken is the request's "Authorization: Bearer <token>", "" when
// it has none. The scheme's name is case-insensitive (RFC 9110 §11.1).
func bearerToken(r *http.Request) string {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(got)
}

// isToken compares in constant time; an empty token matches nothing.
func isToken(got, token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func unauthorized(w http.ResponseWriter, whose string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="waitroom-origin"`)
	writeError(w, http.StatusUnauthorized, "unauthorized", "a valid "+whose+" bearer token is required")
}

func contextWithTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}

// lookupFailed answers a failed event or hold lookup: 404 when it does not
// exist, 503 when the ledger cannot say.
func lookupFailed(w http.ResponseWriter, err error, what string) {
	if errors.Is(err, ledger.ErrNotFound) {
		writeError(w, http.StatusNotFound, "not_found", "no such "+what)
		return
	}
	writeResponse(w, errUnavailable)
}
