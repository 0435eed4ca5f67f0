package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/waitroom/waitroom/waitroom"
)

// The buyer's pages after the purchase (after_purchase, docs/api.md §3).
// The site revokes a buyer's token once the booking is confirmed, so the
// queue's place is not used twice; without these paths the buyer's next
// request would be a new arrival, its cookie replaced, and the booking and
// its tickets out of reach behind the waiting page. On these paths alone a
// completed visitor (a token the site revoked, an account whose position
// is completed) is passed on, as itself, and told so.

// The receipt: with after_purchase, a buyer whose token the site revoked
// also gets that token in a second cookie (receiptSuffix), for as long as
// the token lives. Should a click elsewhere make the buyer a new arrival,
// whose token replaces the queue cookie, the buyer's pages still pass it
// on as the buyer it was, unless its newer token is admitted there.

// receiptSuffix follows the queue cookie's name in the receipt's.
const receiptSuffix = "_done"

// giveReceipt hands the buyer t, the token the site is revoking, as its
// receipt.
func (h *Handler) giveReceipt(w http.ResponseWriter, r *http.Request, t waitroom.Ticket) {
	life := t.ExpiresAt.Sub(h.now())
	if len(h.afterPurchase) == 0 || t.Raw == "" || life < time.Second {
		return
	}
	c := http.Cookie{Name: h.cookieName + receiptSuffix, Value: t.Raw, Path: "/", MaxAge: int(life / time.Second),
		HttpOnly: true, Secure: h.secure(r), SameSite: http.SameSiteLaxMode}
	w.Header().Add("Set-Cookie", c.String())
}

// receipt is the token of r's receipt, while the site's revocation of it
// lasts (ok false: none).
func (h *Handler) receipt(r *http.Request) (t waitroom.Ticket, ok bool) {
	// Nearly no request has one: it is looked for before the cookies are
	// parsed, which every waiting poll would pay for.
	name := h.cookieName + receiptSuffix
	if !slices.ContainsFunc(r.Header["Cookie"], func(v string) bool { return strings.Contains(v, name) }) {
		return t, false
	}
	c, err := r.Cookie(name)
	if err != nil {
		return t, false
	}
	if t, err = h.keys.Verify(c.Value, h.Event); err != nil || t.PreQueue {
		return t, false
	}
	takenBy, revoked := h.room.room.RevokedFor(t.Subject, t.Position)
	return t, revoked && takenBy == ""
}

// byReceipt tells whether r, for one of the buyer's pages, is passed on by
// its receipt: it has one, and its queue token (t, when ok) is not admitted
// there.
func (h *Handler) byReceipt(r *http.Request, repl *placeholders, s waitroom.State, t waitroom.Ticket, ok bool) (waitroom.Ticket, bool) {
	if len(h.afterPurchase) == 0 {
		return waitroom.Ticket{}, false
	}
	done, has := h.receipt(r)
	if !has || !h.isAfterPurchase(r, repl) {
		return waitroom.Ticket{}, false
	}
	if ok && !t.PreQueue && s.Admits(t.Position) && h.holds(r, s, t) == ticketHolds {
		return waitroom.Ticket{}, false
	}
	return done, true
}

// validateAfterPurchase checks the patterns as Caddy's path matcher will
// read them, so a pattern that could never match fails the load instead.
func validateAfterPurchase(patterns []string) error {
	for i, p := range patterns {
		switch {
		case p == "":
			return fmt.Errorf("after_purchase: pattern %d is empty", i+1)
		case !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "*") && !strings.HasPrefix(p, "{"):
			return fmt.Errorf("after_purchase: %q is not a path: it must start with / (or * for a suffix)", p)
		case globbed(p):
			if _, err := path.Match(strings.ToLower(p), "/"); err != nil {
				return fmt.Errorf("after_purchase: %q is not a valid pattern: %w", p, err)
			}
		}
		if matchesEverything(p) {
			return fmt.Errorf("after_purchase: %q matches every path, which would pass a revoked visitor everywhere; name the buyer's pages (/bookings/*, /tickets)", p)
		}
	}
	return nil
}

