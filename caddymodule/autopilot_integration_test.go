package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

// originRoom is the room an origin would publish its inventory through:
// for the memory store the gateway's own (one process), else a follower on
// the same Redis.
func originRoom(t *testing.T, store string, event int64) *waitroom.Room {
	t.Helper()
	if store == "memory" {
		for _, e := range eventRooms() {
			if e.key.Event == event {
				return e.room
			}
		}
		t.Fatalf("no room of event %d", event)
	}
	rdb, err := waitroom.NewRedisClient(store)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	return waitroom.NewRoom(waitroom.NewRedisStore(rdb, waitroom.RedisOptions{}), event, waitroom.RoomOptions{Follow: true})
}

// publishing keeps inv published, as the origin does, until the test ends;
// set changes it.
func publishing(t *testing.T, r *waitroom.Room, inv waitroom.Inventory) (set func(waitroom.Inventory)) {
	t.Helper()
	figures := make(chan waitroom.Inventory)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			inv.At = time.Time{}
			_ = r.PublishInventory(ctx, inv)
			select {
			case <-ctx.Done():
				return
			case inv = <-figures:
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return func(inv waitroom.Inventory) { figures <- inv }
}

func changeLog(t *testing.T, port int, event int64) []waitroom.LogEntry {
	t.Helper()
	res := adminDo(t, 10*time.Second, func() *http.Request {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://localhost:%d/waitroom/events/%d/log", port, event), nil)
		return req
	})
	defer res.Body.Close()
	var log []waitroom.LogEntry
	require.NoError(t, json.NewDecoder(res.Body).Decode(&log))
	return log
}

func TestClosedLoopAutopilotMemory(t *testing.T) { closedLoopAutopilot(t, "memory") }

func TestClosedLoopAutopilotRedis(t *testing.T) { closedLoopAutopilot(t, testenv.RedisURL(t)) }

// closedLoopAutopilot: autopilot { … } admits nobody before the origin
// publishes, then as many as the free seats call for at the assumed
// conversion, logged with why; no more while those admitted decide and
// nothing is free, more once a hold is released.
func closedLoopAutopilot(t *testing.T, store string) {
	ev := testenv.EventID()
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
		autopilot {
			interval 100ms
			max_undecided 6
			decision_time 1m
		}
	}
	respond "the site"`, ev, testSecret, store))
	visitors := make([]*visitor, 10)
	for i := range visitors {
		visitors[i] = newVisitor(t)
		res := visitors[i].get(s.url("/"))
		require.Equal(t, "waiting", res.Header.Get(HeaderStatus), res.body)
	}
	origin := originRoom(t, store, ev)
	state := func() map[string]any {
		_, st, _ := adminCall(t, adminPort, http.MethodGet, "/waitroom/events/"+strconv.FormatInt(ev, 10), "")
		return st
	}
	require.Zero(t, state()["watermark"], "nothing published: nobody admitted")

	set := publishing(t, origin, waitroom.Inventory{Sellable: 10, Remaining: 2, Held: 8, Healthy: true})
	require.Eventually(t, func() bool { return state()["watermark"] == 4.0 }, 10*time.Second, 20*time.Millisecond,
		"2 seats at the assumed conversion 0.5")
	log := changeLog(t, adminPort, ev)
	require.NotEmpty(t, log)
	assert.Equal(t, waitroom.ActorAutopilot, log[0].Actor)
	assert.Equal(t, "admit 4: 2 seats free, 0 undecided, conversion 0.50 (assumed), 1.0 seats each, decision time 1m0s", log[0].Reason)
	assert.Equal(t, "admitted", visitors[3].get(s.url("/")).Header.Get(HeaderStatus))
	assert.Equal(t, "waiting", visitors[4].get(s.url("/")).Header.Get(HeaderStatus))

	// The 4 admitted take the 2 seats; 2 released holds free 2 more: the
	// cap of 6 undecided admits 2 of the 4 the seats call for.
	set(waitroom.Inventory{Sellable: 10, Remaining: 2, Held: 8, Healthy: true})
	set(waitroom.Inventory{Sellable: 10, Remaining: 3, Held: 7, Healthy: true})
	require.Eventually(t, func() bool { return state()["watermark"] == 6.0 }, 10*time.Second, 20*time.Millisecond,
		"a released hold's seat admits more, up to the cap")
	log = changeLog(t, adminPort, ev)
	assert.True(t, strings.HasPrefix(log[0].Reason, "admit 2: 3 seats free, 4 undecided"), log[0].Reason)

	set(waitroom.Inventory{Sellable: 10, Remaining: 10, Healthy: false})
	set(waitroom.Inventory{Sellable: 10, Remaining: 10, Healthy: false})
	time.Sleep(300 * time.Millisecond) // three steering intervals
	assert.Equal(t, 6.0, state()["watermark"], "an unready origin admits nobody")
}

func TestAdminHardCapDerivedMemory(t *testing.T) { adminHardCapDerived(t, "memory") }

func TestAdminHardCapDerivedRedis(t *testing.T) { adminHardCapDerived(t, testenv.RedisURL(t)) }

// adminHardCapDerived: {"per_remaining": k} on the hard cap route derives
// the cap from the origin's figures (watermark + k × remaining), live, and
// arrivals past it are sold out; a fixed cap ends it.
func adminHardCapDerived(t *testing.T, store string) {
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	s := load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store %s
		watermark 2
	}
	respond "the site"`, ev, testSecret, store))
	publishing(t, originRoom(t, store, ev), waitroom.Inventory{Sellable: 10, Remaining: 1, Healthy: true})
	code, st, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/hard_cap", `{"per_remaining": 2, "reason": "two per seat"}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, 2.0, st["hard_cap_per_remaining"])
	require.Eventually(t, func() bool {
		_, st, _ = adminCall(t, adminPort, http.MethodGet, "/waitroom/events/"+evs, "")
		return st["hard_cap"] == 4.0
	}, 10*time.Second, 20*time.Millisecond, "2 admitted + 2 × 1 remaining")
	for want := 1.0; want <= 4; want++ {
		res := newVisitor(t).get(s.url("/"))
		require.NotEqual(t, http.StatusGone, res.StatusCode, "position %v is within the cap", want)
	}
	assert.Equal(t, http.StatusGone, newVisitor(t).get(s.url("/")).StatusCode, "the fifth is past the cap")

	code, st, raw = adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/hard_cap", `{"hard_cap": 0}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Nil(t, st["hard_cap_per_remaining"], "a fixed cap ends the derivation")
	for _, body := range []string{`{"per_remaining": 0}`, `{"per_remaining": -1}`, `{"per_remaining": 2, "hard_cap": 5}`} {
		code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/hard_cap", body)
		assert.Equal(t, http.StatusBadRequest, code, raw)
	}
}

