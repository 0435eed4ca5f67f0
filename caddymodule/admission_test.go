package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

// The admission rules of docs/api.md §3 that tie a position to
// when it was handed out, to its revocation and to the pre-queue token that
// yielded it, each through the handler: requests in, answers out.

// eachStore runs test on the memory store and on Redis, each with a clock
// the test moves (handler, room and store).
func eachStore(t *testing.T, test func(t *testing.T, h *Handler, clk *clock)) {
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			clk := useClock(t)
			h := &Handler{Event: testenv.EventID()}
			if name == "redis" {
				h.Store = testenv.RedisURL(t)
				setUpEvent(t, h.Store, h.Event)
			}
			test(t, h, clk)
		})
	}
}

// doAs is serve with the request's placeholders (user_id reads them) and a
// site that answers X-Waitroom-Command: revoke when revoke is set, as the
// origin does once the holder's booking is confirmed.
func doAs(t *testing.T, h *Handler, r *http.Request, revoke bool) result {
	t.Helper()
	repl := caddyhttp.NewTestReplacer(r)
	r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
	res := result{rec: httptest.NewRecorder(), repl: repl}
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		res.next = r
		if revoke {
			w.Header().Set(HeaderCommand, CommandRevoke)
		}
		_, err := w.Write([]byte("site"))
		return err
	})
	require.NoError(t, h.ServeHTTP(res.rec, r, next))
	return res
}

// do is an ordinary request.
func do(t *testing.T, h *Handler, r *http.Request) result {
	t.Helper()
	return doAs(t, h, r, false)
}

// serveRevoking is an admitted request whose answer revokes its token.
func serveRevoking(t *testing.T, h *Handler, r *http.Request) result {
	t.Helper()
	res := doAs(t, h, r, true)
	require.NotNil(t, res.next, "the revoking request was admitted: %s %s", res.status(), res.rec.Body.String())
	return res
}

// admittedAt is the position the site was told for an admitted answer, 0
// for any other.
func admittedAt(res result) int64 {
	if res.status() != StatusAdmitted || res.next == nil {
		return 0
	}
	pos, _ := strconv.ParseInt(res.next.Header.Get(HeaderPosition), 10, 64)
	return pos
}

// placedToken is the token with a position an answer gave.
func placedToken(t *testing.T, h *Handler, res result) (string, int64) {
	t.Helper()
	c := res.cookie(t, h.cookieName)
	require.NotNil(t, c, "the answer gives a token: %s %s", res.status(), res.rec.Body.String())
	tk, err := h.keys.Verify(c.Value, h.Event)
	require.NoError(t, err)
	return c.Value, tk.Position
}

// asUser makes r a request of the site's account user.
func asUser(r *http.Request, user string) *http.Request {
	r.Header.Set("X-User-ID", user)
	return r
}

// setWatermark sets the event's watermark as the admin API would (a
// configured one never overwrites the store's).
func setWatermark(t *testing.T, h *Handler, n int64) {
	t.Helper()
	update(t, h, waitroom.Change{SetWatermark: &n})
}

// refresh makes the room read the store now, as its poll would.
func refresh(t *testing.T, h *Handler) {
	t.Helper()
	_, err := h.room.room.Refresh(context.Background())
	require.NoError(t, err)
}

// provisionOpening provisions h with a drawn opening an hour ahead by clk.
func provisionOpening(t *testing.T, h *Handler, clk *clock) {
	t.Helper()
	h.LotterySeed = testSeed
	h.OpensAt = clk.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	provision(t, h)
}

// oneEntrantDrawn provisions h with an opening and watermark 1, enters r
// in the pre-queue, and moves clk past the opening: the draw's one entrant,
// admitted at position 1 once it shows the pre-queue token it returns.
func oneEntrantDrawn(t *testing.T, h *Handler, clk *clock, r *http.Request) string {
	t.Helper()
	provisionOpening(t, h, clk)
	setWatermark(t, h, 1)
	pre := preQueueEntrant(t, h, r)
	clk.Advance(time.Hour)
	return pre
}

// preQueueEntrant enters the pre-queue of h's opening and returns the
// pre-queue token.
func preQueueEntrant(t *testing.T, h *Handler, r *http.Request) string {
	t.Helper()
	res := do(t, h, r)
	require.Equal(t, StatusPreQueue, res.status(), res.rec.Body.String())
	c := res.cookie(t, h.cookieName)
	require.NotNil(t, c)
	return c.Value
}

