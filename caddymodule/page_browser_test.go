//go:build browser

package caddymodule

// The visitor's pages in Chromium (make test-browser): the waiting page
// through a whole sale, in English and in German, without JavaScript and
// through a pause, and the challenge and pre-queue pages. Screenshots land in out/browser/.

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/browser"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

// pageSite starts a site behind the room on the memory store; extra is more
// of the waitroom block.
func pageSite(t *testing.T, ev int64, extra string) *site {
	t.Helper()
	return load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store memory
		%s
	}
	header Content-Type "text/html; charset=utf-8"
	respond "<!doctype html><html lang=en><title>The site</title><h1>The site</h1></html>"`, ev, testSecret, extra))
}

// visit loads url in the tab.
func visit(t *testing.T, tab context.Context, url string) {
	t.Helper()
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(url)))
}

// textOf is the text of the element with the id, once it is there.
func textOf(t *testing.T, tab context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(tab, chromedp.Text(chromedp.ID(id)))
	require.NoError(t, err, "#%s", id)
	return s
}

// eval is the value of a JavaScript expression in the tab.
func eval[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// waitFor waits until the expression is true in the tab: the page gets
// there by itself (its own polls, reloads and refreshes), in real time. An
// evaluation that meets a navigation is tried again.
func waitFor(t *testing.T, tab context.Context, expr string, within time.Duration) {
	t.Helper()
	var last error
	ok := assert.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(tab, 2*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		last = err
		return err == nil && v
	}, within, 100*time.Millisecond, "waiting for %s", expr)
	if !ok {
		t.Fatalf("last evaluation: %v", last)
	}
}

// inLanguage makes the tab's requests say Accept-Language: lang, as a
// browser set to that language does.
func inLanguage(t *testing.T, tab context.Context, lang string) {
	t.Helper()
	_, err := chromedp.Call(tab, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	_, err = chromedp.Call(tab, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Accept-Language": lang}})
	require.NoError(t, err)
}

// TestBrowserWaitingPage takes visitors through a sale in Chromium: they
// join and see their place, the people ahead and the estimate; staff raise
// the watermark through the admin API and the page says so in its aria-live
// region, without reloading; at their turn the page moves on to the site by
// itself; at sold out the waiting page turns into the sold-out page. One
// visitor reads it all in German.
func TestBrowserWaitingPage(t *testing.T) {
	clk := useClock(t)
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	s := pageSite(t, ev, "")
	raise := func(by int) {
		t.Helper()
		code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", fmt.Sprintf(`{"raise_by": %d}`, by))
		require.Equal(t, http.StatusOK, code, raw)
	}
	// Three ahead, two of them let in 10 s apart: a pace to estimate from.
	for range 3 {
		require.Equal(t, http.StatusOK, newVisitor(t).get(s.url("/")).StatusCode)
	}
	raise(1)
	clk.Advance(10 * time.Second)
	raise(1)

	ctx := browser.New(t)
	alice := browser.Tab(t, ctx)
	visit(t, alice, s.url("/tickets"))
	assert.Equal(t, "en", eval[string](t, alice, "document.documentElement.lang"))
	assert.Equal(t, "You’re in the queue", eval[string](t, alice, "document.querySelector('h1').textContent"))
	assert.Equal(t, "4", textOf(t, alice, "position"))
	assert.Equal(t, "1", textOf(t, alice, "ahead"))
	assert.Equal(t, "Your estimated wait is less than a minute.", textOf(t, alice, "wait"))
	assert.Equal(t, "polite", eval[string](t, alice, `document.getElementById("live").getAttribute("aria-live")`))
	browser.Screenshot(t, alice, "waiting")

	// Staff let one more in: alice's place is next, and the live region
	// says so, from a poll, with no reload (the marker survives).
	before := textOf(t, alice, "live")
	eval[bool](t, alice, "window.stillThisPage = true")
	raise(1)
	waitFor(t, alice, `document.getElementById("ahead").textContent === "0"`, 20*time.Second)
	after := textOf(t, alice, "live")
	assert.NotEqual(t, before, after, "the aria-live region changed")
	assert.True(t, eval[bool](t, alice, "window.stillThisPage === true"), "updated in place")

	// Her turn: the page takes her to the site by itself.
	raise(1)
	waitFor(t, alice, `document.title === "The site"`, 20*time.Second)
	assert.Equal(t, s.url("/tickets"), eval[string](t, alice, "location.href"))

	// Bob, in German, in a browser of his own.
	bob := browser.Isolated(t, ctx)
	inLanguage(t, bob, "de-DE,de;q=0.9,en;q=0.5")
	visit(t, bob, s.url("/tickets"))
	assert.Equal(t, "de", eval[string](t, bob, "document.documentElement.lang"))
	assert.Equal(t, "Sie sind in der Warteschlange", eval[string](t, bob, "document.querySelector('h1').textContent"))
	assert.Equal(t, "5", textOf(t, bob, "position"))
	assert.Regexp(t, `^Ihre geschätzte Wartezeit beträgt (weniger als eine Minute|etwa \d+ Minuten?)\.$`, textOf(t, bob, "wait"))
	browser.Screenshot(t, bob, "waiting-de")

	// Every seat in a basket: bob keeps his place, and his page says so,
	// from a poll (docs/api.md §3).
	entry := findRoom(ev)
	require.NotNil(t, entry)
	_, uerr := entry.room.Update(t.Context(), waitroom.Change{SoldOut: ptr(true), Actor: waitroom.ActorOrigin})
	require.NoError(t, uerr)
	require.NoError(t, entry.room.PublishInventory(t.Context(), waitroom.Inventory{Sellable: 490, Held: 12, Confirmed: 478, HoldTTLSeconds: 600, Healthy: true}))
	waitFor(t, bob, `!document.getElementById("held").hidden`, 20*time.Second)
	assert.Equal(t, "Gerade liegt jedes Ticket in jemandes Warenkorb. Etwa 12 davon könnten in den nächsten 10 Minuten zurückkommen, "+
		"wenn ihre Käufer nicht bezahlen. Ihr Platz bleibt erhalten.", textOf(t, bob, "held"))
	assert.Equal(t, "Sie sind in der Warteschlange", eval[string](t, bob, "document.querySelector('h1').textContent"))
	assert.Equal(t, "Wir lassen Sie herein, sobald Sie an der Reihe sind.", textOf(t, bob, "wait"), "no estimate from the pace so far")
	browser.Screenshot(t, bob, "all-held-de")

	// Sold out: bob's waiting page turns into the sold-out page, in German;
	// a newcomer gets it at once.
	code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/sold_out", `{"sold_out": true}`)
	require.Equal(t, http.StatusOK, code, raw)
	waitFor(t, bob, `document.title === "Ausverkauft"`, 20*time.Second)
	assert.Equal(t, "Ausverkauft", eval[string](t, bob, "document.querySelector('h1').textContent"))
	browser.Screenshot(t, bob, "sold-out-de")

	carol := browser.Isolated(t, ctx)
	visit(t, carol, s.url("/tickets"))
	assert.Equal(t, "Sold out", eval[string](t, carol, "document.querySelector('h1').textContent"))
	browser.Screenshot(t, carol, "sold-out")

	// The language links are reachable by keyboard, and follow it.
	_, err := chromedp.Run(carol, chromedp.KeyEvent("\t"))
	require.NoError(t, err)
	assert.Equal(t, "English", eval[string](t, carol, "document.activeElement.textContent"), "the first stop of Tab")
	for range 2 {
		_, err = chromedp.Run(carol, chromedp.KeyEvent("\t"))
		require.NoError(t, err)
	}
	assert.Equal(t, "Español", eval[string](t, carol, "document.activeElement.textContent"))
	_, err = chromedp.Run(carol, chromedp.KeyEvent("\r"))
	require.NoError(t, err)
	waitFor(t, carol, `document.documentElement.lang === "es"`, 10*time.Second)
	assert.Equal(t, "Agotado", eval[string](t, carol, "document.querySelector('h1').textContent"))
	assert.Equal(t, s.url("/tickets?lang=es"), eval[string](t, carol, "location.href"))
}

// TestBrowserWaitingPageWithoutJavaScript: with scripts off the waiting
// page refreshes itself by its meta refresh, and so still moves on to the
// site at the visitor's turn.
func TestBrowserWaitingPageWithoutJavaScript(t *testing.T) {
	useClock(t)
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	s := pageSite(t, ev, "")

	tab := browser.New(t)
	_, err := chromedp.Call(tab, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
	require.NoError(t, err)
	visit(t, tab, s.url("/"))
	assert.Equal(t, "1", textOf(t, tab, "position"))
	refresh, err := chromedp.Run(tab, chromedp.AttributeValue(chromedp.CSS(`noscript > meta[http-equiv="refresh"]`), "content"))
	require.NoError(t, err)
	assert.Equal(t, "3", refresh.Value, "the poll interval near the front, though nothing is known of the pace")
	browser.Screenshot(t, tab, "waiting-nojs")

	code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"set": 1}`)
	require.Equal(t, http.StatusOK, code, raw)
	waitFor(t, tab, `document.title === "The site"`, 25*time.Second)
}

