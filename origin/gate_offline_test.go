package origin_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/payment"
)

// Two devices offline each let in the same ticket (a screenshot shown at
// both): whichever uploads first, the ledger holds the same two admissions,
// the earlier first, and counts one double admission. So does a device
// whose offline admission is later than an online one by another device
// or gate: it could not know.
func TestDoubleAdmissionWhateverTheUploadOrder(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 3, payment.MethodVisa)
	east := bearerOf(h.addDevice(ev.ID, "east-1", "").Token)
	west := bearerOf(h.addDevice(ev.ID, "west-1", "").Token)
	east2 := bearerOf(h.addDevice(ev.ID, "east-1", "scanner 2").Token)
	t0 := h.clock.Now()
	h.clock.Advance(10 * time.Minute)
	upload := func(device map[string]string, code string, at time.Time) scanJSON {
		t.Helper()
		res := h.do(http.MethodPost, "/v1/scans", map[string]any{"scans": []any{offline(code, at)}}, device)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		var u uploadJSON
		res.json(t, &u)
		require.Len(t, u.Results, 1)
		return u.Results[0]
	}
	early, late := t0.Add(time.Minute), t0.Add(2*time.Minute)

	// tks[0]: the earlier scan uploaded first.
	assert.Equal(t, http.StatusOK, upload(east, tks[0].Code, early).Status)
	r := upload(west, tks[0].Code, late)
	assert.Equal(t, http.StatusConflict, r.Status, "%+v", r)
	assert.Equal(t, "already_used", r.Result)
	assert.Equal(t, "east-1", r.Gate, "where it was first let in")
	// tks[1]: the later scan uploaded first.
	assert.Equal(t, http.StatusOK, upload(west, tks[1].Code, late).Status)
	r = upload(east, tks[1].Code, early)
	assert.Equal(t, http.StatusOK, r.Status, "%+v", r)
	require.NotNil(t, r.Displaced)

	for _, tk := range tks[:2] {
		scans, err := h.ledger.ScansOf(context.Background(), tk.Code)
		require.NoError(t, err)
		require.Len(t, scans, 2)
		assert.Equal(t, []string{"east-1", "west-1"}, []string{scans[0].Gate, scans[1].Gate})
		assert.Equal(t, []string{"admitted", "admitted"}, []string{scans[0].Result, scans[1].Result}, "both devices let someone in")
		assert.Equal(t, []bool{true, false}, []bool{scans[0].First, scans[1].First})
	}

	// tks[2]: admitted online, then let in offline by a device that
	// could not know.
	h.clock.Advance(time.Minute)
	online := h.clock.Now()
	require.Equal(t, http.StatusOK, h.scan(ev.ID, tks[2].Code, "north-3").status)
	h.clock.Advance(time.Minute)
	r = upload(west, tks[2].Code, online.Add(30*time.Second))
	assert.Equal(t, http.StatusConflict, r.Status, "%+v", r)
	assert.Equal(t, "north-3", r.Gate)

	h.requireScanTotals(ev.ID, scanTotals{Admitted: 3, DoubleAdmissions: 3})
	assert.Equal(t, float64(3), h.scans("double_admission"))

	// The device that let it in knew, and refused it itself.
	r = upload(east, tks[0].Code, late.Add(time.Second))
	assert.Equal(t, http.StatusConflict, r.Status, "%+v", r)
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 3, AlreadyUsed: 1, DoubleAdmissions: 3})

	// A second scanner at east-1 could not know either.
	r = upload(east2, tks[0].Code, late.Add(2*time.Second))
	assert.Equal(t, http.StatusConflict, r.Status, "%+v", r)
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 3, AlreadyUsed: 1, DoubleAdmissions: 3})
	scans, err := h.ledger.ScansOf(context.Background(), tks[0].Code)
	require.NoError(t, err)
	require.Len(t, scans, 4)
	assert.Equal(t, "admitted", scans[3].Result, "another device at the same gate let someone in: %+v", scans[3])
	assert.Equal(t, float64(4), h.scans("double_admission"))

	// Sent again, nothing changes.
	r = upload(west, tks[0].Code, late)
	assert.Equal(t, http.StatusConflict, r.Status, "%+v", r)
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 3, AlreadyUsed: 1, DoubleAdmissions: 3})
	assert.Equal(t, float64(4), h.scans("double_admission"))
}

