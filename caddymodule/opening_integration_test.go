package caddymodule

// In-process Caddy runs of docs/opening.md: the pre-queue and the draw on the
// memory store and on Redis with two gateways, the challenge and the join
// rate behind Caddy's trusted proxies.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
	"github.com/waitroom/waitroom/waitroom/lottery"
)

func TestOpeningMemory(t *testing.T) { openingWalkThrough(t, "memory", "memory") }

// TestOpeningRedisTwoGateways runs two gateways on one Redis (two stores
// and two rooms, as two processes have): entrants enter through either,
// one draw, and both hand every entrant the same position.
func TestOpeningRedisTwoGateways(t *testing.T) {
	url := testenv.RedisURL(t)
	testenv.Redis(t)
	openingWalkThrough(t, url, url+"?client_name=gateway-b")
}

func openingWalkThrough(t *testing.T, storeA, storeB string) {
	clk := useClock(t)
	ev := testenv.EventID()
	if storeA != "memory" {
		// As a gateway that ran before left it: a new event would first
		// wait out a restore window by the clock the test holds still.
		setUpEvent(t, storeA, ev)
	}
	evs := strconv.FormatInt(ev, 10)
	opensAt := clk.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	pa, pb := testenv.FreePort(t), testenv.FreePort(t)
	block := func(port int, store, name string) string {
		return fmt.Sprintf(`
http://localhost:%d {
	waitroom {
		event %d
		key k1 %s
		store %s
		opens_at %s
	}
	respond "gateway %s"
}
`, port, ev, testSecret, store, opensAt, name)
	}
	tc := caddytest.NewTester(t)
	tc.InitServer(fmt.Sprintf(`{
	skip_install_trust
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1ns
}
`, adminPort, pa, testenv.FreePort(t))+block(pa, storeA, "a")+block(pb, storeB, "b"), "caddyfile")
	if t.Failed() {
		t.FailNow()
	}
	a := func(path string) string { return fmt.Sprintf("http://localhost:%d%s", pa, path) }
	b := func(path string) string { return fmt.Sprintf("http://localhost:%d%s", pb, path) }
	lotteryPath := "/waitroom/events/" + evs + "/lottery"
	code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"set": 5}`)
	require.Equal(t, http.StatusOK, code, raw)
	// The admin API changed one gateway's room; the other learns it by the
	// change notice, or by its next poll should its subscription not have
	// been up yet. The whole walk takes less than a poll.
	require.Eventually(t, func() bool { return everyRoomAt(ev, 5) }, 10*time.Second, 5*time.Millisecond,
		"both gateways know the watermark")

	// Before the opening: the commitment only.
	code, before, raw := adminCall(t, adminPort, http.MethodGet, lotteryPath, "")
	require.Equal(t, http.StatusOK, code, raw)
	commitment, _ := before["commitment"].(string)
	require.Len(t, commitment, 64)
	assert.Equal(t, false, before["drawn"])
	assert.NotContains(t, before, "seed", "the seed stays secret until the draw")
	assert.NotContains(t, before, "entrants")

	const n = 24
	var tokens []string
	for i := range n {
		url := a("/")
		if i%2 == 1 {
			url = b("/")
		}
		res := newVisitor(t).get(url)
		require.Equal(t, http.StatusOK, res.StatusCode, res.body)
		assert.Equal(t, "pre_queue", res.Header.Get(HeaderStatus))
		body := res.json(t)
		assert.Equal(t, "pre_queue", body["status"])
		assert.Equal(t, float64(ev), body["event"])
		assert.Equal(t, opensAt, body["opens_at"])
		assert.Equal(t, commitment, body["lottery_commitment"], "one commitment on every gateway")
		tokens = append(tokens, body["token"].(string))
	}
	html := newVisitor(t).get(b("/"), "Accept", "text/html", HeaderToken, tokens[1])
	assert.Contains(t, html.body, commitment)
	assert.Contains(t, html.body, "The queue opens soon")

	clk.Advance(time.Hour)
	positions := map[string]int64{}
	var all []int64
	for _, tok := range tokens {
		var got [2]int64
		for i, url := range []string{a("/"), b("/")} {
			res := newVisitor(t).get(url, HeaderToken, tok)
			require.Contains(t, []int{http.StatusOK}, res.StatusCode, res.body)
			placed := res.Header.Get(HeaderToken)
			require.NotEmpty(t, placed, "the entrant's token is issued anew with its position")
			got[i] = tokenPosition(t, clk, placed, ev)
			if got[i] <= 5 {
				assert.Equal(t, "admitted", res.Header.Get(HeaderStatus))
			} else {
				assert.Equal(t, "waiting", res.Header.Get(HeaderStatus))
				assert.Equal(t, float64(got[i]), res.json(t)["position"])
			}
		}
		assert.Equal(t, got[0], got[1], "both gateways give the entrant the same place")
		positions[subjectOf(t, clk, tok, ev)] = got[0]
		all = append(all, got[0])
	}
	slices.Sort(all)
	for i, p := range all {
		assert.Equal(t, int64(i+1), p, "positions 1…%d, each once", n)
	}
	assert.Equal(t, float64(n+1), newVisitor(t).get(a("/")).json(t)["position"], "later arrivals queue after the entrants")
	assert.Equal(t, float64(n+2), newVisitor(t).get(b("/")).json(t)["position"])

	// After the draw: the seed and the entrants, which rebuild the order.
	code, after, raw := adminCall(t, adminPort, http.MethodGet, lotteryPath, "")
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, true, after["drawn"])
	assert.Equal(t, commitment, after["commitment"])
	var pub lottery.Published
	require.NoError(t, json.Unmarshal([]byte(raw), &pub))
	assert.Len(t, pub.Entrants, n)
	order, err := lottery.Check(pub)
	require.NoError(t, err)
	for x, id := range order {
		assert.Equal(t, pub.Base+int64(x)+1, positions[id], id)
	}

	// An event without an opening has no lottery.
	code, body, _ := adminCall(t, adminPort, http.MethodGet, "/waitroom/events/999999999999999/lottery", "")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, "not_found", body["error"])
}

func tokenPosition(t *testing.T, clk *clock, raw string, ev int64) int64 {
	t.Helper()
	ks, err := waitroom.NewKeySet(clk.Now, waitroom.Key{ID: "k1", Secret: []byte(testSecret)})
	require.NoError(t, err)
	tk, err := ks.Verify(raw, ev)
	require.NoError(t, err)
	return tk.Position
}

func subjectOf(t *testing.T, clk *clock, raw string, ev int64) string {
	t.Helper()
	ks, err := waitroom.NewKeySet(clk.Now, waitroom.Key{ID: "k1", Secret: []byte(testSecret)})
	require.NoError(t, err)
	tk, err := ks.VerifyAny(raw, ev)
	require.NoError(t, err)
	return tk.Subject
}

// TestChallengeAndJoinRateBehindTrustedProxy: the challenge through a real
// server, and the join rate counted by the address Caddy determined: the
// one a trusted proxy names, never one a client claims itself.
func TestChallengeAndJoinRateBehindTrustedProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Caddy")
	}
	trusting, plain := testenv.FreePort(t), testenv.FreePort(t)
	ev := testenv.EventID()
	block := func(port int) string {
		return fmt.Sprintf(`