// unrelatedPaths are paths of a site no buyer's page pattern names all of:
// its home, an event, the origin's holds, a page deep in a folder.
var unrelatedPaths = []string{"/", "/events/1", "/v1/events/1/holds", "/a/b/c.html"}

// matchesEverything tells whether pattern p matches every one of
// unrelatedPaths, as Caddy's path matcher reads it ("/*", "**", a
// placeholder of the path itself), so with it a revoked visitor would be
// passed on anywhere, its queue place used again.
func matchesEverything(p string) (all bool) {
	// A placeholder may read what only a served request has; one that
	// cannot be judged here is left to the operator.
	defer func() {
		if recover() != nil {
			all = false
		}
	}()
	m := caddyhttp.MatchPath{p}
	if err := m.Provision(caddy.Context{}); err != nil {
		return false
	}
	for _, u := range unrelatedPaths {
		r, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			return false
		}
		r = r.WithContext(context.WithValue(context.WithValue(r.Context(),
			caddyhttp.OriginalRequestCtxKey, *r), caddyhttp.VarsCtxKey, map[string]any{}))
		caddyhttp.NewTestReplacer(r)
		if ok, err := m.MatchWithError(r); !ok || err != nil {
			return false
		}
	}
	return true
}

// globbed tells whether Caddy's path matcher compares p with path.Match
// (its other forms, a prefix, a suffix, a substring, an escaped path or a
// placeholder, take any text).
func globbed(p string) bool {
	if strings.ContainsAny(p, "%{") {
		return false
	}
	switch n := strings.Count(p, "*"); {
	case n == 2 && strings.HasPrefix(p, "*") && strings.HasSuffix(p, "*"):
		return false
	case n == 1 && (strings.HasPrefix(p, "*") || strings.HasSuffix(p, "*")):
		return false
	}
	return true
}

// afterPurchaseMatcher is the path matcher of the patterns, provisioned on
// a copy so the config keeps what the operator wrote.
func afterPurchaseMatcher(ctx caddy.Context, patterns []string) (caddyhttp.MatchPath, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	m := caddyhttp.MatchPath(slices.Clone(patterns))
	if err := m.Provision(ctx); err != nil {
		return nil, fmt.Errorf("after_purchase: %w", err)
	}
	return m, nil
}

// isAfterPurchase tells whether r is for one of the buyer's pages.
func (h *Handler) isAfterPurchase(r *http.Request, repl *placeholders) bool {
	if len(h.afterPurchase) == 0 {
		return false
	}
	// The matcher reads the replacer from the request, as Caddy gives it.
	if _, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); !ok {
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl.Replacer))
	}
	ok, err := h.afterPurchase.MatchWithError(r)
	return ok && err == nil
}

// passCompleted passes a completed visitor on to one of the buyer's pages:
// its user id and position, and the token it came with (raw; none from a
// new device), which is neither renewed nor replaced, so the cookie stays
// the buyer's. The site is told it is completed (X-Waitroom-Status on the
// request too), and its command is taken off the answer but not carried
// out: there is no admission left to end.
func (h *Handler) passCompleted(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *placeholders, user string, pos int64, raw string) error {
	r.Header.Set(HeaderUser, user)
	if pos > 0 {
		r.Header.Set(HeaderPosition, strconv.FormatInt(pos, 10))
	}
	if raw != "" {
		r.Header.Set(HeaderToken, raw)
	}
	r.Header.Set(HeaderStatus, StatusCompleted)
	w.Header().Set(HeaderStatus, StatusCompleted)
	setPlaceholders(repl, StatusCompleted, pos)
	return h.passOn(w, r, next, waitroom.Ticket{}, true)
}
