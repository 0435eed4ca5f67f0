package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
	"github.com/waitroom/waitroom/waitroom/lottery"
)

const testSeed = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

// opening provisions h with a clock the test moves (handler and room) and
// an opening an hour ahead.
func opening(t *testing.T, h *Handler) (*Handler, *clock) {
	t.Helper()
	clk := useClock(t)
	if h.OpensAt == "" {
		h.OpensAt = clk.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	}
	return provision(t, h), clk
}

func decode[T any](t *testing.T, res result) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(res.rec.Body.Bytes(), &v), res.rec.Body.String())
	return v
}

// withToken is a JSON request carrying tok in the X-Waitroom-Token header.
func withToken(h *Handler, tok string) *http.Request {
	r := get(h, "")
	if tok != "" {
		r.Header.Set(HeaderToken, tok)
	}
	return r
}

// TestPreQueueAndTheDraw follows docs/opening.md on opens_at on one node: before
// the opening arrivals get the pre-queue answer and a token without a
// position; at the opening each gets a position from the draw (on a token
// issued anew), later arrivals queue after them.
func TestPreQueueAndTheDraw(t *testing.T) {
	h, clk := opening(t, &Handler{LotterySeed: testSeed, Watermark: 2})
	seed, err := lottery.ParseSeed(testSeed)
	require.NoError(t, err)
	commitment := lottery.Commitment(seed)

	const n = 20
	var tokens []string
	for range n {
		res := serve(t, h, get(h, ""))
		require.Equal(t, http.StatusOK, res.rec.Code)
		assert.Equal(t, StatusPreQueue, res.status())
		assert.Equal(t, "no-store", res.rec.Header().Get("Cache-Control"))
		assert.Equal(t, "60", res.rec.Header().Get("Retry-After"))
		assert.Nil(t, res.next, "nobody reaches the site before the opening")
		var raw map[string]any
		require.NoError(t, json.Unmarshal(res.rec.Body.Bytes(), &raw))
		tok, _ := raw["token"].(string)
		assert.Equal(t, map[string]any{
			"status": "pre_queue", "event": float64(h.Event), "opens_at": h.opensAt.Format(time.RFC3339),
			"lottery_commitment": commitment, "opens_in_seconds": 3600.0, "token": tok,
		}, raw)
		c := res.cookie(t, h.cookieName)
		require.NotNil(t, c)
		assert.Equal(t, tok, c.Value)
		assert.Equal(t, int((time.Hour+h.ttl)/time.Second), c.MaxAge,
			"the cookie lasts as long as the token: an entrant who closes the page comes back to its place after the opening")
		tk, err := h.keys.VerifyPreQueue(tok, h.Event)
		require.NoError(t, err)
		assert.Zero(t, tk.Position)
		assert.Equal(t, h.opensAt.Add(h.ttl), tk.ExpiresAt, "good until a token's life after the opening")
		_, err = h.keys.Verify(tok, h.Event)
		assert.Error(t, err, "no verify path admits a pre-queue token")
		tokens = append(tokens, tok)
	}
	// Polling keeps the entry; nothing new is issued.
	res := serve(t, h, withToken(h, tokens[0]))
	assert.Equal(t, StatusPreQueue, res.status())
	assert.Nil(t, res.cookie(t, h.cookieName))
	assert.Equal(t, int64(0), h.room.room.State().LastPosition, "no position before the opening")

	clk.Advance(time.Hour)
	seen := map[int64]bool{}
	var admitted int
	for _, tok := range tokens {
		res := serve(t, h, withToken(h, tok))
		c := res.cookie(t, h.cookieName)
		require.NotNil(t, c, "the entrant's token is issued anew with its position")
		assert.Equal(t, int(h.ttl/time.Second), c.MaxAge, "a token's life from now on")
		tk, err := h.keys.Verify(c.Value, h.Event)
		require.NoError(t, err)
		pre, _ := h.keys.VerifyPreQueue(tok, h.Event)
		assert.Equal(t, pre.Subject, tk.Subject)
		assert.False(t, seen[tk.Position])
		seen[tk.Position] = true
		assert.True(t, tk.Position >= 1 && tk.Position <= n)
		if tk.Position <= 2 {
			admitted++
			assert.Equal(t, StatusAdmitted, res.status())
			require.NotNil(t, res.next)
		} else {
			assert.Equal(t, tk.Position, res.waiting(t).Position)
		}
		// Coming back with the pre-queue token again gives the same place.
		again := serve(t, h, withToken(h, tok)).cookie(t, h.cookieName)
		tk2, err := h.keys.Verify(again.Value, h.Event)
		require.NoError(t, err)
		assert.Equal(t, tk.Position, tk2.Position)
	}
	assert.Equal(t, 2, admitted)
	_, pos := join(t, h)
	assert.Equal(t, int64(n+1), pos, "later arrivals queue after the entrants")

	view, err := h.room.room.Lottery(context.Background())
	require.NoError(t, err)
	assert.Equal(t, testSeed, view.Published.Seed)
	assert.Len(t, view.Published.Entrants, n)
}

