package sim

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/ledger"
)

// The booking answers an Idempotency-Key gets, held to its first use: only
// a key that made a booking (202) is kept for good, in the booking's row;
// a 200 naming a booking made with another key lives only in Redis and may
// be forgotten with it (docs/api.md §8).
func TestBookKeyCheck(t *testing.T) {
	type use struct {
		body   string
		status int
		id     string
	}
	tests := []struct {
		name    string
		answers []use
		broken  string // the last answer's violation, "" if none
	}{
		{"a replay gets the same booking",
			[]use{{"h visa", 202, "b1"}, {"h visa", 202, "b1"}}, ""},
		{"a replay makes a second booking",
			[]use{{"h visa", 202, "b1"}, {"h visa", 202, "b2"}}, "replayed made a second booking"},
		{"a key that made a booking, with another body, makes another",
			[]use{{"h fail", 202, "b1"}, {"h visa", 202, "b2"}}, "made another booking"},
		{"a 200 forgotten with Redis, the same body, makes a booking once the first failed",
			[]use{{"h fail", 200, "b1"}, {"h fail", 202, "b2"}}, ""},
		{"a 200 forgotten with Redis, another body, makes a booking once the first failed",
			[]use{{"h fail", 200, "b1"}, {"h visa", 202, "b2"}}, ""},
		{"a 200, then a booking made with the key, then another body makes another",
			[]use{{"h fail", 200, "b1"}, {"h visa", 202, "b2"}, {"h fail", 202, "b3"}}, "made another booking"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := map[string]keyUse{}
			var v *violation
			for i, a := range tt.answers {
				v = bookKeyCheck(keys, "k", a.body, a.status, a.id)
				if i < len(tt.answers)-1 {
					require.Nil(t, v, "answer %d", i)
				}
			}
			if tt.broken == "" {
				assert.Nil(t, v)
				return
			}
			require.NotNil(t, v)
			assert.Equal(t, "idempotency", v.check)
			assert.Contains(t, v.msg, tt.broken)
		})
	}
}

// A confirmation whose ledger step failed after Redis sold the seat (its
// success event answered 503, the provider to deliver it again) is under
// way at a settle point short of the final one while its booking is not yet
// due to the payment reconciliation; once it is due, or at the final settle
// point, the same state is drift, since the reconciliation must have ended
// it.
func TestConfirmingUnderWay(t *testing.T) {
	w, err := newWorld(t, 1, newStats())
	require.NoError(t, err)
	require.Equal(t, SaleReserved, w.setup.Kind)
	for _, line := range []string{
		"admit qty=20",
		"hold node=0 user=0 qty=1 sel=0 shape=best key=new",
		"book node=0 user=0 sel=0 method=pm_card_visa key=new",
		"webhook node=0 user=0 sel=0 mode=deliver fault=pg-cut-after-redis after=5ms",
	} {
		s, err := ParseStep(line)
		require.NoError(t, err)
		require.Nil(t, w.execGroup([]Step{s}), line)
	}
	w.heal()
	ctx := context.Background()
	event := w.sales[0].id
	inv, err := w.nodes[0].srv.CheckInvariant(ctx, event)
	require.NoError(t, err)
	require.NotNil(t, inv.SeatDrift)
	require.EqualValues(t, 0, inv.Drift, "%+v", inv)
	require.EqualValues(t, 1, *inv.SeatDrift, "the seat sold in redis, held in the ledger: %+v", inv)

	d, err := w.settledDrift(ctx, event, inv, false)
	require.NoError(t, err)
	assert.EqualValues(t, 0, d, "under way at a settle point")
	d, err = w.settledDrift(ctx, event, inv, true)
	require.NoError(t, err)
	assert.EqualValues(t, 1, d, "drift at the final settle point")

	// The booking due to the reconciliation, the hold still live.
	w.clock.Advance(paymentPendingAfter + time.Second)
	inv, err = w.nodes[0].srv.CheckInvariant(ctx, event)
	require.NoError(t, err)
	require.EqualValues(t, 1, *inv.SeatDrift, "%+v", inv)
	d, err = w.settledDrift(ctx, event, inv, false)
	require.NoError(t, err)
	assert.EqualValues(t, 1, d, "drift once the reconciliation is due")
}

// The money check's model of when the reconciliation asks about a booking
// waiting for its payment next.
func TestNextCheck(t *testing.T) {
	made := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	until := made.Add(2 * time.Minute)
	tests := []struct {
		name         string
		until        *time.Time
		checked, now time.Time
		want         time.Time
	}{
		{"while the booking keeps its hold", &until, made.Add(time.Minute), made.Add(90 * time.Second),
			made.Add(time.Minute + paymentPendingAfter)},
		{"just after the hold's end", &until, made.Add(2*time.Minute + time.Second), made.Add(3 * time.Minute),
			made.Add(2*time.Minute + time.Second + paymentPendingAfter)},
		{"as long again as it waited", &until, made.Add(7 * time.Minute), made.Add(8 * time.Minute),
			made.Add(12 * time.Minute)},
		{"at most an hour", &until, made.Add(5 * time.Hour), made.Add(5 * time.Hour),
			made.Add(6 * time.Hour)},
		{"without a hold's keep, from its making", nil, made.Add(3 * time.Minute), made.Add(4 * time.Minute),
			made.Add(6 * time.Minute)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := ledger.Booking{CreatedAt: made, CheckedAt: tc.checked, HoldUntil: tc.until}
			assert.Equal(t, tc.want, nextCheck(b, tc.now))
		})
	}
}
