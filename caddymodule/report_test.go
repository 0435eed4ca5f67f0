package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

// sampleOf is a sample with last positions handed out, watermark admitted
// (all below it), waiting the rest, and the origin's figures when
// remaining is not negative.
func sampleOf(last, watermark, remaining, held int64, soldOut bool) reportSample {
	s := reportSample{state: waitroom.State{LastPosition: last, Watermark: watermark, SoldOut: soldOut},
		admitted: min(last, watermark)}
	if !soldOut {
		s.waiting = max(last-watermark, 0)
	}
	if remaining >= 0 {
		s.inv, s.haveInv, s.fresh = waitroom.Inventory{Remaining: remaining, Held: held, At: time.Unix(1, 0)}, true, true
	}
	s.avail = waitroom.Judge(s.state, s.inv, s.fresh)
	return s
}

func TestRecorderTimeline(t *testing.T) {
	t0 := time.Unix(1_000_000, 0).UTC()
	rc := newRecorder()
	rc.record(t0, sampleOf(0, 0, -1, 0, false))
	assert.Empty(t, rc.points, "the sale starts at its first arrival")

	rc.record(t0.Add(time.Second), sampleOf(3, 0, -1, 0, false))
	rc.record(t0.Add(1500*time.Millisecond), sampleOf(5, 2, -1, 0, false))
	rc.record(t0.Add(2*time.Second), sampleOf(8, 4, 10, 2, false))
	rc.record(t0.Add(3*time.Second), sampleOf(9, 9, 0, 4, false))
	rc.record(t0.Add(4*time.Second), sampleOf(9, 9, 0, 0, true))
	n := func(v int64) *int64 { return &v }
	assert.Equal(t, []reportPoint{
		{T: t0.Add(time.Second), Arrivals: 5, Waiting: 3, Watermark: 2, Admitted: 2},
		{T: t0.Add(2 * time.Second), Arrivals: 8, Waiting: 4, Watermark: 4, Admitted: 4, Remaining: n(10), Held: n(2)},
		{T: t0.Add(3 * time.Second), Arrivals: 9, Watermark: 9, Admitted: 9, Remaining: n(0), Held: n(4), AllHeld: true},
		{T: t0.Add(4 * time.Second), Arrivals: 9, Watermark: 9, Admitted: 9, Remaining: n(0), Held: n(0), SoldOut: true},
	}, rc.points, "one point a second, the newest sample of the second standing for it")
}

func TestAllHeld(t *testing.T) {
	for name, tc := range map[string]struct {
		s    reportSample
		want bool
	}{
		"no figures":                {sampleOf(5, 5, -1, 0, false), false},
		"seats left":                {sampleOf(5, 5, 1, 4, false), false},
		"none left, some held":      {sampleOf(5, 5, 0, 4, false), true},
		"none left, none held":      {sampleOf(5, 5, 0, 0, false), false},
		"marked sold out, all held": {sampleOf(5, 5, 0, 4, true), false},
		"the origin's flag, all held": {func() reportSample {
			s := sampleOf(5, 5, 0, 4, true)
			s.state.SoldOutBy = waitroom.ActorOrigin
			s.avail = waitroom.Judge(s.state, s.inv, s.fresh)
			return s
		}(), true},
	} {
		t.Run(name, func(t *testing.T) { assert.Equal(t, tc.want, allHeld(tc.s)) })
	}
}

// TestRecorderWaits: each admitted position waited from the second it was
// handed out to the second the watermark reached it.
func TestRecorderWaits(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	rc := newRecorder()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// The gateway looks before the sale; then 100 positions at 0 s,
	// admitted at once; 100 more at 1 s, admitted at 11 s; 10 at 2 s,
	// admitted at 102 s.
	rc.record(at(-1), sampleOf(0, 0, -1, 0, false))
	rc.record(at(0), sampleOf(100, 100, -1, 0, false))
	rc.record(at(1), sampleOf(200, 100, -1, 0, false))
	rc.record(at(2), sampleOf(210, 100, -1, 0, false))
	rc.record(at(11), sampleOf(210, 200, -1, 0, false))
	var body reportBody
	rc.snapshot(&body)
	n := func(v int64) *int64 { return &v }
	assert.Equal(t, waitQuantiles{P50: n(0), P90: n(10), P99: n(10)}, body.Waits)
	rc.record(at(102), sampleOf(210, 300, -1, 0, false))
	rc.snapshot(&body)
	assert.Equal(t, waitQuantiles{P50: n(10), P90: n(10), P99: n(100)}, body.Waits, "100 s falls in the 5 s buckets")
	assert.Equal(t, int64(210), rc.waits.total, "each position counted once")

	empty := newRecorder()
	empty.snapshot(&body)
	assert.Equal(t, waitQuantiles{}, body.Waits, "null before anyone is admitted")
}

