package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/waitroom"
)

// A rebuild waits at least as long as other nodes' hold writes may take:
// derived from the hold write timeout, and a shorter settle is refused.
func TestRebuildSettleCoversTheHoldWriteTimeout(t *testing.T) {
	keys, err := waitroom.NewKeySet(nil, waitroom.Key{ID: "k1", Secret: secret})
	require.NoError(t, err)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: New does no I/O
	t.Cleanup(func() { _ = rdb.Close() })
	tests := []struct {
		timeout, settle, skew time.Duration
		wantSettle            time.Duration
		wantErr               string
	}{
		{timeout: 0, settle: 0, skew: 0, wantSettle: 3 * time.Second},
		{timeout: 5 * time.Second, settle: 0, skew: 0, wantSettle: 6 * time.Second},
		{timeout: 5 * time.Second, settle: 0, skew: 250 * time.Millisecond, wantSettle: 5250 * time.Millisecond},
		{timeout: 5 * time.Second, settle: 7 * time.Second, skew: -1, wantSettle: 7 * time.Second},
		{timeout: 5 * time.Second, settle: 2 * time.Second, wantErr: "rebuild settle time 2s is shorter than the hold write timeout 5s"},
		{timeout: 0, settle: time.Second, wantErr: "shorter than the hold write timeout 2s"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("timeout %v settle %v", tt.timeout, tt.settle), func(t *testing.T) {
			srv, err := origin.New(origin.Config{Keys: keys, HoldWriteTimeout: tt.timeout, RebuildSettle: tt.settle,
				ClockSkewMargin: tt.skew}, nil, rdb)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantSettle, srv.SettleTime())
		})
	}
}

// No hold lives beyond its creation plus its whole-life cap: not the first
// expiry (a cap below the hold lifetime), not an extension.
func TestHoldLifeIsCapped(t *testing.T) {
	for _, maxLife := range []time.Duration{0, 12 * time.Minute, 5 * time.Minute} {
		t.Run(fmt.Sprintf("max life %v", maxLife), func(t *testing.T) {
			h := newHarness(t, harnessOptions{config: func(c *origin.Config) { c.HoldMaxLife = maxLife }})
			ev := h.createEvent(map[string]any{"capacity": 1, "hold_ttl_seconds": 600})
			ctx := context.Background()
			created := h.clock.Now().Truncate(time.Second)
			id := h.holdID(ev.ID, "ann", "a", 1)
			limit := created.Add(20 * time.Minute) // 2 × the hold lifetime
			if maxLife > 0 {
				limit = created.Add(maxLife)
			}

			// Every booking attempt asks for a later expiry.
			var got time.Time
			for range 4 {
				h.clock.Advance(5 * time.Minute)
				ext, err := h.srv.ExtendHold(ctx, id, h.clock.Now().Add(10*time.Minute), nil)
				if h.clock.Now().After(limit) {
					require.ErrorIs(t, err, origin.ErrHoldExpired)
					break
				}
				require.NoError(t, err)
				got = ext.ExpiresAt
				assert.False(t, got.After(limit), "expiry %v beyond the cap %v", got, limit)
			}
			assert.True(t, got.Equal(limit), "extended up to the cap: %v", got)

			if d := limit.Sub(h.clock.Now()) + time.Second; d > 0 {
				h.clock.Advance(d)
			}
			n, err := h.srv.ReapOnce(ctx)
			require.NoError(t, err)
			assert.Equal(t, 1, n, "the hold ends at its cap")
			assert.Equal(t, http.StatusCreated, h.hold(ev.ID, "bob", 1, "b").status, "and its seat is free in Redis too")
			h.requireInvariant(ev.ID, 1)
		})
	}
}
