package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/payment"
)

// wrongEventJSON is the part of a scan's answer that says which event the
// ticket is for.
type wrongEventJSON struct {
	Status int    `json:"status"`
	Error  string `json:"error"`
	Result string `json:"result"`
	Event  int64  `json:"event"`
	Ticket *struct {
		Code string `json:"code"`
	} `json:"ticket"`
}

// Tomorrow's ticket at today's gate: a device registered for today, and
// the shared token naming today, refuse it, online and offline; the
// refusals are recorded, and the ticket is still admitted once at its own
// event's gate.
func TestScanOfAnotherEventRefused(t *testing.T) {
	h := newGateHarness(t)
	today := h.createEvent(map[string]any{"capacity": 10})
	tomorrow := h.createEvent(map[string]any{"capacity": 10})
	_, todays := h.tickets(today.ID, "ann", 1, payment.MethodVisa)
	_, tomorrows := h.tickets(tomorrow.ID, "bob", 1, payment.MethodVisa)
	north := h.addDevice(today.ID, "north-3", "scanner 12")
	h.clock.Advance(time.Minute)

	wrong := func(name string, res result) {
		t.Helper()
		require.Equal(t, http.StatusConflict, res.status, "%s: %s", name, res.body)
		assert.Equal(t, "wrong_event", res.errorCode(t), name)
		var a wrongEventJSON
		res.json(t, &a)
		assert.Equal(t, tomorrow.ID, a.Event, "%s: the ticket's event", name)
		assert.Equal(t, "wrong_event", a.Result, name)
	}
	wrong("device, online", h.do(http.MethodPost, "/v1/scans", map[string]any{"code": tomorrows[0].Code}, bearerOf(north.Token)))
	wrong("shared token, online", h.scan(today.ID, tomorrows[0].Code, "north-3"))
	wrong("shared token, offline", h.do(http.MethodPost, "/v1/scans", map[string]any{"code": tomorrows[0].Code, "gate": "field-1",
		"event": today.ID, "scanned_at": h.clock.Now().Add(-time.Second).Format(time.RFC3339Nano)}, gateAuth()))
	up := h.do(http.MethodPost, "/v1/scans", map[string]any{"scans": []any{offline(tomorrows[0].Code, h.clock.Now().Add(-2*time.Second)),
		offline(todays[0].Code, h.clock.Now().Add(-2*time.Second))}}, bearerOf(north.Token))
	require.Equal(t, http.StatusOK, up.status, "%s", up.body)
	var u struct {
		Event   int64            `json:"event"`
		Results []wrongEventJSON `json:"results"`
	}
	up.json(t, &u)
	assert.Equal(t, today.ID, u.Event, "the device's event")
	require.Len(t, u.Results, 2)
	assert.Equal(t, wrongEventJSON{Status: http.StatusConflict, Error: "wrong_event", Result: "wrong_event", Event: tomorrow.ID,
		Ticket: u.Results[0].Ticket}, u.Results[0], "device, upload")
	assert.Equal(t, "admitted", u.Results[1].Result, "today's ticket at today's gate")

	res := h.do(http.MethodPost, "/v1/scans", map[string]any{"code": tomorrows[0].Code, "event": tomorrow.ID}, bearerOf(north.Token))
	require.Equal(t, http.StatusForbidden, res.status, "a device scans for its own event only: %s", res.body)
	assert.Equal(t, "wrong_event", res.errorCode(t))
	res = h.scan(today.ID+1_000_000, tomorrows[0].Code, "north-3")
	require.Equal(t, http.StatusNotFound, res.status, "%s", res.body)
	assert.Equal(t, "not_found", res.errorCode(t))

	scans, err := h.ledger.ScansOf(context.Background(), tomorrows[0].Code)
	require.NoError(t, err)
	require.Len(t, scans, 4, "every refusal recorded")
	for _, s := range scans {
		assert.Equal(t, "wrong_event", s.Result)
		assert.False(t, s.First, "never admitted")
	}
	res = h.scan(tomorrow.ID, tomorrows[0].Code, "gate-b")
	require.Equal(t, http.StatusOK, res.status, "tomorrow, at its own gate, it admits: %s", res.body)
	h.requireScanTotals(today.ID, scanTotals{Admitted: 1, WrongEvent: 4})
	h.requireScanTotals(tomorrow.ID, scanTotals{Admitted: 1})

	list := h.devices()
	require.Len(t, list, 1)
	require.NotNil(t, list[0].Event)
	assert.Equal(t, today.ID, *list[0].Event)

	res = h.do(http.MethodPost, "/v1/admin/gate-devices", map[string]any{"gate": "north-3", "event": today.ID + 1_000_000}, admin())
	require.Equal(t, http.StatusNotFound, res.status, "a device for an unknown event: %s", res.body)
	assert.Equal(t, "not_found", res.errorCode(t))
}