// An uploaded scan without its code is a malformed upload, refused whole as
// one without its time is, rather than answered as a forged ticket.
func TestUploadedScanWithoutCode(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)
	device := bearerOf(h.addDevice(ev.ID, "east-1", "").Token)
	h.clock.Advance(time.Minute)
	at := h.clock.Now().Add(-time.Second).Format(time.RFC3339Nano)
	for name, scan := range map[string]map[string]any{
		"no code":   {"scanned_at": at},
		"null code": {"code": nil, "scanned_at": at},
	} {
		res := h.do(http.MethodPost, "/v1/scans", map[string]any{"scans": []any{offline(tks[0].Code, h.clock.Now()), scan}}, device)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
		assert.Equal(t, "invalid_request", res.errorCode(t), name)
	}
	scans, err := h.ledger.ScansOf(context.Background(), tks[0].Code)
	require.NoError(t, err)
	assert.Empty(t, scans, "nothing of a refused upload recorded")
}

// A scan time that is null is no time: refused as a malformed request, an
// uploaded scan's as one left out, rather than taken for a scan made now
// (a device's offline scan would be placed at the time it was sent, and
// judged used or void by then).
func TestScanTimeNull(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)
	device := bearerOf(h.addDevice(ev.ID, "east-1", "").Token)
	h.clock.Advance(time.Minute)
	for name, body := range map[string]map[string]any{
		"one scan, null":         {"code": tks[0].Code, "scanned_at": nil},
		"one scan, not a string": {"code": tks[0].Code, "scanned_at": 12},
		"upload, null":           {"scans": []any{map[string]any{"code": tks[0].Code, "scanned_at": nil}}},
		"upload, left out":       {"scans": []any{map[string]any{"code": tks[0].Code}}},
		"upload, top-level null": {"scans": []any{offline(tks[0].Code, h.clock.Now())}, "scanned_at": nil},
	} {
		res := h.do(http.MethodPost, "/v1/scans", body, device)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
		assert.Equal(t, "invalid_request", res.errorCode(t), name)
		assert.Contains(t, string(res.body), "scanned_at", name)
	}
	scans, err := h.ledger.ScansOf(context.Background(), tks[0].Code)
	require.NoError(t, err)
	assert.Empty(t, scans, "nothing recorded")
	res := h.do(http.MethodPost, "/v1/scans", map[string]any{"code": tks[0].Code}, device)
	assert.Equal(t, http.StatusOK, res.status, "left out, the scan is made now: %s", res.body)
}

// An event that is no event's id is a malformed body, with a device's token
// as with the shared one: not "another event" than the device's.
func TestDeviceScanOfNoEvent(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)
	device := bearerOf(h.addDevice(ev.ID, "east-1", "").Token)
	for _, event := range []int64{0, -1} {
		res := h.do(http.MethodPost, "/v1/scans", map[string]any{"code": tks[0].Code, "event": event}, device)
		require.Equal(t, http.StatusBadRequest, res.status, "event %d: %s", event, res.body)
		assert.Equal(t, "invalid_request", res.errorCode(t))
	}
}