// TestChallengeAtJoin follows docs/opening.md on the challenge: no solution, a wrong,
// expired or reused one all get a new challenge; a solution joins once.
func TestChallengeAtJoin(t *testing.T) {
	clk := newClock()
	h := &Handler{Challenge: 8}
	h.now = clk.Now
	provision(t, h)

	res := serve(t, h, get(h, ""))
	require.Equal(t, http.StatusOK, res.rec.Code)
	assert.Equal(t, StatusChallenge, res.status())
	assert.Equal(t, "no-store", res.rec.Header().Get("Cache-Control"))
	assert.Nil(t, res.cookie(t, h.cookieName), "no token without the work")
	assert.Nil(t, res.next)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(res.rec.Body.Bytes(), &raw))
	assert.Equal(t, "challenge", raw["status"])
	assert.Equal(t, 8.0, raw["difficulty"])
	nonce, _ := raw["challenge"].(string)
	require.Len(t, nonce, waitroom.NonceLen)
	assert.Equal(t, int64(0), h.room.room.State().LastPosition, "a challenge takes no position")

	withSolution := func(s string) *http.Request {
		r := get(h, "")
		r.Header.Set(HeaderSolution, s)
		return r
	}
	sol := waitroom.Solve(nonce, 8)
	res = serve(t, h, withSolution(sol))
	assert.Equal(t, int64(1), res.waiting(t).Position)
	assert.NotNil(t, res.cookie(t, h.cookieName))

	wrong := nonce + ":x"
	for i := 0; ; i++ {
		sum := sha256.Sum256([]byte(wrong))
		if waitroom.LeadingZeroBits(sum[:]) < 8 {
			break
		}
		wrong = nonce + ":x" + strconv.Itoa(i)
	}
	for name, s := range map[string]string{
		"reused":  sol,
		"wrong":   wrong,
		"garbage": "garbage",
		"forged":  waitroom.Solve(strings.Repeat("0", waitroom.NonceLen), 8),
	} {
		t.Run(name, func(t *testing.T) {
			res := serve(t, h, withSolution(s))
			assert.Equal(t, StatusChallenge, res.status())
			assert.Nil(t, res.cookie(t, h.cookieName))
			assert.NotEqual(t, nonce, decode[challengeBody](t, res).Challenge, "a new challenge")
		})
	}
	t.Run("expired", func(t *testing.T) {
		late := waitroom.Solve(decode[challengeBody](t, serve(t, h, get(h, ""))).Challenge, 8)
		clk.Advance(waitroom.DefaultChallengeTTL)
		assert.Equal(t, StatusChallenge, serve(t, h, withSolution(late)).status())
	})
	assert.Equal(t, int64(1), h.room.room.State().LastPosition)

	// A token holder is never challenged.
	b := serve(t, h, withSolution(waitroom.Solve(decode[challengeBody](t, serve(t, h, get(h, ""))).Challenge, 8)))
	placed := b.waiting(t)
	assert.Equal(t, int64(2), placed.Position)
	assert.Equal(t, int64(2), serve(t, h, withToken(h, placed.Token)).waiting(t).Position)
}

