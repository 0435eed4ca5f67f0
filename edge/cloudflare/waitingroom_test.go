package cloudflare

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/waitroom"
)

const (
	testZone = "023e105f4ecef8ad9ca31a8372d0c353"
	testRoom = "699d98642c564d2e855e9661899b7252"
)

// roomAPI is the part of Cloudflare's Waiting Rooms API the driver uses:
// one room and its events. It checks every request as the API would,
// answers in the API's envelope, and fails with the statuses fail gives,
// one per request in turn (0: answer).
type roomAPI struct {
	t    *testing.T
	srv  *httptest.Server
	mu   sync.Mutex
	fail []int
	seen int
	// room is the room as the API keeps it.
	room map[string]any
	// events are the room's events by id.
	events map[string]map[string]any
	nextID int
	// calls are the requests answered, as "METHOD path".
	calls []string
	// patches are the bodies of the room's PATCHes.
	patches []map[string]any
}

func newRoomAPI(t *testing.T, fail ...int) *roomAPI {
	a := &roomAPI{t: t, fail: fail, events: map[string]map[string]any{},
		room: map[string]any{"id": testRoom, "name": "shop_tickets", "host": "tickets.example.com", "path": "/sale",
			"new_users_per_minute": 200, "total_active_users": 200, "queue_all": false, "session_duration": 5}}
	mux := http.NewServeMux()
	base := "/client/v4/zones/{zone}/waiting_rooms/{room}"
	mux.HandleFunc("GET "+base, a.serve(a.getRoom))
	mux.HandleFunc("PATCH "+base, a.serve(a.patchRoom))
	mux.HandleFunc("GET "+base+"/events", a.serve(a.listEvents))
	mux.HandleFunc("POST "+base+"/events", a.serve(a.newEvent))
	mux.HandleFunc("PATCH "+base+"/events/{event}", a.serve(a.patchEvent))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.NotFound(w, r)
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *roomAPI) url() string { return a.srv.URL + "/client/v4/" }

// serve checks what every request shares and answers h's result in the
// envelope, unless this request is to fail.
func (a *roomAPI) serve(h func(r *http.Request, body map[string]any) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t := a.t
		assert.Equal(t, testZone, r.PathValue("zone"))
		assert.Equal(t, testRoom, r.PathValue("room"))
		assert.Equal(t, "Bearer "+testToken, r.Header.Get("Authorization"))
		var body map[string]any
		raw, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		if r.Method == http.MethodGet {
			assert.Empty(t, raw, "a GET has no body")
		} else {
			assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
			require.NoError(t, json.Unmarshal(raw, &body), string(raw))
		}

		a.mu.Lock()
		defer a.mu.Unlock()
		status := 0
		if a.seen < len(a.fail) {
			status = a.fail[a.seen]
		}
		a.seen++
		w.Header().Set("Content-Type", "application/json")
		if status != 0 {
			w.WriteHeader(status)
			_, _ = fmt.Fprintf(w, `{"success":false,"errors":[{"code":1000,"message":"%s"}],"messages":[],"result":null}`, http.StatusText(status))
			return
		}
		a.calls = append(a.calls, r.Method+" "+r.URL.Path)
		env := map[string]any{"success": true, "errors": []any{}, "messages": []any{}, "result": h(r, body)}
		if r.Method == http.MethodGet && r.PathValue("event") == "" && len(r.URL.Path) > len("/events") && r.URL.Path[len(r.URL.Path)-len("/events"):] == "/events" {
			n := len(env["result"].([]any))
			env["result_info"] = map[string]any{"page": 1, "per_page": 25, "count": n, "total_count": n, "total_pages": 1}
		}
		require.NoError(t, json.NewEncoder(w).Encode(env))
	}
}

func (a *roomAPI) getRoom(*http.Request, map[string]any) any { return a.room }