// TestBrowserChallenge: the challenge page solves its proof of work in a
// Web Worker and joins the queue with it.
func TestBrowserChallenge(t *testing.T) {
	ev := testenv.EventID()
	s := pageSite(t, ev, "challenge 16")
	tab := browser.New(t)
	visit(t, tab, s.url("/"))
	assert.Equal(t, "Just a moment", eval[string](t, tab, "document.title"))
	waitFor(t, tab, `document.getElementById("position") !== null`, 30*time.Second)
	assert.Equal(t, "1", textOf(t, tab, "position"))
	assert.Equal(t, "You’re in the queue", eval[string](t, tab, "document.querySelector('h1').textContent"))
}

// TestBrowserPreQueue: before the opening the page counts down by the
// gateway's clock; at the opening it reloads into the place the draw gave.
func TestBrowserPreQueue(t *testing.T) {
	clk := useClock(t)
	ev := testenv.EventID()
	opensAt := clk.Now().Add(4 * time.Second).UTC().Format(time.RFC3339)
	s := pageSite(t, ev, "opens_at "+opensAt)
	tab := browser.New(t)
	visit(t, tab, s.url("/"))
	assert.Equal(t, "The queue opens soon", eval[string](t, tab, "document.title"))
	count := textOf(t, tab, "count")
	assert.Regexp(t, regexp.MustCompile(`^0:0[0-4]$`), count, "a countdown from the server's 4 s")
	browser.Screenshot(t, tab, "pre-queue")
	waitFor(t, tab, fmt.Sprintf(`document.getElementById("count").textContent !== %q`, count), 5*time.Second)

	// The gateway's clock reaches the opening; the page, at zero, reloads.
	clk.Advance(4 * time.Second)
	waitFor(t, tab, `document.getElementById("position") !== null`, 20*time.Second)
	assert.Equal(t, "1", textOf(t, tab, "position"))
}

