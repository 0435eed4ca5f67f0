//go:build browser

package storefront_test

// The storefront in Chromium (make test-browser): two adjacent seats
// chosen on the map, held, paid with a test card, and the two tickets with
// their QR codes. Screenshots land in out/browser/.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/browser"
	"github.com/waitroom/waitroom/origin/payment"
)

func TestBrowserStorefrontBuysTwoAdjacentSeats(t *testing.T) {
	s := newShop(t, shopOptions{})
	tab := browser.New(t)
	buyTwoSeats(t, s, tab, "alice", "storefront")
}

// The same purchase without JavaScript, in German: forms, redirects and
// the booking page's meta refresh carry it.
func TestBrowserStorefrontWithoutJavaScript(t *testing.T) {
	s := newShop(t, shopOptions{})
	tab := browser.New(t)
	_, err := chromedp.Call(tab, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
	require.NoError(t, err)
	_, err = chromedp.Call(tab, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	_, err = chromedp.Call(tab, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Accept-Language": "de-DE,de;q=0.9"}})
	require.NoError(t, err)
	buyTwoSeats(t, s, tab, "bruno", "storefront-nojs-de")
	h1, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS("h1")))
	require.NoError(t, err)
	assert.Equal(t, "Ihre Buchung", h1)
}

// admitIn gives tab user's queue token for ev, as the room sets it on
// admission.
func admitIn(t *testing.T, s *shop, tab context.Context, ev int64, user string) {
	t.Helper()
	tk, err := s.keys.Issue(user, ev, 1, 24*time.Hour)
	require.NoError(t, err)
	_, err = chromedp.Call(tab, network.SetCookie, network.SetCookieParams{
		Name: fmt.Sprintf("waitroom_%d", ev), Value: tk.Raw, URL: s.url + "/"})
	require.NoError(t, err)
}

// buyTwoSeats walks user through the pages of a new seated event in tab:
// two adjacent seats clicked on the map, held, paid with a test card, and
// the booking with two tickets and their QR codes. Screenshots are named
// after shots.
func buyTwoSeats(t *testing.T, s *shop, tab context.Context, user, shots string) {
	ev := s.seatedEvent("Stadium night")
	admitIn(t, s, tab, ev, user)

	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.ID(fmt.Sprintf("event-%d", ev)))))
	browser.Screenshot(t, tab, shots+"-events")
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID(fmt.Sprintf("event-%d", ev))), chromedp.WaitVisible(chromedp.ID("map"))))

	// Two adjacent seats, chosen by clicking them on the map.
	require.NoError(t, chromedp.Do(tab,
		chromedp.Click(chromedp.CSS(`label[for="s-A-1-3"]`)),
		chromedp.Click(chromedp.CSS(`label[for="s-A-1-4"]`)),
	))
	browser.Until(t, tab, `document.getElementById("s-A-1-3").checked && document.getElementById("s-A-1-4").checked`)
	browser.Screenshot(t, tab, shots+"-seats")
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("hold-seats")), chromedp.WaitVisible(chromedp.ID("pay"))))

	seats, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("hold-seats")))
	require.NoError(t, err)
	assert.Equal(t, "A-1-3, A-1-4", seats)
	live, err := chromedp.Run(tab, chromedp.AttributeValue(chromedp.ID("countdown"), "aria-live"))
	require.NoError(t, err)
	assert.Equal(t, "polite", live.Value)
	browser.Until(t, tab, `/^\d+:\d\d$/.test(document.getElementById("left").textContent)`)
	browser.Screenshot(t, tab, shots+"-hold")

	// Pay with a test card: the booking page refreshes itself until the
	// payment's webhook confirms it.
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("c-pm_card_visa")), chromedp.Click(chromedp.ID("pay-button"))))
	browser.Until(t, tab, `document.querySelector('[data-status="confirmed"]') !== null`)
	browser.Until(t, tab, `Array.from(document.querySelectorAll(".tickets img")).filter(i => i.complete && i.naturalWidth > 0).length === 2`)
	labels, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(".tickets figcaption")).map(f => f.textContent.split(" ").pop())`))
	require.NoError(t, err)
	assert.Equal(t, []string{"A-1-3", "A-1-4"}, labels)
	browser.Screenshot(t, tab, shots+"-booking")
}

// A buyer who holds seats and goes back to the event page (to look again,
// or to choose others once the hold is given back) finds its buttons
// working: the page the browser restores from its back-forward cache is
// not left with the button the first submit disabled.
func TestBrowserStorefrontBackAfterHold(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	tab := browser.New(t)
	admitIn(t, s, tab, ev, "erin")

	// The events, then the event: the way in that the room's admission leads.
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.ID(fmt.Sprintf("event-%d", ev)))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID(fmt.Sprintf("event-%d", ev))), chromedp.WaitVisible(chromedp.ID("map"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`label[for="s-A-1-3"]`))))
	browser.Until(t, tab, `document.getElementById("s-A-1-3").checked`)
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("hold-seats")), chromedp.WaitVisible(chromedp.ID("pay"))))

	// Back, as the browser's button does (a page restored from the
	// back-forward cache fires no load event to wait for).
	_, err := chromedp.Run(tab, chromedp.Evaluate[any](`history.back()`))
	require.NoError(t, err)
	browser.Until(t, tab, `document.getElementById("map") !== null`)
	browser.Screenshot(t, tab, "storefront-back-after-hold")
	for _, id := range []string{"hold-seats", "best-qty"} {
		disabled, err := chromedp.Run(tab, chromedp.Evaluate[bool](fmt.Sprintf(`(document.getElementById(%q).closest("form").querySelector("button")).disabled`, id)))
		require.NoError(t, err)
		assert.False(t, disabled, "the button of the form of #%s, once back on the page", id)
	}
}

// A hold that runs out while its page is open says so on the page, in
// words, where the buyer looks: not only the figure at 0:00 and a greyed
// button.
func TestBrowserStorefrontHoldRunsOut(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	tab := browser.New(t)
	admitIn(t, s, tab, ev, "fred")

	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/events/%d", s.url, ev)), chromedp.WaitVisible(chromedp.ID("map"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`label[for="s-A-1-5"]`))))
	browser.Until(t, tab, `document.getElementById("s-A-1-5").checked`)
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("hold-seats")), chromedp.WaitVisible(chromedp.ID("pay"))))
	// The hold has two seconds left when its page is loaded again.
	s.clock.Advance(598 * time.Second)
	require.NoError(t, chromedp.Do(tab, chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("pay"))))
	browser.Until(t, tab, `document.getElementById("left").textContent === "0:00"`)
	browser.Until(t, tab, `document.querySelector('[role="alert"]:not(.sr)') !== null && document.querySelector('[role="alert"]:not(.sr)').offsetHeight > 0`)
	alert, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(`[role="alert"]:not(.sr)`)))
	require.NoError(t, err)
	assert.Contains(t, alert, "Your hold has expired")
	browser.Screenshot(t, tab, "storefront-hold-ran-out")

	// The heading and the title say it too, and what is left to do is
	// choose again: no pay form or release for a hold that is gone.
	h1, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS("h1")))
	require.NoError(t, err)
	assert.Equal(t, "Your hold has ended", h1)
	title, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.title`))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(title, "Your hold has expired"), title)
	shown, err := chromedp.Run(tab, chromedp.Evaluate[[]bool](`["pay", "expires", "choose-again"].map(id => document.getElementById(id).offsetHeight > 0)
		.concat(document.querySelector('form[action$="/release"]').offsetHeight > 0)`))
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false, true, false}, shown, "pay form, expiry, choose again, release")
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("choose-again")), chromedp.WaitVisible(chromedp.ID("map"))))
}

