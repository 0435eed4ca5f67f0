package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/loadtest/api"
)

// TestPurchaseSurvivesRevocationThroughTheGateway buys a ticket through
// the local Caddyfile that make up runs: the first confirmed answer
// revokes the queue token, and the booking and its ticket's QR code are
// still reached with that token through the room (after_purchase), as the
// same buyer, while any other page makes the bearer a new arrival.
func TestPurchaseSurvivesRevocationThroughTheGateway(t *testing.T) {
	h := heldThroughLocalCaddyfile(t)
	call, gw, ev, token, hold := h.call, h.sys.Gateway, h.sys.Event.ID, h.token, h.hold
	resp, raw := call(http.MethodPost, gw+"/v1/bookings", token, "book-1",
		map[string]string{"hold_id": hold.HoldID, "payment_method_token": api.CardVisa})
	require.Less(t, resp.StatusCode, 300, "%s", raw)
	var b api.Booking
	require.NoError(t, json.Unmarshal(raw, &b))
	user := b.UserID
	require.NotEmpty(t, user)

	// Until its first confirmed answer the buyer is admitted; that answer
	// revokes the token.
	for b.Status != api.BookingConfirmed {
		require.Equal(t, api.BookingPending, b.Status, "%s", raw)
		time.Sleep(100 * time.Millisecond)
		resp, raw = call(http.MethodGet, gw+"/v1/bookings/"+b.BookingID, token, "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
		require.Equal(t, "admitted", resp.Header.Get("X-Waitroom-Status"))
		require.NoError(t, json.Unmarshal(raw, &b))
	}
	require.NotEmpty(t, b.Tickets)

	// Revoked, and still the booking's buyer on its pages.
	for range 2 {
		resp, raw = call(http.MethodGet, gw+"/v1/bookings/"+b.BookingID, token, "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
		assert.Equal(t, "completed", resp.Header.Get("X-Waitroom-Status"))
		assert.Empty(t, resp.Header.Get("X-Waitroom-Token"), "no new token")
		assert.Empty(t, resp.Header.Values("Set-Cookie"), "the cookie is kept")
		assert.Empty(t, resp.Header.Get("X-Waitroom-Command"))
		var again api.Booking
		require.NoError(t, json.Unmarshal(raw, &again))
		assert.Equal(t, api.BookingConfirmed, again.Status)
		assert.Equal(t, user, again.UserID)
	}
	resp, raw = call(http.MethodGet, gw+"/v1/tickets/"+b.Tickets[0].Code+".png", token, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	assert.Equal(t, "completed", resp.Header.Get("X-Waitroom-Status"))
	assert.Equal(t, "image/png", resp.Header.Get("Content-Type"))

	// Anywhere else the revoked token is a new arrival, as before: a new
	// token, someone else.
	resp, raw = call(http.MethodGet, fmt.Sprintf("%s/v1/events/%d", gw, ev), token, "", nil)
	assert.Contains(t, []string{"admitted", "waiting"}, resp.Header.Get("X-Waitroom-Status"), "%s", raw)
	fresh := resp.Header.Get("X-Waitroom-Token")
	assert.NotEmpty(t, fresh, "a new arrival's token")
	assert.NotEqual(t, token, fresh)
}