func TestWaitBuckets(t *testing.T) {
	for _, tc := range []struct{ wait, bucket int64 }{
		{0, 0}, {59, 59}, {60, 60}, {64, 60}, {599, 595}, {600, 600}, {3599, 3570}, {3600, 3600}, {86399, 86100}, {200000, 86400},
	} {
		var h waitHistogram
		h.add(tc.wait, 1)
		assert.Equal(t, tc.bucket, *h.quantile(.5), "wait %d", tc.wait)
	}
	assert.True(t, slices.IsSorted(waitBounds))
}

// TestRecorderThins: the timeline never holds more than maxReportPoints;
// full, it keeps every other point and the newest, the spacing doubled.
func TestRecorderThins(t *testing.T) {
	t0 := time.Unix(1_000_000, 0).UTC()
	rc := newRecorder()
	for i := range maxReportPoints + 1 {
		rc.record(t0.Add(time.Duration(i)*time.Second), sampleOf(int64(i+1), 0, -1, 0, false))
	}
	require.Len(t, rc.points, (maxReportPoints+2)/2)
	assert.Equal(t, 2*time.Second, rc.step)
	assert.Equal(t, t0, rc.points[0].T, "the first stays")
	assert.Equal(t, t0.Add(maxReportPoints*time.Second), rc.points[len(rc.points)-1].T, "the newest stays")
	for i := 1; i < len(rc.points); i++ {
		require.Equal(t, 2*time.Second, rc.points[i].T.Sub(rc.points[i-1].T), "point %d", i)
	}
	// The next second falls in the newest point's step.
	n := len(rc.points)
	rc.record(t0.Add((maxReportPoints+1)*time.Second), sampleOf(maxReportPoints+5, 0, -1, 0, false))
	require.Len(t, rc.points, n)
	assert.Equal(t, int64(maxReportPoints+5), rc.points[n-1].Arrivals)
	rc.record(t0.Add((maxReportPoints+2)*time.Second), sampleOf(maxReportPoints+6, 0, -1, 0, false))
	assert.Len(t, rc.points, n+1)
}

// TestRecorderAbandoned: the most positions at once handed out, not
// admitted, and no longer polled.
func TestRecorderAbandoned(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	rc := newRecorder()
	s := sampleOf(100, 10, -1, 0, false)
	s.waiting = 60 // 30 stopped polling
	rc.record(t0, s)
	s = sampleOf(100, 50, -1, 0, false)
	s.waiting = 40 // 10 gone; 20 of the earlier ones were admitted
	rc.record(t0.Add(time.Second), s)
	rc.record(t0.Add(2*time.Second), sampleOf(100, 50, -1, 0, true))
	assert.Equal(t, int64(30), rc.abandoned, "a sold-out event's queue says nothing of who left")
}

// useReportTicks makes the report's sampling tick when the test says.
func useReportTicks(t *testing.T) chan time.Time {
	t.Helper()
	ticks := make(chan time.Time)
	prev := reportTicks
	reportTicks = func() (<-chan time.Time, func()) { return ticks, func() {} }
	t.Cleanup(func() { reportTicks = prev })
	return ticks
}

