package storefront_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

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
	holdPath := b.holdSeats(ev, "A-1-3").holdOf(t)
	req, err := http.NewRequest(http.MethodPost, s.url+"/v1/bookings", strings.NewReader(
		fmt.Sprintf(`{"hold_id":%q,"payment_method_token":"pm_card_unheard_of"}`, strings.TrimPrefix(holdPath, "/holds/"))))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	api := b.do(req)
	require.Contains(t, api.body, `"status":"failed"`)
	m := bookingLink.FindStringSubmatch(b.get("/tickets").body)
	require.NotNil(t, m)
	failed := b.get(m[1])
	assert.Contains(t, failed.body, `<p id="failure">The payment did not go through.</p>`)
	noCode(t, failed.body, "the booking page")
}