http://localhost:%d {
	waitroom {
		event %d
		key k1 %s
		challenge 8
		join_rate 2 1h
	}
	respond "the site"
}
`, port, ev, testSecret)
	}
	tc := caddytest.NewTester(t)
	tc.InitServer(fmt.Sprintf(`{
	skip_install_trust
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1ns
	servers :%d {
		trusted_proxies static 127.0.0.1/8 ::1
	}
}
`, adminPort, trusting, testenv.FreePort(t), trusting)+block(trusting)+block(plain), "caddyfile")
	if t.Failed() {
		t.FailNow()
	}
	join := func(port int, forwardedFor string) response {
		v := newVisitor(t)
		url := fmt.Sprintf("http://localhost:%d/", port)
		res := v.get(url, "X-Forwarded-For", forwardedFor)
		if res.Header.Get(HeaderStatus) != "challenge" {
			return res
		}
		c := res.json(t)
		assert.Equal(t, 8.0, c["difficulty"])
		return v.get(url, "X-Forwarded-For", forwardedFor, HeaderSolution, waitroom.Solve(c["challenge"].(string), 8))
	}

	for range 2 {
		assert.Equal(t, "waiting", join(trusting, "198.51.100.1").Header.Get(HeaderStatus))
	}
	res := join(trusting, "198.51.100.1")
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	assert.Equal(t, "rate_limited", res.Header.Get(HeaderStatus))
	assert.NotEmpty(t, res.Header.Get("Retry-After"))
	assert.Equal(t, "waiting", join(trusting, "198.51.100.2").Header.Get(HeaderStatus), "another client behind the proxy")

	// Not a trusted proxy: the header is the client's word, and all these
	// are one address.
	assert.Equal(t, "waiting", join(plain, "203.0.113.1").Header.Get(HeaderStatus))
	assert.Equal(t, "waiting", join(plain, "203.0.113.2").Header.Get(HeaderStatus))
	assert.Equal(t, http.StatusTooManyRequests, join(plain, "203.0.113.3").StatusCode)
}

// everyRoomAt reports whether every room of event in this process (one per
// gateway here) holds watermark in memory.
func everyRoomAt(event, watermark int64) bool {
	at := true
	rooms.Range(func(_, v any) bool {
		if e := v.(*roomEntry); e.key.Event == event && e.room.State().Watermark != watermark {
			at = false
		}
		return at
	})
	return at
}