// TestSolutionStaysAtTheGateway: an arrival let straight in by its solution
// reaches the site without the solution header.
func TestSolutionStaysAtTheGateway(t *testing.T) {
	h := provision(t, &Handler{Challenge: 4, Watermark: 10})
	r := get(h, "")
	r.Header.Set(HeaderSolution, waitroom.Solve(decode[challengeBody](t, serve(t, h, get(h, ""))).Challenge, 4))
	res := serve(t, h, r)
	require.NotNil(t, res.next)
	assert.Equal(t, StatusAdmitted, res.status())
	assert.Empty(t, res.next.Header.Values(HeaderSolution))
}

// request from a client address, as Caddy's server determined it.
func from(h *Handler, clientIP string) *http.Request {
	r := get(h, "")
	r.RemoteAddr = "127.0.0.1:5555"
	return r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey,
		map[string]any{caddyhttp.ClientIPVarKey: clientIP}))
}

// TestJoinRatePerClient follows docs/opening.md on join_rate: new arrivals of one
// address above the rate get 429 with Retry-After, counted by the address
// Caddy determined (behind a trusted proxy, the one it names), IPv6 by /64.
func TestJoinRatePerClient(t *testing.T) {
	clk := newClock()
	h := &Handler{JoinRate: &JoinRate{Joins: 2, Per: caddy.Duration(time.Minute)}}
	h.now = clk.Now
	provision(t, h)

	for i := range 2 {
		assert.Equal(t, StatusWaiting, serve(t, h, from(h, "203.0.113.7")).status(), i)
	}
	res := serve(t, h, from(h, "203.0.113.7"))
	assert.Equal(t, http.StatusTooManyRequests, res.rec.Code)
	assert.Equal(t, StatusRateLimited, res.status())
	assert.Equal(t, "30", res.rec.Header().Get("Retry-After"))
	assert.Equal(t, "no-store", res.rec.Header().Get("Cache-Control"))
	assert.Nil(t, res.cookie(t, h.cookieName))
	assert.Equal(t, "rate_limited", decode[map[string]any](t, res)["error"])
	assert.Equal(t, int64(2), h.room.room.State().LastPosition, "a refused arrival takes no position")

	// Another address, or a token holder of the first, is not held back.
	assert.Equal(t, StatusWaiting, serve(t, h, from(h, "203.0.113.8")).status())
	tok, _ := tokenAt(t, h, 1)
	r := from(h, "203.0.113.7")
	r.Header.Set(HeaderToken, tok)
	assert.Equal(t, StatusWaiting, serve(t, h, r).status())

	// The allowance comes back at the rate.
	clk.Advance(30 * time.Second)
	assert.Equal(t, StatusWaiting, serve(t, h, from(h, "203.0.113.7")).status())
	assert.Equal(t, http.StatusTooManyRequests, serve(t, h, from(h, "203.0.113.7")).rec.Code)

	// One /64 is one client.
	assert.Equal(t, StatusWaiting, serve(t, h, from(h, "2001:db8:1:2::1")).status())
	assert.Equal(t, StatusWaiting, serve(t, h, from(h, "2001:db8:1:2::ffff")).status())
	assert.Equal(t, http.StatusTooManyRequests, serve(t, h, from(h, "2001:db8:1:2:aaaa::3")).rec.Code)
	assert.Equal(t, StatusWaiting, serve(t, h, from(h, "2001:db8:1:3::1")).status())

	// Without Caddy's verdict, the peer's address.
	peer := func() *http.Request { r := get(h, ""); r.RemoteAddr = "198.51.100.1:1234"; return r }
	serve(t, h, peer())
	serve(t, h, peer())
	assert.Equal(t, http.StatusTooManyRequests, serve(t, h, peer()).rec.Code)
}

