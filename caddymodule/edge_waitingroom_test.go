package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/waitroom"
)

func TestUnmarshalCloudflareWaitingRoom(t *testing.T) {
	for _, c := range []struct {
		name  string
		input string
		want  *CloudflareWaitingRoom
		err   string
	}{
		{
			name: "every setting",
			input: `waitroom {
				cloudflare_waiting_room {
					zone_id {env.CF_ZONE_ID}
					waiting_room_id 699d98642c564d2e855e9661899b7252
					api_token {env.CF_API_TOKEN}
					api_url http://127.0.0.1:9/client/v4/
					debounce 10s
					prequeue 30m
				}
			}`,
			want: &CloudflareWaitingRoom{ZoneID: "{env.CF_ZONE_ID}", WaitingRoomID: "699d98642c564d2e855e9661899b7252",
				APIToken: "{env.CF_API_TOKEN}", APIURL: "http://127.0.0.1:9/client/v4/",
				Debounce: caddy.Duration(10 * time.Second), PreQueue: caddy.Duration(30 * time.Minute)},
		},
		{
			name:  "the required ones",
			input: "waitroom {\n cloudflare_waiting_room {\n zone_id z\n waiting_room_id r\n api_token t\n }\n event 9\n}",
			want:  &CloudflareWaitingRoom{ZoneID: "z", WaitingRoomID: "r", APIToken: "t"},
		},
		{name: "arguments", input: "waitroom {\n cloudflare_waiting_room abc\n}", err: "cloudflare_waiting_room takes its settings in a block"},
		{name: "empty", input: "waitroom {\n cloudflare_waiting_room {\n }\n}", err: "cloudflare_waiting_room: zone_id, waiting_room_id and api_token are required"},
		{name: "no zone", input: "waitroom {\n cloudflare_waiting_room {\n waiting_room_id r\n api_token t\n }\n}", err: "zone_id, waiting_room_id and api_token are required"},
		{name: "no room", input: "waitroom {\n cloudflare_waiting_room {\n zone_id z\n api_token t\n }\n}", err: "zone_id, waiting_room_id and api_token are required"},
		{name: "no token", input: "waitroom {\n cloudflare_waiting_room {\n zone_id z\n waiting_room_id r\n }\n}", err: "zone_id, waiting_room_id and api_token are required"},
		{name: "unknown setting", input: "waitroom {\n cloudflare_waiting_room {\n account_id x\n }\n}", err: `unrecognized cloudflare_waiting_room subdirective "account_id"`},
		{name: "a setting twice", input: "waitroom {\n cloudflare_waiting_room {\n zone_id z\n waiting_room_id r\n zone_id y\n api_token t\n }\n}", err: "cloudflare_waiting_room: zone_id: given twice in one block (first on line 3)"},
		{name: "two tokens", input: "waitroom {\n cloudflare_waiting_room {\n api_token a b\n }\n}", err: "cloudflare_waiting_room: api_token: want exactly one argument"},
		{name: "bad debounce", input: "waitroom {\n cloudflare_waiting_room {\n debounce soon\n }\n}", err: `cloudflare_waiting_room: debounce: "soon" is not a duration`},
		{name: "bad prequeue", input: "waitroom {\n cloudflare_waiting_room {\n prequeue early\n }\n}", err: `cloudflare_waiting_room: prequeue: "early" is not a duration`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(c.input))
			if c.err != "" {
				assert.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, h.CloudflareWaitingRoom)
		})
	}
}

func TestCloudflareWaitingRoomIsValidated(t *testing.T) {
	full := CloudflareWaitingRoom{ZoneID: "z", WaitingRoomID: "r", APIToken: "{env.WAITROOM_TEST_UNSET_TOKEN}"}
	for name, c := range map[string]struct {
		edit func(*CloudflareWaitingRoom)
		want string
	}{
		"no zone":        {func(c *CloudflareWaitingRoom) { c.ZoneID = "" }, "cloudflare_waiting_room: zone_id is required"},
		"no room":        {func(c *CloudflareWaitingRoom) { c.WaitingRoomID = "" }, "cloudflare_waiting_room: waiting_room_id is required"},
		"token unset":    {func(*CloudflareWaitingRoom) {}, "cloudflare_waiting_room: api_token is required (once placeholders are replaced)"},
		"negative delay": {func(c *CloudflareWaitingRoom) { c.APIToken, c.Debounce = "t", -1 }, "cloudflare_waiting_room: debounce must not be negative"},
		"short prequeue": {func(c *CloudflareWaitingRoom) { c.APIToken, c.PreQueue = "t", caddy.Duration(time.Minute) }, "cloudflare_waiting_room: prequeue must be at least 5m0s"},
	} {
		t.Run(name, func(t *testing.T) {
			wr := full
			c.edit(&wr)
			h := &Handler{Event: 1, Keys: []Key{{ID: "k1", Secret: testSecret}}, CloudflareWaitingRoom: &wr}
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			err := h.Provision(ctx)
			assert.ErrorContains(t, err, c.want)
			assert.Nil(t, h.room, "a refused config holds no room")
		})
	}
}