// TestReportRoute: GET /waitroom/events/{id}/report answers the sale's
// report in the shape of docs/api.md, from the samples the room's
// recorder took.
func TestReportRoute(t *testing.T) {
	ticks := useReportTicks(t)
	h, clk := opening(t, &Handler{LotterySeed: testSeed, Watermark: 2, JoinRate: &JoinRate{Joins: 4, Per: caddy.Duration(time.Hour)}})
	a := newAdmin(t, clk.Now)
	path := fmt.Sprintf("/waitroom/events/%d/report", h.Event)

	rec := adminServe(a, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, []any{}, body["timeline"], "nothing happened yet")
	assert.Equal(t, map[string]any{"p50": nil, "p90": nil, "p99": nil}, body["wait_seconds"])
	lot := body["lottery"].(map[string]any)
	assert.Equal(t, false, lot["drawn"])
	assert.Nil(t, lot["seed"])
	assert.Len(t, lot["commitment"], 64)
	// The recorder's first look, as its first tick takes it: before the
	// sale.
	reports.of(h.Event).record(clk.Now(), sampleRoom(h.room))

	entrant := serve(t, h, get(h, "")).cookie(t, h.cookieName)
	require.NotNil(t, entrant)
	clk.Advance(time.Hour)
	serve(t, h, withToken(h, entrant.Value)) // drawn: position 1
	for range 3 {
		serve(t, h, get(h, ""))
	}
	require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 10, Held: 10, Remaining: 0, Healthy: true, At: clk.Now()}))
	update(t, h, waitroom.Change{RaiseBy: 1, Actor: ActorAdmin, Reason: "first"})
	update(t, h, waitroom.Change{RaiseBy: 1, Actor: ActorAdmin, Reason: "second"})
	ticks <- clk.Now()
	// The tick is taken; the next one is sent once the first was recorded.
	ticks <- clk.Now()

	rec = adminServe(a, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	body = nil
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	assert.Equal(t, []string{"abandoned", "changes", "event", "lottery", "refused", "timeline", "wait_seconds"}, keys(body))
	assert.Equal(t, float64(h.Event), body["event"])
	timeline := body["timeline"].([]any)
	require.Len(t, timeline, 1)
	assert.Equal(t, map[string]any{"t": clk.Now().UTC().Truncate(time.Second).Format(time.RFC3339), "arrivals": 4.0, "waiting": 0.0,
		"watermark": 4.0, "admitted": 4.0, "remaining": 0.0, "held": 10.0, "all_held": true, "sold_out": false}, timeline[0])
	assert.Equal(t, map[string]any{"p50": 0.0, "p90": 0.0, "p99": 0.0}, body["wait_seconds"])
	assert.Equal(t, map[string]any{"join_rate": 0.0, "challenge": 0.0}, body["refused"])
	lot = body["lottery"].(map[string]any)
	assert.Equal(t, true, lot["drawn"])
	assert.Equal(t, testSeed, lot["seed"])
	changes := body["changes"].([]any)
	require.GreaterOrEqual(t, len(changes), 2)
	assert.Equal(t, "second", changes[len(changes)-1].(map[string]any)["reason"], "newest last")

	refused := 0
	for range 10 {
		if serve(t, h, get(h, "")).status() == StatusRateLimited {
			refused++
		}
	}
	require.NotZero(t, refused, "past the join rate of its address")
	rec = adminServe(a, http.MethodGet, path, "")
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, float64(refused), body["refused"].(map[string]any)["join_rate"])
}

func TestReportRouteErrors(t *testing.T) {
	h := provision(t, &Handler{})
	a := newAdmin(t, poolClock)
	for _, tc := range []struct {
		method, path string
		code         int
		error        string
	}{
		{http.MethodGet, "/waitroom/events/999999999/report", http.StatusNotFound, "not_found"},
		{http.MethodGet, "/waitroom/events/x/report", http.StatusNotFound, "not_found"},
		{http.MethodPost, fmt.Sprintf("/waitroom/events/%d/report", h.Event), http.StatusMethodNotAllowed, "method_not_allowed"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := adminServe(a, tc.method, tc.path, "")
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			assert.True(t, strings.Contains(rec.Body.String(), `"error":"`+tc.error+`"`), rec.Body.String())
		})
	}
	rec := adminServe(a, http.MethodGet, fmt.Sprintf("/waitroom/events/%d/report", h.Event), "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), `"lottery":null`, "no scheduled opening")
}

func TestReportThroughCaddyMemory(t *testing.T) { reportThroughCaddy(t, "memory") }

func TestReportThroughCaddyRedis(t *testing.T) { reportThroughCaddy(t, testenv.RedisURL(t)) }

// reportThroughCaddy: the report on Caddy's admin endpoint follows the
// event in its store, memory or Redis, one point per sample.
func reportThroughCaddy(t *testing.T, store string) {
	ticks := useReportTicks(t)
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
	}
	respond "the site"`, ev, testSecret, store))
	for range 3 {
		require.Equal(t, http.StatusOK, newVisitor(t).get(s.url("/")).StatusCode)
	}
	code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"raise_by": 2, "reason": "first two"}`)
	require.Equal(t, http.StatusOK, code, raw)
	ticks <- time.Now()
	ticks <- time.Now() // taken once the first sample is recorded

	code, body, raw := adminCall(t, adminPort, http.MethodGet, "/waitroom/events/"+evs+"/report", "")
	require.Equal(t, http.StatusOK, code, raw)
	timeline := body["timeline"].([]any)
	require.Len(t, timeline, 1, raw)
	assert.Equal(t, pick(timeline[0].(map[string]any), "arrivals", "waiting", "watermark", "admitted", "remaining", "held", "all_held", "sold_out"),
		map[string]any{"arrivals": 3.0, "waiting": 1.0, "watermark": 2.0, "admitted": 2.0, "remaining": nil, "held": nil, "all_held": false, "sold_out": false})
	changes := body["changes"].([]any)
	require.Len(t, changes, 1, raw)
	assert.Equal(t, "first two", changes[0].(map[string]any)["reason"])
	assert.Nil(t, body["lottery"])

	code, body, raw = adminCall(t, adminPort, http.MethodGet, "/waitroom/events/999999999999999/report", "")
	assert.Equal(t, http.StatusNotFound, code, raw)
	assert.Equal(t, "not_found", body["error"])
}

