package caddymodule

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/edge/cloudflare"
	"github.com/waitroom/waitroom/waitroom"
)

// All held is not sold out (docs/api.md §3): while no seat is left but
// live holds could still end, a visitor not admitted keeps waiting and is
// told so; the 410 comes when nothing can come back, when an operator
// sells the event out, or past the hard cap.

// answerOf decodes a JSON answer into a map, so absent fields show as
// absent.
func answerOf(t *testing.T, res result) map[string]any {
	t.Helper()
	var body map[string]any
	require.NoError(t, json.Unmarshal(res.rec.Body.Bytes(), &body), res.rec.Body.String())
	return body
}

func TestAllHeldIsNotSoldOut(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.HardCap = 50
		provision(t, h)
		update(t, h, waitroom.Change{SetWatermark: ptr[int64](1)})
		_, admitted := join(t, h)
		require.EqualValues(t, 1, admitted)
		waiting, pos := join(t, h)
		require.EqualValues(t, 2, pos)

		// The origin's flag: the last seat went into a basket; three
		// seats are held and may come back.
		update(t, h, waitroom.Change{SoldOut: ptr(true), Actor: "origin"})
		require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 5, Held: 3, Confirmed: 2, Healthy: true}))

		res := serve(t, h, get(h, waiting))
		require.Equal(t, http.StatusOK, res.rec.Code, res.rec.Body.String())
		assert.Equal(t, StatusWaiting, res.status())
		body := answerOf(t, res)
		assert.Equal(t, "waiting", body["status"])
		assert.Equal(t, true, body["all_held"])
		assert.EqualValues(t, 3, body["may_return"])
		_, inQueue := queueCounts(h.room)
		assert.Positive(t, inQueue, "the console counts them waiting")

		res = serve(t, h, get(h, ""))
		require.Equal(t, http.StatusOK, res.rec.Code, "a new arrival joins while all is held: %s", res.rec.Body.String())
		assert.Equal(t, true, answerOf(t, res)["all_held"])

		// Past the hard cap: never admitted, whatever comes back.
		beyond, _ := tokenAt(t, h, 51)
		assert.Equal(t, http.StatusGone, serve(t, h, get(h, beyond)).rec.Code)

		// Every hold was paid for: nothing can come back.
		require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 5, Confirmed: 5, Healthy: true}))
		res = serve(t, h, get(h, waiting))
		assert.Equal(t, http.StatusGone, res.rec.Code)
		assert.Equal(t, StatusSoldOut, res.status())
		_, inQueue = queueCounts(h.room)
		assert.Zero(t, inQueue)

		// An operator's flag stands, holds or not.
		update(t, h, waitroom.Change{SoldOut: ptr(false), Actor: "origin"})
		update(t, h, waitroom.Change{SoldOut: ptr(true), Actor: ActorAdmin})
		require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 5, Held: 3, Confirmed: 2, Healthy: true}))
		assert.Equal(t, http.StatusGone, serve(t, h, get(h, waiting)).rec.Code)
	})
}

func TestAllHeldPageSaysSoInEveryLanguage(t *testing.T) {
	h := provision(t, &Handler{Watermark: 1})
	waiting, _ := tokenAt(t, h, 5)
	update(t, h, waitroom.Change{SoldOut: ptr(true), Actor: waitroom.ActorOrigin})
	require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 500, Held: 1234, Confirmed: 10, HoldTTLSeconds: 300, Healthy: true}))

	res := serve(t, h, get(h, waiting))
	require.Equal(t, http.StatusOK, res.rec.Code)
	body := answerOf(t, res)
	assert.EqualValues(t, 1234, body["may_return"])
	assert.EqualValues(t, 300, body["may_return_within_seconds"])

	for lang, want := range map[string]string{
		"en": "About 1,234 of them may come back in the next 5 minutes",
		"de": "Etwa 1.234 davon könnten in den nächsten 5 Minuten zurückkommen",
		"es": "Unas 1.234 podrían volver en los próximos 5 minutos",
		"ja": "今後5 分以内に約1,234枚が戻ってくる",
	} {
		r := get(h, waiting)
		r.Header.Set("Accept", "text/html")
		r.Header.Set("Accept-Language", lang)
		res := serve(t, h, r)
		require.Equal(t, http.StatusOK, res.rec.Code, lang)
		assert.Contains(t, res.rec.Body.String(), want, lang)
		assert.NotContains(t, res.rec.Body.String(), `id="held" hidden`, lang)
	}

	// Once nothing is held, the page has no such sentence, and the next
	// poll finds the event sold out.
	update(t, h, waitroom.Change{SoldOut: ptr(false), Actor: waitroom.ActorOrigin})
	require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 500, Remaining: 3, Held: 487, Confirmed: 10, Healthy: true}))
	r := get(h, waiting)
	r.Header.Set("Accept", "text/html")
	res = serve(t, h, r)
	assert.Contains(t, res.rec.Body.String(), `id="held" hidden`)
	assert.Equal(t, false, answerOf(t, serve(t, h, get(h, waiting)))["all_held"])
}

func TestSoldOutAtZeroKeepsTheEarlyAnswer(t *testing.T) {
	eachStore(t, func(t *testing.T, h *Handler, clk *clock) {
		h.SoldOutAtZero = true
		provision(t, h)
		update(t, h, waitroom.Change{SetWatermark: ptr[int64](1)})
		waiting, _ := tokenAt(t, h, 5)
		update(t, h, waitroom.Change{SoldOut: ptr(true), Actor: waitroom.ActorOrigin})
		require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 5, Held: 3, Confirmed: 2, Healthy: true}))
		assert.Equal(t, http.StatusGone, serve(t, h, get(h, waiting)).rec.Code)
		assert.Equal(t, http.StatusGone, serve(t, h, get(h, "")).rec.Code)
		admitted, _ := tokenAt(t, h, 1)
		assert.Equal(t, http.StatusOK, serve(t, h, get(h, admitted)).rec.Code, "a buyer let in may still pay")
	})
}

func TestAllHeldReachesWorkersKV(t *testing.T) {
	url, written := kvStandIn(t)
	h := provision(t, &Handler{Watermark: 10, Keys: []Key{{ID: "k1", Secret: testSecret}},
		CloudflareKV: &CloudflareKV{AccountID: "acct", NamespaceID: "ns", APIToken: "cf-test-token",
			APIURL: url, Debounce: caddy.Duration(time.Millisecond)}})
	// next is the first state written that passes ok: a poll may catch a
	// change half done, and only the last write counts.
	next := func(ok func(cloudflare.State) bool) cloudflare.State {
		t.Helper()
		for {
			select {
			case st := <-written:
				if ok(st) {
					return st
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the state looked for never reached the stand-in")
				return cloudflare.State{}
			}
		}
	}
	require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 5, Held: 3, Confirmed: 2, Healthy: true}))
	update(t, h, waitroom.Change{SoldOut: ptr(true), Actor: waitroom.ActorOrigin})
	st := next(func(st cloudflare.State) bool { return st.SoldOut })
	assert.True(t, st.AllHeld, "the edge is told the visitors keep waiting")
	assert.EqualValues(t, 3, st.MayReturn)

	// The holds were paid for: the figures alone change, and the edge
	// learns that nothing can come back.
	require.NoError(t, h.room.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 5, Confirmed: 5, Healthy: true}))
	st = next(func(st cloudflare.State) bool { return !st.AllHeld })
	assert.True(t, st.SoldOut)
	assert.Zero(t, st.MayReturn)
}
