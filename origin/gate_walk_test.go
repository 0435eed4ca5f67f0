package origin_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/payment"
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

// scans reads the gate's scans counter of a result.
func (h *harness) scans(result string) float64 {
	h.t.Helper()
	v, _ := h.series(`waitroom_origin_scans_total{result="` + result + `"}`)
	return v
}

// A device whose upload was answered 503 half-way, or whose answer was
// lost, sends it all again: the scans it resends were counted when they
// were recorded, and are not counted again, so the admissions counted
// never pass the tickets let in.
func TestUploadSentAgainCountedOnce(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 5})
	_, tks := h.tickets(ev.ID, "ann", 3, payment.MethodVisa)
	at := h.clock.Now()
	h.clock.Advance(time.Minute)
	require.Equal(t, http.StatusOK, h.scan(ev.ID, tks[2].Code, "north-3").status)
	h.clock.Advance(time.Minute)

	batch := []map[string]any{
		offline(tks[0].Code, at.Add(time.Second)),
		offline(tks[1].Code, at.Add(2*time.Second)),
		offline(tks[1].Code, at.Add(3*time.Second)),
		offline(tks[2].Code, at.Add(4*time.Second)),
	}
	first := h.upload(ev.ID, "field-1", batch...)
	want := map[string]float64{"admitted": h.scans("admitted"), "already_used": h.scans("already_used"),
		"double_admission": h.scans("double_admission")}
	require.Equal(t, map[string]float64{"admitted": 4, "already_used": 1, "double_admission": 1}, want,
		"north-3's online admission, then the upload's: %+v", first.Results)

	again := h.upload(ev.ID, "field-1", batch...)
	for i := range batch {
		assert.Equal(t, first.Results[i].Status, again.Results[i].Status, "scan %d answered as before", i)
	}
	got := map[string]float64{"admitted": h.scans("admitted"), "already_used": h.scans("already_used"),
		"double_admission": h.scans("double_admission")}
	assert.Equal(t, want, got, "the scans sent again are not counted again")
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 3, AlreadyUsed: 1, DoubleAdmissions: 1})
}