// TestPreQueueTokenAfterRevocation: once the position drawn for a
// pre-queue token is revoked, the pre-queue token never admits again: an
// anonymous bearer queues at the back, an account is done (API.md §12).
func TestPreQueueTokenAfterRevocation(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.UserID = "{http.request.header.X-User-ID}"
		provisionOpening(t, h, clk)
		setWatermark(t, h, 2)
		anon := preQueueEntrant(t, h, get(h, ""))
		alice := preQueueEntrant(t, h, asUser(get(h, ""), "alice"))
		clk.Advance(time.Hour)

		for _, c := range []struct {
			name, pre, user string
		}{{"anonymous", anon, ""}, {"account", alice, "alice"}} {
			r := func() *http.Request { return asUser(withToken(h, c.pre), c.user) }
			if c.user == "" {
				r = func() *http.Request { return withToken(h, c.pre) }
			}
			res := serveRevoking(t, h, r())
			drawn := admittedAt(res)
			require.NotZero(t, drawn, "%s: its drawn place, within the watermark", c.name)

			res = do(t, h, r())
			assert.Zero(t, admittedAt(res), "%s: the pre-queue token of a revoked position admits again: %s at %s",
				c.name, res.status(), res.rec.Header().Get(HeaderToken))
			if c.user != "" {
				assert.Equal(t, StatusCompleted, res.status(), "%s", c.name)
			} else {
				_, pos := placedToken(t, h, res)
				assert.NotEqual(t, drawn, pos, "%s: a place at the back", c.name)
			}
		}
	})
}

// TestPreQueueTokenAfterItsWindow: a pre-queue token never admits once the
// admission window of the position drawn for it ended (API.md §12).
func TestPreQueueTokenAfterItsWindow(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		pre := oneEntrantDrawn(t, h, clk, get(h, ""))
		require.Equal(t, int64(1), admittedAt(do(t, h, withToken(h, pre))), "admitted at its drawn place")
		refresh(t, h)

		clk.Advance(DefaultAdmissionWindow + time.Second)
		refresh(t, h)
		res := do(t, h, withToken(h, pre))
		assert.Zero(t, admittedAt(res), "admitted after the window: %s", res.status())
		_, pos := placedToken(t, h, res)
		assert.Equal(t, int64(2), pos, "a place at the back")
		assert.Equal(t, StatusWaiting, res.status())
	})
}

// TestPauseShowsASpentPlaceAtTheBack: a place whose admission window ended
// is given up while the event is paused too, for an arrival's token and a
// pre-queue token's drawn place alike, as an account's is: the bearer waits
// at the back, not at a place that no longer admits once entry resumes.
func TestPauseShowsASpentPlaceAtTheBack(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		provisionOpening(t, h, clk)
		setWatermark(t, h, 2)
		pre := preQueueEntrant(t, h, get(h, ""))
		clk.Advance(time.Hour)
		drawn := admittedAt(do(t, h, withToken(h, pre)))
		require.NotZero(t, drawn, "admitted at its drawn place")
		res := do(t, h, get(h, ""))
		tok, pos := placedToken(t, h, res)
		require.Equal(t, pos, admittedAt(res), "an arrival admitted at once")
		refresh(t, h)

		clk.Advance(DefaultAdmissionWindow + time.Second)
		update(t, h, waitroom.Change{Paused: ptr(true)})
		refresh(t, h)
		for _, c := range []struct {
			name, token string
			was         int64
		}{{"arrival's token", tok, pos}, {"pre-queue token", pre, drawn}} {
			res := do(t, h, withToken(h, c.token))
			body := res.waiting(t)
			assert.Greater(t, body.Position, int64(2), "%s: its place at %d given up, a place at the back", c.name, c.was)
			assert.True(t, body.Paused, "%s", c.name)
		}

		// Once entry resumes, nobody passes on the spent places.
		update(t, h, waitroom.Change{Paused: ptr(false)})
		refresh(t, h)
		for _, token := range []string{tok, pre} {
			assert.Zero(t, admittedAt(do(t, h, withToken(h, token))))
		}
	})
}