// A device reads the void feed of its own event only; the shared token
// reads any.
func TestVoidFeedOfAnotherEvent(t *testing.T) {
	h := newGateHarness(t)
	today := h.createEvent(map[string]any{"capacity": 10})
	tomorrow := h.createEvent(map[string]any{"capacity": 10})
	b, tks := h.tickets(tomorrow.ID, "bob", 1, payment.MethodVisa)
	h.cancel(tomorrow.ID, "bob", b.BookingID)
	device := bearerOf(h.addDevice(today.ID, "north-3", "").Token)

	res := h.do(http.MethodGet, fmt.Sprintf("/v1/scans/void?event=%d", tomorrow.ID), nil, device)
	require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
	assert.Equal(t, "wrong_event", res.errorCode(t))
	mine, _ := h.readVoids(today.ID, "", 10, device)
	assert.Empty(t, mine)
	all, _ := h.readVoids(tomorrow.ID, "", 10, gateAuth())
	assert.Equal(t, []string{tks[0].Code}, all)
}

// An offline scan dated before its ticket was issued, or before the device
// that sent it was registered, is refused: backdating a scan cannot take
// the admission from the one who used the ticket.
func TestOfflineScanBackdated(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 2, payment.MethodVisa)
	issued := h.clock.Now()
	h.clock.Advance(time.Hour)
	device := h.addDevice(ev.ID, "field-1", "")
	h.clock.Advance(time.Minute)
	require.Equal(t, http.StatusOK, h.scan(ev.ID, tks[0].Code, "north-3").status)
	h.clock.Advance(time.Minute)

	before := issued.Add(-time.Hour)
	res := h.do(http.MethodPost, "/v1/scans", map[string]any{"code": tks[0].Code, "gate": "field-2", "event": ev.ID,
		"scanned_at": before.Format(time.RFC3339Nano)}, gateAuth())
	require.Equal(t, http.StatusBadRequest, res.status, "scanned before it was issued: %s", res.body)
	assert.Equal(t, "invalid_request", res.errorCode(t))

	u := h.upload(ev.ID, "field-2", offline(tks[0].Code, before), offline(tks[1].Code, issued.Add(time.Second)))
	assert.Equal(t, http.StatusBadRequest, u.Results[0].Status, "%+v", u.Results[0])
	assert.Equal(t, "invalid_request", u.Results[0].Error)
	assert.Equal(t, http.StatusOK, u.Results[1].Status, "the upload's other scans count: %+v", u.Results[1])

	// The device existed from an hour after the issue on.
	up := h.do(http.MethodPost, "/v1/scans", map[string]any{"scans": []any{offline(tks[0].Code, issued.Add(time.Second))}}, bearerOf(device.Token))
	require.Equal(t, http.StatusBadRequest, up.status, "scanned before its device was registered: %s", up.body)
	assert.Equal(t, "invalid_request", up.errorCode(t))

	res = h.scan(ev.ID, tks[0].Code, "south-1")
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	var used scanJSON
	res.json(t, &used)
	assert.Equal(t, "north-3", used.Gate, "still the admission it was")
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 2, AlreadyUsed: 1})
}