// On a phone's width, the hold page fits: the test cards' long names wrap
// instead of widening the page past the screen.
func TestBrowserStorefrontHoldFitsAPhone(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.gaEvent("Club night")
	tab := browser.New(t)
	require.NoError(t, chromedp.Do(tab, chromedp.EmulateViewport(360, 740)))
	admitIn(t, s, tab, ev, "gina")
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/events/%d", s.url, ev)), chromedp.WaitVisible(chromedp.ID("qty"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`form[action$="/holds"] button`)), chromedp.WaitVisible(chromedp.ID("pay"))))
	browser.Screenshot(t, tab, "storefront-hold-phone")
	widths, err := chromedp.Run(tab, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, document.documentElement.clientWidth]`))
	require.NoError(t, err)
	assert.LessOrEqual(t, widths[0], widths[1], "the page's width against the screen's")
}

// A buyer who pays and then goes back to the hold's page finds it as it
// is now, booked, with the way to the booking: not the page the browser
// kept from before the payment, with its countdown and pay form.
func TestBrowserStorefrontBackAfterPayment(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	tab := browser.New(t)
	admitIn(t, s, tab, ev, "hana")

	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/events/%d", s.url, ev)), chromedp.WaitVisible(chromedp.ID("map"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`label[for="s-A-2-1"]`))))
	browser.Until(t, tab, `document.getElementById("s-A-2-1").checked`)
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("hold-seats")), chromedp.WaitVisible(chromedp.ID("pay"))))
	holdURL, err := chromedp.Run(tab, chromedp.Evaluate[string](`location.href`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("c-pm_card_visa")), chromedp.Click(chromedp.ID("pay-button"))))
	browser.Until(t, tab, `document.querySelector('[data-status="confirmed"]') !== null`)
	bookingURL, err := chromedp.Run(tab, chromedp.Evaluate[string](`location.href`))
	require.NoError(t, err)

	_, err = chromedp.Run(tab, chromedp.Evaluate[any](`history.back()`))
	require.NoError(t, err)
	browser.Until(t, tab, fmt.Sprintf(`location.href === %q && document.getElementById("booking-link") !== null`, holdURL))
	browser.Screenshot(t, tab, "storefront-back-after-payment")
	h1, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS("h1")))
	require.NoError(t, err)
	assert.Equal(t, "Your seats are booked", h1)
	gone, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.getElementById("pay") === null && document.getElementById("left") === null`))
	require.NoError(t, err)
	assert.True(t, gone, "no pay form, no countdown")
	link, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById("booking-link").href`))
	require.NoError(t, err)
	assert.Equal(t, bookingURL, link)
}

// On a phone's width, a long row of seats stays on one line, after its
// row's label, and its section scrolls sideways: wrapped, its last seats
// looked like another row without a label. The page itself stays as wide
// as the screen.
func TestBrowserStorefrontLongRowOnAPhone(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.createEvent(map[string]any{"name": "Long rows", "seating": map[string]any{"sections": []any{
		map[string]any{"id": "A", "price": 120000, "rows": []any{map[string]any{"id": "1", "seats": 30}, map[string]any{"id": "2", "seats": 30}}},
	}}})
	tab := browser.New(t)
	require.NoError(t, chromedp.Do(tab, chromedp.EmulateViewport(360, 740)))
	admitIn(t, s, tab, ev, "omar")
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/events/%d", s.url, ev)), chromedp.WaitVisible(chromedp.ID("map"))))
	browser.Screenshot(t, tab, "storefront-long-row-phone")

	lines, err := chromedp.Run(tab, chromedp.Evaluate[[]int](`Array.from(document.querySelectorAll(".row")).map(r =>
		new Set(Array.from(r.querySelectorAll("label")).map(c => Math.round(c.getBoundingClientRect().top))).size)`))
	require.NoError(t, err)
	assert.Equal(t, []int{1, 1}, lines, "each row on one line")
	labelled, err := chromedp.Run(tab, chromedp.Evaluate[bool](`Array.from(document.querySelectorAll(".row")).every(r => {
		const l = r.querySelector(".rl").getBoundingClientRect(), s = r.querySelector("label").getBoundingClientRect();
		return l.bottom > s.top && l.top < s.bottom && l.right <= s.left; })`))
	require.NoError(t, err)
	assert.True(t, labelled, "each row's label before its seats, on their line")
	section, err := chromedp.Run(tab, chromedp.Evaluate[[]int](`(s => [s.scrollWidth, s.clientWidth])(document.querySelector(".section"))`))
	require.NoError(t, err)
	assert.Greater(t, section[0], section[1], "the section scrolls sideways")
	widths, err := chromedp.Run(tab, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, document.documentElement.clientWidth]`))
	require.NoError(t, err)
	assert.LessOrEqual(t, widths[0], widths[1], "the page's width against the screen's")

	// The last seat of a row is still there to choose, once scrolled to.
	require.NoError(t, chromedp.Do(tab, chromedp.ScrollIntoView(chromedp.CSS(`label[for="s-A-1-30"]`)), chromedp.Click(chromedp.CSS(`label[for="s-A-1-30"]`))))
	browser.Until(t, tab, `document.getElementById("s-A-1-30").checked`)
}

