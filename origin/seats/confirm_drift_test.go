package seats

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seatmap"
)

// TestCorrectRestoresLostConfirmation: a reserved seat is sold (its hold
// confirmed in Redis and in the ledger), then Redis loses the
// confirmation (a failover that dropped the acknowledged write: the record
// is pending again, back in the expiry index). The seat's owner is the
// same in both, so the count and the owners agree, but Redis would give
// the seat away at the hold's expiry while the ledger has it sold. The
// drift corrector puts the confirmation back.
func TestCorrectRestoresLostConfirmation(t *testing.T) {
	p, ev, _ := sectionProtocol(t, 4)
	ctx := context.Background()
	seat := seatmap.SeatID("A", "1", 1)
	res := p.Place(ctx, PlaceRequest{Event: ev, User: "ann", Quantity: 1, Seats: []string{seat}, Key: "k-ann",
		Digest: "d-ann", Scope: idem.Scope{Kind: "holds", Event: ev.ID, User: "ann", Key: "k-ann"},
		Render: func(ledger.Hold) []byte { return []byte("{}") }})
	require.Equal(t, Held, res.Outcome, "%+v", res)
	sell(t, p, res.Hold)

	// Redis loses the confirmation.
	rdb := testenv.Redis(t)
	k := inventory.KeysFor(ev.ID)
	raw, err := rdb.HGet(ctx, k.Holds, res.Hold.ID).Result()
	require.NoError(t, err)
	var rec inventory.Record
	require.NoError(t, json.Unmarshal([]byte(raw), &rec))
	require.True(t, rec.Confirmed)
	rec.Confirmed = false
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, rdb.HSet(ctx, k.Holds, res.Hold.ID, b).Err())
	require.NoError(t, rdb.ZAdd(ctx, k.Expiry, redis.Z{Score: float64(res.Hold.ExpiresAt.UnixMilli()), Member: res.Hold.ID}).Err())

	inv, err := p.Recovery().CheckInvariant(ctx, ev.ID)
	require.NoError(t, err)
	require.NotNil(t, inv.SeatDrift)
	require.Equal(t, int64(1), *inv.SeatDrift, "held in redis, sold in the ledger: %+v", inv)

	_, err = p.Recovery().CorrectDrift(ctx, ev.ID)
	require.NoError(t, err)
	inv, err = p.Recovery().CheckInvariant(ctx, ev.ID)
	require.NoError(t, err)
	assert.Zero(t, inv.Drift, "count drift")
	assert.Equal(t, int64(0), *inv.SeatDrift, "seat drift once corrected: %+v", inv)
	n, err := rdb.ZCard(ctx, k.Expiry).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a sold hold is out of the expiry index: no reclaim can give its seat away")
}