// waitingRoomStandIn is the part of Cloudflare's Waiting Rooms API the
// gateway uses; edge/cloudflare's tests check the requests in detail.
// It hands the bodies of the room's PATCHes and of the events created to
// the test.
func waitingRoomStandIn(t *testing.T) (url string, patches, events <-chan map[string]any) {
	p, e := make(chan map[string]any, 100), make(chan map[string]any, 100)
	const base = "/client/v4/zones/zone/waiting_rooms/room"
	answer := func(w http.ResponseWriter, result any) {
		w.Header().Set("Content-Type", "application/json")
		assert.NoError(t, json.NewEncoder(w).Encode(map[string]any{"success": true, "errors": []any{}, "messages": []any{}, "result": result}))
	}
	body := func(r *http.Request) map[string]any {
		var b map[string]any
		assert.NoError(t, json.NewDecoder(r.Body).Decode(&b))
		return b
	}
	var mu sync.Mutex
	room := map[string]any{"id": "room", "name": "shop", "host": "tickets.test", "path": "/",
		"new_users_per_minute": 200, "total_active_users": 200, "queue_all": false}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "Bearer cf-test-token", r.Header.Get("Authorization"))
		mu.Lock()
		defer mu.Unlock()
		switch r.Method + " " + r.URL.Path {
		case "GET " + base:
			answer(w, room)
		case "PATCH " + base:
			b := body(r)
			for k, v := range b {
				room[k] = v
			}
			answer(w, room)
			p <- b
		case "GET " + base + "/events":
			answer(w, []any{})
		case "POST " + base + "/events":
			b := body(r)
			b["id"] = "ev1"
			answer(w, b)
			e <- b
		default:
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/client/v4/", p, e
}

func TestSoldOutQueuesAllAtCloudflare(t *testing.T) {
	url, patches, events := waitingRoomStandIn(t)
	t.Setenv("WAITROOM_TEST_CF_TOKEN", "cf-test-token")
	h := provision(t, &Handler{OpensAt: "2030-01-31T10:00:00Z",
		CloudflareWaitingRoom: &CloudflareWaitingRoom{ZoneID: "zone", WaitingRoomID: "room",
			APIToken: "{env.WAITROOM_TEST_CF_TOKEN}", APIURL: url, Debounce: caddy.Duration(time.Millisecond)}})

	next := func(ch <-chan map[string]any) map[string]any {
		t.Helper()
		select {
		case b := <-ch:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("nothing reached the stand-in")
			return nil
		}
	}
	ev := next(events)
	assert.Equal(t, "2030-01-31T10:00:00Z", ev["event_start_time"])
	assert.Equal(t, "2030-01-31T09:00:00Z", ev["prequeue_start_time"])
	assert.Equal(t, true, ev["shuffle_at_event_start"])

	update(t, h, waitroom.Change{SoldOut: ptr(true)})
	// The room as first read is already as the quiet room steers it (200,
	// 200, not queueing): the first write is the sale's end.
	b := next(patches)
	assert.Equal(t, true, b["queue_all"])
	assert.Equal(t, "tickets.test", b["host"])
	assert.Equal(t, 200.0, b["new_users_per_minute"])

	update(t, h, waitroom.Change{SoldOut: ptr(false)})
	for b = next(patches); b["queue_all"] != false; b = next(patches) {
	}
}

func TestAdmissionsSetCloudflaresRates(t *testing.T) {
	url, patches, _ := waitingRoomStandIn(t)
	h := provision(t, &Handler{CloudflareWaitingRoom: &CloudflareWaitingRoom{ZoneID: "zone", WaitingRoomID: "room",
		APIToken: "cf-test-token", APIURL: url, Debounce: caddy.Duration(time.Millisecond)}})

	// Two raises: the second admits 2,000 positions, within the last two
	// minutes (1,000 a minute) and within the decision time (2,000
	// deciding), plus one minute's headroom.
	update(t, h, waitroom.Change{SetWatermark: ptr(int64(1000))})
	update(t, h, waitroom.Change{SetWatermark: ptr(int64(3000))})
	deadline := time.After(10 * time.Second)
	for {
		select {
		case b := <-patches:
			if b["new_users_per_minute"] == 1000.0 {
				assert.Equal(t, 3000.0, b["total_active_users"])
				assert.Equal(t, false, b["queue_all"])
				return
			}
		case <-deadline:
			t.Fatal("the rates never reached the stand-in")
		}
	}
}