// TestPauseStopsTheWindow: the admission window runs only while entry is
// open. A place the watermark reached during a long pause, and one
// admitted just before it, are both kept, their pages polling, until entry
// has been open for the window; then they are spent.
func TestPauseStopsTheWindow(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		provision(t, h)
		setWatermark(t, h, 1)
		tokens := map[string]string{}
		tokens["first"], _ = placedToken(t, h, do(t, h, get(h, "")))
		var pos int64
		tokens["second"], pos = placedToken(t, h, do(t, h, get(h, "")))
		require.Equal(t, int64(2), pos)
		// poll is a page's poll: it carries the last token an answer gave.
		poll := func(who string) result {
			res := do(t, h, withToken(h, tokens[who]))
			if c := res.cookie(t, h.cookieName); c != nil {
				tokens[who] = c.Value
			}
			return res
		}
		refresh(t, h)

		clk.Advance(DefaultAdmissionWindow - time.Minute)
		update(t, h, waitroom.Change{Paused: ptr(true)})
		update(t, h, waitroom.Change{RaiseBy: 1})
		for range 6 {
			clk.Advance(5 * time.Minute)
			refresh(t, h)
			for want, who := range []string{"first", "second"} {
				body := poll(who).waiting(t)
				assert.Equal(t, int64(want+1), body.Position, "%s keeps its place while paused", who)
				assert.True(t, body.Paused, "%s", who)
			}
		}

		update(t, h, waitroom.Change{Paused: ptr(false)})
		refresh(t, h)
		assert.Equal(t, int64(1), admittedAt(poll("first")), "a minute of its window left")
		assert.Equal(t, int64(2), admittedAt(poll("second")), "its whole window ahead")

		clk.Advance(time.Minute)
		refresh(t, h)
		_, again := placedToken(t, h, poll("first"))
		assert.Greater(t, again, int64(2), "its window ran out once entry was open again")
		assert.Equal(t, int64(2), admittedAt(poll("second")))
		clk.Advance(DefaultAdmissionWindow - time.Minute)
		refresh(t, h)
		_, again = placedToken(t, h, poll("second"))
		assert.Greater(t, again, int64(2))
	})
}

// TestWindowStartsAtHandout: with the watermark set ahead of arrivals, a
// later arrival's window starts when it is handed its position, not when
// the watermark passed that position before anyone held it.
func TestWindowStartsAtHandout(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		provision(t, h)
		setWatermark(t, h, 10)
		clk.Advance(DefaultAdmissionWindow + time.Minute)
		refresh(t, h)

		res := do(t, h, get(h, ""))
		tok, pos := placedToken(t, h, res)
		require.Equal(t, int64(1), pos)
		require.Equal(t, pos, admittedAt(res))
		res = do(t, h, get(h, tok))
		assert.Equal(t, pos, admittedAt(res), "sent to the back on its next request")
		refresh(t, h)

		clk.Advance(DefaultAdmissionWindow - time.Second)
		refresh(t, h)
		assert.Equal(t, pos, admittedAt(do(t, h, get(h, tok))), "within its window")
		clk.Advance(2 * time.Second)
		refresh(t, h)
		res = do(t, h, get(h, tok))
		_, again := placedToken(t, h, res)
		assert.Equal(t, int64(2), again, "its window over: the back of the queue")
	})
}

// TestDrawnEntrantsBelowTheWatermarkKeepTheirPlace: at an opening, an
// entrant drawn below a watermark set long before keeps its place for the
// window from the opening.
func TestDrawnEntrantsBelowTheWatermarkKeepTheirPlace(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		provisionOpening(t, h, clk)
		setWatermark(t, h, 5)
		var pres []string
		for range 3 {
			pres = append(pres, preQueueEntrant(t, h, get(h, "")))
		}
		clk.Advance(time.Hour)
		for _, pre := range pres {
			res := do(t, h, withToken(h, pre))
			tok, pos := placedToken(t, h, res)
			require.Equal(t, pos, admittedAt(res))
			clk.Advance(time.Minute)
			res = do(t, h, get(h, tok))
			assert.Equal(t, pos, admittedAt(res), "the drawn entrant lost its place: %s", res.status())
		}
	})
}