// TestBrowserPause: staff pause entry while a visitor waits; her page says
// she keeps her place, and she does: her turn comes while entry is paused,
// the pause outlasts her admission window many times over, and when entry
// resumes the page takes her to the site by itself.
func TestBrowserPause(t *testing.T) {
	clk := useClock(t)
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	s := pageSite(t, ev, "admission_window 1m\n\t\ttoken_ttl 2h")
	admin := func(path, body string) {
		t.Helper()
		code, _, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+path, body)
		require.Equal(t, http.StatusOK, code, raw)
	}
	require.Equal(t, http.StatusOK, newVisitor(t).get(s.url("/")).StatusCode)

	tab := browser.New(t)
	visit(t, tab, s.url("/tickets"))
	assert.Equal(t, "2", textOf(t, tab, "position"))
	// Count the page's polls, to know when it has read the queue again.
	eval[bool](t, tab, `(() => { const f = window.fetch; window.polls = 0;
		window.fetch = (...a) => { window.polls++; return f(...a); }; return true; })()`)
	pollsAfter := func(n int) {
		t.Helper()
		// A poll is sent once the answer to the one before was shown.
		waitFor(t, tab, fmt.Sprintf("window.polls >= %d", eval[int](t, tab, "window.polls")+n), 45*time.Second)
	}

	admin("/pause", `{"paused": true, "reason": "payments down"}`)
	paused := "Entry is paused for a moment. You keep your place."
	waitFor(t, tab, fmt.Sprintf(`document.getElementById("wait").textContent === %q`, paused), 45*time.Second)
	admin("/watermark", `{"raise_by": 2}`)
	waitFor(t, tab, `document.getElementById("ahead").textContent === "0"`, 45*time.Second)
	browser.Screenshot(t, tab, "paused")

	// Her turn came during the pause; five minutes of it are five windows.
	clk.Advance(5 * time.Minute)
	pollsAfter(2)
	assert.Equal(t, "2", textOf(t, tab, "position"), "she keeps her place")
	assert.Equal(t, paused, textOf(t, tab, "wait"))
	assert.Equal(t, "You’re in the queue", eval[string](t, tab, "document.querySelector('h1').textContent"))

	admin("/pause", `{"paused": false}`)
	waitFor(t, tab, `document.title === "The site"`, 45*time.Second)
	assert.Equal(t, s.url("/tickets"), eval[string](t, tab, "location.href"))
}
