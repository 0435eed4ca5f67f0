package storefront_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Giving seats back and cancelling a booking ask first, without the
// script too: one tap that missed its button lost the seats of a sold-out
// sale. A form sent without the answer (a page loaded before) asks too.
func TestStorefrontAsksBeforeGivingBack(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	b := s.shopper().enter("uma", ev)
	other := s.shopper().enter("vic", ev)
	hold := b.holdSeats(ev, "A-1-2")
	holdPath := hold.holdOf(t)
	assert.Contains(t, hold.body, `<form action="`+holdPath+`/release" class="live">`, "the release button leads to a question")

	for _, ask := range []page{b.get(holdPath + "/release"), b.post(holdPath+"/release", url.Values{})} {
		require.Equal(t, http.StatusOK, ask.status, ask.body)
		assert.Equal(t, "Give these seats back? · Tickets", titleOf(ask))
		assert.Contains(t, ask.body, `<form method="post" action="`+holdPath+`/release" class="box">`)
		assert.Contains(t, ask.body, `<input type="hidden" name="confirm" value="yes">`)
		assert.Contains(t, ask.body, `<a href="`+holdPath+`" id="keep">No, keep my seats</a>`)
		assert.Contains(t, other.get(fmt.Sprintf("/events/%d", ev)).body, `<label for="s-A-1-2" class="held">`, "still held")
	}
	for lang, title := range map[string]string{"de": "Diese Plätze freigeben?", "es": "¿Liberar estos asientos?", "ja": "この席を手放しますか？"} {
		ask := b.get(holdPath + "/release?lang=" + lang)
		assert.Equal(t, "<h1>"+title+"</h1>", h1Of(ask), lang)
		assert.NotContains(t, ask.body, "shop_", lang)
	}
	b.get("/?lang=en")

	b.follow(b.pay(hold, "pm_card_visa"))
	bookingPath := b.lastPath
	s.settle()
	booked := b.get(bookingPath)
	require.Contains(t, booked.body, `data-status="confirmed"`)
	assert.Contains(t, booked.body, `<form action="`+bookingPath+`/cancellation" class="box">`, "the cancel button leads to a question")
	assert.Equal(t, http.StatusSeeOther, b.get(holdPath+"/release").status, "a hold paid for is not given back here")

	for _, ask := range []page{b.get(bookingPath + "/cancellation"), b.post(bookingPath+"/cancellation", url.Values{})} {
		require.Equal(t, http.StatusOK, ask.status, ask.body)
		assert.Equal(t, "Cancel this booking? · Tickets", titleOf(ask))
		assert.Contains(t, ask.body, `<form method="post" action="`+bookingPath+`/cancellation" class="box">`)
		assert.Contains(t, ask.body, `<input type="hidden" name="confirm" value="yes">`)
		assert.Contains(t, ask.body, `<a href="`+bookingPath+`" id="keep">No, keep my booking</a>`)
		assert.Contains(t, b.get(bookingPath).body, `data-status="confirmed"`, "still booked")
	}
	for lang, title := range map[string]string{"de": "Diese Buchung stornieren?", "es": "¿Cancelar esta reserva?", "ja": "この予約をキャンセルしますか？"} {
		ask := b.get(bookingPath + "/cancellation?lang=" + lang)
		assert.Equal(t, "<h1>"+title+"</h1>", h1Of(ask), lang)
		assert.NotContains(t, ask.body, "shop_", lang)
	}
	b.get("/?lang=en")

	cancelled := b.follow(b.post(bookingPath+"/cancellation", url.Values{"confirm": {"yes"}}))
	assert.Regexp(t, `data-status="(cancelled|refunded)"`, cancelled.body)
	assert.Equal(t, http.StatusSeeOther, b.get(bookingPath+"/cancellation").status, "a cancelled booking is not asked about again")
}

var pageH1 = regexp.MustCompile(`<h1>[^<]*</h1>`)

func h1Of(p page) string { return pageH1.FindString(p.body) }