// A card declined and then, a moment later, accepted: the page that says
// it was declined also says it may still go through, names its booking,
// keeps the pay form for another card, and takes the buyer to the booking
// once it is confirmed, as its own page would.
func TestBrowserStorefrontDeclinedThenAccepted(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	tab := browser.New(t)
	admitIn(t, s, tab, ev, "ines")

	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/events/%d", s.url, ev)), chromedp.WaitVisible(chromedp.ID("map"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`label[for="s-A-2-3"]`))))
	browser.Until(t, tab, `document.getElementById("s-A-2-3").checked`)
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("hold-seats")), chromedp.WaitVisible(chromedp.ID("pay"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("c-pm_fakepay_fail_then_succeed")), chromedp.Click(chromedp.ID("pay-button"))))
	browser.Until(t, tab, `document.getElementById("error") !== null && document.getElementById("watching") !== null`)
	browser.Screenshot(t, tab, "storefront-declined-may-go-through")

	alert, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("error")))
	require.NoError(t, err)
	assert.Contains(t, alert, "the bank did not confirm it")
	said, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("declined")))
	require.NoError(t, err)
	assert.Contains(t, said, "this one may still go through")
	assert.Contains(t, said, "takes you to your booking if it goes through")
	link, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById("declined-link").href`))
	require.NoError(t, err)
	assert.Regexp(t, `/bookings/[0-9a-f-]{36}$`, link)
	usable, err := chromedp.Run(tab, chromedp.Evaluate[bool](`!document.getElementById("pay-button").disabled && document.querySelectorAll('#pay input[name="card"]').length > 1`))
	require.NoError(t, err)
	assert.True(t, usable, "the pay form, for another card")

	// The hold's page loaded in place of the answer (the answer's own
	// address is the pay form's, whose reload would send the form again):
	// it watches the same payment, and the history stays the one Back is
	// checked on below.
	holdURL, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById("pay").action.replace(/\/booking$/, "")`))
	require.NoError(t, err)
	_, err = chromedp.Run(tab, chromedp.Evaluate[any](fmt.Sprintf(`location.replace(%q)`, holdURL)))
	require.NoError(t, err)
	browser.Until(t, tab, fmt.Sprintf(`location.href === %q && document.getElementById("watching") !== null && document.getElementById("declined-link").href === %q`, holdURL, link))
	alert, err = chromedp.Run(tab, chromedp.Text(chromedp.ID("error")))
	require.NoError(t, err)
	assert.Contains(t, alert, "the bank did not confirm it", "the page loaded again says what happened")

	// The provider accepts the payment after all.
	s.clock.Advance(6 * time.Second)
	s.fp.Tick()
	s.settle()
	browser.Until(t, tab, fmt.Sprintf(`location.href === %q && document.querySelector('[data-status="confirmed"]') !== null`, link))
	browser.Screenshot(t, tab, "storefront-declined-then-booked")

	// Back leads to the hold's page, booked, not to the declined answer.
	_, err = chromedp.Run(tab, chromedp.Evaluate[any](`history.back()`))
	require.NoError(t, err)
	browser.Until(t, tab, fmt.Sprintf(`/\/holds\/[0-9a-f-]{36}$/.test(location.href) && document.getElementById("booking-link") !== null && document.getElementById("booking-link").href === %q`, link))
}

