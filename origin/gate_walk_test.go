package origin_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A cursor shaped like the feed's but holding a snapshot PostgreSQL would
// not read is a cursor the feed never handed out: 400, as any other, not a
// 503 that sends the device retrying the same cursor for ever.
func TestVoidFeedCursorPostgresWouldNotRead(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 5})
	device := bearerOf(h.addDevice(ev.ID, "field-1", "").Token)
	_, good := h.readVoids(ev.ID, "", 1000, device)

	for name, raw := range map[string]string{
		"xmin after xmax":             "9:3:",
		"xmin 0":                      "0:0:",
		"in progress before xmin":     "5:10:3",
		"in progress out of order":    "5:10:7,6",
		"in progress at xmax":         "5:10:10",
		"xid past 64 bits":            "99999999999999999999:99999999999999999999:",
		"a page's snapshot xmin 0":    "|0:0:|1|1",
		"a page's earlier snapshot":   "9:3:|5:10:|1|1",
		"a page's xid past 64 bits":   "|5:10:|18446744073709551616|1",
		"a page's id past 63 bits":    "|5:10:|7|9223372036854775808",
		"a page's later snapshot bad": "5:10:|5:10:11|1|1",
	} {
		since := base64.RawURLEncoding.EncodeToString([]byte(raw))
		q := url.Values{"event": {fmt.Sprint(ev.ID)}, "since": {since}}
		res := h.do(http.MethodGet, "/v1/scans/void?"+q.Encode(), nil, device)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
		assert.Equal(t, "invalid_request", res.errorCode(t), name)
	}
	q := url.Values{"event": {fmt.Sprint(ev.ID)}, "since": {good}}
	res := h.do(http.MethodGet, "/v1/scans/void?"+q.Encode(), nil, device)
	assert.Equal(t, http.StatusOK, res.status, "the cursor the feed handed out still reads: %s", res.body)
}