func (a *roomAPI) patchRoom(r *http.Request, body map[string]any) any {
	t := a.t
	// The API refuses a PATCH without these.
	for _, f := range []string{"host", "name", "new_users_per_minute", "total_active_users"} {
		assert.Contains(t, body, f, "the PATCH carries %s", f)
	}
	assert.Equal(t, a.room["host"], body["host"], "the room's host is kept")
	assert.Equal(t, a.room["name"], body["name"], "the room's name is kept")
	assert.Equal(t, a.room["path"], body["path"], "the room's path is kept")
	for _, f := range []string{"new_users_per_minute", "total_active_users"} {
		n, ok := body[f].(float64)
		if assert.True(t, ok, "%s is a number", f) {
			assert.GreaterOrEqual(t, n, 200.0, f)
			assert.LessOrEqual(t, n, float64(math.MaxInt32), f)
		}
	}
	a.patches = append(a.patches, body)
	for k, v := range body {
		a.room[k] = v
	}
	return a.room
}

func (a *roomAPI) listEvents(r *http.Request, _ map[string]any) any {
	out := []any{}
	if p := r.URL.Query().Get("page"); p != "" && p != "1" {
		// Every event is on the first page.
		return out
	}
	for _, e := range a.events {
		out = append(out, e)
	}
	return out
}

// checkEvent checks an event's body as the API would.
func (a *roomAPI) checkEvent(body map[string]any) {
	t := a.t
	for _, f := range []string{"name", "event_start_time", "event_end_time"} {
		assert.Contains(t, body, f, "an event carries %s", f)
	}
	start, err := time.Parse(time.RFC3339, fmt.Sprint(body["event_start_time"]))
	require.NoError(t, err)
	end, err := time.Parse(time.RFC3339, fmt.Sprint(body["event_end_time"]))
	require.NoError(t, err)
	pre, err := time.Parse(time.RFC3339, fmt.Sprint(body["prequeue_start_time"]))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, end.Sub(start), time.Minute, "an event lasts a minute at least")
	assert.GreaterOrEqual(t, start.Sub(pre), 5*time.Minute, "a pre-queue starts five minutes before at least")
	assert.Equal(t, true, body["shuffle_at_event_start"])
	// Rates are left to the room, which the driver steers.
	assert.NotContains(t, body, "new_users_per_minute")
	assert.NotContains(t, body, "total_active_users")
}

func (a *roomAPI) newEvent(_ *http.Request, body map[string]any) any {
	a.checkEvent(body)
	a.nextID++
	id := "25756b2dfe6e378a06b033b670413757" + strconv.Itoa(a.nextID)
	body["id"] = id
	a.events[id] = body
	return body
}

func (a *roomAPI) patchEvent(r *http.Request, body map[string]any) any {
	a.checkEvent(body)
	e, ok := a.events[r.PathValue("event")]
	require.True(a.t, ok, "an event the room has")
	for k, v := range body {
		e[k] = v
	}
	return e
}

func (a *roomAPI) requests() (tried int, calls []string, patches []map[string]any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen, append([]string(nil), a.calls...), append([]map[string]any(nil), a.patches...)
}

var testOpening = time.Date(2030, 1, 31, 10, 0, 0, 0, time.UTC)

func newTestWaitingRoom(t *testing.T, api *roomAPI, opensAt time.Time) (*WaitingRoom, *fakeClock) {
	t.Helper()
	w, err := NewWaitingRoom(WaitingRoomConfig{ZoneID: testZone, WaitingRoomID: testRoom, APIToken: testToken,
		APIURL: api.url(), Debounce: 5 * time.Second, Event: 42, OpensAt: opensAt}, nil)
	require.NoError(t, err)
	clk := &fakeClock{now: time.Date(2030, 1, 31, 8, 0, 0, 0, time.UTC)}
	w.now = clk.Now
	w.backoff = func(n int) time.Duration { return time.Second << (n - 1) }
	return w, clk
}

const (
	roomPath  = "/client/v4/zones/" + testZone + "/waiting_rooms/" + testRoom
	eventPath = roomPath + "/events"
)