// TestPreQueueTokenYieldsOnePosition: a pre-queue token the draw has no
// place for, or whose opening was taken out of the config, yields one
// position, ever, however often it is presented: never a fresh one per
// request, which would skip the challenge and the join rate.
func TestPreQueueTokenYieldsOnePosition(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.Challenge = 4
		h.JoinRate = &JoinRate{Joins: 1, Per: caddy.Duration(time.Hour)}
		provision(t, h)
		setWatermark(t, h, 1)
		pre, err := h.keys.IssuePreQueue("v_0123456789abcdef", h.Event, clk.Now().Add(time.Hour))
		require.NoError(t, err)

		first := do(t, h, withToken(h, pre.Raw))
		_, pos := placedToken(t, h, first)
		for range 3 {
			res := do(t, h, withToken(h, pre.Raw))
			if c := res.cookie(t, h.cookieName); c != nil {
				tk, err := h.keys.Verify(c.Value, h.Event)
				require.NoError(t, err)
				assert.Equal(t, pos, tk.Position, "a fresh position for the same pre-queue token")
			}
		}
		assert.Equal(t, pos, h.room.room.State().LastPosition, "one position handed out")
	})
}

// TestPreQueueTokenNotInTheDrawYieldsOnePosition: the same for a token of
// an opening whose draw has no record of its bearer.
func TestPreQueueTokenNotInTheDrawYieldsOnePosition(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		provisionOpening(t, h, clk)
		setWatermark(t, h, 1)
		_ = preQueueEntrant(t, h, get(h, ""))
		stranger, err := h.keys.IssuePreQueue("v_notanentrant00000000", h.Event, h.opensAt.Add(h.ttl))
		require.NoError(t, err)
		clk.Advance(time.Hour)

		_, pos := placedToken(t, h, do(t, h, withToken(h, stranger.Raw)))
		assert.Equal(t, int64(2), pos, "after the entrant")
		for range 3 {
			_, again := placedToken(t, h, do(t, h, withToken(h, stranger.Raw)))
			assert.Equal(t, pos, again, "a fresh position for the same pre-queue token")
		}
	})
}

// TestPreQueueTokenPlacedFromALeaseKeepsItsPlace: a pre-queue token placed
// at the back from a block of positions leased long before keeps its place
// when it is shown again: its window counts from the handout the store
// recorded with the place, not from when the gateway saw the counter pass
// it (defect: the second presentation found the place's window over at
// once and handed the token a second position, its first place lost).
func TestPreQueueTokenPlacedFromALeaseKeepsItsPlace(t *testing.T) {
	clk := useClock(t)
	h := &Handler{Event: testenv.EventID(), Store: testenv.RedisURL(t), Lease: 2}
	setUpEvent(t, h.Store, h.Event)
	provision(t, h)
	setWatermark(t, h, 5)
	_, first := placedToken(t, h, do(t, h, get(h, "")))
	require.Equal(t, int64(1), first, "leases 1 and 2")
	refresh(t, h)
	clk.Advance(DefaultAdmissionWindow + time.Minute)
	refresh(t, h)

	pre, err := h.keys.IssuePreQueue("v_0123456789abcdef", h.Event, clk.Now().Add(time.Hour))
	require.NoError(t, err)
	res := do(t, h, withToken(h, pre.Raw))
	require.Equal(t, int64(2), admittedAt(res), "the lease's second position, handed out now")
	for range 2 {
		clk.Advance(time.Minute)
		res = do(t, h, withToken(h, pre.Raw))
		assert.Equal(t, int64(2), admittedAt(res), "its place kept: %s %s", res.status(), res.rec.Body.String())
	}
}

// TestAccountRevocationOutlivesTheWindow: an account's revocation holds
// for token_ttl + 1 minute (docs/api.md §3), past its admission window: a
// new device of the account is told it is done, not given a new place.
func TestAccountRevocationOutlivesTheWindow(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.UserID = "{http.request.header.X-User-ID}"
		provision(t, h)
		setWatermark(t, h, 1)
		res := do(t, h, asUser(get(h, ""), "alice"))
		tok, pos := placedToken(t, h, res)
		require.Equal(t, pos, admittedAt(res))
		serveRevoking(t, h, asUser(get(h, tok), "alice"))
		revokedAt := clk.Now()

		clk.Advance(DefaultAdmissionWindow + time.Minute)
		refresh(t, h)
		res = do(t, h, asUser(get(h, ""), "alice"))
		assert.Equal(t, StatusCompleted, res.status(), "a new device after the window: %s %s", res.status(), res.rec.Body.String())
		res = do(t, h, asUser(get(h, tok), "alice"))
		assert.Equal(t, StatusCompleted, res.status(), "the revoked token after the window")

		clk.Advance(revokedAt.Add(DefaultTokenTTL + revokeLeeway).Sub(clk.Now()))
		refresh(t, h)
		res = do(t, h, asUser(get(h, ""), "alice"))
		assert.Equal(t, StatusWaiting, res.status(), "the revocation ended: a place at the back")
	})
}

