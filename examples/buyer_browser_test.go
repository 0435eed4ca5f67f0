//go:build browser

package examples_test

// The buyer's whole day in Chromium (make test-browser), through the room
// as make up runs it: Caddy with the waitroom module and this directory's
// Caddyfile in front of the bundled origin, its storefront at /, on real
// Redis and PostgreSQL. Screenshots land in out/browser/.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/waitroom/waitroom/caddymodule"
	"github.com/waitroom/waitroom/internal/browser"
	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/waitroom"
)

const (
	secret     = "an-example-secret-of-at-least-32-bytes"
	adminToken = "day-admin-token"
)

// day is the stack a buyer meets: the site through the room, the staff
// console on Caddy's admin endpoint, the origin behind them.
type day struct {
	site, admin, origin string
	event               int64
	// gate is the token of a gate device registered for the event.
	gate string
	// raised counts the watermark raises so far: one per buyer.
	raised int
}

// newDay starts the origin (fakepay as its payment provider), creates an
// event with a seat map, registers a gate device for it, and loads
// examples/Caddyfile into an in-process Caddy in front of the origin.
func newDay(t *testing.T) *day {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rdb, err := redisurl.New(testenv.RedisURL(t), redisurl.Defaults{PoolSize: 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	lg, err := ledger.Open(ctx, testenv.Postgres(t), ledger.Options{MaxConns: 10})
	require.NoError(t, err)
	t.Cleanup(lg.Close)
	keys, err := waitroom.NewKeySet(time.Now, waitroom.Key{ID: "k1", Secret: []byte(secret)})
	require.NoError(t, err)
	fp, err := payment.NewFakepay(ctx, payment.FakepayConfig{WebhookSecret: "whsec_day", Seed: 7,
		HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = fp.Close() })
	srv, err := origin.New(origin.Config{
		Keys: keys, AdminToken: adminToken, Payments: fp,
		TicketKey: []byte("ticket-key-0123456789abcdef-0123456789"),
		BuyerKey:  []byte("buyer-key-0123456789abcdef-0123456789"),
		Logger:    slog.New(slog.DiscardHandler), SeatMapMaxAge: time.Nanosecond,
	}, lg, rdb)
	require.NoError(t, err)
	require.NoError(t, srv.Start(ctx))
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	d := &day{origin: ts.URL, event: testenv.EventID()}

	d.call(t, http.MethodPost, "/v1/events", "Bearer "+adminToken, map[string]any{
		"id": d.event, "name": "Stadium night", "currency": "inr", "hold_ttl_seconds": 600, "max_per_user": 4,
		"seating": map[string]any{"sections": []any{
			map[string]any{"id": "A", "price": 120000, "rows": []any{map[string]any{"id": "1", "seats": 8}, map[string]any{"id": "2", "seats": 8}}},
			map[string]any{"id": "GA-East", "price": 50000, "capacity": 30},
		}},
	}, http.StatusCreated)
	var dev struct {
		Token string `json:"token"`
	}
	d.call(t, http.MethodPost, "/v1/admin/gate-devices", "Bearer "+adminToken,
		map[string]any{"gate": "north-3", "event": d.event, "name": "scanner 12"}, http.StatusCreated, &dev)
	d.gate = dev.Token

	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("XDG_DATA_HOME", dir)
	sitePort, adminPort := testenv.FreePort(t), testenv.FreePort(t)
	for k, v := range map[string]string{
		"WAITROOM_PORT": strconv.Itoa(sitePort), "WAITROOM_ADMIN_PORT": strconv.Itoa(adminPort),
		"WAITROOM_EVENT": strconv.FormatInt(d.event, 10), "WAITROOM_SECRET": secret,
		"ORIGIN_ADDR": strings.TrimPrefix(ts.URL, "http://"), "REDIS_URL": testenv.RedisURL(t),
	} {
		t.Setenv(k, v)
	}
	caddyfile, err := os.ReadFile("Caddyfile")
	require.NoError(t, err)
	caddytest.Default.AdminPort = adminPort
	caddytest.NewTester(t).InitServer(string(caddyfile), "caddyfile")
	t.Cleanup(func() { _ = caddy.Stop() })
	if t.Failed() {
		t.FailNow()
	}
	d.site = fmt.Sprintf("http://127.0.0.1:%d", sitePort)
	d.admin = fmt.Sprintf("http://localhost:%d", adminPort)
	// The provider posts its webhooks to the site's public address.
	fp.SetWebhookURL(d.site + "/v1/webhooks/fakepay")
	return d
}

// call sends a JSON request to the origin's API and decodes its answer
// into out.
func (d *day) call(t *testing.T, method, path, auth string, body any, want int, out ...any) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(method, d.origin+path, bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, got)
	for _, o := range out {
		require.NoError(t, json.Unmarshal(got, o))
	}
}

// buyer is how one run of the day differs from the others.
type buyer struct {
	name string
	// lang is the browser's Accept-Language, "" for none.
	lang string
	// link is the language the buyer chooses with the waiting page's
	// links, "" for none.
	link      string
	noScript  bool
	seats     [2]string
	waiting   string // the waiting page's heading
	bookingH1 string // the booking page's heading
	// cancels: the buyer cancels the booking rather than go to the show.
	cancels bool
}

// TestBrowserBuyersDay: a buyer arrives and waits; staff raise the
// watermark in the console, in a second tab; the buyer chooses two
// adjacent seats on the map, holds them with the countdown running, pays
// with a test card and gets two tickets with their QR codes. The queue
// token is revoked by that confirmed booking, and the booking, reloaded
// through the room, still shows the tickets. Then the buyer goes to the
// show: a gate device admits a ticket, and the booking page no longer
// offers the cancellation; or cancels and sees the refund, and the gate
// refuses the tickets. Once with JavaScript, once without, once in German
// (the browser's language), once in Spanish (chosen on the waiting page).
func TestBrowserBuyersDay(t *testing.T) {
	d := newDay(t)
	for _, b := range []buyer{
		{name: "day", seats: [2]string{"A-1-1", "A-1-2"}, waiting: "You’re in the queue", bookingH1: "Your booking"},
		{name: "day-nojs", noScript: true, seats: [2]string{"A-1-4", "A-1-5"}, waiting: "You’re in the queue", bookingH1: "Your booking", cancels: true},
		{name: "day-de", lang: "de-DE,de;q=0.9", seats: [2]string{"A-1-7", "A-1-8"}, waiting: "Sie sind in der Warteschlange", bookingH1: "Ihre Buchung"},
		{name: "day-es", link: "es", seats: [2]string{"A-2-1", "A-2-2"}, waiting: "Estás en la cola", bookingH1: "Tu reserva", cancels: true},
	} {
		t.Run(b.name, func(t *testing.T) { d.walk(t, b) })
	}
}

func (d *day) walk(t *testing.T, b buyer) {
	tab := browser.New(t)
	shot := func(step string) { browser.Screenshot(t, tab, b.name+"-"+step) }
	_, err := chromedp.Call(tab, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	if b.noScript {
		_, err = chromedp.Call(tab, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		require.NoError(t, err)
	}
	if b.lang != "" {
		_, err = chromedp.Call(tab, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Accept-Language": b.lang}})
		require.NoError(t, err)
	}
	// The room's verdict on each page the tab loads.
	var mu sync.Mutex
	status := map[string]string{}
	require.NoError(t, chromedp.Listen(tab, func(e any) {
		if e, ok := e.(*network.EventResponseReceived); ok && e.Type == network.ResourceTypeDocument {
			mu.Lock()
			defer mu.Unlock()
			s, _ := e.Response.Headers["X-Waitroom-Status"].(string)
			if s == "" {
				s, _ = e.Response.Headers["x-waitroom-status"].(string)
			}
			status[strings.SplitN(e.Response.URL, "?", 2)[0]] = s
		}
	}))
	roomSaid := func(url string) string {
		mu.Lock()
		defer mu.Unlock()
		return status[url]
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, sel)
		return s
	}
	eval := func(expr string) string {
		t.Helper()
		s, err := chromedp.Run(tab, chromedp.Evaluate[string](expr))
		require.NoError(t, err, expr)
		return s
	}
	wantLang := "en"
	if b.lang != "" {
		wantLang = b.lang[:2]
	}

	// 1. Arrive: the waiting page, nobody admitted yet; its language links
	// keep the place.
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(d.site+"/"), chromedp.WaitVisible(chromedp.CSS("#position"))))
	if b.link != "" {
		wantLang = b.link
		position := text("#position")
		require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`a[href$="lang=`+b.link+`"]`))))
		browser.Until(t, tab, fmt.Sprintf(`document.documentElement.lang === %q && document.getElementById("position") !== null`, b.link))
		assert.Equal(t, position, text("#position"))
	}
	assert.Equal(t, b.waiting, text("h1"))
	assert.Equal(t, wantLang, eval("document.documentElement.lang"))
	assert.Equal(t, "waiting", roomSaid(d.site+"/"))
	shot("1-waiting")

	// 2. Staff raise the watermark by one in the console, in a second tab.
	console := browser.Tab(t, tab)
	card := fmt.Sprintf("#event-%d", d.event)
	require.NoError(t, chromedp.Do(console, chromedp.Navigate(d.admin+"/waitroom/console"),
		chromedp.WaitVisible(chromedp.CSS(card+` input[name="raise_by"]`))))
	browser.Until(t, console, fmt.Sprintf(`document.querySelector(%q).textContent === %q`, card+" [data-k=watermark]", strconv.Itoa(d.raised)))
	require.NoError(t, chromedp.Do(console,
		chromedp.SetValue(chromedp.CSS(card+` input[name="raise_by"]`), "1"),
		chromedp.SetValue(chromedp.CSS(card+` input[name="reason"]`), "next buyer"),
		chromedp.Click(chromedp.CSS(card+` button[data-act="raise"]`))))
	d.raised++
	browser.Until(t, console, fmt.Sprintf(`document.querySelector(%q).textContent === %q`, card+" [data-k=watermark]", strconv.Itoa(d.raised)))
	browser.Screenshot(t, console, b.name+"-2-console")

	// 3. The waiting page moves on to the storefront by itself (its poll,
	// or without scripts its meta refresh); two adjacent seats are chosen
	// on the map.
	link := fmt.Sprintf("event-%d", d.event)
	browser.Until(t, tab, fmt.Sprintf(`document.getElementById(%q) !== null`, link))
	assert.Equal(t, "admitted", roomSaid(d.site+"/"))
	assert.Equal(t, wantLang, eval("document.documentElement.lang"))
	clickFresh(t, tab, "#"+link)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.ID("map"))))
	require.NoError(t, chromedp.Do(tab,
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`label[for="s-%s"]`, b.seats[0]))),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`label[for="s-%s"]`, b.seats[1])))))
	browser.Until(t, tab, fmt.Sprintf(`document.getElementById("s-%s").checked && document.getElementById("s-%s").checked`, b.seats[0], b.seats[1]))
	shot("3-seats")

	// 4. Hold them: the hold page counts down to its expiry.
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("hold-seats")), chromedp.WaitVisible(chromedp.ID("pay"))))
	assert.Equal(t, b.seats[0]+", "+b.seats[1], text("#hold-seats"))
	assert.Equal(t, "polite", eval(`document.getElementById("countdown").getAttribute("aria-live")`))
	browser.Until(t, tab, `/^\d+:\d\d$/.test(document.getElementById("left").textContent)`)
	holdURL := eval("location.href")
	shot("4-hold")

	// 5. Pay with a test card; 6. the booking page refreshes itself until
	// the payment's webhook, through the room, confirms it: two tickets
	// with their QR codes.
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("c-pm_card_visa")), chromedp.Click(chromedp.ID("pay-button"))))
	browser.Until(t, tab, `document.querySelector('[data-status]') !== null`)
	shot("5-paid")
	browser.Until(t, tab, `document.querySelector('[data-status="confirmed"]') !== null`)
	d.tickets(t, tab, b.seats)
	assert.Equal(t, b.bookingH1, text("h1"))
	bookingURL := eval("location.href")
	shot("6-booking")

	// 7. The confirmed booking revoked the queue token. Reloaded through
	// the room, the booking is still there, with its tickets.
	require.NoError(t, chromedp.Do(tab, chromedp.Reload()))
	browser.Until(t, tab, `document.querySelector('[data-status="confirmed"]') !== null`)
	assert.Equal(t, "completed", roomSaid(bookingURL), "the room passed a revoked token to the booking")
	codes := d.tickets(t, tab, b.seats)
	shot("7-after-revocation")
	// The hold's page, as Back leads to it: passed on too, it says the
	// seats are booked and leads to the booking, with nothing to pay.
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(holdURL), chromedp.WaitVisible(chromedp.ID("booking-link"))))
	assert.Equal(t, "completed", roomSaid(holdURL), "the room passed a revoked token to the hold's page")
	assert.Equal(t, bookingURL, eval(`document.getElementById("booking-link").href`))
	assert.Equal(t, "true", eval(`String(document.getElementById("pay") === null)`))
	shot("7-hold-after-revocation")
	// The events list, then "My tickets", which lists the booking and
	// leads back to it.
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`header a[href="/"]`)),
		chromedp.WaitVisible(chromedp.ID(link))))
	assert.Equal(t, "completed", roomSaid(d.site+"/"))
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`header a[href="/tickets"]`)),
		chromedp.WaitVisible(chromedp.CSS(".bookings"))))
	assert.Equal(t, "completed", roomSaid(d.site+"/tickets"))
	assert.Contains(t, text(".bookings"), b.seats[0]+", "+b.seats[1])
	clickFresh(t, tab, ".bookings a")
	browser.Until(t, tab, fmt.Sprintf(`location.href === %q && document.getElementById("cancel") !== null`, bookingURL))

	if b.cancels {
		// 8. Cancel from the page, and say yes when asked: the refund goes
		// under way, then is paid back, and the page says so; the gate
		// refuses the tickets.
		clickFresh(t, tab, "#cancel")
		browser.Until(t, tab, `document.getElementById("confirm") !== null`)
		assert.Equal(t, "completed", roomSaid(bookingURL+"/cancellation"), "the question is passed on after the purchase")
		clickFresh(t, tab, "#confirm")
		browser.Until(t, tab, `document.querySelector('[data-refund="succeeded"]') !== null`)
		assert.Equal(t, "completed", roomSaid(bookingURL))
		shot("8-refunded")
		for _, code := range codes {
			d.call(t, http.MethodPost, "/v1/scans", "Bearer "+d.gate, map[string]any{"code": code}, http.StatusGone)
		}
		return
	}

	// 8. At the show, a gate device of the event scans the first ticket:
	// admitted.
	var scan struct {
		Result string `json:"result"`
	}
	d.call(t, http.MethodPost, "/v1/scans", "Bearer "+d.gate, map[string]any{"code": codes[0]}, http.StatusOK, &scan)
	assert.Equal(t, "admitted", scan.Result)

	// 9. The booking page, loaded again, keeps the tickets and no longer
	// offers the cancellation: its holder is inside. The other ticket
	// still admits its own holder.
	require.NoError(t, chromedp.Do(tab, chromedp.Reload()))
	browser.Until(t, tab, `document.getElementById("let-in") !== null && document.getElementById("cancel") === null`)
	assert.Equal(t, "completed", roomSaid(bookingURL))
	d.tickets(t, tab, b.seats)
	shot("9-let-in")
	d.call(t, http.MethodPost, "/v1/scans", "Bearer "+d.gate, map[string]any{"code": codes[1]}, http.StatusOK, &scan)
	assert.Equal(t, "admitted", scan.Result)
}

// clickFresh clicks the element sel selects on a page the tab came to by
// itself (a reload, a redirect, a click's navigation), which chromedp may
// not have caught up with: a click that misses its node is tried again.
func clickFresh(t *testing.T, tab context.Context, sel string) {
	t.Helper()
	var err error
	for range 50 {
		ctx, cancel := context.WithTimeout(tab, 5*time.Second)
		err = chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("click %s: %v", sel, err)
}

// tickets checks that the booking page shows a ticket for each seat, its
// QR code loaded, and returns their codes.
func (d *day) tickets(t *testing.T, tab context.Context, seats [2]string) []string {
	t.Helper()
	browser.Until(t, tab, `Array.from(document.querySelectorAll(".tickets img")).filter(i => i.complete && i.naturalWidth > 0).length === 2`)
	labels, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(".tickets figcaption")).map(f => f.textContent.split(" ").pop())`))
	require.NoError(t, err)
	assert.Equal(t, seats[:], labels)
	codes, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(".tickets img")).map(i => new URL(i.src).pathname.replace(/^\/v1\/tickets\//, "").replace(/\.png$/, ""))`))
	require.NoError(t, err)
	require.Len(t, codes, 2)
	return codes
}