// The tab shows the site's icon: the icon the browser asks for on a page
// of the shop is there and draws, and nothing the page loads is missing.
// A browser asks for /favicon.ico by itself, and answered 404 there on
// every page.
func TestBrowserStorefrontIcon(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.gaEvent("Club night")
	tab := browser.New(t)
	var mu sync.Mutex
	answers := map[string]int64{}
	require.NoError(t, chromedp.Listen(tab, func(e any) {
		if r, ok := e.(*network.EventResponseReceived); ok {
			mu.Lock()
			answers[r.Response.URL] = r.Response.Status
			mu.Unlock()
		}
	}))
	_, err := chromedp.Call(tab, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.ID(fmt.Sprintf("event-%d", ev)))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID(fmt.Sprintf("event-%d", ev))), chromedp.WaitVisible(chromedp.ID("qty"))))

	icon := func() (string, int64) {
		mu.Lock()
		defer mu.Unlock()
		for u, status := range answers {
			if strings.HasSuffix(u, "/favicon.ico") || strings.Contains(u, "/assets/icon") {
				return u, status
			}
		}
		return "", 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for u, _ := icon(); u == "" && time.Now().Before(deadline); u, _ = icon() {
		time.Sleep(100 * time.Millisecond)
	}
	u, status := icon()
	require.NotEmpty(t, u, "the browser asked for an icon")
	assert.Equal(t, int64(http.StatusOK), status, u)
	mu.Lock()
	for u, status := range answers {
		assert.Less(t, status, int64(400), u)
	}
	mu.Unlock()

	// The icon the page names, and the one at /favicon.ico, draw.
	sizes, err := chromedp.Run(tab, chromedp.Evaluate[[]int](`Promise.all([document.querySelector('link[rel="icon"]').href, "/favicon.ico"].map(async src => {
		const img = new Image();
		img.src = src;
		await img.decode();
		return img.naturalWidth;
	}))`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	assert.Equal(t, []int{32, 32}, sizes)
}

// A buyer in Tokyo reads the hold's expiry in Tokyo's time, in the page's
// language; the UTC the page was written with stays at hand.
func TestBrowserStorefrontExpiryInLocalTime(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.gaEvent("Club night")
	tab := browser.New(t)
	_, err := chromedp.Call(tab, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Tokyo"})
	require.NoError(t, err)
	admitIn(t, s, tab, ev, "yuki")
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/events/%d", s.url, ev)), chromedp.WaitVisible(chromedp.ID("qty"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`form[action$="/holds"] button`)), chromedp.WaitVisible(chromedp.ID("pay"))))
	browser.Until(t, tab, `!document.querySelector("#expires time").textContent.includes("UTC")`)
	browser.Screenshot(t, tab, "storefront-expiry-local-time")

	// The hold, made at 10:00 UTC, lasts ten minutes: 19:10 in Tokyo.
	said, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("expires")))
	require.NoError(t, err)
	assert.Regexp(t, `^They are yours until 7:10:00[\s\x{202f}]PM GMT\+9: pay before then\.$`, said)
	utc, err := chromedp.Run(tab, chromedp.AttributeValue(chromedp.CSS("#expires time"), "title"))
	require.NoError(t, err)
	assert.Equal(t, "10:10:00 UTC", utc.Value)

	// In Japanese, as Japanese write it.
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`a[hreflang="ja"]`)), chromedp.WaitVisible(chromedp.ID("pay"))))
	browser.Until(t, tab, `document.documentElement.lang === "ja" && !document.querySelector("#expires time").textContent.includes("UTC")`)
	said, err = chromedp.Run(tab, chromedp.Text(chromedp.ID("expires")))
	require.NoError(t, err)
	assert.Contains(t, said, "19:10:00 JST")
}

