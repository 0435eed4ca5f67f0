package caddymodule

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// GET /waitroom/events/{id}/applied lists the watermarks the node took
// into memory, oldest first, each with when.
func TestAdminAppliedWatermarks(t *testing.T) {
	ev := testenv.EventID()
	load(t, testenv.FreePort(t), fmt.Sprintf(`
	waitroom {
		event %d
		key k1 %s
		store memory
	}
	respond "the site"`, ev, testSecret))
	events := fmt.Sprintf("/waitroom/events/%d", ev)
	before := time.Now()
	for _, body := range []string{`{"set": 5}`, `{"raise_by": 3}`} {
		code, _, raw := adminCall(t, adminPort, http.MethodPost, events+"/watermark", body)
		require.Equal(t, http.StatusOK, code, raw)
	}
	code, body, raw := adminCall(t, adminPort, http.MethodGet, events+"/applied", "")
	require.Equal(t, http.StatusOK, code, raw)
	assert.EqualValues(t, ev, body["event"])
	assert.EqualValues(t, 0, body["dropped"])
	applied, ok := body["applied"].([]any)
	require.True(t, ok, raw)
	require.Len(t, applied, 2, raw)
	var last time.Time
	for i, want := range []float64{5, 8} {
		m := applied[i].(map[string]any)
		assert.Equal(t, want, m["watermark"])
		at, err := time.Parse(time.RFC3339Nano, m["at"].(string))
		require.NoError(t, err)
		assert.False(t, at.Before(before), "applied after the call began")
		assert.False(t, at.Before(last), "oldest first")
		last = at
	}

	code, _, _ = adminCall(t, adminPort, http.MethodGet, "/waitroom/events/999999999/applied", "")
	assert.Equal(t, http.StatusNotFound, code)
}
