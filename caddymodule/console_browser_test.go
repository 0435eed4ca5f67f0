//go:build browser

package caddymodule

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/browser"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

// consoleSale starts a Caddy whose admin endpoint is set up as
// docs/operations.md says for the console (origins enforced, the empty
// origin allowed for the typed address), guarding a new event with the
// watermark at 2, and sends it five arrivals: two admitted, three waiting.
func consoleSale(t *testing.T) (int64, string) {
	t.Helper()
	ev := testenv.EventID()
	port := testenv.FreePort(t)
	tc := caddytest.NewTester(t)
	tc.InitServer(fmt.Sprintf(`{
	skip_install_trust
	admin localhost:%d {
		origins localhost:%d ""
		enforce_origin
	}
	http_port %d
	https_port %d
	grace_period 1ns
}

http://localhost:%d {
	waitroom {
		event %d
		key k1 %s
		watermark 2
	}
	respond "the site"
}
`, adminPort, adminPort, port, port+1, port, ev, testSecret), "caddyfile")
	site := fmt.Sprintf("http://localhost:%d/", port)
	for range 5 {
		require.Equal(t, http.StatusOK, newVisitor(t).get(site).StatusCode)
	}
	return ev, site
}

// TestBrowserConsole opens the staff console in Chromium on an admin
// endpoint set up as docs/operations.md says (origins enforced, the empty
// origin allowed for the typed address), and drives it: the event is
// listed, raise moves the watermark, pause and sold out work, every request
// the page makes goes to its own origin, and another site's page cannot
// change the event.
func TestBrowserConsole(t *testing.T) {
	ev, site := consoleSale(t)
	evs := strconv.FormatInt(ev, 10)
	entry := findRoom(ev)
	require.NotNil(t, entry)
	// The origin publishes its figures every second or so; figures older
	// than waitroom.InventoryFresh show as stale, so they are published
	// again while the test runs, however long Chromium takes to start.
	inv := waitroom.Inventory{Sellable: 490, Held: 6, Confirmed: 2, Remaining: 482, Healthy: true}
	require.NoError(t, entry.room.PublishInventory(t.Context(), inv))
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-t.Context().Done():
				return
			case <-tick.C:
				_ = entry.room.PublishInventory(t.Context(), inv)
			}
		}
	}()

	admin := fmt.Sprintf("http://localhost:%d", adminPort)
	ctx := browser.New(t)
	// The requests the console makes, and the headers they went out with
	// (Origin is added below what requestWillBeSent reports).
	var mu sync.Mutex
	var sent []*network.Request
	wire := map[network.RequestID]network.Headers{}
	ids := map[*network.Request]network.RequestID{}
	require.NoError(t, chromedp.Listen(ctx, func(e any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := e.(type) {
		case *network.EventRequestWillBeSent:
			sent = append(sent, e.Request)
			ids[e.Request] = e.RequestID
		case *network.EventRequestWillBeSentExtraInfo:
			wire[e.RequestID] = e.Headers
		}
	}))

	card := "#event-" + evs
	text := func(k string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).textContent`, card+" [data-k="+k+"]")))
		require.NoError(t, err)
		return s
	}
	// until waits for the card to show want in field k.
	until := func(k, want string) {
		t.Helper()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.textContent === %q`, card+" "+k, want),
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second)))
		require.NoError(t, err, "%s shows %q", k, want)
	}
	click := func(act string) {
		t.Helper()
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(card+` button[data-act="`+act+`"]`, chromedp.NodeVisible)))
	}
	state := func() map[string]any {
		t.Helper()
		code, s, raw := adminCall(t, adminPort, http.MethodGet, "/waitroom/events/"+evs, "")
		require.Equal(t, http.StatusOK, code, raw)
		return s
	}

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(admin+"/waitroom/console")))
	until("h2 .badge", "Open")
	until("[data-k=watermark]", "2")
	assert.Equal(t, "3", text("waiting"))
	assert.Equal(t, "2", text("admitted"))
	assert.Equal(t, "5", text("last_position"))
	assert.Equal(t, "482", text("remaining"))

	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(card+` input[name="raise_by"]`, "3", chromedp.NodeVisible),
		chromedp.SetValue(card+` input[name="reason"]`, "payments caught up", chromedp.NodeVisible)))
	click("raise")
	until("[data-k=watermark]", "5")
	assert.Equal(t, 5.0, state()["watermark"], "the raise went through the admin API")
	until("tbody tr:first-child td:nth-child(6)", "payments caught up")

	// A dozen more arrive while staff watch: the console shows the pace.
	for range 12 {
		require.Equal(t, http.StatusOK, newVisitor(t).get(site).StatusCode)
	}
	until("[data-k=last_position]", "17")
	assert.Equal(t, "12", text("waiting"))
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`Number(document.querySelector(%q).textContent) > 0`, card+" [data-k=arrivals_per_second]"),
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "arrivals per second shown")
	browser.Screenshot(t, ctx, "console")

	click("pause")
	until("h2 .badge", "Paused")
	assert.Equal(t, true, state()["paused"])
	until(`button[data-act="pause"]`, "Resume")

	// Another site's page tries to sell the event out, as a form (its
	// text/plain body is JSON the module would take) and as a script: Caddy
	// refuses both before the module sees them.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>other</title><form id="f" method="post" enctype="text/plain" action="%s/waitroom/events/%s/sold_out"><input name='{"sold_out": true, "reason": "' value='"}'></form>`, admin, evs)
	}))
	defer other.Close()
	foreign := browser.Tab(t, ctx)
	require.NoError(t, chromedp.Do(foreign, chromedp.Navigate(other.URL)))
	var status int
	status, err = chromedp.Run(foreign, chromedp.Evaluate[int](fmt.Sprintf(
		`fetch(%q, {method: "POST", mode: "no-cors", body: '{"sold_out": true}'}).then(() => 0, () => -1)`, admin+"/waitroom/events/"+evs+"/sold_out"),
		chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	assert.Equal(t, 0, status, "an opaque answer")
	require.NoError(t, chromedp.Do(foreign, chromedp.Submit(chromedp.ID("f"))))
	require.NoError(t, chromedp.Do(foreign, chromedp.WaitReady("body")))
	assert.Equal(t, false, state()["sold_out"], "no other site's request changed the event")

	require.NoError(t, chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`)))
	click("sold_out")
	until("h2 .badge", "Sold out")
	assert.Equal(t, true, state()["sold_out"])
	until("[data-k=waiting]", "0")
	click("pause")
	until("h2 .badge", "Sold out")
	until(`button[data-act="pause"]`, "Pause")
	assert.Equal(t, false, state()["paused"])
	browser.Screenshot(t, ctx, "console-sold-out")

	mu.Lock()
	defer mu.Unlock()
	var posts int
	for _, r := range sent {
		if !strings.HasPrefix(r.URL, admin+"/") {
			t.Errorf("the console asked another origin: %s %s", r.Method, r.URL)
		}
		if r.Method == http.MethodPost && wire[ids[r]]["Origin"] == admin {
			posts++
		}
	}
	assert.GreaterOrEqual(t, posts, 4, "the console's changes carry its own origin")
}

// TestBrowserConsoleStaff walks the console as staff on sale day do, where
// it used to mislead them: a read that hangs (a stalled tunnel) is said
// and recovered from, the status line is not rewritten (and announced)
// every second, a toggle that another change just flipped under the
// pointer is not pressed blind, an absurd raise is refused in the page,
// each change says what the event is now, the watermark is set either way
// without overwriting another desk's, and a phone shows the page
// without scrolling sideways.
func TestBrowserConsoleStaff(t *testing.T) {
	ev, _ := consoleSale(t)
	evs := strconv.FormatInt(ev, 10)
	admin := fmt.Sprintf("http://localhost:%d", adminPort)
	ctx := browser.New(t)
	card := "#event-" + evs
	eval := func(t *testing.T, js string) any {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[any](js))
		require.NoError(t, err, js)
		return v
	}
	status := func(t *testing.T) string { return eval(t, `document.getElementById("status").textContent`).(string) }
	until := func(t *testing.T, js string) {
		t.Helper()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](js,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
		require.NoError(t, err, "until %s", js)
	}
	state := func(t *testing.T) map[string]any {
		t.Helper()
		code, s, raw := adminCall(t, adminPort, http.MethodGet, "/waitroom/events/"+evs, "")
		require.Equal(t, http.StatusOK, code, raw)
		return s
	}
	click := func(t *testing.T, act string) {
		t.Helper()
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(card+` button[data-act="`+act+`"]`, chromedp.NodeVisible)))
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(admin+"/waitroom/console")))
	until(t, `document.getElementById("status").textContent === "Live: 1 event."`)

	t.Run("the status line is written only when it changes", func(t *testing.T) {
		eval(t, `window.mutations = 0; new MutationObserver(() => mutations++).observe(document.getElementById("status"), {childList: true, characterData: true, subtree: true}); 1`)
		time.Sleep(2500 * time.Millisecond)
		assert.Equal(t, 0.0, eval(t, `mutations`), "the polls rewrote %q, which a screen reader announces again", status(t))
	})

	t.Run("an absurd raise is refused in the page", func(t *testing.T) {
		// Past 2^53 the number sent is not the number typed.
		eval(t, `document.querySelector("`+card+` input[name=raise_by]").value = "9007199254740993"; 1`)
		click(t, "raise")
		until(t, `document.getElementById("status").textContent.startsWith("Raise by")`)
		assert.Equal(t, 2.0, state(t)["watermark"])
		eval(t, `document.querySelector("`+card+` input[name=raise_by]").value = "3"; 1`)
		click(t, "raise")
		until(t, `document.querySelector("`+card+` [data-k=watermark]").textContent === "5"`)
		assert.Equal(t, "Event "+evs+": watermark 5, not paused.", status(t), "a change says what the event is now")
	})

	t.Run("a toggle another change just flipped is not pressed blind", func(t *testing.T) {
		code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/pause", `{"paused": true, "reason": "the other desk"}`)
		require.Equal(t, http.StatusOK, code, raw)
		// The button under the pointer turns from Pause to Resume as the
		// click lands: the click does not resume the event.
		until(t, `document.querySelector("`+card+` button[data-act=pause]").textContent === "Resume"`)
		click(t, "pause")
		until(t, `document.getElementById("status").textContent.includes("again")`)
		assert.Equal(t, true, state(t)["paused"], "the other desk's pause stands")
		assert.Equal(t, "Event "+evs+" was just changed; press Resume again if you mean it.", status(t))
		click(t, "pause")
		until(t, `document.querySelector("`+card+` .badge").textContent === "Open"`)
		assert.Equal(t, false, state(t)["paused"], "pressed again, it resumes")
	})

	t.Run("set moves the watermark either way, asks before lowering it, and is told of another desk's", func(t *testing.T) {
		input := `document.querySelector("` + card + ` input[name=set]")`
		shown := func(want string) string {
			return `document.querySelector("` + card + ` [data-k=watermark]").textContent === "` + want + `"`
		}
		eval(t, input+`.value = "9"; 1`)
		click(t, "set")
		until(t, shown("9"))
		assert.Equal(t, 9.0, state(t)["watermark"])

		eval(t, `window.asked = ""; window.confirm = (q) => { asked = q; return false; }; `+input+`.value = "4"; 1`)
		click(t, "set")
		until(t, `asked !== ""`)
		assert.Contains(t, eval(t, `asked`), "from 9 to 4? Visitors admitted above 4 wait again")
		assert.Equal(t, 9.0, state(t)["watermark"], "declined, nothing changed")
		eval(t, `window.confirm = () => true; 1`)
		click(t, "set")
		until(t, shown("4"))
		assert.Equal(t, 4.0, state(t)["watermark"])

		eval(t, input+`.value = "-1"; 1`)
		click(t, "set")
		until(t, `document.getElementById("status").textContent.startsWith("Set the watermark to a whole number")`)
		assert.Equal(t, 4.0, state(t)["watermark"])

		// The page's reads stop (a slow tunnel) while another desk sets the
		// watermark: the page's set, made from the view it still shows, is
		// refused and says what the watermark is now.
		eval(t, `window.liveAsked = 0; window.realFetch = window.fetch; window.fetch = (url, opts) => {
			if (!String(url).endsWith("/waitroom/live")) return realFetch(url, opts);
			liveAsked++;
			return new Promise((_, fail) => opts.signal.addEventListener("abort", () => fail(opts.signal.reason)));
		}; 1`)
		until(t, `liveAsked >= 1`)
		code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"set": 7, "reason": "the other desk"}`)
		require.Equal(t, http.StatusOK, code, raw)
		eval(t, input+`.value = "6"; 1`)
		click(t, "set")
		until(t, `document.getElementById("status").textContent.includes("meanwhile")`)
		assert.Equal(t, "Event "+evs+": the watermark was changed to 7 meanwhile; nothing was set. Check it and press Set watermark again if you mean it.", status(t))
		assert.Equal(t, 7.0, state(t)["watermark"], "the other desk's set stands")
		until(t, shown("7"))
		eval(t, `window.fetch = window.realFetch; 1`)
	})

	t.Run("a phone shows the page without scrolling sideways", func(t *testing.T) {
		reason := strings.Repeat("x", 120)
		code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"raise_by": 1, "reason": "`+reason+`"}`)
		require.Equal(t, http.StatusOK, code, raw)
		require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile)))
		until(t, `document.querySelector("`+card+` tbody td:nth-child(6)")?.textContent === "`+reason+`"`)
		until(t, `document.querySelector("`+card+` polyline[data-series=waiting]") !== null`)
		browser.Screenshot(t, ctx, "console-phone")
		assert.Equal(t, 390.0, eval(t, `document.documentElement.scrollWidth`), "the page is as wide as the phone")
		require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 720)))
		browser.Screenshot(t, ctx, "console-laptop")
	})

	t.Run("a read that hangs is said, and the console recovers", func(t *testing.T) {
		// A stalled tunnel: requests neither answer nor fail.
		eval(t, `window.realFetch = window.fetch; window.fetch = (url, opts) => new Promise((_, fail) => opts.signal && opts.signal.addEventListener("abort", () => fail(opts.signal.reason))); 1`)
		until(t, `document.getElementById("status").textContent.startsWith("Cannot read the events")`)
		eval(t, `window.fetch = window.realFetch; 1`)
		until(t, `document.getElementById("status").textContent === "Live: 1 event."`)
	})
}
