package storefront_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/storefront"
)

var ticketImg = regexp.MustCompile(`<img src="(/v1/tickets/[^"]+\.png)"`)

// A buyer chooses two seats on the map, pays, sees the tickets, and still
// sees them once the queue token is gone; then cancels.
func TestStorefrontSeatsToTickets(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	b := s.shopper().enter("alice", ev)

	home := b.get("/")
	require.Equal(t, http.StatusOK, home.status)
	assert.Contains(t, home.body, "Stadium night")
	assert.Contains(t, home.body, "from 500.00 INR", "the cheapest section's price")
	assert.Contains(t, home.body, "Seats left: 50")
	setCookie := strings.Join(home.header.Values("Set-Cookie"), "\n")
	assert.Contains(t, setCookie, storefront.BuyerCookie+"=", "the first page sets the buyer cookie")
	assert.Contains(t, setCookie, "HttpOnly")
	assert.Contains(t, setCookie, "SameSite=Lax")
	assert.NotContains(t, setCookie, "Secure", "plain http")

	evPage := b.get(fmt.Sprintf("/events/%d", ev))
	require.Equal(t, http.StatusOK, evPage.status)
	assert.Contains(t, evPage.body, `<symbol id="seat"`)
	assert.Contains(t, evPage.body, `<input type="checkbox" name="seat" value="A-1-3" id="s-A-1-3"><label for="s-A-1-3" class="free">`)
	assert.Contains(t, evPage.body, "Places left: <strong>30</strong>", "the standing section's places")

	hold := b.holdSeats(ev, "A-1-3", "A-1-4")
	require.Equal(t, http.StatusOK, hold.status, hold.body)
	assert.Contains(t, hold.body, "A-1-3, A-1-4")
	assert.Contains(t, hold.body, "2,400.00 INR")
	assert.Contains(t, hold.body, `aria-live="polite"`)
	assert.Contains(t, hold.body, "Time left: 10:00")
	assert.Contains(t, hold.body, `value="pm_card_visa" checked`)

	other := s.shopper().enter("bob", ev)
	seen := other.get(fmt.Sprintf("/events/%d", ev))
	assert.Contains(t, seen.body, `value="A-1-3" id="s-A-1-3" disabled><label for="s-A-1-3" class="held">`, "held for the others")

	pending := b.follow(b.pay(hold, "pm_card_visa"))
	require.Equal(t, http.StatusOK, pending.status, pending.body)
	s.settle()
	bookingPath := b.lastPath
	done := b.get(bookingPath)
	require.Equal(t, http.StatusOK, done.status)
	assert.Contains(t, done.body, `data-status="confirmed"`)
	assert.NotContains(t, done.body, `http-equiv="refresh"`, "a settled booking stops refreshing")
	assert.Equal(t, "revoke", done.header.Get("X-Waitroom-Command"), "the gateway ends the admission")
	imgs := ticketImg.FindAllStringSubmatch(done.body, -1)
	require.Len(t, imgs, 2, done.body)
	assert.Contains(t, done.body, "Seat A-1-3")
	assert.Contains(t, done.body, "Seat A-1-4")
	png := b.get(imgs[0][1])
	assert.Equal(t, http.StatusOK, png.status)
	assert.Equal(t, "image/png", png.header.Get("Content-Type"))
	seen = other.get(fmt.Sprintf("/events/%d", ev))
	assert.Contains(t, seen.body, `<label for="s-A-1-3" class="sold">`)

	// The purchase revokes the token: the buyer cookie alone still shows
	// the booking and the tickets.
	b.dropToken(ev)
	again := b.get(bookingPath)
	require.Equal(t, http.StatusOK, again.status, again.body)
	assert.Len(t, ticketImg.FindAllStringSubmatch(again.body, -1), 2)
	mine := b.get("/tickets")
	require.Equal(t, http.StatusOK, mine.status)
	assert.Contains(t, mine.body, `href="`+bookingPath+`"`)
	assert.Contains(t, mine.body, "A-1-3, A-1-4")

	// Nobody else's: another buyer, or a forged cookie.
	assert.Equal(t, http.StatusNotFound, other.get(bookingPath).status)
	assert.NotContains(t, other.get("/tickets").body, bookingPath)
	forger := s.shopper()
	c := b.cookie(storefront.BuyerCookie)
	require.NotNil(t, c)
	payload, mac, _ := strings.Cut(c.Value, ".")
	forger.header.Set("Cookie", storefront.BuyerCookie+"="+payload+"x."+mac)
	assert.Equal(t, http.StatusNotFound, forger.get(bookingPath).status, "a cookie not signed by the key is no buyer")

	cancelled := b.follow(b.post(bookingPath+"/cancellation", url.Values{"confirm": {"yes"}}))
	require.Equal(t, http.StatusOK, cancelled.status)
	assert.Regexp(t, `data-status="(cancelled|refunded)"`, cancelled.body)
	assert.Regexp(t, `data-refund="(pending|succeeded)"`, cancelled.body)
	assert.Empty(t, ticketImg.FindAllStringSubmatch(cancelled.body, -1), "the tickets are void")
	assert.Contains(t, cancelled.body, `<p id="ended">You cancelled this booking. Its tickets are no longer valid.</p>`)
	assert.NotContains(t, cancelled.body, `id="pay-again"`, "the hold is sold and given back")
	twice := b.post(bookingPath+"/cancellation", url.Values{"confirm": {"yes"}})
	assert.Equal(t, http.StatusSeeOther, twice.status, "cancelling again shows the same cancellation")
}

