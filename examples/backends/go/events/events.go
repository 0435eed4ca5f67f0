// Package events is the Go recipe for a site that takes Waitroom's booking
// events (docs/api.md §17): it checks the Waitroom-Signature header with the
// standard library alone, then hands the event on.
//
//	secret := []byte(os.Getenv("WAITROOM_EVENTS_SECRET")) // the origin's ORIGIN_EVENTS_SECRET
//	http.Handle("/hooks/waitroom", events.Handler(secret, func(ctx context.Context, ev events.Event) error {
//		return orders.Apply(ctx, ev) // dedup on ev.ID: an event may come twice
//	}))
//
// The origin sends each event until a 2xx answers it: answer 2xx only once
// the event is safely handled, and anything else to have it sent again.
package events

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header carries the signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">.
const Header = "Waitroom-Signature"

// Tolerance is how far the signature's time may be from the clock.
const Tolerance = 5 * time.Minute

// ErrSignature: the header is missing, malformed, too old, or does not sign
// the body with the secret.
var ErrSignature = errors.New("waitroom event signature invalid")

// Event is a booking event; Data's fields depend on Type.
type Event struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Created int64           `json:"created"`
	Data    json.RawMessage `json:"data"`
}

// Verify checks header against the raw body: a v1 signature of it with
// secret, made within tolerance of now. Several v1 may be present (one per
// secret while a secret is rotated): one valid is enough.
func Verify(header string, body, secret []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrSignature
	}
	if d := now.Sub(time.Unix(t, 0)); d > tolerance || d < -tolerance {
		return ErrSignature
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts + "."))
	m.Write(body)
	want := m.Sum(nil)
	for _, s := range sigs {
		if got, err := hex.DecodeString(s); err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignature
}

// maxBody bounds what is read of a request: an event is a few kilobytes.
const maxBody = 1 << 20

// Handler verifies each request's signature and passes its event to handle:
// 400 for a bad signature or body, 500 when handle fails (the origin sends
// the event again), 204 once handled.
func Handler(secret []byte, handle func(context.Context, Event) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if err := Verify(r.Header.Get(Header), body, secret, time.Now(), Tolerance); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ev Event
		if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" {
			http.Error(w, "malformed event", http.StatusBadRequest)
			return
		}
		if err := handle(r.Context(), ev); err != nil {
			http.Error(w, "not handled", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
