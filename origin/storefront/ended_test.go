package storefront_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/payment"
)

// A booking that ends refunded used to say only "Refunded": the buyer was
// not told why, nor that a hold paid for with the wrong amount is still
// theirs to pay.
func TestStorefrontSaysWhyABookingWasRefunded(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	b := s.shopper().enter("lou", ev)
	hold := b.holdSeats(ev, "A-1-1").holdOf(t)

	api := b.apiPay(hold, payment.MethodSilent)
	require.Equal(t, http.StatusAccepted, api.status, api.body)
	var paid struct {
		BookingID string `json:"booking_id"`
		PaymentID string `json:"payment_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(api.body), &paid))
	// Changed at the provider to another amount before it settles.
	require.NoError(t, s.fp.AmendAtProvider(paid.PaymentID, 100, "inr"))
	require.NoError(t, s.fp.Redeliver(context.Background(), paid.PaymentID))
	s.settle()

	page := b.get("/bookings/" + paid.BookingID)
	require.Equal(t, http.StatusOK, page.status, page.body)
	assert.Contains(t, page.body, `data-status="refunded"`)
	assert.Contains(t, page.body, `<p id="ended">The payment provider took another amount than the seats&#39; price, `+
		`so no ticket was issued and the whole payment goes back to you.</p>`)
	assert.Contains(t, page.body, `<a href="`+hold+`" id="pay-again">`, "the hold is still the buyer's")
	for _, lang := range []string{"de", "es", "ja"} {
		other := b.get("/bookings/" + paid.BookingID + "?lang=" + lang)
		assert.Contains(t, other.body, `<p id="ended">`, lang)
		assert.NotContains(t, other.body, `<p id="ended">The payment provider`, lang)
	}
	b.get("/?lang=en")

	// Paid at its price, the hold is sold: nothing left to pay again.
	res := b.pay(b.get(hold), "pm_card_visa")
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	s.settle()
	assert.NotContains(t, b.get("/bookings/"+paid.BookingID).body, `id="pay-again"`)
}