func TestWaitingRoomDebouncesToOnePatch(t *testing.T) {
	api := newRoomAPI(t)
	w, clk := newTestWaitingRoom(t, api, time.Time{})
	ctx := context.Background()

	// The closed loop's pace moves every half second for four seconds.
	for i := range 8 {
		w.Steer(Steering{NewUsersPerMinute: 300 + int64(i), TotalActiveUsers: 900})
		next, err := w.RunOnce(ctx)
		require.NoError(t, err)
		assert.False(t, next.IsZero())
		clk.Advance(500 * time.Millisecond)
	}
	tried, _, _ := api.requests()
	assert.Zero(t, tried, "nothing written within the debounce")

	clk.Advance(time.Second)
	next, err := w.RunOnce(ctx)
	require.NoError(t, err)
	assert.True(t, next.IsZero(), "nothing left to write")
	_, calls, patches := api.requests()
	assert.Equal(t, []string{"GET " + roomPath, "PATCH " + roomPath}, calls, "no event without an opening")
	require.Len(t, patches, 1)
	assert.Equal(t, map[string]any{"host": "tickets.example.com", "name": "shop_tickets", "path": "/sale",
		"new_users_per_minute": 307.0, "total_active_users": 900.0, "queue_all": false}, patches[0], "the latest, with the room's own host, name and path")

	// The same settings again write nothing; a room already as wanted is
	// read but not written (a reload, another gateway).
	w.Steer(Steering{NewUsersPerMinute: 307, TotalActiveUsers: 900})
	clk.Advance(time.Hour)
	_, err = w.RunOnce(ctx)
	require.NoError(t, err)
	tried, _, _ = api.requests()
	assert.Equal(t, 2, tried)

	w2, clk2 := newTestWaitingRoom(t, api, time.Time{})
	w2.Steer(Steering{NewUsersPerMinute: 307, TotalActiveUsers: 900})
	clk2.Advance(5 * time.Second)
	_, err = w2.RunOnce(ctx)
	require.NoError(t, err)
	_, calls, _ = api.requests()
	assert.Equal(t, []string{"GET " + roomPath, "PATCH " + roomPath, "GET " + roomPath}, calls)
}

func TestWaitingRoomQueuesAllWhenSoldOutAndResumes(t *testing.T) {
	api := newRoomAPI(t)
	w, clk := newTestWaitingRoom(t, api, time.Time{})
	ctx := context.Background()

	steer := func(f Figures) map[string]any {
		t.Helper()
		w.Steer(SteeringOf(f))
		clk.Advance(5 * time.Second)
		_, err := w.RunOnce(ctx)
		require.NoError(t, err)
		_, _, patches := api.requests()
		require.NotEmpty(t, patches)
		return patches[len(patches)-1]
	}
	assert.Equal(t, true, steer(Figures{SoldOut: true})["queue_all"], "sold out")
	assert.Equal(t, false, steer(Figures{AdmittedPerMinute: 450})["queue_all"], "on sale again")
	assert.Equal(t, true, steer(Figures{Paused: true, AdmittedPerMinute: 450})["queue_all"], "paused")
	last := steer(Figures{AdmittedPerMinute: 450, Undecided: 100, Holding: 50})
	assert.Equal(t, false, last["queue_all"], "resumed")
	assert.Equal(t, 450.0, last["new_users_per_minute"])
	assert.Equal(t, 600.0, last["total_active_users"])
}

func TestWaitingRoomRetriesAfterFailures(t *testing.T) {
	// The GET fails (500), then the PATCH is limited (429).
	api := newRoomAPI(t, http.StatusInternalServerError, 0, http.StatusTooManyRequests)
	w, clk := newTestWaitingRoom(t, api, time.Time{})
	ctx := context.Background()

	w.Steer(Steering{QueueAll: true, NewUsersPerMinute: 200, TotalActiveUsers: 200})
	clk.Advance(5 * time.Second)
	next, err := w.RunOnce(ctx)
	require.Error(t, err, "500")
	assert.Equal(t, clk.now.Add(time.Second), next, "first retry after 1s")

	clk.Advance(999 * time.Millisecond)
	_, err = w.RunOnce(ctx)
	require.NoError(t, err)
	tried, _, _ := api.requests()
	assert.Equal(t, 1, tried, "no retry before the backoff")

	clk.Advance(time.Millisecond)
	next, err = w.RunOnce(ctx)
	require.Error(t, err, "429")
	assert.Equal(t, clk.now.Add(2*time.Second), next, "the backoff doubles")

	clk.Advance(2 * time.Second)
	next, err = w.RunOnce(ctx)
	require.NoError(t, err)
	assert.True(t, next.IsZero())
	tried, calls, patches := api.requests()
	assert.Equal(t, 5, tried, "one request per try: the client does not retry on its own")
	assert.Equal(t, []string{"GET " + roomPath, "GET " + roomPath, "PATCH " + roomPath}, calls)
	require.Len(t, patches, 1)
	assert.Equal(t, true, patches[0]["queue_all"])
}

