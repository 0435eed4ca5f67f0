package storefront_test

import (
	"fmt"
	"net/http"
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
	// The pay form offers no such card: the API pays with it.
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
