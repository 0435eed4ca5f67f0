package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/freeport"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/stack"
)

// TestWebhookThroughTheGateway posts a provider's Stripe-signed webhook to
// the site's public address, as a provider configured with that address
// does, through the local Caddyfile that make up runs: the webhook reaches
// the origin past the room, and the booking it settles is confirmed. The
// provider holds no queue token, and the room's waiting page would have
// answered it 200 and swallowed it.
func TestWebhookThroughTheGateway(t *testing.T) {
	h := heldThroughLocalCaddyfile(t)
	ctx, sys, client, call, gw, ev, token, hold := h.ctx, h.sys, h.client, h.call, h.sys.Gateway, h.sys.Event.ID, h.token, h.hold
	// The provider takes the money and sends nothing of its own accord:
	// the test sends its webhook, to the public address.
	resp, raw := call(http.MethodPost, gw+"/v1/bookings", token, "book-1",
		map[string]string{"hold_id": hold.HoldID, "payment_method_token": api.FakepaySilent})
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "%s", raw)
	var b api.Booking
	require.NoError(t, json.Unmarshal(raw, &b))
	require.Equal(t, api.BookingPending, b.Status)
	require.NotEmpty(t, b.PaymentID)

	body, err := json.Marshal(api.Succeeded(b))
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw+"/v1/webhooks/fakepay", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", api.Signature(sys.WebhookSecret, body, time.Now()))
	// A forged queue identity sent along is taken off before the origin.
	req.Header.Set("X-Waitroom-User", "someone")
	hook, err := client.Do(req)
	require.NoError(t, err)
	hookBody, _ := io.ReadAll(hook.Body)
	hook.Body.Close()
	assert.Equal(t, http.StatusOK, hook.StatusCode, "%s", hookBody)
	assert.Empty(t, hook.Header.Get("X-Waitroom-Status"), "the room never answered it")

	oa := api.OriginAdmin{Client: api.Client{HTTP: client, Base: sys.Origin.URL}, Token: sys.AdminToken}
	require.Eventually(t, func() bool {
		resp, raw = call(http.MethodGet, sys.Origin.URL+"/v1/bookings/"+b.BookingID, token, "", nil)
		return resp.StatusCode == http.StatusOK && json.Unmarshal(raw, &b) == nil && b.Status != api.BookingPending
	}, time.Minute, 100*time.Millisecond)
	assert.Equal(t, api.BookingConfirmed, b.Status, "%s", raw)
	inv, err := oa.Invariant(ctx, ev)
	require.NoError(t, err)
	assert.Zero(t, inv.Drift)
	assert.Equal(t, int64(1), inv.Confirmed)

	// An unsigned post to the same address is the origin's to refuse, not
	// the room's to answer.
	resp, raw = call(http.MethodPost, gw+"/v1/webhooks/fakepay", "", "", map[string]string{"id": "evt_forged"})
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", raw)
	assert.Empty(t, resp.Header.Get("X-Waitroom-Status"))
}

// localHold is a buyer admitted through the local Caddyfile, holding one
// seat.
type localHold struct {
	ctx    context.Context
	sys    *stack.System
	client *http.Client
	call   func(method, url, token, key string, body any) (*http.Response, []byte)
	token  string
	hold   api.Hold
}

// heldThroughLocalCaddyfile starts the origin and Caddy with the
// Caddyfile make up runs, for an event of 10 seats, and takes a buyer
// through the room: a waiting answer, the watermark raised in the
// gateway's admin, admitted, then a hold of one seat.
func heldThroughLocalCaddyfile(t *testing.T) localHold {
	t.Helper()
	redisURL := testenv.RedisURL(t)
	databaseURL := testenv.Postgres(t)
	caddyBin, originBin := buildServers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	sitePort, err := freeport.Take()
	require.NoError(t, err)
	adminPort, err := freeport.Take()
	require.NoError(t, err)
	sys, err := stack.Up(ctx, stack.SystemConfig{
		CaddyBin: caddyBin, OriginBin: originBin, Dir: t.TempDir(),
		RedisURL: redisURL, DatabaseURL: databaseURL,
		Caddyfile: "../examples/Caddyfile", SitePort: sitePort, AdminPort: adminPort,
		Event: api.NewEvent{Name: "Final", Capacity: 10, Price: 90000, Currency: "inr", HoldTTLSeconds: 600, MaxPerUser: 4},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, err := range sys.Down(context.Background()) {
			t.Log(err)
		}
	})
	ev, gw := sys.Event.ID, sys.Gateway
	client := &http.Client{Timeout: 30 * time.Second}
	call := buyerCalls(ctx, t, client)

	resp, raw := call(http.MethodGet, fmt.Sprintf("%s/v1/events/%d", gw, ev), "", "", nil)
	require.Equal(t, "waiting", resp.Header.Get("X-Waitroom-Status"), "%s", raw)
	var waiting api.Waiting
	require.NoError(t, json.Unmarshal(raw, &waiting))
	token := waiting.Token
	admin := api.GatewayAdmin{Client: api.Client{HTTP: client, Base: sys.Caddy.AdminURL}}
	_, err = admin.SetWatermark(ctx, ev, 100)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		resp, _ = call(http.MethodGet, fmt.Sprintf("%s/v1/events/%d", gw, ev), token, "", nil)
		return resp.Header.Get("X-Waitroom-Status") == "admitted"
	}, 10*time.Second, 50*time.Millisecond)

	resp, raw = call(http.MethodPost, fmt.Sprintf("%s/v1/events/%d/holds", gw, ev), token, "hold-1", map[string]int{"quantity": 1})
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", raw)
	var hold api.Hold
	require.NoError(t, json.Unmarshal(raw, &hold))
	return localHold{ctx: ctx, sys: sys, client: client, call: call, token: token, hold: hold}
}
