package origin_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/waitroom"
)

type trailEntryJSON struct {
	Time      string         `json:"time"`
	Kind      string         `json:"kind"`
	HoldID    *string        `json:"hold_id"`
	BookingID *string        `json:"booking_id"`
	Detail    map[string]any `json:"detail"`
}

type trailJSON struct {
	Event   int64            `json:"event"`
	User    string           `json:"user"`
	Entries []trailEntryJSON `json:"entries"`
}

func (h *payHarness) trail(event int64, user string) trailJSON {
	h.t.Helper()
	res := h.do(http.MethodGet, fmt.Sprintf("/v1/admin/users/%s/trail?event=%d", user, event), nil, admin())
	require.Equal(h.t, http.StatusOK, res.status, "trail: %s", res.body)
	var tr trailJSON
	res.json(h.t, &tr)
	return tr
}

// holdAt holds qty seats as user with a token for position pos.
func (h *payHarness) holdAt(event int64, user string, pos int64, qty int) holdJSON {
	h.t.Helper()
	res := h.do(http.MethodPost, fmt.Sprintf("/v1/events/%d/holds", event), map[string]any{"quantity": qty}, map[string]string{
		waitroom.TokenHeader: h.token(user, event, pos),
		"Idempotency-Key":    "hold-" + uuid.NewString(),
	})
	require.Equal(h.t, http.StatusCreated, res.status, "hold: %s", res.body)
	var hj holdJSON
	res.json(h.t, &hj)
	return hj
}

// kinds is the trail's kinds in order, and checks the times never go back.
func kinds(t *testing.T, tr trailJSON) []string {
	t.Helper()
	var out []string
	var last time.Time
	for _, e := range tr.Entries {
		at, err := time.Parse(time.RFC3339, e.Time)
		require.NoError(t, err)
		require.False(t, at.Before(last), "entries in time order: %+v", tr.Entries)
		last = at
		out = append(out, e.Kind)
	}
	return out
}