// TestRecorderWaitsFromItsFirstLook: a gateway that starts (or is given
// the event) mid-sale never saw when the positions already admitted were
// handed out or reached, so they are not its waits; those it sees
// admitted later count from its first look.
func TestRecorderWaitsFromItsFirstLook(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	rc := newRecorder()
	rc.record(at(0), sampleOf(5000, 4000, -1, 0, false))
	var body reportBody
	rc.snapshot(&body)
	assert.Equal(t, waitQuantiles{}, body.Waits, "nobody was admitted while this gateway watched")

	rc.record(at(30), sampleOf(5000, 5000, -1, 0, false))
	rc.snapshot(&body)
	n := func(v int64) *int64 { return &v }
	assert.Equal(t, waitQuantiles{P50: n(30), P90: n(30), P99: n(30)}, body.Waits, "waited at least since the first look")
	assert.Equal(t, int64(1000), rc.waits.total)
}

// TestRecorderLooksOnceTheRoomReadTheStore: a room that has not yet read
// its event's state shows zeros; taken for the first look, they would make
// every position already admitted a wait of the gateway's.
func TestRecorderLooksOnceTheRoomReadTheStore(t *testing.T) {
	clk := time.Unix(1_000_000, 0)
	now := func() time.Time { return clk }
	store := waitroom.NewMemoryStore(now)
	ev := testenv.EventID()
	before := waitroom.NewRoom(store, ev, waitroom.RoomOptions{Now: now})
	_, err := before.Refresh(t.Context())
	require.NoError(t, err)
	for range 50 {
		_, err := before.Join(t.Context())
		require.NoError(t, err)
	}
	_, err = before.Update(t.Context(), waitroom.Change{SetWatermark: func() *int64 { v := int64(40); return &v }()})
	require.NoError(t, err)

	room := waitroom.NewRoom(store, ev, waitroom.RoomOptions{Now: now})
	entry := &roomEntry{key: roomKey{Event: ev}, room: room}
	rc := newRecorder()
	rc.look(clk, entry)
	_, err = room.Refresh(t.Context())
	require.NoError(t, err)
	rc.look(clk, entry)

	var body reportBody
	rc.snapshot(&body)
	assert.Equal(t, waitQuantiles{}, body.Waits, "the 40 admitted before the gateway looked are not its waits")
	require.NotEmpty(t, body.Timeline)
	assert.Equal(t, int64(40), body.Timeline[0].Admitted)
}

// TestReportRefusedByTheChallenge: every arrival is handed a challenge
// before its place, so the challenges handed out are not refusals; the
// report counts the solutions turned down (wrong, used again).
func TestReportRefusedByTheChallenge(t *testing.T) {
	h := provision(t, &Handler{Challenge: 4})
	a := newAdmin(t, poolClock)
	withSolution := func(s string) *http.Request {
		r := get(h, "")
		r.Header.Set(HeaderSolution, s)
		return r
	}
	for range 3 {
		sol := waitroom.Solve(decode[challengeBody](t, serve(t, h, get(h, ""))).Challenge, 4)
		require.Equal(t, StatusWaiting, serve(t, h, withSolution(sol)).status())
		require.Equal(t, StatusChallenge, serve(t, h, withSolution(sol)).status(), "used again")
	}
	require.Equal(t, StatusChallenge, serve(t, h, withSolution("garbage")).status())

	rec := adminServe(a, http.MethodGet, fmt.Sprintf("/waitroom/events/%d/report", h.Event), "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var body reportBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, int64(4), body.Refused.Challenge, "three solutions used again and one wrong; the three that joined were not refused")
}

// TestFiguresWithSoldOutAtZero: with sold_out_at_zero the origin's flag is
// the 410 at once, held seats or not, so the report, the live figures and
// the gauges count nobody waiting and no stretch all held, as those
// visitors were answered; else everyone told sold out, no longer polling,
// would count as waiting, then as abandoned.
func TestFiguresWithSoldOutAtZero(t *testing.T) {
	clk := newClock()
	h := &Handler{SoldOutAtZero: true}
	h.now = clk.Now
	provision(t, h)
	for range 3 {
		serve(t, h, get(h, ""))
	}
	require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 10, Held: 4, Remaining: 0, Healthy: true, At: clk.Now()}))
	update(t, h, waitroom.Change{SoldOut: func() *bool { v := true; return &v }(), Actor: waitroom.ActorOrigin, Reason: "no seat left to hold"})
	require.Equal(t, http.StatusGone, serve(t, h, get(h, "")).rec.Code, "the site's answer")

	admitted, waiting := queueCounts(h.room)
	assert.Equal(t, int64(0), waiting, "nobody waits: they were told sold out")
	assert.Equal(t, int64(0), admitted)
	s := sampleRoom(h.room)
	assert.True(t, s.avail.SoldOut, "the sold-out answer")
	assert.False(t, allHeld(s))
}
