package storefront_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/ledger"
)

// The hold's page once its booking is confirmed (Back to it, a reload,
// the gateway passing the buyer whose token was revoked on to /holds/*):
// it says the seats are booked and leads to the booking, with no pay form
// and no countdown; nothing under /holds/ charges again or gives the
// bought seats back.
func TestStorefrontHoldPageAfterBooking(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	b := s.shopper().enter("alice", ev)
	hold := b.holdSeats(ev, "A-1-3", "A-1-4")
	require.Equal(t, http.StatusOK, hold.status, hold.body)
	holdPath := hold.holdOf(t)
	b.follow(b.pay(hold, "pm_card_visa"))
	bookingPath := b.lastPath
	s.settle()
	require.Contains(t, b.get(bookingPath).body, `data-status="confirmed"`)

	// The token is revoked by the confirmed booking: the buyer cookie
	// alone, as the gateway passes a completed buyer on.
	b.dropToken(ev)
	b.header.Set("X-Waitroom-Status", "completed")
	again := b.get(holdPath)
	require.Equal(t, http.StatusOK, again.status, again.body)
	assert.Contains(t, again.body, "<h1>Your seats are booked</h1>")
	assert.Contains(t, again.body, `id="notice">These seats are paid for`)
	assert.Contains(t, again.body, `<a id="booking-link" href="`+bookingPath+`">See the booking and its tickets</a>`)
	assert.Contains(t, again.body, "A-1-3, A-1-4")
	for _, gone := range []string{`id="pay"`, `id="left"`, `id="countdown"`, "/release", "Your seats are held", "no longer active"} {
		assert.NotContains(t, again.body, gone)
	}
	de := b.get(holdPath + "?lang=de")
	assert.Contains(t, de.body, "<h1>Ihre Plätze sind gebucht</h1>")
	b.get("/?lang=en")

	// The old page's pay form sent again, with its key or a new one:
	// the same booking, no second payment.
	for _, key := range []string{hold.key(t), uuid.NewString()} {
		res := b.post(holdPath+"/booking", url.Values{"key": {key}, "card": {"pm_card_visa"}})
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		assert.Equal(t, bookingPath, res.header.Get("Location"))
	}
	assert.Len(t, s.fp.PaymentsForBooking(strings.TrimPrefix(bookingPath, "/bookings/")), 1)
	assert.Equal(t, 1, strings.Count(b.get("/tickets").body, `href="/bookings/`), "one booking")

	// Giving bought seats back is for the cancellation, not the hold.
	res := b.post(holdPath+"/release", url.Values{"confirm": {"yes"}})
	assert.Equal(t, http.StatusConflict, res.status)
	assert.Contains(t, res.body, "cancel the booking instead")
	assert.Contains(t, b.get(bookingPath).body, `data-status="confirmed"`)
	other := s.shopper().enter("bob", ev)
	assert.Contains(t, other.get(fmt.Sprintf("/events/%d", ev)).body, `<label for="s-A-1-3" class="sold">`)

	// No hold is made without the token's admission.
	evPage := b.get(fmt.Sprintf("/events/%d", ev))
	res = b.post(fmt.Sprintf("/events/%d/holds", ev), url.Values{"key": {evPage.key(t)}, "mode": {"seats"}, "seat": {"B-1-1"}})
	assert.Equal(t, http.StatusUnauthorized, res.status)
}

// While a payment is under way, the hold's page shown again leads to it
// rather than offering to pay a second time.
func TestStorefrontHoldPageWhilePaying(t *testing.T) {
	s := newShop(t, shopOptions{quietWebhooks: true})
	ev := s.gaEvent("Pending")
	b := s.shopper().enter("grace", ev)
	key := b.get(fmt.Sprintf("/events/%d", ev)).key(t)
	hold := b.follow(b.post(fmt.Sprintf("/events/%d/holds", ev), url.Values{"key": {key}, "mode": {"quantity"}, "quantity": {"2"}}))
	holdPath := hold.holdOf(t)
	pending := b.follow(b.pay(hold, "pm_card_visa"))
	require.Contains(t, pending.body, `data-status="payment_pending"`)
	again := b.get(holdPath)
	require.Equal(t, http.StatusOK, again.status)
	assert.Contains(t, again.body, "Your payment for these seats is under way.")
	assert.Contains(t, again.body, `<a id="booking-link" href="`+b.lastPath+`">`)
	assert.NotContains(t, again.body, `id="pay"`)
}

// A booking whose ticket a gate let in: its page no longer offers the
// cancellation, and says why; a cancellation sent from a page loaded
// before the scan is refused in the same words, the tickets kept.
func TestStorefrontLetInBookingIsNotCancellable(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	b := s.shopper().enter("rosa", ev)
	b.follow(b.pay(b.holdSeats(ev, "A-2-5"), "pm_card_visa"))
	bookingPath := b.lastPath
	s.settle()
	page := b.get(bookingPath)
	require.Contains(t, page.body, `data-status="confirmed"`)
	assert.Contains(t, page.body, `id="cancel"`)
	img := ticketImg.FindStringSubmatch(page.body)
	require.NotNil(t, img, page.body)
	code := strings.TrimSuffix(strings.TrimPrefix(img[1], "/v1/tickets/"), ".png")
	booking, _, _ := strings.Cut(strings.TrimPrefix(bookingPath, "/bookings/"), "?")
	scanned, err := s.lg.RecordScan(context.Background(), ledger.NewScan{Code: code, Booking: booking, Gate: "north-3", Event: ev},
		s.clock.Now)
	require.NoError(t, err)
	require.Equal(t, ledger.ScanAdmitted, scanned.Result)

	const said = "A ticket of this booking was let in at the gate, so it can no longer be cancelled."
	page = b.get(bookingPath)
	assert.NotContains(t, page.body, `id="cancel"`)
	assert.Contains(t, page.body, `<p id="let-in">`+said+`</p>`)
	assert.Len(t, ticketImg.FindAllStringSubmatch(page.body, -1), 1, "the ticket shown still")

	res := b.post(bookingPath+"/cancellation", url.Values{"confirm": {"yes"}})
	require.Equal(t, http.StatusConflict, res.status, res.body)
	assert.Contains(t, res.body, `role="alert" id="error">`+said+`</p>`)
	assert.NotContains(t, res.body, `id="let-in"`, "said once")
	assert.Contains(t, res.body, `data-status="confirmed"`)
	assert.Contains(t, b.get(bookingPath+"?lang=de").body, `<p id="let-in">`)
}