// A keyboard or screen reader user on a booking page that waits for its
// payment (here a declined one that may still go through) keeps their
// place: the page is not loaded again every few seconds, which put the
// focus back at the top and started a screen reader over, but once what
// it says has changed.
func TestBrowserStorefrontWaitingBookingKeepsFocus(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.gaEvent("Club night")
	tab := browser.New(t)
	admitIn(t, s, tab, ev, "kemal")
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/events/%d", s.url, ev)), chromedp.WaitVisible(chromedp.ID("qty"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`form[action$="/holds"] button`)), chromedp.WaitVisible(chromedp.ID("pay"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("c-pm_fakepay_fail_then_succeed")), chromedp.Click(chromedp.ID("pay-button"))))
	browser.Until(t, tab, `document.getElementById("declined-link") !== null`)
	link, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById("declined-link").href`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("rechecking"))))

	refresh, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('meta[http-equiv="refresh"]').length`))
	require.NoError(t, err)
	assert.Zero(t, refresh, "a reload of the page by itself, with the script there to watch it")
	require.NoError(t, chromedp.Do(tab, chromedp.Focus(chromedp.CSS(`#main a[href^="/holds/"]`))))
	_, err = chromedp.Run(tab, chromedp.Evaluate[any](`window.stayed = true`))
	require.NoError(t, err)
	// Longer than the page's own check: the focus is where the buyer put it.
	deadline := time.Now().Add(7 * time.Second)
	for time.Now().Before(deadline) {
		kept, err := chromedp.Run(tab, chromedp.Evaluate[bool](`window.stayed === true && document.activeElement.matches('#main a[href^="/holds/"]')`))
		require.NoError(t, err)
		require.True(t, kept, "the page kept the focus")
		time.Sleep(250 * time.Millisecond)
	}

	// The provider accepts the payment after all: the page says so.
	s.clock.Advance(6 * time.Second)
	s.fp.Tick()
	s.settle()
	browser.Until(t, tab, `document.querySelector('[data-status="confirmed"]') !== null`)
}