// TestAccountWithAVisitorLikeID: an account whose id starts as an
// anonymous visitor's does (v_) is still an account: its token's renewals
// keep its one position, so a new device of it gets that position, and a
// pre-queue token of it yields the account's position.
func TestAccountWithAVisitorLikeID(t *testing.T) {
	const user = "v_bob"
	t.Run("renewals keep its position", func(t *testing.T) {
		clk := useClock(t)
		h := provision(t, &Handler{UserID: "{http.request.header.X-User-ID}"})
		res := do(t, h, asUser(get(h, ""), user))
		tok, pos := placedToken(t, h, res)
		tk, err := h.keys.Verify(tok, h.Event)
		require.NoError(t, err)
		assert.True(t, tk.Account, "the token says it is an account's")
		// The store's entry of the account lapses (it lives token_ttl from
		// its last claim, by the store's own clock); the renewal of its
		// token claims the position again.
		require.NoError(t, h.room.room.Store().(waitroom.AccountStore).ForgetAccount(context.Background(), h.Event, user))
		clk.Advance(h.ttl/2 + time.Second)
		res = do(t, h, asUser(get(h, tok), user))
		require.Equal(t, pos, res.waiting(t).Position)
		require.NotNil(t, res.cookie(t, h.cookieName), "renewed")

		res = do(t, h, asUser(get(h, ""), user))
		assert.Equal(t, pos, res.waiting(t).Position, "a new device of the account: its one position")
	})
	t.Run("its pre-queue token yields the account's position", func(t *testing.T) {
		clk := useClock(t)
		h := provision(t, &Handler{UserID: "{http.request.header.X-User-ID}"})
		_, pos := placedToken(t, h, do(t, h, asUser(get(h, ""), user)))
		do(t, h, get(h, "")) // another arrival
		pre, err := h.keys.IssuePreQueueAccount(user, h.Event, clk.Now().Add(time.Hour))
		require.NoError(t, err)
		_, got := placedToken(t, h, do(t, h, asUser(withToken(h, pre.Raw), user)))
		assert.Equal(t, pos, got, "the opening taken out of the config: the account's one position")
	})
}

// TestRevocationOnAnotherGatewayAfterOnePoll: a revocation made on one
// gateway ends the token's admission on another at its next poll, without
// Redis's change notice (docs/api.md §3: within a poll).
func TestRevocationOnAnotherGatewayAfterOnePoll(t *testing.T) {
	useClock(t)
	store := testenv.RedisURL(t)
	ev := testenv.EventID()
	setUpEvent(t, store, ev)
	a := provision(t, &Handler{Event: ev, Store: store})
	b := provision(t, &Handler{Event: ev, Store: store, Lease: 2})
	setWatermark(t, a, 1)
	tok, pos := placedToken(t, a, do(t, a, get(a, "")))
	require.Equal(t, int64(1), pos)
	refresh(t, b)
	require.Equal(t, pos, admittedAt(do(t, b, get(b, tok))), "admitted on the other gateway before the revocation")

	serveRevoking(t, a, get(a, tok))
	refresh(t, b)
	res := do(t, b, get(b, tok))
	assert.Zero(t, admittedAt(res), "the other gateway admits a revoked token after a poll")
	_, again := placedToken(t, b, res)
	assert.Equal(t, int64(2), again, "a new arrival at the back")
}

// TestAccountRevocationOnAnotherGateway: a gateway sharing the store holds
// an account's revocation past its window as the one that saw it does.
func TestAccountRevocationOnAnotherGateway(t *testing.T) {
	clk := useClock(t)
	store := testenv.RedisURL(t)
	ev := testenv.EventID()
	setUpEvent(t, store, ev)
	a := provision(t, &Handler{Event: ev, Store: store, UserID: "{http.request.header.X-User-ID}"})
	// Another lease: another store client and room, as on another node.
	b := provision(t, &Handler{Event: ev, Store: store, Lease: 2, UserID: "{http.request.header.X-User-ID}"})
	setWatermark(t, a, 1)
	res := do(t, a, asUser(get(a, ""), "alice"))
	tok, pos := placedToken(t, a, res)
	require.Equal(t, pos, admittedAt(res))
	serveRevoking(t, a, asUser(get(a, tok), "alice"))

	clk.Advance(DefaultAdmissionWindow + time.Minute)
	refresh(t, a)
	refresh(t, b)
	for name, h := range map[string]*Handler{"a": a, "b": b} {
		assert.Equal(t, StatusCompleted, do(t, h, asUser(get(h, ""), "alice")).status(), "a new device at %s", name)
		assert.Equal(t, StatusCompleted, do(t, h, asUser(get(h, tok), "alice")).status(), "the token at %s", name)
	}
}

