package storefront_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A second tab choosing other seats while a hold is live is shown that
// hold, and told why: not other seats than it chose, without a word.
func TestStorefrontAlreadyHeldSaysWhy(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	b := s.shopper().enter("nina", ev)
	first := b.holdSeats(ev, "A-1-1", "A-1-2")
	require.Equal(t, http.StatusOK, first.status)
	assert.NotContains(t, first.body, `id="notice"`)

	// The other tab's event page, loaded before, sends its own choice.
	evPage := b.get(fmt.Sprintf("/events/%d", ev))
	res := b.post(fmt.Sprintf("/events/%d/holds", ev), url.Values{"key": {evPage.key(t)}, "mode": {"seats"}, "seat": {"B-1-5"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	second := b.follow(res)
	require.Equal(t, http.StatusOK, second.status)
	assert.Equal(t, first.holdOf(t), second.holdOf(t), "the hold there was")
	assert.Contains(t, second.body, `id="hold-seats">A-1-1, A-1-2</dd>`)
	assert.Contains(t, second.body, `id="notice">You already hold these seats, and a buyer holds one set at a time`)
	ja := b.get(b.lastPath + "&lang=ja")
	assert.Contains(t, ja.body, `id="notice">すでにこの席を確保しています`)
	b.get("/?lang=en")

	// Once they are bought, the same says so.
	b.follow(b.pay(first, "pm_card_visa"))
	s.settle()
	evPage = b.get(fmt.Sprintf("/events/%d", ev))
	res = b.post(fmt.Sprintf("/events/%d/holds", ev), url.Values{"key": {evPage.key(t)}, "mode": {"seats"}, "seat": {"B-1-6"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	bought := b.follow(res)
	assert.Contains(t, bought.body, `id="notice">You have already bought these seats`)
	assert.Contains(t, bought.body, `id="booking-link"`)
}