// warnings keeps the origin's warnings for a test to read.
type warnings struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *warnings) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *warnings) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// A device offline lets a ticket in at 10:01, its booking is cancelled and
// refunded at 10:02, and the device uploads at 10:05. The scan stays a
// void ticket's (the booking has no admitted ticket), but it is marked as
// let in before the void, answered so, counted, and the booking named in a
// warning: someone is inside on a refunded booking. Uploaded before the
// cancellation, the scan admits and the cancellation is refused; a scan
// made after the void is a refusal and nothing else.
func TestLetInOfflineThenVoided(t *testing.T) {
	warned := &warnings{}
	h := newPayHarness(t, payOptions{config: func(c *origin.Config) {
		c.GateToken = gateToken
		c.Logger = slog.New(slog.NewTextHandler(warned, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}})
	ev := h.createEvent(map[string]any{"capacity": 10})
	ann, annTks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)
	bob, bobTks := h.tickets(ev.ID, "bob", 1, payment.MethodVisa)
	cat, catTks := h.tickets(ev.ID, "cat", 1, payment.MethodVisa)
	device := bearerOf(h.addDevice(ev.ID, "field-1", "").Token)
	other := bearerOf(h.addDevice(ev.ID, "field-1", "scanner 2").Token)
	upload := func(code string, at time.Time) scanJSON {
		t.Helper()
		res := h.do(http.MethodPost, "/v1/scans", map[string]any{"scans": []any{offline(code, at)}}, device)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		var u uploadJSON
		res.json(t, &u)
		require.Len(t, u.Results, 1)
		return u.Results[0]
	}

	h.clock.Advance(time.Minute)
	letIn := h.clock.Now() // 10:01: ann's and cat's tickets let in offline
	h.clock.Advance(time.Minute)
	// 10:02: cat's scan is uploaded first, so her cancellation is refused.
	require.Equal(t, http.StatusOK, upload(catTks[0].Code, letIn).Status)
	res := h.do(http.MethodPost, "/v1/bookings/"+cat.BookingID+"/cancellation", nil, h.auth("cat", ev.ID))
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	assert.Equal(t, "booking_not_cancellable", res.errorCode(t))
	assert.Equal(t, "refunded", h.cancel(ev.ID, "ann", ann.BookingID).Status)
	assert.Equal(t, "refunded", h.cancel(ev.ID, "bob", bob.BookingID).Status)
	h.clock.Advance(time.Minute)
	afterVoid := h.clock.Now() // 10:03: bob's ticket scanned, and refused
	h.clock.Advance(2 * time.Minute)

	// 10:05: the uploads.
	r := upload(annTks[0].Code, letIn)
	assert.Equal(t, http.StatusGone, r.Status, "%+v", r)
	assert.Equal(t, "ticket_void", r.Result)
	assert.True(t, r.LetInBeforeVoid, "let in at 10:01, voided at 10:02: %+v", r)
	r = upload(bobTks[0].Code, afterVoid)
	assert.Equal(t, http.StatusGone, r.Status, "%+v", r)
	assert.False(t, r.LetInBeforeVoid, "scanned after the void: refused by the device")

	scans, err := h.ledger.ScansOf(context.Background(), annTks[0].Code)
	require.NoError(t, err)
	require.Len(t, scans, 1)
	assert.Equal(t, "ticket_void", scans[0].Result, "a refunded booking has no admitted ticket")
	assert.False(t, scans[0].First)
	assert.True(t, scans[0].LetInBeforeVoid)
	scans, err = h.ledger.ScansOf(context.Background(), bobTks[0].Code)
	require.NoError(t, err)
	require.Len(t, scans, 1)
	assert.False(t, scans[0].LetInBeforeVoid)

	h.requireScanTotals(ev.ID, scanTotals{Admitted: 1, Void: 2, LetInThenVoided: 1})
	assert.Equal(t, float64(1), h.scans("let_in_before_void"))
	assert.Equal(t, float64(2), h.scans("ticket_void"))
	assert.Contains(t, warned.String(), ann.BookingID, "the operator is told whose refund to chase")
	assert.NotContains(t, warned.String(), bob.BookingID)

	// Sent again, it is answered the same and counted once.
	r = upload(annTks[0].Code, letIn)
	assert.True(t, r.LetInBeforeVoid, "%+v", r)
	assert.Equal(t, float64(1), h.scans("let_in_before_void"))
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 1, Void: 2, LetInThenVoided: 1})

	// The device that let the ticket in refused it itself after.
	r = upload(annTks[0].Code, letIn.Add(time.Second))
	assert.Equal(t, http.StatusGone, r.Status, "%+v", r)
	assert.False(t, r.LetInBeforeVoid, "the device knew it had let the ticket in: %+v", r)
	// Another device could not know: a second person inside, on the same
	// ticket. Alone, as one offline scan, its 410 says so too.
	one := h.do(http.MethodPost, "/v1/scans", map[string]any{"code": annTks[0].Code,
		"scanned_at": letIn.Add(2 * time.Second).Format(time.RFC3339Nano)}, other)
	require.Equal(t, http.StatusGone, one.status, "%s", one.body)
	var single scanJSON
	one.json(t, &single)
	assert.True(t, single.LetInBeforeVoid, "%s", one.body)
	assert.Equal(t, float64(2), h.scans("let_in_before_void"))
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 1, Void: 4, LetInThenVoided: 1})
	// Online, the ticket is void now: nobody was let in by it.
	one = h.scan(ev.ID, annTks[0].Code, "north-3")
	require.Equal(t, http.StatusGone, one.status, "%s", one.body)
	assert.NotContains(t, string(one.body), "let_in_before_void")
}

