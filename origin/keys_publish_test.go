package origin_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/waitroom"
)

// The origin notes its key checks beside the gateways': with a gateway
// holding its secret under k1 they agree; with one holding another, whose
// tokens the origin would refuse as forged, both are told, the origin in
// its gauge.
func TestOriginComparesItsKeysWithTheGateways(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 5})
	gauge := fmt.Sprintf(`waitroom_origin_key_disagreements{event="%d"}`, ev.ID)
	gateway := waitroom.NewRedisStore(h.rdb, waitroom.RedisOptions{Now: h.clock.Now})

	d, err := gateway.NoteKeys(ctx, ev.ID, h.keys.Checks(), waitroom.KeyNoteWindow)
	require.NoError(t, err)
	assert.Empty(t, d)
	origin.NoteKeysOnce(ctx, h.srv)
	v, ok := h.series(gauge)
	require.True(t, ok, "the gauge is set")
	assert.Zero(t, v)

	other := map[string]string{"k1": waitroom.KeyCheck([]byte("another-secret-of-at-least-32-bytes"))}
	d, err = gateway.NoteKeys(ctx, ev.ID, other, waitroom.KeyNoteWindow)
	require.NoError(t, err)
	require.Len(t, d, 1, "the gateway is told")
	origin.NoteKeysOnce(ctx, h.srv)
	v, _ = h.series(gauge)
	assert.Equal(t, 1.0, v, "the origin is told")
}
