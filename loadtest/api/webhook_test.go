package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The signature is Stripe's scheme: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">.
func TestSignature(t *testing.T) {
	body := []byte(`{"id":"evt_1"}`)
	at := time.Unix(1700000000, 0)
	sig := Signature("whsec_test", body, at)
	require.True(t, strings.HasPrefix(sig, "t=1700000000,v1="))
	mac := hmac.New(sha256.New, []byte("whsec_test"))
	mac.Write([]byte("1700000000." + string(body)))
	assert.Equal(t, "t=1700000000,v1="+hex.EncodeToString(mac.Sum(nil)), sig)
}

func TestSucceeded(t *testing.T) {
	e := Succeeded(Booking{BookingID: "b1", PaymentID: "pi_1", Amount: 90000, Currency: "inr"})
	b, err := json.Marshal(e)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, "payment_intent.succeeded", m["type"])
	obj := m["data"].(map[string]any)["object"].(map[string]any)
	assert.Equal(t, "pi_1", obj["id"])
	assert.Equal(t, "b1", obj["metadata"].(map[string]any)["booking_id"])
	assert.NotEqual(t, e.ID, Succeeded(Booking{}).ID, "event ids are unique")
}

func TestBookingSettled(t *testing.T) {
	tests := []struct {
		b    Booking
		want bool
	}{
		{Booking{Status: BookingPending}, false},
		{Booking{Status: ""}, false},
		{Booking{Status: BookingCancelled, RefundStatus: "pending"}, false},
		{Booking{Status: BookingCancelled}, true},
		{Booking{Status: BookingConfirmed}, true},
		{Booking{Status: BookingRefunded}, true},
		{Booking{Status: BookingFailed}, true},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.b.Settled(), "%+v", tc.b)
	}
}