// Two devices at one gate let the same ticket in at the same moment (a
// screenshot shown at both doors of an entrance): the second upload is a
// scan of its own, not the first's sent again. Whichever uploads first,
// the other is recorded as a second admission, counted, and moves its
// device's last scan; only a device's own scan sent again is a replay.
func TestTwoDevicesAtOneGateSameMoment(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)
	one := h.addDevice(ev.ID, "field-1", "scanner 1")
	two := h.addDevice(ev.ID, "field-1", "scanner 2")
	h.clock.Advance(time.Minute)
	at := h.clock.Now()
	h.clock.Advance(5 * time.Minute)
	upload := func(device deviceJSON) scanJSON {
		t.Helper()
		res := h.do(http.MethodPost, "/v1/scans", map[string]any{"scans": []any{offline(tks[0].Code, at)}}, bearerOf(device.Token))
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		var u uploadJSON
		res.json(t, &u)
		require.Len(t, u.Results, 1)
		return u.Results[0]
	}

	require.Equal(t, http.StatusOK, upload(one).Status)
	r := upload(two)
	assert.Equal(t, http.StatusConflict, r.Status, "%+v", r)
	assert.Equal(t, "already_used", r.Result)
	assert.Equal(t, "field-1", r.Gate)

	scans, err := h.ledger.ScansOf(context.Background(), tks[0].Code)
	require.NoError(t, err)
	require.Len(t, scans, 2, "scanner 2's scan is recorded")
	assert.Equal(t, []string{one.ID, two.ID}, []string{scans[0].Device, scans[1].Device})
	assert.Equal(t, []string{"admitted", "admitted"}, []string{scans[0].Result, scans[1].Result}, "both let someone in")
	assert.Equal(t, []bool{true, false}, []bool{scans[0].First, scans[1].First})
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 1, DoubleAdmissions: 1})
	assert.Equal(t, float64(1), h.scans("double_admission"))
	for _, d := range h.devices() {
		assert.NotNil(t, d.LastScanAt, "%s scanned", d.Name)
	}

	// Each device sending its upload again changes nothing.
	assert.Equal(t, http.StatusOK, upload(one).Status)
	assert.Equal(t, http.StatusConflict, upload(two).Status)
	scans, err = h.ledger.ScansOf(context.Background(), tks[0].Code)
	require.NoError(t, err)
	assert.Len(t, scans, 2)
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 1, DoubleAdmissions: 1})
	assert.Equal(t, float64(1), h.scans("double_admission"))
}
