package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/waitroom"
)

// nearNow is a test clock that starts at the wall clock's time: the
// origin's admission store times its keys by the wall clock, so the
// injected time must agree with it for an extension to be kept.
func nearNow() *clock { return &clock{t: time.Now().UTC().Truncate(time.Second)} }

// extendedAt reports whether user's admission in event is extended at at,
// read as a gateway reads it (the store's AdmissionExtended) by a store
// whose clock says at.
func extendedAt(t *testing.T, h *harness, event int64, user string, at time.Time) bool {
	t.Helper()
	store := waitroom.NewRedisStore(h.rdb, waitroom.RedisOptions{Now: func() time.Time { return at }})
	ok, err := store.AdmissionExtended(context.Background(), event, user)
	require.NoError(t, err)
	return ok
}

func expiry(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return at
}

// TestHoldExtendsAdmission: a buyer who holds seats stays admitted past
// the admission window until the hold expires, at least; one who was
// refused (sold out) is not.
func TestHoldExtendsAdmission(t *testing.T) {
	h := newHarness(t, harnessOptions{clock: nearNow()})
	ev := h.createEvent(map[string]any{"capacity": 2, "max_per_user": 2, "hold_ttl_seconds": 600})

	cases := []struct {
		user     string
		qty      int
		status   int
		extended bool
	}{
		{user: "ann", qty: 2, status: http.StatusCreated, extended: true},
		{user: "bob", qty: 1, status: http.StatusConflict, extended: false}, // sold out
	}
	for _, c := range cases {
		t.Run(c.user, func(t *testing.T) {
			h := h.with(t)
			res := h.hold(ev.ID, c.user, c.qty, "hold-"+c.user)
			require.Equal(t, c.status, res.status, "hold: %s", res.body)
			now := h.clock.Now()
			require.Equal(t, c.extended, extendedAt(t, h, ev.ID, c.user, now), "extended now")
			if !c.extended {
				return
			}
			var hj holdJSON
			res.json(t, &hj)
			exp := expiry(t, hj.ExpiresAt)
			require.True(t, extendedAt(t, h, ev.ID, c.user, exp), "extended until the hold's expiry %s", exp)
			require.False(t, extendedAt(t, h, ev.ID, c.user, exp.Add(time.Hour)), "not for ever")
		})
	}
}

// TestBookingExtendsAdmission: a booking that extends its hold for the
// payment extends its buyer's admission with it.
func TestBookingExtendsAdmission(t *testing.T) {
	c := nearNow()
	h := newPayHarness(t, payOptions{clock: c, config: nil})
	ev := h.createEvent(map[string]any{"capacity": 5, "hold_ttl_seconds": 600})

	hold := h.holdOne(ev.ID, "ann", 1)
	first := expiry(t, hold.ExpiresAt)
	// Near its expiry, the booking moves the hold's end to cover the payment.
	c.Advance(590 * time.Second)
	b := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodSilent)
	res := h.do(http.MethodGet, "/v1/holds/"+b.HoldID, nil, h.auth("ann", ev.ID))
	require.Equal(t, http.StatusOK, res.status, "hold: %s", res.body)
	var hj holdJSON
	res.json(t, &hj)
	exp := expiry(t, hj.ExpiresAt)
	require.True(t, exp.After(first.Add(time.Minute)), "the booking extended the hold: %s → %s", first, exp)
	require.True(t, extendedAt(t, h.harness, ev.ID, "ann", exp), "admission extended until the extended hold's expiry %s", exp)
}

// TestRefusalIsNotedForTheAutopilot: a hold refused for want of seats is
// noted against its queue position, so a first hold that position makes
// later (of a seat that came back) is counted but not taken for a
// decision time by the gateways' autopilot.
func TestRefusalIsNotedForTheAutopilot(t *testing.T) {
	h := newHarness(t, harnessOptions{clock: nearNow()})
	ev := h.createEvent(map[string]any{"capacity": 1, "hold_ttl_seconds": 600})
	hold := func(user string, position int64) result {
		return h.do(http.MethodPost, fmt.Sprintf("/v1/events/%d/holds", ev.ID), map[string]any{"quantity": 1}, map[string]string{
			waitroom.TokenHeader: h.token(user, ev.ID, position),
			"Idempotency-Key":    "hold-" + user,
		})
	}
	res := hold("ann", 1)
	require.Equal(t, http.StatusCreated, res.status, "hold: %s", res.body)
	res = hold("bob", 2)
	require.Equal(t, http.StatusConflict, res.status, "hold: %s", res.body)

	ctx := context.Background()
	store := waitroom.NewRedisStore(h.rdb, waitroom.RedisOptions{})
	first, err := store.MarkHeld(ctx, ev.ID, 2, h.clock.Now())
	require.NoError(t, err)
	require.True(t, first, "a refusal is not a hold")
	held, err := store.Holds(ctx, ev.ID, 2)
	require.NoError(t, err)
	require.Equal(t, int64(2), held.UpTo, "both holds count")
	require.Len(t, held.Recent, 1)
	require.Equal(t, int64(1), held.Recent[0].Position, "only the hold made without a refusal is a sample")
}