func TestClientKey(t *testing.T) {
	for _, c := range []struct{ ip, remote, want string }{
		{"203.0.113.7", "127.0.0.1:1", "203.0.113.7"},
		{"::ffff:203.0.113.7", "127.0.0.1:1", "203.0.113.7"},
		{"2001:db8::1", "127.0.0.1:1", "2001:db8::/64"},
		{"fe80::1%eth0", "127.0.0.1:1", "fe80::/64"},
		{"", "198.51.100.2:443", "198.51.100.2"},
		{"", "[2001:db8:5::9]:443", "2001:db8:5::/64"},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://x/", nil)
		r.RemoteAddr = c.remote
		if c.ip != "" {
			r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{caddyhttp.ClientIPVarKey: c.ip}))
		}
		assert.Equal(t, c.want, clientKey(r), c)
	}
}

// TestJoinRateOutlivesAReload: the join rate's counts are the event's, not
// a config's: a reload (the new config provisioned before the old one is
// cleaned up) keeps them, and a second site guarding the event at the same
// rate shares them, so an address gets no fresh allowance from either.
func TestJoinRateOutlivesAReload(t *testing.T) {
	clk := newClock()
	ev := testenv.EventID()
	rateOf := func() *JoinRate { return &JoinRate{Joins: 1, Per: caddy.Duration(time.Minute)} }
	old := &Handler{Event: ev, JoinRate: rateOf()}
	old.now = clk.Now
	provision(t, old)
	assert.Equal(t, StatusWaiting, serve(t, old, from(old, "203.0.113.7")).status())

	reloaded := &Handler{Event: ev, JoinRate: rateOf(), TokenTTL: caddy.Duration(time.Hour)}
	reloaded.now = clk.Now
	provision(t, reloaded)
	other := &Handler{Event: ev, JoinRate: rateOf()}
	other.now = clk.Now
	provision(t, other)
	require.NoError(t, old.Cleanup())
	assert.Equal(t, http.StatusTooManyRequests, serve(t, reloaded, from(reloaded, "203.0.113.7")).rec.Code, "the allowance was spent before the reload")
	assert.Equal(t, http.StatusTooManyRequests, serve(t, other, from(other, "203.0.113.7")).rec.Code, "the other site counts the same joins")
	clk.Advance(time.Minute)
	assert.Equal(t, StatusWaiting, serve(t, reloaded, from(reloaded, "203.0.113.7")).status(), "back at the rate")
}

// TestJoinLimiterIsBounded: the per-address buckets never outgrow their two
// generations.
func TestJoinLimiterIsBounded(t *testing.T) {
	l := newJoinLimiter(1, time.Minute)
	l.size = 100
	now := time.Now()
	for i := range 1000 {
		l.take("10.0.0."+strconv.Itoa(i), now)
	}
	assert.LessOrEqual(t, len(l.cur)+len(l.prev), 100)
	ok, _ := l.take("10.0.0.999", now)
	assert.False(t, ok, "a recent address is still remembered")
}