// TestClosedLoopLeaseTwoGateways: two gateways on one Redis steer by one
// lease: one raise for the free seats, not one per gateway, and both
// admit by it (how soon is logged, not judged: a loaded machine's time).
func TestClosedLoopLeaseTwoGateways(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs Caddy")
	}
	store := testenv.RedisURL(t)
	testenv.Redis(t)
	bin := buildCaddy(t)
	ev := testenv.EventID()
	pilot := "autopilot {\n\t\t\tinterval 50ms\n\t\t\tdecision_time 1m\n\t\t}"
	a := startGatewayWith(t, bin, "a", ev, store, pilot)
	b := startGatewayWith(t, bin, "b", ev, store, pilot)
	visitors := make([]*visitor, 30)
	for i := range visitors {
		g := a
		if i%2 == 1 {
			g = b
		}
		visitors[i] = newVisitor(t)
		require.Equal(t, "waiting", visitors[i].get(g.url("/")).Header.Get(HeaderStatus))
	}
	publishing(t, originRoom(t, store, ev), waitroom.Inventory{Sellable: 10, Remaining: 10, Healthy: true})
	require.Eventually(t, func() bool {
		return visitors[19].get(a.url("/")).Header.Get(HeaderStatus) == "admitted"
	}, 10*time.Second, 20*time.Millisecond, "10 seats at the assumed conversion 0.5: 20 admitted")
	admittedAt := time.Now()
	require.Eventually(t, func() bool {
		return visitors[19].get(b.url("/")).Header.Get(HeaderStatus) == "admitted"
	}, 10*time.Second, 10*time.Millisecond, "the other gateway admits by the same raise")
	t.Logf("seen by the other gateway after %s", time.Since(admittedAt))

	time.Sleep(500 * time.Millisecond) // ten steering intervals of each gateway
	assert.Equal(t, "waiting", visitors[20].get(b.url("/")).Header.Get(HeaderStatus), "the 20 undecided cover the seats")
	var raises []waitroom.LogEntry
	for _, e := range changeLog(t, a.adminPort, ev) {
		if e.Actor == waitroom.ActorAutopilot {
			raises = append(raises, e)
		}
	}
	require.Len(t, raises, 1, "one raise, by whichever gateway held the lease: %+v", raises)
	assert.Equal(t, json.RawMessage("20"), raises[0].To)
}