// General admission by quantity, the best available, a standing section,
// and giving a hold back.
func TestStorefrontQuantitiesAndSections(t *testing.T) {
	s := newShop(t, shopOptions{})
	ga := s.gaEvent("Club night")
	b := s.shopper().enter("carol", ga)
	evPage := b.get(fmt.Sprintf("/events/%d", ga))
	require.Equal(t, http.StatusOK, evPage.status)
	assert.Contains(t, evPage.body, `<select id="qty" name="quantity">`)
	assert.Contains(t, evPage.body, "900.00 INR")
	hold := b.follow(b.post(fmt.Sprintf("/events/%d/holds", ga), url.Values{"key": {evPage.key(t)}, "mode": {"quantity"}, "quantity": {"3"}}))
	assert.Contains(t, hold.body, "2,700.00 INR")
	released := b.follow(b.post(hold.holdOf(t)+"/release", url.Values{"confirm": {"yes"}}))
	require.Equal(t, http.StatusOK, released.status)
	assert.Contains(t, released.body, "The seats were given back.")
	assert.Contains(t, released.body, `Seats left: <strong id="left-count">100</strong>`)
	gone := b.get(hold.holdOf(t))
	assert.NotContains(t, gone.body, `id="pay"`, "a released hold cannot be paid")
	assert.Contains(t, gone.body, `<p class="notice" role="status" id="notice">The seats were given back.</p>`,
		"the page of a released hold says so, not only that the seats are held")

	seated := s.seatedEvent("Arena")
	d := s.shopper().enter("dave", seated)
	evPage = d.get(fmt.Sprintf("/events/%d", seated))
	best := d.follow(d.post(fmt.Sprintf("/events/%d/holds", seated), url.Values{"key": {evPage.key(t)}, "mode": {"best"}, "section": {"B"}, "quantity": {"2"}}))
	assert.Contains(t, best.body, "B-1-", "two seats of section B")
	assert.Contains(t, best.body, "1,600.00 INR")

	e := s.shopper().enter("erin", seated)
	evPage = e.get(fmt.Sprintf("/events/%d", seated))
	standing := e.follow(e.post(fmt.Sprintf("/events/%d/holds", seated), url.Values{"key": {evPage.key(t)}, "mode": {"section"}, "section": {"GA-East"}, "quantity": {"2"}}))
	assert.Contains(t, standing.body, "GA-East")
	assert.Contains(t, standing.body, "1,000.00 INR")
	assert.Contains(t, e.get(fmt.Sprintf("/events/%d", seated)).body, "Places left: <strong>28</strong>")
}

