//go:build browser

package storefront_test

// The storefront in Chromium (make test-browser): two adjacent seats
// chosen on the map, held, paid with a test card, and the two tickets with
// their QR codes. Screenshots land in out/browser/.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/browser"
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

// buyTwoSeats walks user through the pages of a new seated event in tab:
// two adjacent seats clicked on the map, held, paid with a test card, and
// the booking with two tickets and their QR codes. Screenshots are named
// after shots.
func buyTwoSeats(t *testing.T, s *shop, tab context.Context, user, shots string) {
	ev := s.seatedEvent("Stadium night")
	// The gateway's queue token, as the room sets it on admission.
	tk, err := s.keys.Issue(user, ev, 1, 24*time.Hour)
	require.NoError(t, err)
	_, err = chromedp.Call(tab, network.SetCookie, network.SetCookieParams{
		Name: fmt.Sprintf("waitroom_%d", ev), Value: tk.Raw, URL: s.url + "/"})
	require.NoError(t, err)

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