// TestOpeningChallengeAndRateCompose: an arrival before the opening solves
// the challenge once (and is counted by the join rate once) to enter the
// pre-queue; at the opening its pre-queue token gets its place with neither.
func TestOpeningChallengeAndRateCompose(t *testing.T) {
	h, clk := opening(t, &Handler{Challenge: 6, JoinRate: &JoinRate{Joins: 1, Per: caddy.Duration(time.Hour)}})
	ip := "192.0.2.50"
	ch := decode[challengeBody](t, serve(t, h, from(h, ip)))
	r := from(h, ip)
	r.Header.Set(HeaderSolution, waitroom.Solve(ch.Challenge, 6))
	entered := decode[preQueueBody](t, serve(t, h, r))
	require.Equal(t, StatusPreQueue, entered.Status)

	// The address used its join: a second arrival is refused before any work.
	assert.Equal(t, http.StatusTooManyRequests, serve(t, h, from(h, ip)).rec.Code)
	// Polling with the pre-queue token is neither challenged nor limited.
	r = from(h, ip)
	r.Header.Set(HeaderToken, entered.Token)
	assert.Equal(t, StatusPreQueue, serve(t, h, r).status())

	clk.Advance(time.Hour)
	r = from(h, ip)
	r.Header.Set(HeaderToken, entered.Token)
	res := serve(t, h, r)
	assert.Equal(t, int64(1), res.waiting(t).Position, "no challenge again at the opening")
}

func TestPreQueueAndChallengePages(t *testing.T) {
	h, _ := opening(t, &Handler{Challenge: 5, LotterySeed: testSeed})
	html := func(tok string) result {
		r := httptest.NewRequest(http.MethodGet, "http://tickets.test/", nil)
		if tok != "" {
			r.Header.Set(HeaderToken, tok)
		}
		return serve(t, h, r)
	}
	res := html("")
	assert.Equal(t, StatusChallenge, res.status())
	page := strings.Join(strings.Fields(res.rec.Body.String()), " ")
	for _, want := range []string{"new Worker(", "X-Waitroom-Solution", `"Accept": "application/json"`, `credentials: "same-origin"`,
		`role="progressbar"`, "difficulty = 5 ;", "<noscript>"} {
		assert.Contains(t, page, want)
	}
	ch := decode[challengeBody](t, serve(t, h, get(h, "")))
	r := get(h, "")
	r.Header.Set(HeaderSolution, waitroom.Solve(ch.Challenge, 5))
	tok := decode[preQueueBody](t, serve(t, h, r)).Token

	res = html(tok)
	assert.Equal(t, StatusPreQueue, res.status())
	assert.Equal(t, "text/html; charset=utf-8", res.rec.Header().Get("Content-Type"))
	page = strings.Join(strings.Fields(res.rec.Body.String()), " ")
	seed, _ := lottery.ParseSeed(testSeed)
	for _, want := range []string{"The queue opens soon", lottery.Commitment(seed), "var left = 3600 ;", "performance.now()",
		"window.location.reload()", `<noscript><meta http-equiv="refresh" content="60">`} {
		assert.Contains(t, page, want)
	}
}

func TestOpeningConfigRefused(t *testing.T) {
	keys := []Key{{ID: "k1", Secret: testSecret}}
	for name, c := range map[string]struct {
		h    Handler
		want string
	}{
		"bad opens_at":          {Handler{Event: 1, Keys: keys, OpensAt: "tomorrow"}, "opens_at: want an RFC 3339 time"},
		"seed without opens_at": {Handler{Event: 1, Keys: keys, LotterySeed: testSeed}, "lottery_seed: only used with opens_at"},
		"short seed":            {Handler{Event: 1, Keys: keys, OpensAt: "2030-01-01T10:00:00Z", LotterySeed: "00ff"}, "at least 16"},
		"challenge too hard":    {Handler{Event: 1, Keys: keys, Challenge: 40}, "challenge: must be 1 to 28"},
		"negative challenge":    {Handler{Event: 1, Keys: keys, Challenge: -1}, "challenge"},
		"join rate no period":   {Handler{Event: 1, Keys: keys, JoinRate: &JoinRate{Joins: 3}}, "join_rate"},
		"join rate no joins":    {Handler{Event: 1, Keys: keys, JoinRate: &JoinRate{Per: caddy.Duration(time.Second)}}, "join_rate"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			h := c.h
			err := h.Provision(ctx)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Nil(t, h.room)
		})
	}
}

