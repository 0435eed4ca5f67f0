package storefront_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var bookingLink = regexp.MustCompile(`href="(/bookings/[0-9a-f-]{36})"`)

// A declined payment is told in words, on the hold's page and on the
// booking's, in every language: never the provider's code.
func TestStorefrontDeclineInPlainWords(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	codes := []string{"generic_decline", "insufficient_funds", "authentication_required", "card_declined", "unknown_payment_method"}
	noCode := func(t *testing.T, body, where string) {
		t.Helper()
		for _, c := range codes {
			assert.NotContains(t, body, c, where)
		}
	}

	for _, c := range []struct{ user, seat, card, words string }{
		{"ivy", "A-1-1", "pm_card_chargeDeclined", "The card was declined by its bank."},
		{"jack", "A-1-2", "pm_card_chargeDeclinedInsufficientFunds", "The card was declined: there is not enough money on it."},
	} {
		b := s.shopper().enter(c.user, ev)
		hold := b.holdSeats(ev, c.seat)
		res := b.pay(hold, c.card)
		require.Equal(t, http.StatusPaymentRequired, res.status, res.body)
		assert.Contains(t, res.body, `id="error">`+c.words+" Your seats are still held: choose another card.</p>")
		noCode(t, res.body, "the hold page")

		m := bookingLink.FindStringSubmatch(b.get("/tickets").body)
		require.NotNil(t, m, "the failed booking in My tickets")
		failed := b.get(m[1])
		require.Equal(t, http.StatusOK, failed.status)
		assert.Contains(t, failed.body, `data-status="failed"`)
		assert.Contains(t, failed.body, `<p id="failure">`+c.words+`</p>`)
		noCode(t, failed.body, "the booking page")
		for _, lang := range []string{"de", "es", "ja"} {
			page := b.get(m[1] + "?lang=" + lang)
			assert.Contains(t, page.body, `<p id="failure">`, lang)
			assert.NotContains(t, page.body, `<p id="failure">`+c.words, lang)
			noCode(t, page.body, "the booking page in "+lang)
			res := b.pay(hold, c.card)
			assert.Contains(t, res.body, `role="alert" id="error">`, lang)
			noCode(t, res.body, "the hold page in "+lang)
		}
		b.get("/?lang=en")
	}

	// A reason the storefront has no words of its own for: the general
	// ones.
	b := s.shopper().enter("kim", ev)
	api := b.apiPay(b.holdSeats(ev, "A-1-3").holdOf(t), "pm_card_unheard_of")
	require.Contains(t, api.body, `"status":"failed"`)
	m := bookingLink.FindStringSubmatch(b.get("/tickets").body)
	require.NotNil(t, m)
	failed := b.get(m[1])
	assert.Contains(t, failed.body, `<p id="failure">The payment did not go through.</p>`)
	noCode(t, failed.body, "the booking page")
}

// A payment the provider reports failed and then succeeded: the failed
// booking's page keeps checking, so the buyer who waits on it sees the
// booking confirmed. A failure long past stops checking.
func TestStorefrontFailedBookingKeepsChecking(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	b := s.shopper().enter("lena", ev)
	hold := b.holdSeats(ev, "B-1-2")
	// Paid through the API, as another client of the site would.
	b.apiPay(hold.holdOf(t), "pm_fakepay_fail_then_succeed")
	s.settle()
	m := bookingLink.FindStringSubmatch(b.get("/tickets").body)
	require.NotNil(t, m)
	failed := b.get(m[1])
	require.Contains(t, failed.body, `data-status="failed"`)
	assert.Contains(t, failed.body, `<meta http-equiv="refresh" content="5">`, "the page checks again")
	assert.Contains(t, failed.body, `id="rechecking">`)
	assert.Contains(t, failed.body, "Try another card", "the buyer may still pay otherwise")

	s.clock.Advance(6 * time.Second)
	s.fp.Tick()
	s.settle()
	done := b.get(m[1])
	assert.Contains(t, done.body, `data-status="confirmed"`)
	assert.NotContains(t, done.body, `http-equiv="refresh"`)
	assert.Len(t, ticketImg.FindAllStringSubmatch(done.body, -1), 1)

	c := s.shopper().enter("max", ev)
	res := c.pay(c.holdSeats(ev, "B-1-4"), "pm_card_chargeDeclined")
	require.Equal(t, http.StatusPaymentRequired, res.status, res.body)
	m = bookingLink.FindStringSubmatch(c.get("/tickets").body)
	require.NotNil(t, m)
	assert.Contains(t, c.get(m[1]).body, `<meta http-equiv="refresh" content="5">`)
	s.clock.Advance(4 * time.Minute)
	late := c.get(m[1])
	assert.Contains(t, late.body, `data-status="failed"`)
	assert.NotContains(t, late.body, `http-equiv="refresh"`, "a failure long past stops checking")
	assert.NotContains(t, late.body, `id="rechecking"`)
}

var declinedLink = regexp.MustCompile(`<a id="declined-link" href="(/bookings/[0-9a-f-]{36})">`)