// The language of the waiting page: Accept-Language, ?lang= (kept in the
// gateway's cookie).
func TestStorefrontLanguages(t *testing.T) {
	s := newShop(t, shopOptions{})
	s.gaEvent("Konzert")
	b := s.shopper()
	b.header.Set("Accept-Language", "de-DE,de;q=0.9")
	de := b.get("/")
	assert.Contains(t, de.body, `<html lang="de">`)
	assert.Contains(t, de.body, "Veranstaltungen")
	assert.Equal(t, "de", de.header.Get("Content-Language"))
	assert.Contains(t, de.body, "900,00 INR", "German money")
	ja := b.get("/?lang=ja")
	assert.Contains(t, ja.body, "イベント")
	assert.Equal(t, "ja", b.cookie("waitroom_lang").Value)
	assert.Contains(t, b.get("/tickets").body, "マイチケット", "the choice is kept")
}

// Over https (at the proxy), the buyer cookie is Secure.
func TestStorefrontBuyerCookieSecure(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.gaEvent("Secure")
	b := s.shopper().enter("frank", ev)
	b.header.Set("X-Forwarded-Proto", "https")
	p := b.get(fmt.Sprintf("/events/%d", ev))
	assert.Contains(t, strings.Join(p.header.Values("Set-Cookie"), "\n"), "Secure")
	noToken := s.shopper().get("/")
	assert.NotContains(t, strings.Join(noToken.header.Values("Set-Cookie"), "\n"), storefront.BuyerCookie,
		"no token, no buyer to remember")
}

// A booking whose payment is not settled yet reloads itself (a meta
// refresh, no script) until it is.
func TestStorefrontPendingBookingRefreshes(t *testing.T) {
	s := newShop(t, shopOptions{quietWebhooks: true})
	ev := s.gaEvent("Pending")
	b := s.shopper().enter("grace", ev)
	key := b.get(fmt.Sprintf("/events/%d", ev)).key(t)
	hold := b.follow(b.post(fmt.Sprintf("/events/%d/holds", ev), url.Values{"key": {key}, "mode": {"quantity"}, "quantity": {"2"}}))
	pending := b.follow(b.pay(hold, "pm_card_visa"))
	assert.Contains(t, pending.body, `data-status="payment_pending"`)
	assert.Contains(t, pending.body, `<meta http-equiv="refresh" content="2">`)
	assert.Contains(t, pending.body, `role="status" aria-live="polite"`)
	assert.Empty(t, pending.header.Get("X-Waitroom-Command"), "not bought yet")

	id := strings.TrimPrefix(b.lastPath, "/bookings/")
	paid := s.fp.PaymentsForBooking(id)
	require.Len(t, paid, 1)
	s.fp.SetWebhookURL(s.url + "/v1/webhooks/fakepay")
	require.NoError(t, s.fp.Redeliver(context.Background(), paid[0].ID))
	done := b.get(b.lastPath)
	assert.Contains(t, done.body, `data-status="confirmed"`)
	assert.NotContains(t, done.body, `http-equiv="refresh"`)
	assert.Len(t, ticketImg.FindAllStringSubmatch(done.body, -1), 2)
	assert.Contains(t, done.body, "Seat #", "a general-admission ticket's seat number")
}

// The hold's expiry is a <time> with its instant: the page says it in UTC,
// in every language, and the script rewrites it in the buyer's own zone.
func TestStorefrontExpiryIsATime(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.gaEvent("Club night")
	b := s.shopper().enter("ute", ev)
	key := b.get(fmt.Sprintf("/events/%d", ev)).key(t)
	hold := b.follow(b.post(fmt.Sprintf("/events/%d/holds", ev), url.Values{"key": {key}, "mode": {"quantity"}, "quantity": {"1"}}))
	// The clock stands at 10:00:00 UTC; a hold lasts 600 s.
	assert.Contains(t, hold.body, `<p id="expires" class="live">They are yours until <time datetime="2026-05-01T10:10:00Z">10:10:00 UTC</time>: pay before then.</p>`)
	for lang, words := range map[string]string{
		"de": `<p id="expires" class="live">Sie gehören Ihnen bis <time datetime="2026-05-01T10:10:00Z">10:10:00 UTC</time>: Zahlen Sie vorher.</p>`,
		"es": `<p id="expires" class="live">Son tuyos hasta las <time datetime="2026-05-01T10:10:00Z">10:10:00 UTC</time>: paga antes.</p>`,
		"ja": `<p id="expires" class="live"><time datetime="2026-05-01T10:10:00Z">10:10:00 UTC</time>まで確保されています。それまでにお支払いください。</p>`,
	} {
		assert.Contains(t, b.get(b.lastPath+"?lang="+lang).body, words, lang)
	}
}