// A pre-queue token after the opening was taken out of the config gets a
// place at the back like any arrival, once: it keeps that place however
// often it comes back. In a sold-out event a token that was not placed yet
// gets the sold-out answer, never a place.
func TestPreQueueTokenAfterTheOpeningWasRemoved(t *testing.T) {
	h := provision(t, &Handler{Watermark: 5})
	pre, err := h.keys.IssuePreQueue("v_0123456789abcdef", h.Event, time.Now().Add(time.Hour))
	require.NoError(t, err)

	res := serve(t, h, get(h, pre.Raw))
	require.Equal(t, http.StatusOK, res.rec.Code, res.rec.Body.String())
	assert.Equal(t, StatusAdmitted, res.status(), "position 1, within the watermark")

	update(t, h, waitroom.Change{SoldOut: ptr(true)})
	res = serve(t, h, get(h, pre.Raw))
	assert.Equal(t, StatusAdmitted, res.status(), "its place, admitted, still passes")
	assert.Equal(t, "1", res.next.Header.Get(HeaderPosition))

	late, err := h.keys.IssuePreQueue("v_123456789abcdef0", h.Event, time.Now().Add(time.Hour))
	require.NoError(t, err)
	res = serve(t, h, get(h, late.Raw))
	require.Equal(t, http.StatusGone, res.rec.Code, res.rec.Body.String())
	assert.Equal(t, StatusSoldOut, res.status())
	assert.True(t, strings.HasPrefix(res.rec.Header().Get("Cache-Control"), "private"), "a token holder's 410 is private")
	assert.Equal(t, int64(1), h.room.room.State().LastPosition, "no place handed out in the sold-out event")
}

// TestPreQueueTokenPlacedAtTheBackTellsItsHandout: a pre-queue token the
// draw has no place for is handed one at the back now, and the token issued
// for it says so (hat), so every gateway counts its admission window from
// now: another gateway may have seen the position pass long before, in a
// block leased then.
func TestPreQueueTokenPlacedAtTheBackTellsItsHandout(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.UserID = "{http.request.header.X-User-ID}"
		provision(t, h)
		clk.Advance(time.Hour)
		now := clk.Now().UTC().Truncate(time.Second)

		anon, err := h.keys.IssuePreQueue("v_0123456789abcdef", h.Event, clk.Now().Add(time.Hour))
		require.NoError(t, err)
		acct, err := h.keys.IssuePreQueueAccount("alice", h.Event, clk.Now().Add(time.Hour))
		require.NoError(t, err)
		for _, c := range []struct {
			name string
			r    *http.Request
		}{
			{"anonymous", withToken(h, anon.Raw)},
			{"an account", asUser(withToken(h, acct.Raw), "alice")},
		} {
			tok, _ := placedToken(t, h, do(t, h, c.r))
			tk, err := h.keys.Verify(tok, h.Event)
			require.NoError(t, err)
			assert.Equal(t, now, tk.HandedOut, "%s: handed out now", c.name)
		}
	})
}

