package caddymodule

import (
	"context"
	"strconv"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

// Two gateways of one event on one Redis, the second with a mistyped
// secret under k1: each finds the fleet's checks differ and says so in its
// gauge. Two with the same secret agree. The memory store is one node's,
// with nobody to disagree with.
func TestGatewaysWithDifferentSecretsAreTold(t *testing.T) {
	store := testenv.RedisURL(t)
	right := []Key{{ID: "k1", Secret: testSecret}}
	note := func(h *Handler) []waitroom.KeyDisagreement {
		t.Helper()
		noter, ok := h.room.store.store.(waitroom.KeyNoter)
		require.True(t, ok, "the Redis store is shared by the fleet")
		return h.noteFleetKeys(context.Background(), noter, nil)
	}

	ev := testenv.EventID()
	setUpEvent(t, store, ev)
	a := provision(t, &Handler{Event: ev, Store: store, Keys: right})
	// Another lease: another store client and room, as on another node.
	b := provision(t, &Handler{Event: ev, Store: store, Lease: 2,
		Keys: []Key{{ID: "k1", Secret: "an-example-secret-of-at-least-32-bytez"}}})
	require.NotEqual(t, a.keyChecks["k1"], b.keyChecks["k1"])
	for name, h := range map[string]*Handler{"a": a, "b": b} {
		d := note(h)
		require.Len(t, d, 1, "gateway %s", name)
		assert.Equal(t, "k1", d[0].KeyID)
		assert.ElementsMatch(t, []string{a.keyChecks["k1"], b.keyChecks["k1"]}, d[0].Checks)
	}
	assert.Equal(t, 1.0, gauge(t, ev), "the gauge counts the key ids in dispute")

	ev = testenv.EventID()
	setUpEvent(t, store, ev)
	c := provision(t, &Handler{Event: ev, Store: store, Keys: right})
	d := provision(t, &Handler{Event: ev, Store: store, Lease: 2, Keys: right})
	assert.Empty(t, note(c))
	assert.Empty(t, note(d))
	assert.Zero(t, gauge(t, ev))

	mem := provision(t, &Handler{Keys: right})
	_, ok := mem.room.store.store.(waitroom.KeyNoter)
	assert.False(t, ok, "one node's memory store notes nothing")
	assert.Nil(t, mem.fleetKeys)
}

func gauge(t *testing.T, event int64) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, metrics.keyDisagreements.WithLabelValues(strconv.FormatInt(event, 10)).Write(&m))
	return m.GetGauge().GetValue()
}