// The site has an icon: the pages name it, and /favicon.ico, which a
// browser asks for by itself, is the same, cached as the other assets.
func TestStorefrontIcon(t *testing.T) {
	s := newShop(t, shopOptions{})
	b := s.shopper()
	m := regexp.MustCompile(`<link rel="icon" href="([^"]+)" type="image/svg\+xml">`).FindStringSubmatch(b.get("/").body)
	require.NotNil(t, m, "the pages name their icon")
	named := b.get(m[1])
	for path, res := range map[string]page{m[1]: named, "/favicon.ico": b.get("/favicon.ico")} {
		require.Equal(t, http.StatusOK, res.status, path)
		assert.Equal(t, "image/svg+xml", res.header.Get("Content-Type"), path)
		assert.Equal(t, "public, max-age=3600", res.header.Get("Cache-Control"), path)
		assert.Contains(t, res.body, "<svg", path)
		assert.Equal(t, named.body, res.body, path)
	}
}

// The pages are light: a small stylesheet and script, cached; the pages
// compressed for a browser that takes gzip.
func TestStorefrontAssetsAndWeight(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Weight")
	b := s.shopper().enter("heidi", ev)
	for _, a := range []struct {
		file, kind string
		most       int
	}{
		{"shop.css", "text/css", 3 << 10},
		// The script also watches a declined payment that may still go
		// through.
		{"shop.js", "text/javascript", 4 << 10},
	} {
		res := b.get("/assets/" + a.file)
		require.Equal(t, http.StatusOK, res.status, a.file)
		assert.Contains(t, res.header.Get("Content-Type"), a.kind)
		assert.Contains(t, res.header.Get("Cache-Control"), "max-age=")
		assert.Less(t, len(res.body), a.most, a.file)
	}
	assert.Equal(t, http.StatusNotFound, b.get("/assets/nothing.css").status)

	req, err := http.NewRequest(http.MethodGet, s.url+fmt.Sprintf("/events/%d", ev), nil)
	require.NoError(t, err)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "gzip", resp.Header.Get("Content-Encoding"))
	plain := b.get(fmt.Sprintf("/events/%d", ev))
	t.Logf("event page with a 20-seat map: %d bytes, %d gzipped", len(plain.body), len(raw))
	assert.Less(t, len(raw), 3<<10, "the event page, compressed")
	assert.Equal(t, "no-store", plain.header.Get("Cache-Control"))
	assert.Contains(t, plain.header.Get("Content-Security-Policy"), "script-src 'self'")
}

// Every seat held is not sold out: the list and the event page say the
// seats are held and may come back, until they are paid for.
func TestStorefrontAllHeldIsNotSoldOut(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.createEvent(map[string]any{"name": "Small room", "capacity": 2, "price": 90000, "overflow_pct": 0, "max_per_user": 2})
	b := s.shopper().enter("alice", ev)
	other := s.shopper().enter("bob", ev)

	evPage := b.get(fmt.Sprintf("/events/%d", ev))
	res := b.post(fmt.Sprintf("/events/%d/holds", ev), url.Values{"key": {evPage.key(t)}, "mode": {"quantity"}, "quantity": {"2"}})
	hold := b.follow(res)
	require.Equal(t, http.StatusOK, hold.status, hold.body)

	list := other.get("/")
	item := regexp.MustCompile(fmt.Sprintf(`(?s)id="event-%d".*?</li>`, ev)).FindString(list.body)
	assert.Contains(t, item, "<strong>All held</strong>")
	assert.NotContains(t, item, "Sold out")
	seen := other.get(fmt.Sprintf("/events/%d", ev))
	assert.Contains(t, seen.body, `<p id="all-held">Every seat is held right now by a buyer who has not paid yet (2 held).`)

	b.follow(b.pay(hold, "pm_card_visa"))
	s.settle()
	list = other.get("/")
	item = regexp.MustCompile(fmt.Sprintf(`(?s)id="event-%d".*?</li>`, ev)).FindString(list.body)
	assert.Contains(t, item, "<strong>Sold out</strong>", "paid for: nothing can come back")
	assert.NotContains(t, other.get(fmt.Sprintf("/events/%d", ev)).body, `id="all-held"`)
}