// TestPreQueueEntrantsEnterAgainAfterTheStoreLostThem: Redis loses the
// event's state, entrants included, before the opening. An entrant that
// polls after the restore is entered again and given its token anew (its
// later polls cost no store call), so the draw gives it its place.
func TestPreQueueEntrantsEnterAgainAfterTheStoreLostThem(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb, err := waitroom.NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	ev := testenv.EventID()
	setUpEvent(t, srv.URL(), ev)
	h, clk := opening(t, &Handler{Event: ev, LotterySeed: testSeed, Store: srv.URL()})
	ctx := context.Background()
	clk.Advance(2 * waitroom.DefaultRestoreWindow)
	res := serve(t, h, get(h, ""))
	require.Equal(t, StatusPreQueue, res.status())
	tok := res.cookie(t, h.cookieName).Value
	clk.Advance(time.Second)
	res = serve(t, h, withToken(h, tok))
	require.Equal(t, StatusPreQueue, res.status())
	assert.Nil(t, res.cookie(t, h.cookieName), "nothing lost: the token stays")

	require.NoError(t, rdb.FlushAll(ctx).Err())
	_, err = h.room.room.Refresh(ctx)
	require.NoError(t, err)
	clk.Advance(waitroom.DefaultRestoreWindow)
	_, err = h.room.room.Refresh(ctx)
	require.NoError(t, err)
	clk.Advance(time.Second)
	res = serve(t, h, withToken(h, tok))
	require.Equal(t, StatusPreQueue, res.status())
	c := res.cookie(t, h.cookieName)
	require.NotNil(t, c, "entered again, on a token issued anew")
	again := serve(t, h, withToken(h, c.Value))
	assert.Equal(t, StatusPreQueue, again.status())
	assert.Nil(t, again.cookie(t, h.cookieName), "its later polls are not asked again")

	clk.Advance(time.Hour)
	pre, err := h.keys.VerifyPreQueue(c.Value, h.Event)
	require.NoError(t, err)
	pos, err := h.room.room.DrawnPosition(ctx, pre.Subject)
	require.NoError(t, err, "the entrant is in the draw")
	assert.Equal(t, int64(1), pos)
}

// TestPreQueueTokenOutlastsAMovedOpening: the operator moved the opening
// half an hour later after entrants had their pre-queue tokens, which end a
// token's life after the old opening: at the new one. An entrant's poll gives it its token
// anew, the same entrant, ending a token's life after the new opening, so
// it comes back to its drawn place; later polls keep that token.
func TestPreQueueTokenOutlastsAMovedOpening(t *testing.T) {
	h, clk := opening(t, &Handler{LotterySeed: testSeed, UserID: "{http.request.header.X-User-ID}"})
	ctx := context.Background()
	oldEnd := clk.Now().Add(30*time.Minute + h.ttl)
	anon, err := h.keys.IssuePreQueue("v_0123456789abcdef", h.Event, oldEnd)
	require.NoError(t, err)
	acct, err := h.keys.IssuePreQueueAccount("alice", h.Event, oldEnd)
	require.NoError(t, err)
	for _, c := range []struct {
		name    string
		tok     waitroom.Ticket
		r       func(string) *http.Request
		account bool
	}{
		{"anonymous", anon, func(tok string) *http.Request { return withToken(h, tok) }, false},
		{"an account", acct, func(tok string) *http.Request { return asUser(withToken(h, tok), "alice") }, true},
	} {
		require.NoError(t, h.room.room.Enter(ctx, c.tok.Subject))
		res := serve(t, h, c.r(c.tok.Raw))
		require.Equal(t, StatusPreQueue, res.status(), c.name)
		cookie := res.cookie(t, h.cookieName)
		require.NotNil(t, cookie, "%s: the token is given anew", c.name)
		renewed, err := h.keys.VerifyPreQueue(cookie.Value, h.Event)
		require.NoError(t, err)
		assert.Equal(t, c.tok.Subject, renewed.Subject, c.name)
		assert.Equal(t, c.account, renewed.IsAccount(), c.name)
		assert.False(t, renewed.ExpiresAt.Before(h.opensAt.Add(h.ttl)), "%s: it ends a token's life after the opening", c.name)
		again := serve(t, h, c.r(cookie.Value))
		assert.Equal(t, StatusPreQueue, again.status())
		assert.Nil(t, again.cookie(t, h.cookieName), "%s: its later polls keep it", c.name)
	}

	clk.Advance(time.Hour + h.ttl)
	for _, sub := range []string{"v_0123456789abcdef", "alice"} {
		_, err := h.room.room.DrawnPosition(ctx, sub)
		require.NoError(t, err, "%s: in the draw", sub)
	}
}