// A keyboard user sees the whole focus ring of the seat they are on: the
// seats at the edges of a section's scrolling box had theirs cut off (the
// last row's at the bottom, the first seat's under its row's label, the
// last seat's once scrolled to it).
func TestBrowserStorefrontSeatFocusRingShows(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.createEvent(map[string]any{"name": "Long rows", "seating": map[string]any{"sections": []any{
		map[string]any{"id": "A", "price": 120000, "rows": []any{map[string]any{"id": "1", "seats": 30}, map[string]any{"id": "2", "seats": 30}}},
	}}})
	tab := browser.New(t)
	require.NoError(t, chromedp.Do(tab, chromedp.EmulateViewport(360, 740)))
	admitIn(t, s, tab, ev, "keiko")
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/events/%d", s.url, ev)), chromedp.WaitVisible(chromedp.ID("map"))))
	for _, seat := range []string{"A-1-1", "A-2-1", "A-2-15", "A-1-30", "A-2-30"} {
		// Reached by the keyboard, as the ring is drawn for.
		require.NoError(t, chromedp.Do(tab, chromedp.Focus(chromedp.ID("s-"+seat)),
			chromedp.KeyEvent(kb.Tab, chromedp.KeyModifiers(chromedp.ModifierShift)), chromedp.KeyEvent(kb.Tab)))
		shown, err := chromedp.Run(tab, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
			const input = document.getElementById("s-%s"), label = input.labels[0], st = getComputedStyle(label);
			if (!input.matches(":focus-visible") || st.outlineStyle === "none") { return "no focus ring"; }
			const o = parseFloat(st.outlineWidth) + parseFloat(st.outlineOffset), r = label.getBoundingClientRect();
			const sec = label.closest(".section"), b = sec.getBoundingClientRect();
			const left = Math.max(b.left + sec.clientLeft, label.closest(".row").querySelector(".rl").getBoundingClientRect().right);
			const top = b.top + sec.clientTop, right = b.left + sec.clientLeft + sec.clientWidth, bottom = top + sec.clientHeight;
			const cut = [r.left - o < left && "left", r.top - o < top && "top", r.right + o > right && "right", r.bottom + o > bottom && "bottom"].filter(Boolean);
			return cut.length ? "cut off at " + cut.join(", ") : "";
		})()`, seat)))
		require.NoError(t, err)
		assert.Empty(t, shown, seat)
		browser.Screenshot(t, tab, "storefront-seat-focus-"+seat)
	}
}

// A cancelled booking whose refund is under way says so, and says it is
// paid back once it is: the script's watch of the page sees a refund's
// change as the reload did.
func TestBrowserStorefrontRefundUnderWay(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.gaEvent("Club night")
	tab := browser.New(t)
	admitIn(t, s, tab, ev, "rosa")
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/events/%d", s.url, ev)), chromedp.WaitVisible(chromedp.ID("qty"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`form[action$="/holds"] button`)), chromedp.WaitVisible(chromedp.ID("pay"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("pay-button"))))
	browser.Until(t, tab, `document.getElementById("cancel") !== null`)
	u, err := chromedp.Run(tab, chromedp.Evaluate[string](`location.pathname`))
	require.NoError(t, err)
	paid := s.fp.PaymentsForBooking(strings.TrimPrefix(u, "/bookings/"))
	require.Len(t, paid, 1)
	require.NoError(t, s.fp.SetRefundOutcome(paid[0].ID, payment.RefundPending))

	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("cancel")), chromedp.WaitVisible(chromedp.ID("confirm")), chromedp.Click(chromedp.ID("confirm"))))
	browser.Until(t, tab, `document.querySelector('[data-refund="pending"]') !== null`)
	refunds := s.fp.RefundsForPayment(paid[0].ID)
	require.Len(t, refunds, 1)
	require.NoError(t, s.fp.SettleRefund(refunds[0].ID, payment.RefundSucceeded))
	s.settle()
	browser.Until(t, tab, `document.querySelector('[data-refund="succeeded"]') !== null`)
	browser.Screenshot(t, tab, "storefront-refund-paid-back")
}

// On a slow connection a buyer who stops a payment that hangs (the
// browser's stop, or Esc) can send it again: its button came back
// disabled for good, and only loading the page again gave a pay form. The
// form's key is the same, so a payment that did reach the shop is not
// made twice.
func TestBrowserStorefrontPayAgainAfterStop(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.gaEvent("Club night")
	tab := browser.New(t)
	admitIn(t, s, tab, ev, "sami")
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/events/%d", s.url, ev)), chromedp.WaitVisible(chromedp.ID("qty"))))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`form[action$="/holds"] button`)), chromedp.WaitVisible(chromedp.ID("pay"))))

	paused := make(chan struct{}, 1)
	require.NoError(t, chromedp.Listen(tab, func(e any) {
		if _, ok := e.(*fetch.EventRequestPaused); ok {
			select {
			case paused <- struct{}{}:
			default:
			}
		}
	}))
	_, err := chromedp.Call(tab, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/booking"}}})
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("pay-button"))))
	select {
	case <-paused:
	case <-time.After(30 * time.Second):
		t.Fatal("the payment never left")
	}
	_, err = chromedp.Call(tab, cdppage.StopLoading, cdp.Empty{})
	require.NoError(t, err)
	_, err = chromedp.Call(tab, fetch.Disable, cdp.Empty{})
	require.NoError(t, err)

	browser.Until(t, tab, `!document.getElementById("pay-button").disabled`)
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("pay-button"))))
	browser.Until(t, tab, `document.querySelector('[data-status="confirmed"]') !== null`)
	u, err := chromedp.Run(tab, chromedp.Evaluate[string](`location.pathname`))
	require.NoError(t, err)
	assert.Len(t, s.fp.PaymentsForBooking(strings.TrimPrefix(u, "/bookings/")), 1)
}

// A keyboard user need not Tab through every seat of the map to reach
// what follows it: the first stop of the map is a link past it, shown
// when reached, to the best available.
func TestBrowserStorefrontSkipTheSeatMap(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	tab := browser.New(t)
	require.NoError(t, chromedp.Do(tab, chromedp.EmulateViewport(360, 740)))
	admitIn(t, s, tab, ev, "lena")
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(fmt.Sprintf("%s/events/%d?lang=de", s.url, ev)), chromedp.WaitVisible(chromedp.ID("map"))))
	_, err := chromedp.Run(tab, chromedp.Evaluate[any](`document.getElementById("main").focus()`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(tab, chromedp.KeyEvent(kb.Tab)))
	skip, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`(a => [a.id, a.textContent, String(a.getBoundingClientRect().width > 20 && a.getBoundingClientRect().height > 10)])(document.activeElement)`))
	require.NoError(t, err)
	assert.Equal(t, []string{"skip-map", "Sitzplan überspringen", "true"}, skip, "the first stop, shown")
	browser.Screenshot(t, tab, "storefront-skip-seat-map")
	require.NoError(t, chromedp.Do(tab, chromedp.KeyEvent(kb.Enter)))
	browser.Until(t, tab, fmt.Sprintf(`document.activeElement.id === "best" && location.pathname === "/events/%d"`, ev))
	require.NoError(t, chromedp.Do(tab, chromedp.KeyEvent(kb.Tab)))
	browser.Until(t, tab, `document.activeElement.id === "best-section"`)
}