func TestAuditTrail(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10, "hold_ttl_seconds": 60, "overflow_pct": 10})
	step := func() { h.clock.Advance(time.Second) }

	// ann, admitted at position 37: holds and gives the hold back, holds
	// again, is declined, pays, cancels.
	first := h.holdAt(ev.ID, "ann", 37, 1)
	step()
	res := h.do(http.MethodDelete, "/v1/holds/"+first.HoldID, nil, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusNoContent, res.status, "%s", res.body)
	step()
	second := h.holdAt(ev.ID, "ann", 37, 2)
	step()
	declined := h.mustBook(ev.ID, "ann", second.HoldID, payment.MethodDeclined)
	require.Equal(t, "failed", declined.Status)
	step()
	paid := h.mustBook(ev.ID, "ann", second.HoldID, payment.MethodVisa)
	require.Equal(t, "confirmed", h.settled(ev.ID, "ann", paid.BookingID).Status)
	step()
	res = h.do(http.MethodPost, "/v1/bookings/"+paid.BookingID+"/cancellation", nil, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	cancelled := h.settled(ev.ID, "ann", paid.BookingID)

	tr := h.trail(ev.ID, "ann")
	assert.Equal(t, ev.ID, tr.Event)
	assert.Equal(t, "ann", tr.User)
	got := kinds(t, tr)
	t.Logf("ann's trail: %v (booking %s, refund %s)", got, cancelled.Status, cancelled.RefundStatus)
	require.NotEmpty(t, tr.Entries)
	admitted := tr.Entries[0]
	assert.Equal(t, "admitted", admitted.Kind)
	assert.EqualValues(t, 37, admitted.Detail["position"])
	assert.Equal(t, first.HoldID, *admitted.HoldID)
	assert.Equal(t, "2026-05-01T10:00:00Z", admitted.Time, "at the first hold's time")
	assert.Subset(t, got, []string{"hold_created", "hold_released", "booking_created", "booking_failed",
		"payment_succeeded", "booking_confirmed", "hold_confirmed", "ticket_issued", "ticket_voided"})
	// In order (each kind's first appearance).
	want := []string{"admitted", "hold_created", "hold_released", "hold_created", "booking_created", "booking_failed",
		"booking_created", "payment_succeeded", "booking_confirmed", "ticket_issued", "ticket_voided"}
	assert.True(t, inOrder(got, want), "want %v in order within %v", want, got)
	if cancelled.Status == "refunded" {
		assert.Contains(t, got, "refund_succeeded")
		assert.Contains(t, got, "booking_refunded")
	} else {
		assert.Contains(t, got, "booking_cancelled")
	}
	// The confirmed booking's ticket entries name it and its hold.
	for _, e := range tr.Entries {
		if e.Kind == "ticket_issued" {
			require.NotNil(t, e.BookingID)
			assert.Equal(t, paid.BookingID, *e.BookingID)
			assert.Equal(t, second.HoldID, *e.HoldID)
			assert.NotEmpty(t, e.Detail["code"])
		}
	}

	// bob's hold lapses: expired at its expiry, before the reaper marks it,
	// and at the time the ledger marked it after.
	bob := h.holdAt(ev.ID, "bob", 38, 1)
	h.expireHold(ev.ID, "bob", bob.HoldID)
	tr = h.trail(ev.ID, "bob")
	assert.Equal(t, []string{"admitted", "hold_created", "hold_expired"}, kinds(t, tr))
	assert.Equal(t, bob.ExpiresAt, tr.Entries[2].Time)
	_, err := h.srv.ReapOnce(t.Context())
	require.NoError(t, err)
	tr = h.trail(ev.ID, "bob")
	assert.Equal(t, []string{"admitted", "hold_created", "hold_expired"}, kinds(t, tr))

	// cat pays late and is served from the overflow reserve: the hold
	// expired, it was never confirmed; the booking was.
	cat := h.holdAt(ev.ID, "cat", 39, 1)
	late := h.mustBook(ev.ID, "cat", cat.HoldID, payment.MethodSilent)
	h.expireHold(ev.ID, "cat", cat.HoldID)
	require.NoError(t, h.fp.Redeliver(t.Context(), late.PaymentID))
	require.True(t, h.settled(ev.ID, "cat", late.BookingID).Overflow)
	tr = h.trail(ev.ID, "cat")
	got = kinds(t, tr)
	assert.Equal(t, []string{"admitted", "hold_created", "booking_created", "hold_expired", "payment_succeeded",
		"booking_confirmed", "ticket_issued"}, got)
	for _, e := range tr.Entries {
		if e.Kind == "booking_confirmed" {
			assert.Equal(t, true, e.Detail["overflow"])
		}
	}

	// Nobody: no entries.
	assert.Empty(t, h.trail(ev.ID, "nobody").Entries)

	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
		status  int
		code    string
	}{
		{"no admin token", fmt.Sprintf("/v1/admin/users/ann/trail?event=%d", ev.ID), nil, http.StatusUnauthorized, "unauthorized"},
		{"a buyer's token", fmt.Sprintf("/v1/admin/users/ann/trail?event=%d", ev.ID), h.auth("ann", ev.ID), http.StatusUnauthorized, "unauthorized"},
		{"no event", "/v1/admin/users/ann/trail", admin(), http.StatusBadRequest, "invalid_request"},
		{"event not a number", "/v1/admin/users/ann/trail?event=final", admin(), http.StatusBadRequest, "invalid_request"},
		{"event not positive", "/v1/admin/users/ann/trail?event=0", admin(), http.StatusBadRequest, "invalid_request"},
		{"unknown event", fmt.Sprintf("/v1/admin/users/ann/trail?event=%d", ev.ID+1_000_000), admin(), http.StatusNotFound, "not_found"},
		{"user id with a NUL", fmt.Sprintf("/v1/admin/users/a%%00n/trail?event=%d", ev.ID), admin(), http.StatusBadRequest, "invalid_request"},
		{"user id not UTF-8", fmt.Sprintf("/v1/admin/users/a%%FFn/trail?event=%d", ev.ID), admin(), http.StatusBadRequest, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := h.with(t).do(http.MethodGet, tc.path, nil, tc.headers)
			require.Equal(t, tc.status, res.status, "%s", res.body)
			assert.Equal(t, tc.code, res.errorCode(t))
		})
	}
}

// inOrder reports whether want appears in got in order (not necessarily
// next to each other).
func inOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// A reserved seat's ticket shows in the trail with the seat id it carries,
// issued and voided alike, not the seat's number in the map.
func TestAuditTrailSeatedTicket(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createSeated(seating(1, 8), nil)
	res := h.holdBody(ev.ID, "ann", map[string]any{"seat_ids": []string{"A-1-7"}}, "k1")
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	var hold seatedHold
	res.json(t, &hold)
	b := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodVisa)
	require.NoError(t, h.fp.WaitIdle(t.Context()))
	h.clock.Advance(time.Second)
	res = h.do(http.MethodPost, "/v1/bookings/"+b.BookingID+"/cancellation", nil, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)

	seen := map[string]any{}
	for _, e := range h.trail(ev.ID, "ann").Entries {
		if e.Kind == "ticket_issued" || e.Kind == "ticket_voided" {
			seen[e.Kind] = e.Detail["seat"]
		}
	}
	assert.Equal(t, map[string]any{"ticket_issued": "A-1-7", "ticket_voided": "A-1-7"}, seen)
}