// TestOnePlaceTakenOverOnceInAFleet: an anonymous place becomes one
// account's, also when a second account signs in with the same token at a
// gateway that has not yet heard of the first take-over (and so of its
// revocation of the token): the store decides, and the second arrives as
// itself.
func TestOnePlaceTakenOverOnceInAFleet(t *testing.T) {
	useClock(t)
	store := testenv.RedisURL(t)
	ev := testenv.EventID()
	setUpEvent(t, store, ev)
	a := provision(t, &Handler{Event: ev, Store: store, UserID: "{http.request.header.X-User-ID}"})
	// Another lease: another store client and room, as on another node.
	b := provision(t, &Handler{Event: ev, Store: store, Lease: 2, UserID: "{http.request.header.X-User-ID}"})
	setWatermark(t, a, 0)
	anon, p := placedToken(t, a, do(t, a, get(a, "")))

	_, pos := placedToken(t, a, do(t, a, asUser(get(a, anon), "alice")))
	require.Equal(t, p, pos, "alice signed in while waiting: her place")
	_, pos = placedToken(t, b, do(t, b, asUser(get(b, anon), "bob")))
	assert.NotEqual(t, p, pos, "bob, with the same token at another gateway: a place of his own")
	_, again := placedToken(t, a, do(t, a, asUser(get(a, ""), "alice")))
	assert.Equal(t, p, again, "alice keeps hers")
	_, again = placedToken(t, b, do(t, b, asUser(get(b, anon), "alice")))
	assert.Equal(t, p, again, "alice again with the token, at the other gateway")
}

// TestAccountEntrantAfterItsWindow: an account's drawn position, once its
// window ended, is given up as any account's is: neither its pre-queue token
// nor a new device of it is admitted there again.
func TestAccountEntrantAfterItsWindow(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.UserID = "{http.request.header.X-User-ID}"
		pre := oneEntrantDrawn(t, h, clk, asUser(get(h, ""), "alice"))
		require.Equal(t, int64(1), admittedAt(do(t, h, asUser(withToken(h, pre), "alice"))), "admitted at its drawn place")
		refresh(t, h)

		clk.Advance(DefaultAdmissionWindow + time.Second)
		refresh(t, h)
		for _, c := range []struct {
			name string
			r    func() *http.Request
		}{
			{"a new device", func() *http.Request { return asUser(get(h, ""), "alice") }},
			{"its pre-queue token", func() *http.Request { return asUser(withToken(h, pre), "alice") }},
			{"a new device, again", func() *http.Request { return asUser(get(h, ""), "alice") }},
			{"its pre-queue token, again", func() *http.Request { return asUser(withToken(h, pre), "alice") }},
		} {
			name, r := c.name, c.r
			res := do(t, h, r())
			assert.Zero(t, admittedAt(res), "%s: admitted at its drawn place after its window", name)
			_, pos := placedToken(t, h, res)
			assert.Equal(t, int64(2), pos, "%s: the account's place at the back", name)
		}
	})
}

// TestPreQueueAccountTokenAfterTheOpeningWasRemoved: an account's pre-queue
// token whose opening was taken out of the config is answered by the
// position the account took from the draw, as that position's token would
// be (waiting, in a paused sold-out event whose watermark passed it), not
// turned away as a stranger to a sold-out event.
func TestPreQueueAccountTokenAfterTheOpeningWasRemoved(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.UserID = "{http.request.header.X-User-ID}"
		provisionOpening(t, h, clk)
		pre := preQueueEntrant(t, h, asUser(get(h, ""), "bob"))
		clk.Advance(time.Hour)
		_, pos := placedToken(t, h, do(t, h, asUser(withToken(h, pre), "bob")))
		require.Equal(t, int64(1), pos, "the draw's one entrant")

		// A reload without the opening; then the event sells out, paused.
		reloaded := provision(t, &Handler{Event: h.Event, Store: h.Store, UserID: h.UserID})
		update(t, reloaded, waitroom.Change{SetWatermark: ptr[int64](3), Paused: ptr(true), SoldOut: ptr(true)})
		refresh(t, reloaded)

		res := do(t, reloaded, asUser(withToken(reloaded, pre), "bob"))
		assert.Equal(t, StatusWaiting, res.status(), res.rec.Body.String())
		_, again := placedToken(t, reloaded, res)
		assert.Equal(t, pos, again, "the position the token yielded")
	})
}