func TestWaitingRoomKeepsOneEventForTheOpening(t *testing.T) {
	api := newRoomAPI(t)
	ctx := context.Background()

	w, _ := newTestWaitingRoom(t, api, testOpening)
	next, err := w.RunOnce(ctx)
	require.NoError(t, err)
	assert.True(t, next.IsZero())
	_, calls, _ := api.requests()
	assert.Equal(t, []string{"GET " + eventPath, "POST " + eventPath}, calls, "listed, then created")
	require.Len(t, api.events, 1)
	var id string
	var ev map[string]any
	for id, ev = range api.events {
	}
	assert.Equal(t, "waitroom_event_42", ev["name"])
	assert.Equal(t, "2030-01-31T09:00:00Z", ev["prequeue_start_time"])
	assert.Equal(t, "2030-01-31T10:00:00Z", ev["event_start_time"])
	assert.Equal(t, "2030-01-31T11:00:00Z", ev["event_end_time"])
	assert.Equal(t, false, ev["suspended"])

	// Done once: the driver does not look again.
	_, err = w.RunOnce(ctx)
	require.NoError(t, err)
	tried, _, _ := api.requests()
	assert.Equal(t, 2, tried)

	// A reload with the same opening finds the event and leaves it.
	w, _ = newTestWaitingRoom(t, api, testOpening)
	_, err = w.RunOnce(ctx)
	require.NoError(t, err)
	_, calls, _ = api.requests()
	assert.Equal(t, []string{"GET " + eventPath, "POST " + eventPath, "GET " + eventPath}, calls)

	// A reload with the opening moved edits the same event.
	w, _ = newTestWaitingRoom(t, api, testOpening.Add(30*time.Minute))
	_, err = w.RunOnce(ctx)
	require.NoError(t, err)
	_, calls, _ = api.requests()
	assert.Equal(t, []string{"GET " + eventPath, "POST " + eventPath, "GET " + eventPath,
		"GET " + eventPath, "PATCH " + eventPath + "/" + id}, calls)
	require.Len(t, api.events, 1, "edited, not duplicated")
	assert.Equal(t, "2030-01-31T10:30:00Z", api.events[id]["event_start_time"])
	assert.Equal(t, "2030-01-31T09:30:00Z", api.events[id]["prequeue_start_time"])
}

func TestWaitingRoomMakesNoEventForAPastOpening(t *testing.T) {
	api := newRoomAPI(t)
	w, clk := newTestWaitingRoom(t, api, testOpening)
	clk.now = testOpening.Add(OpeningEventLength)
	next, err := w.RunOnce(context.Background())
	require.NoError(t, err)
	assert.True(t, next.IsZero())
	_, calls, _ := api.requests()
	assert.Equal(t, []string{"GET " + eventPath}, calls, "looked for, not created")
	assert.Empty(t, api.events)
}

func TestWaitingRoomRetriesTheEvent(t *testing.T) {
	api := newRoomAPI(t, 0, http.StatusServiceUnavailable)
	w, clk := newTestWaitingRoom(t, api, testOpening)
	ctx := context.Background()

	next, err := w.RunOnce(ctx)
	require.Error(t, err, "the POST failed")
	assert.Equal(t, clk.now.Add(time.Second), next)
	clk.Advance(time.Second)
	_, err = w.RunOnce(ctx)
	require.NoError(t, err)
	_, calls, _ := api.requests()
	assert.Equal(t, []string{"GET " + eventPath, "GET " + eventPath, "POST " + eventPath}, calls)
	assert.Len(t, api.events, 1)
}

