package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/stack"
)

// TestPurchaseEndToEnd buys two seats the way a browser's script would,
// through Caddy with the waiting room and the origin paying with fakepay:
// join → wait → admitted → hold → book → webhook → confirmed with tickets →
// ticket image → cancellation.
func TestPurchaseEndToEnd(t *testing.T) {
	redisURL := testenv.RedisURL(t)
	databaseURL := testenv.Postgres(t)
	caddyBin, originBin := buildServers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	overflow := int64(10)
	sys, err := stack.Up(ctx, stack.SystemConfig{
		CaddyBin: caddyBin, OriginBin: originBin, Dir: t.TempDir(),
		RedisURL: redisURL, DatabaseURL: databaseURL,
		Event: api.NewEvent{Name: "Final", Capacity: 10, Price: 90000, Currency: "inr",
			HoldTTLSeconds: 600, MaxPerUser: 4, OverflowPct: &overflow},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, err := range sys.Down(context.Background()) {
			t.Log(err)
		}
	})
	ev := sys.Event.ID
	client := &http.Client{Timeout: 30 * time.Second}
	call := buyerCalls(ctx, t, client)
	gw := sys.Gateway

	// Join: the queue answers with a position and a token.
	resp, raw := call(http.MethodGet, fmt.Sprintf("%s/v1/events/%d", gw, ev), "", "", nil)
	require.Equal(t, "waiting", resp.Header.Get("X-Waitroom-Status"), "%s", raw)
	var waiting api.Waiting
	require.NoError(t, json.Unmarshal(raw, &waiting))
	require.NotEmpty(t, waiting.Token)

	// Event staff admit the queue.
	admin := api.GatewayAdmin{Client: api.Client{HTTP: client, Base: sys.Caddy.AdminURL}}
	_, err = admin.SetWatermark(ctx, ev, 100)
	require.NoError(t, err)
	token := waiting.Token
	var page api.Event
	require.Eventually(t, func() bool {
		resp, raw = call(http.MethodGet, fmt.Sprintf("%s/v1/events/%d", gw, ev), token, "", nil)
		return resp.Header.Get("X-Waitroom-Status") == "admitted" && resp.StatusCode == http.StatusOK &&
			json.Unmarshal(raw, &page) == nil
	}, 10*time.Second, 50*time.Millisecond, "admitted within a second of the watermark")
	assert.Equal(t, int64(9), page.Remaining)

	// Hold, then book.
	resp, raw = call(http.MethodPost, fmt.Sprintf("%s/v1/events/%d/holds", gw, ev), token, "hold-1", map[string]int{"quantity": 2})
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", raw)
	var hold api.Hold
	require.NoError(t, json.Unmarshal(raw, &hold))
	resp, raw = call(http.MethodPost, gw+"/v1/bookings", token, "book-1",
		map[string]string{"hold_id": hold.HoldID, "payment_method_token": api.CardVisa})
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "%s", raw)
	var b api.Booking
	require.NoError(t, json.Unmarshal(raw, &b))
	assert.Equal(t, api.BookingPending, b.Status)

	// fakepay's webhook goes to the origin; the booking is confirmed with
	// its tickets.
	require.Eventually(t, func() bool {
		resp, raw = call(http.MethodGet, gw+"/v1/bookings/"+b.BookingID, token, "", nil)
		return resp.StatusCode == http.StatusOK && json.Unmarshal(raw, &b) == nil && b.Status != api.BookingPending
	}, time.Minute, 100*time.Millisecond)
	require.Equal(t, api.BookingConfirmed, b.Status, "%s", raw)
	assert.Empty(t, resp.Header.Get("X-Waitroom-Command"), "the origin's revoke stays at the gateway")
	require.Len(t, b.Tickets, 2)
	assert.NotEqual(t, b.Tickets[0].Seat, b.Tickets[1].Seat)

	resp, raw = call(http.MethodGet, gw+"/v1/tickets/"+b.Tickets[0].Code+".png", token, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	_, err = png.Decode(bytes.NewReader(raw))
	require.NoError(t, err, "the ticket's QR code is a PNG")

	oa := api.OriginAdmin{Client: api.Client{HTTP: client, Base: sys.Origin.URL}, Token: sys.AdminToken}
	inv, err := oa.Invariant(ctx, ev)
	require.NoError(t, err)
	assert.Zero(t, inv.Drift)
	assert.Equal(t, int64(2), inv.Confirmed)
	assert.Equal(t, int64(7), inv.Remaining)

	// The confirmed booking ended the token's admission at the gateway
	// (X-Waitroom-Command: revoke), so what the buyer does after the sale
	// goes to the origin itself, which still knows the token: the buyer
	// cancels, is refunded, and the seats are back on sale.
	resp, raw = call(http.MethodPost, sys.Origin.URL+"/v1/bookings/"+b.BookingID+"/cancellation", token, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	require.NoError(t, json.Unmarshal(raw, &b))
	assert.Equal(t, api.BookingRefunded, b.Status)
	inv, err = oa.Invariant(ctx, ev)
	require.NoError(t, err)
	assert.Zero(t, inv.Drift)
	assert.Zero(t, inv.Confirmed)
	assert.Equal(t, int64(9), inv.Remaining)
}

// buyerCalls is how the end-to-end tests call the gateway and the origin as
// a buyer's script does: JSON in and out, the queue token and the
// Idempotency-Key in their headers when given.
func buyerCalls(ctx context.Context, t *testing.T, client *http.Client) func(method, url, token, key string, body any) (*http.Response, []byte) {
	return func(method, url, token, key string, body any) (*http.Response, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			require.NoError(t, err)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		require.NoError(t, err)
		req.Header.Set("Accept", "application/json")
		if token != "" {
			req.Header.Set("X-Waitroom-Token", token)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, raw
	}
}