// TestReloadKeepsSpentPlacesSpent: a reload that changes the room's
// configuration (here it takes the opening out) makes a new room, which
// takes over what the old one saw: a place whose window ended is not
// admitted again, by its token or by the pre-queue token that yielded it
// (defect: the new room counted every admitted position from its first
// read, so both admitted again; docs/api.md §3).
func TestReloadKeepsSpentPlacesSpent(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		pre := oneEntrantDrawn(t, h, clk, get(h, ""))
		res := do(t, h, withToken(h, pre))
		tok, pos := placedToken(t, h, res)
		require.Equal(t, pos, admittedAt(res), "the draw's one entrant")
		clk.Advance(DefaultAdmissionWindow + time.Minute)
		refresh(t, h)

		reloaded := provision(t, &Handler{Event: h.Event, Store: h.Store})
		refresh(t, reloaded)
		for _, c := range []struct{ name, raw string }{{"token", tok}, {"pre-queue token", pre}} {
			res := do(t, reloaded, withToken(reloaded, c.raw))
			assert.Equal(t, StatusWaiting, res.status(), "%s: %s", c.name, res.rec.Body.String())
			_, again := placedToken(t, reloaded, res)
			assert.Greater(t, again, pos, "%s: its place given up, a new one at the back", c.name)
		}
	})
}

// TestPreQueueTokenOfTheDrawAfterTheOpeningWasRemoved: an anonymous
// entrant's pre-queue token yields the position the draw gave it, and the
// same one once the opening was taken out of the config, never a second.
func TestPreQueueTokenOfTheDrawAfterTheOpeningWasRemoved(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		provisionOpening(t, h, clk)
		pre := preQueueEntrant(t, h, get(h, ""))
		clk.Advance(time.Hour)
		_, pos := placedToken(t, h, do(t, h, withToken(h, pre)))
		require.Equal(t, int64(1), pos, "the draw's one entrant")

		reloaded := provision(t, &Handler{Event: h.Event, Store: h.Store})
		refresh(t, reloaded)
		_, again := placedToken(t, reloaded, do(t, reloaded, withToken(reloaded, pre)))
		assert.Equal(t, pos, again, "the position the token yielded")
	})
}

// TestRevocationFlushedBeforeTheStatus: a site that flushes its answer
// before writing a status sends its header with an implicit 200; the
// command is taken off it and carried out all the same.
func TestRevocationFlushedBeforeTheStatus(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		provision(t, h)
		setWatermark(t, h, 1)
		tok, _ := placedToken(t, h, do(t, h, at(h, "/buy", "")))

		r := at(h, "/buy", tok)
		repl := caddyhttp.NewTestReplacer(r)
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
		rec := httptest.NewRecorder()
		next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set(HeaderCommand, CommandRevoke)
			if err := http.NewResponseController(w).Flush(); err != nil {
				return err
			}
			_, err := w.Write([]byte("site"))
			return err
		})
		require.NoError(t, h.ServeHTTP(rec, r, next))
		assert.Equal(t, http.StatusOK, rec.Code)
		assert.True(t, rec.Flushed)
		assert.Empty(t, rec.Result().Header.Values(HeaderCommand), "the flushed header carries no command")

		res := do(t, h, at(h, "/buy", tok))
		assert.Nil(t, res.next, "the command was carried out: %s", res.status())
	})
}

