package storefront_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A hold's page says the hold ended once it has, in its heading as in its
// message, and a page left open without the script loads itself again
// when it ends: its heading said the seats were held, with a pay form, as
// long as nobody reloaded it.
func TestStorefrontHoldPageSaysItEnded(t *testing.T) {
	s := newShop(t, shopOptions{})
	ev := s.seatedEvent("Stadium night")
	b := s.shopper().enter("nico", ev)
	hold := b.holdSeats(ev, "B-1-4")
	holdPath := hold.holdOf(t)
	assert.Equal(t, "Your seats are held · Tickets", titleOf(hold))
	assert.Contains(t, hold.body, `<noscript><meta http-equiv="refresh" content="601;url=`+holdPath+`"></noscript>`)

	s.clock.Advance(10*time.Minute + time.Second)
	gone := b.get(holdPath)
	require.Equal(t, http.StatusOK, gone.status)
	assert.Equal(t, "<h1>Your hold has ended</h1>", h1Of(gone))
	assert.Contains(t, gone.body, "Your hold has expired")
	assert.Contains(t, gone.body, `>Choose seats again</a>`)
	assert.NotContains(t, gone.body, `http-equiv="refresh"`)
	assert.Equal(t, "<h1>Ihre Reservierung ist beendet</h1>", h1Of(b.get(holdPath+"?lang=de")))
}
