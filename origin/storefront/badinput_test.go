package storefront_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/waitroom"
)

// Every refusal re-renders the page with a message, and keeps what the
// buyer had: their other seats, their hold, their choice of card.
func TestStorefrontBadInput(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Refusals")
	holds := fmt.Sprintf("/events/%d/holds", ev)

	t.Run("a taken seat", func(t *testing.T) {
		first := s.shopper().enter("taken-1", ev)
		first.holdSeats(ev, "A-2-1")
		b := s.shopper().enter("taken-2", ev)
		page := b.get(fmt.Sprintf("/events/%d", ev))
		res := b.post(holds, url.Values{"key": {page.key(t)}, "mode": {"seats"}, "seat": {"A-2-1", "A-2-2"}})
		assert.Equal(t, http.StatusConflict, res.status)
		assert.Contains(t, res.body, `role="alert"`)
		assert.Contains(t, res.body, "Someone else has just taken A-2-1.")
		assert.Contains(t, res.body, `value="A-2-2" id="s-A-2-2" checked>`, "the other seat stays chosen")
		assert.NotEqual(t, page.key(t), res.key(t), "a new key for the next try")
		assert.Contains(t, res.body, fmt.Sprintf(`href="/events/%d?lang=de"`, ev), "the language links lead to the page, not the form")
		hold := b.follow(b.post(holds, url.Values{"key": {res.key(t)}, "mode": {"seats"}, "seat": {"A-2-2", "A-2-3"}}))
		assert.Contains(t, hold.body, "A-2-2, A-2-3")
	})

	t.Run("an expired hold", func(t *testing.T) {
		b := s.shopper().enter("late", ev)
		hold := b.holdSeats(ev, "B-1-7")
		s.clock.Advance(11 * 60e9)
		res := b.pay(hold, "pm_card_visa")
		assert.Equal(t, http.StatusGone, res.status)
		assert.Contains(t, res.body, "Your hold has expired")
		assert.NotContains(t, res.body, `id="pay"`)
		assert.Contains(t, b.get(hold.holdOf(t)).body, "Your hold has expired")
	})

	t.Run("a declined card", func(t *testing.T) {
		b := s.shopper().enter("declined", ev)
		hold := b.holdSeats(ev, "B-1-1")
		res := b.pay(hold, "pm_card_chargeDeclined")
		assert.Equal(t, http.StatusPaymentRequired, res.status)
		assert.Contains(t, res.body, "The card was declined by its bank. Your seats are still held")
		assert.Contains(t, res.body, `value="pm_card_chargeDeclined" checked`, "the card chosen is kept")
		assert.Contains(t, res.body, "B-1-1", "the hold is still there")
		booked := b.follow(b.pay(res, "pm_card_visa"))
		assert.Equal(t, http.StatusOK, booked.status)
		s.settle()
		assert.Contains(t, b.get(b.lastPath).body, `data-status="confirmed"`)
	})

	t.Run("a double submit", func(t *testing.T) {
		b := s.shopper().enter("double", ev)
		page := b.get(fmt.Sprintf("/events/%d", ev))
		form := url.Values{"key": {page.key(t)}, "mode": {"seats"}, "seat": {"A-1-6"}}
		one, two := b.post(holds, form), b.post(holds, form)
		require.Equal(t, http.StatusSeeOther, one.status, one.body)
		assert.Equal(t, one.header.Get("Location"), two.header.Get("Location"), "the same hold")
		hold := b.get(one.header.Get("Location"))
		pay := url.Values{"key": {hold.key(t)}, "card": {"pm_card_visa"}}
		p1, p2 := b.post(hold.holdOf(t)+"/booking", pay), b.post(hold.holdOf(t)+"/booking", pay)
		require.Equal(t, http.StatusSeeOther, p1.status, p1.body)
		assert.Equal(t, p1.header.Get("Location"), p2.header.Get("Location"), "the same booking")
		s.settle()
	})

	t.Run("a tampered form", func(t *testing.T) {
		b := s.shopper().enter("tamper", ev)
		key := b.get(fmt.Sprintf("/events/%d", ev)).key(t)
		for name, form := range map[string]url.Values{
			"a seat not on the map":        {"key": {key}, "mode": {"seats"}, "seat": {"Z-9-9"}},
			"a standing section as a seat": {"key": {key}, "mode": {"seats"}, "seat": {"GA-East"}},
			"no key":                       {"mode": {"seats"}, "seat": {"A-1-1"}},
			"a bad key":                    {"key": {"x"}, "mode": {"seats"}, "seat": {"A-1-1"}},
			"an unknown mode":              {"key": {key}, "mode": {"free"}},
			"a quantity on a seat map":     {"key": {key}, "mode": {"quantity"}, "quantity": {"2"}},
			"a negative quantity":          {"key": {key}, "mode": {"best"}, "quantity": {"-1"}},
			"a reserved section as places": {"key": {key}, "mode": {"section"}, "section": {"A"}, "quantity": {"1"}},
		} {
			res := b.post(holds, form)
			assert.Equal(t, http.StatusBadRequest, res.status, name)
			assert.Contains(t, res.body, "Something in the form was not valid", name)
		}
		over := b.post(holds, url.Values{"key": {key}, "mode": {"best"}, "quantity": {"5"}})
		assert.Equal(t, http.StatusBadRequest, over.status)
		assert.Contains(t, over.body, "You can buy at most 4 tickets.")
		none := b.post(holds, url.Values{"key": {key}, "mode": {"seats"}})
		assert.Contains(t, none.body, "Choose at least one seat.")

		hold := b.holdSeats(ev, "A-1-1")
		res := b.post(hold.holdOf(t)+"/booking", url.Values{"key": {hold.key(t)}, "card": {"pm_card_evil"}})
		assert.Equal(t, http.StatusBadRequest, res.status)
		assert.Contains(t, res.body, "Something in the form was not valid")
		assert.Contains(t, res.body, `id="pay"`, "the hold can still be paid")

		thief := s.shopper().enter("thief", ev)
		assert.Equal(t, http.StatusNotFound, thief.get(hold.holdOf(t)).status, "another buyer's hold")
		assert.Equal(t, http.StatusNotFound, thief.pay(hold, "pm_card_visa").status)
		assert.Equal(t, http.StatusNotFound, thief.post(hold.holdOf(t)+"/release", url.Values{"confirm": {"yes"}}).status)
		assert.Equal(t, http.StatusNotFound, thief.get("/holds/not-a-hold").status)
	})

	t.Run("a cross-site post", func(t *testing.T) {
		b := s.shopper().enter("csrf", ev)
		key := b.get(fmt.Sprintf("/events/%d", ev)).key(t)
		form := url.Values{"key": {key}, "mode": {"seats"}, "seat": {"A-1-2"}}
		res := b.post(holds, form, "Sec-Fetch-Site", "cross-site")
		assert.Equal(t, http.StatusForbidden, res.status)
		assert.Contains(t, res.body, "sent from another site")
		res = b.post(holds, form, "Sec-Fetch-Site", "", "Origin", "https://evil.example")
		assert.Equal(t, http.StatusForbidden, res.status)
		assert.Contains(t, b.get(fmt.Sprintf("/events/%d", ev)).body, `value="A-1-2" id="s-A-1-2"><label for="s-A-1-2" class="free">`,
			"nothing was held")
	})

	t.Run("no admission", func(t *testing.T) {
		b := s.shopper()
		key := b.get(fmt.Sprintf("/events/%d", ev)).key(t)
		res := b.post(holds, url.Values{"key": {key}, "mode": {"seats"}, "seat": {"A-1-5"}})
		assert.Equal(t, http.StatusUnauthorized, res.status)
		assert.Contains(t, res.body, "come in through the queue first")

		waiting := s.seatedEvent("Not yet")
		s.admit(waiting, 0)
		w := s.shopper().enter("waiting", waiting)
		key = w.get(fmt.Sprintf("/events/%d", waiting)).key(t)
		res = w.post(fmt.Sprintf("/events/%d/holds", waiting), url.Values{"key": {key}, "mode": {"seats"}, "seat": {"A-1-5"}})
		assert.Equal(t, http.StatusForbidden, res.status)
		assert.Contains(t, res.body, "It is not your turn yet")

		// One change: the room never admits between the two.
		paused, watermark := true, int64(10)
		_, err := s.store.Update(context.Background(), waiting, waitroom.Change{SetWatermark: &watermark, Paused: &paused})
		require.NoError(t, err)
		res = w.post(fmt.Sprintf("/events/%d/holds", waiting), url.Values{"key": {key}, "mode": {"seats"}, "seat": {"A-1-5"}})
		assert.Equal(t, http.StatusServiceUnavailable, res.status)
		assert.Contains(t, res.body, "The sale is paused for a moment")
	})

	t.Run("no such page", func(t *testing.T) {
		b := s.shopper()
		for _, path := range []string{"/events/999999999", "/events/x", "/bookings/00000000-0000-0000-0000-000000000000", "/bookings/x"} {
			res := b.get(path)
			assert.Equal(t, http.StatusNotFound, res.status, path)
			assert.Contains(t, res.body, "There is nothing here", path)
		}
	})
}

// Without a payment provider the pages hold seats and say that paying is
// not possible.
func TestStorefrontWithoutPayments(t *testing.T) {
	s := newShop(t, shopOptions{noPayments: true})
	ev := s.gaEvent("Free to look")
	b := s.shopper().enter("nopay", ev)
	key := b.get(fmt.Sprintf("/events/%d", ev)).key(t)
	hold := b.follow(b.post(fmt.Sprintf("/events/%d/holds", ev), url.Values{"key": {key}, "mode": {"quantity"}, "quantity": {"1"}}))
	assert.Contains(t, hold.body, "Payments are not set up on this site.")
	assert.NotContains(t, hold.body, `id="pay"`)
}