// A card declined and then, a moment later, accepted (an asynchronous
// authentication): the pay form's answer says the payment may still go
// through and names its booking, whose page checks again, rather than only
// send the buyer to another card; the pay form stays for one. A decline
// long past is told as before.
func TestStorefrontDeclineMayStillGoThrough(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	b := s.shopper().enter("nora", ev)
	hold := b.holdSeats(ev, "B-1-6")
	assert.Contains(t, hold.body, `value="pm_fakepay_fail_then_succeed"`, "fakepay's card on the pay form")
	res := b.pay(hold, "pm_fakepay_fail_then_succeed")
	require.Equal(t, http.StatusPaymentRequired, res.status, res.body)
	assert.Contains(t, res.body, `role="alert" id="error">`)
	m := declinedLink.FindStringSubmatch(res.body)
	require.NotNil(t, m, "the declined payment's booking, named: %s", res.body)
	assert.Contains(t, res.body, `data-recheck="`+m[1]+`" data-recheck-seconds="180" data-recheck-every="5"`)
	assert.Contains(t, res.body, "so this one may still go through.")
	assert.Contains(t, res.body, `id="pay-button"`, "the pay form, for another card")
	for _, lang := range []string{"de", "es", "ja"} {
		other := b.post(hold.holdOf(t)+"/booking?lang="+lang, url.Values{"key": {hold.key(t)}, "card": {"pm_fakepay_fail_then_succeed"}})
		require.Equal(t, http.StatusPaymentRequired, other.status, lang)
		assert.Regexp(t, declinedLink, other.body, lang)
		assert.NotContains(t, other.body, "may still go through", lang)
	}
	b.get("/?lang=en")

	failed := b.get(m[1])
	require.Contains(t, failed.body, `data-status="failed"`)
	assert.Contains(t, failed.body, `id="rechecking">`)
	s.clock.Advance(6 * time.Second)
	s.fp.Tick()
	s.settle()
	assert.Contains(t, b.get(m[1]).body, `data-status="confirmed"`, "the booking named")

	c := s.shopper().enter("olga", ev)
	hold = c.holdSeats(ev, "B-1-8")
	res = c.pay(hold, "pm_card_chargeDeclined")
	require.Equal(t, http.StatusPaymentRequired, res.status, res.body)
	assert.Regexp(t, declinedLink, res.body, "any decline may still go through")
	s.clock.Advance(4 * time.Minute)
	late := c.pay(hold, "pm_card_chargeDeclined")
	require.Equal(t, http.StatusPaymentRequired, late.status, late.body)
	assert.NotContains(t, late.body, `id="declined"`, "a decline long past")
	assert.Contains(t, late.body, `role="alert" id="error">The card was declined by its bank. Your seats are still held: choose another card.</p>`)
}

// The hold's page loaded again after a decline (a reload, Back, the link
// in My tickets), or after a payment declined through the API, watches the
// declined payment as the pay form's answer did: a buyer who comes back to
// it is not offered another card as if nothing were under way. Another
// buyer's decline, and a decline long past, are not shown.
func TestStorefrontHoldPageWatchesARecentDecline(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	b := s.shopper().enter("pia", ev)
	hold := b.holdSeats(ev, "B-1-5")
	assert.NotContains(t, hold.body, `id="declined"`, "nothing declined yet")
	res := b.pay(hold, "pm_fakepay_fail_then_succeed")
	require.Equal(t, http.StatusPaymentRequired, res.status, res.body)
	m := declinedLink.FindStringSubmatch(res.body)
	require.NotNil(t, m, res.body)

	again := b.get(hold.holdOf(t))
	require.Equal(t, http.StatusOK, again.status, again.body)
	assert.Contains(t, again.body, `data-recheck="`+m[1]+`" data-recheck-seconds="180" data-recheck-every="5"`)
	assert.Contains(t, again.body, `role="alert" id="error">The payment needed your bank&#39;s confirmation, and the bank did not confirm it. Your seats are still held: choose another card.</p>`)
	assert.Contains(t, again.body, "so this one may still go through.")
	assert.Contains(t, again.body, `id="pay-button"`, "the pay form, for another card")

	s.clock.Advance(time.Minute)
	assert.Contains(t, b.get(hold.holdOf(t)).body, `data-recheck-seconds="120"`, "the watch's time left")

	c := s.shopper().enter("quinn", ev)
	other := c.holdSeats(ev, "B-1-7")
	c.apiPay(other.holdOf(t), "pm_card_chargeDeclined")
	page := c.get(other.holdOf(t))
	assert.Regexp(t, declinedLink, page.body, "a decline through the API")
	assert.NotContains(t, page.body, m[1], "another buyer's booking")

	s.clock.Advance(3 * time.Minute)
	late := c.get(other.holdOf(t))
	require.Equal(t, http.StatusOK, late.status)
	assert.NotContains(t, late.body, `id="declined"`, "a decline long past")
	assert.NotContains(t, late.body, `id="error"`)
	assert.Contains(t, late.body, `id="pay-button"`)
}

// apiPay pays for the hold at holdPath through the API, with the buyer's
// queue token, as another client of the site would.
func (b *buyer) apiPay(holdPath, method string) page {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.s.url+"/v1/bookings", strings.NewReader(
		fmt.Sprintf(`{"hold_id":%q,"payment_method_token":%q}`, strings.TrimPrefix(holdPath, "/holds/"), method)))
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	return b.do(req)
}