// TestASignedInVisitorIsItsAccount: with user_id, one position per account
// (docs/api.md §7) holds whatever token the account presents. An anonymous
// token's place becomes the account's once, when it holds none yet (the
// visitor signed in while waiting), and then admits no one else; another
// anonymous token, or another account's, gives the account nothing but its
// own place; and it is admitted as itself.
func TestASignedInVisitorIsItsAccount(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.UserID = "{http.request.header.X-User-ID}"
		provision(t, h)
		setWatermark(t, h, 0)
		anon1, p1 := placedToken(t, h, do(t, h, get(h, "")))
		anon2, p2 := placedToken(t, h, do(t, h, get(h, "")))
		require.Equal(t, []int64{1, 2}, []int64{p1, p2})

		res := do(t, h, asUser(get(h, anon2), "alice"))
		alice, pos := placedToken(t, h, res)
		assert.Equal(t, p2, pos, "alice signed in while waiting at %d: her place", p2)
		tk, err := h.keys.Verify(alice, h.Event)
		require.NoError(t, err)
		assert.Equal(t, "alice", tk.Subject, "the token given is alice's")

		_, pos = placedToken(t, h, do(t, h, asUser(get(h, anon1), "alice")))
		assert.Equal(t, p2, pos, "another anonymous token: alice's one place, not a second")
		_, pos = placedToken(t, h, do(t, h, asUser(get(h, ""), "alice")))
		assert.Equal(t, p2, pos, "a new device of alice")

		_, pos = placedToken(t, h, do(t, h, get(h, anon2)))
		assert.Greater(t, pos, p2, "the token alice took the place of admits no one else there: a new arrival")
		res = do(t, h, get(h, anon1))
		assert.Equal(t, p1, res.waiting(t).Position, "the token alice did not take keeps its place")

		_, pos = placedToken(t, h, do(t, h, asUser(get(h, alice), "bob")))
		assert.NotEqual(t, p2, pos, "bob with alice's token: a place of his own")
		_, again := placedToken(t, h, do(t, h, asUser(get(h, ""), "bob")))
		assert.Equal(t, pos, again, "bob holds that one place")

		setWatermark(t, h, 2)
		refresh(t, h)
		res = do(t, h, asUser(get(h, anon1), "alice"))
		require.Equal(t, p2, admittedAt(res), "alice admitted at her place: %s %s", res.status(), res.rec.Body.String())
		assert.Equal(t, "alice", res.next.Header.Get(HeaderUser), "admitted as herself")
		res = do(t, h, get(h, anon1))
		assert.Equal(t, p1, admittedAt(res), "the anonymous token alice did not take")
		assert.NotEqual(t, "alice", res.next.Header.Get(HeaderUser))
	})
}

// TestASignedInVisitorWithAPlaceIsNotAskedAgain: an account that holds a
// place, back with an anonymous token, gets that place without the
// challenge again: the token proves the visitor was let in once.
func TestASignedInVisitorWithAPlaceIsNotAskedAgain(t *testing.T) {
	useClock(t)
	h := provision(t, &Handler{Challenge: 4, UserID: "{http.request.header.X-User-ID}"})
	solved := func(r *http.Request) *http.Request {
		ch := decode[challengeBody](t, serve(t, h, get(h, "")))
		r.Header.Set(HeaderSolution, waitroom.Solve(ch.Challenge, 4))
		return r
	}
	_, held := placedToken(t, h, do(t, h, solved(asUser(get(h, ""), "alice"))))
	anon, p := placedToken(t, h, do(t, h, solved(get(h, ""))))
	require.NotEqual(t, held, p)

	res := do(t, h, asUser(get(h, anon), "alice"))
	require.NotEqual(t, StatusChallenge, res.status(), "asked again: %s", res.rec.Body.String())
	_, got := placedToken(t, h, res)
	assert.Equal(t, held, got, "alice's place")
}

// TestASignedInEntrantKeepsItsDrawnPlace: an account the draw gave a place
// holds that one; signed in with an anonymous token, it takes nothing
// over, and the token keeps its place.
func TestASignedInEntrantKeepsItsDrawnPlace(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.UserID = "{http.request.header.X-User-ID}"
		oneEntrantDrawn(t, h, clk, asUser(get(h, ""), "alice"))
		anon, p := placedToken(t, h, do(t, h, get(h, "")))
		require.Equal(t, int64(2), p, "after the draw's one entrant")

		res := do(t, h, asUser(get(h, anon), "alice"))
		assert.Equal(t, int64(1), admittedAt(res), "alice's drawn place: %s %s", res.status(), res.rec.Body.String())
		assert.Equal(t, "alice", res.next.Header.Get(HeaderUser))
		res = do(t, h, get(h, anon))
		assert.Equal(t, p, res.waiting(t).Position, "the anonymous token keeps its place")
	})
}
