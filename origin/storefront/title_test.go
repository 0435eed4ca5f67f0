package storefront_test

import (
	"fmt"
	"net/url"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
)

var pageTitle = regexp.MustCompile(`<title>([^<]*)</title>`)

func titleOf(p page) string {
	if m := pageTitle.FindStringSubmatch(p.body); m != nil {
		return m[1]
	}
	return ""
}

// The page's title is what a screen reader says first of a page, and the
// tab shows: a refused form's page says in it what went wrong (an alert
// already there when the page loads is not read out by itself), and a
// page of only a message names it rather than the site twice.
func TestStorefrontTitleSaysWhatWentWrong(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	b := s.shopper().enter("tess", ev)

	page := b.get(fmt.Sprintf("/events/%d", ev))
	assert.Equal(t, "Stadium night · Tickets", titleOf(page))
	refused := b.post(fmt.Sprintf("/events/%d/holds", ev), url.Values{"key": {page.key(t)}, "mode": {"seats"}})
	assert.Equal(t, "Choose at least one seat. · Stadium night · Tickets", titleOf(refused))

	hold := b.holdSeats(ev, "B-1-2")
	assert.Equal(t, "Your seats are held · Tickets", titleOf(hold))
	declined := b.pay(hold, "pm_card_chargeDeclined")
	assert.Equal(t, "The card was declined by its bank. Your seats are still held: choose another card. · Your seats are held · Tickets", titleOf(declined))

	missing := b.get("/holds/00000000-0000-0000-0000-000000000000")
	assert.Equal(t, "There is nothing here: it may belong to another browser. · Tickets", titleOf(missing))
	assert.Equal(t, "Hier ist nichts: Es gehört vielleicht zu einem anderen Browser. · Tickets", titleOf(b.get("/bookings/nothing?lang=de")), "in the page's language")
}