func TestRunSteersInTheBackground(t *testing.T) {
	api := newRoomAPI(t)
	w, err := NewWaitingRoom(WaitingRoomConfig{ZoneID: testZone, WaitingRoomID: testRoom, APIToken: testToken,
		APIURL: api.url(), Debounce: time.Millisecond, Event: 7}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	w.Steer(Steering{QueueAll: true, NewUsersPerMinute: 200, TotalActiveUsers: 200})
	require.Eventually(t, func() bool {
		_, _, patches := api.requests()
		return len(patches) == 1
	}, 10*time.Second, 5*time.Millisecond)
	cancel()
	<-done
}

func TestSteeringOf(t *testing.T) {
	for name, tc := range map[string]struct {
		f    Figures
		want Steering
	}{
		"quiet":    {Figures{}, Steering{NewUsersPerMinute: 200, TotalActiveUsers: 200}},
		"sold out": {Figures{SoldOut: true, AdmittedPerMinute: 1000}, Steering{QueueAll: true, NewUsersPerMinute: 1000, TotalActiveUsers: 1000}},
		"paused":   {Figures{Paused: true}, Steering{QueueAll: true, NewUsersPerMinute: 200, TotalActiveUsers: 200}},
		"busy": {Figures{AdmittedPerMinute: 1200.2, Undecided: 600, Holding: 350},
			Steering{NewUsersPerMinute: 1300, TotalActiveUsers: 2300}},
		"two figures": {Figures{AdmittedPerMinute: 287, Undecided: 10_001},
			Steering{NewUsersPerMinute: 290, TotalActiveUsers: 11_000}},
		"round already": {Figures{AdmittedPerMinute: 300, Undecided: 4_700},
			Steering{NewUsersPerMinute: 300, TotalActiveUsers: 5_000}},
		"huge": {Figures{AdmittedPerMinute: 1e12, Undecided: math.MaxInt64, Holding: 5},
			Steering{NewUsersPerMinute: math.MaxInt32, TotalActiveUsers: math.MaxInt32}},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, SteeringOf(tc.f))
		})
	}
}

func TestFiguresOf(t *testing.T) {
	now := time.Date(2030, 1, 31, 10, 10, 0, 0, time.UTC)
	marks := []waitroom.AppliedWatermark{
		{Watermark: 100, At: now.Add(-5 * time.Minute)},
		{Watermark: 400, At: now.Add(-90 * time.Second)},
		{Watermark: 700, At: now.Add(-20 * time.Second)},
	}
	s := waitroom.State{Watermark: 700, Paused: true}
	f := FiguresOf(s, marks, waitroom.Inventory{Held: 40}, now, 30*time.Second)
	// 600 admitted since two minutes ago (from 100), 300 within the
	// decision time (from 400).
	assert.Equal(t, Figures{Paused: true, AdmittedPerMinute: 300, Undecided: 300, Holding: 40}, f)

	// A room that just started measures from the first watermark it saw.
	f = FiguresOf(waitroom.State{Watermark: 700}, marks[1:], waitroom.Inventory{}, now, time.Minute)
	assert.Equal(t, Figures{AdmittedPerMinute: 150, Undecided: 300}, f)
	assert.Equal(t, Figures{SoldOut: true}, FiguresOf(waitroom.State{SoldOut: true, Watermark: 5}, nil, waitroom.Inventory{}, now, time.Minute))
}

func TestWaitingRoomConfigValidate(t *testing.T) {
	ok := WaitingRoomConfig{ZoneID: "z", WaitingRoomID: "r", APIToken: "t"}
	for name, tc := range map[string]struct {
		edit func(*WaitingRoomConfig)
		want string
	}{
		"complete":                 {func(*WaitingRoomConfig) {}, ""},
		"no zone":                  {func(c *WaitingRoomConfig) { c.ZoneID = "" }, "zone_id is required"},
		"no room":                  {func(c *WaitingRoomConfig) { c.WaitingRoomID = "" }, "waiting_room_id is required"},
		"no token":                 {func(c *WaitingRoomConfig) { c.APIToken = "" }, "api_token is required"},
		"bad debounce":             {func(c *WaitingRoomConfig) { c.Debounce = -time.Second }, "debounce must not be negative"},
		"short prequeue":           {func(c *WaitingRoomConfig) { c.PreQueue = time.Minute }, "prequeue must be at least 5m0s"},
		"a proxy":                  {func(c *WaitingRoomConfig) { c.APIURL = "https://proxy.internal/client/v4/" }, ""},
		"api_url without a scheme": {func(c *WaitingRoomConfig) { c.APIURL = "api.cloudflare.com/client/v4/" }, "api_url: want an http or https URL"},
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
