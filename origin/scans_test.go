package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/origin/ticketcode"
)

const gateToken = "gate-token-0123456789"

func gateAuth() map[string]string { return map[string]string{"Authorization": "Bearer " + gateToken} }

type scanJSON struct {
	Code            string      `json:"code"`
	Status          int         `json:"status"`
	Error           string      `json:"error"`
	Result          string      `json:"result"`
	Ticket          *ticketJSON `json:"ticket"`
	Gate            string      `json:"gate"`
	ScannedAt       string      `json:"scanned_at"`
	FirstScannedAt  string      `json:"first_scanned_at"`
	LetInBeforeVoid bool        `json:"let_in_before_void"`
	Displaced       *struct {
		Gate      string `json:"gate"`
		ScannedAt string `json:"scanned_at"`
	} `json:"displaced"`
}

type uploadJSON struct {
	Gate    string     `json:"gate"`
	Results []scanJSON `json:"results"`
}

// newGateHarness is an origin selling through fakepay with the gate on.
func newGateHarness(t *testing.T) *payHarness {
	return newPayHarness(t, payOptions{config: func(c *origin.Config) { c.GateToken = gateToken }})
}

// tickets buys qty seats for user and returns the tickets.
func (h *payHarness) tickets(event int64, user string, qty int, method string) (bookingJSON, []ticketJSON) {
	h.t.Helper()
	b := h.mustBook(event, user, h.holdOne(event, user, qty).HoldID, method)
	got := h.settled(event, user, b.BookingID)
	require.Equal(h.t, "confirmed", got.Status, "%+v", got)
	require.Len(h.t, got.Tickets, qty)
	return got, got.Tickets
}

func (h *payHarness) scan(event int64, code, gate string) result {
	h.t.Helper()
	return h.do(http.MethodPost, "/v1/scans", map[string]any{"code": code, "gate": gate, "event": event}, gateAuth())
}

func (h *payHarness) upload(event int64, gate string, scans ...map[string]any) uploadJSON {
	h.t.Helper()
	res := h.do(http.MethodPost, "/v1/scans", map[string]any{"gate": gate, "event": event, "scans": scans}, gateAuth())
	require.Equal(h.t, http.StatusOK, res.status, "%s", res.body)
	var u uploadJSON
	res.json(h.t, &u)
	require.Equal(h.t, gate, u.Gate)
	require.Len(h.t, u.Results, len(scans))
	return u
}

func offline(code string, at time.Time) map[string]any {
	return map[string]any{"code": code, "scanned_at": at.Format(time.RFC3339Nano)}
}

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err, s)
	return v
}

func TestScanAdmitsOnce(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 2, payment.MethodVisa)

	first := h.scan(ev.ID, tks[0].Code, "north-3")
	require.Equal(t, http.StatusOK, first.status, "%s", first.body)
	var a scanJSON
	first.json(t, &a)
	assert.Equal(t, "admitted", a.Result)
	assert.Equal(t, "north-3", a.Gate)
	require.NotNil(t, a.Ticket)
	assert.Equal(t, tks[0], *a.Ticket, "the ticket as the booking has it, seat included")
	assert.True(t, parseTime(t, a.ScannedAt).Equal(h.clock.Now()), "scanned now, by the origin's clock")

	h.clock.Advance(90 * time.Second)
	for _, gate := range []string{"south-1", "north-3"} {
		again := h.scan(ev.ID, tks[0].Code, gate)
		require.Equal(t, http.StatusConflict, again.status, "%s", again.body)
		assert.Equal(t, "already_used", again.errorCode(t))
		var u scanJSON
		again.json(t, &u)
		assert.Equal(t, "north-3", u.Gate, "where it was first used")
		assert.Equal(t, a.ScannedAt, u.FirstScannedAt, "and when")
		assert.True(t, parseTime(t, u.ScannedAt).Equal(h.clock.Now()))
		assert.Equal(t, tks[0], *u.Ticket)
	}
	other := h.scan(ev.ID, tks[1].Code, "south-1")
	assert.Equal(t, http.StatusOK, other.status, "the booking's other ticket is its own: %s", other.body)

	scans, err := h.ledger.ScansOf(context.Background(), tks[0].Code)
	require.NoError(t, err)
	require.Len(t, scans, 3)
	assert.Equal(t, []bool{true, false, false}, []bool{scans[0].First, scans[1].First, scans[2].First})
	assert.Equal(t, []string{"admitted", "already_used", "already_used"}, []string{scans[0].Result, scans[1].Result, scans[2].Result})
	assert.Equal(t, "north-3", scans[0].Gate)
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 2, AlreadyUsed: 2})
}

type scanTotals struct {
	Event            int64 `json:"event"`
	Admitted         int64 `json:"admitted"`
	AlreadyUsed      int64 `json:"already_used"`
	Void             int64 `json:"ticket_void"`
	WrongEvent       int64 `json:"wrong_event"`
	DoubleAdmissions int64 `json:"double_admissions"`
	LetInThenVoided  int64 `json:"let_in_then_voided"`
}

func (h *payHarness) requireScanTotals(event int64, want scanTotals) {
	h.t.Helper()
	res := h.do(http.MethodGet, fmt.Sprintf("/v1/admin/events/%d/scans", event), nil, admin())
	require.Equal(h.t, http.StatusOK, res.status, "%s", res.body)
	var got scanTotals
	res.json(h.t, &got)
	want.Event = event
	require.Equal(h.t, want, got)
}

// Many gates scan one code at once, while the clock moves: the ledger lets
// exactly one in.
func TestConcurrentScansAdmitOne(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)

	const n = 40
	var wg sync.WaitGroup
	answers := make([]result, n)
	for i := range n {
		wg.Go(func() {
			h.clock.Advance(time.Millisecond)
			answers[i] = h.scan(ev.ID, tks[0].Code, fmt.Sprintf("gate-%d", i%8))
		})
	}
	wg.Wait()
	admitted, winner := 0, ""
	for _, res := range answers {
		if res.status == http.StatusOK {
			admitted++
			var a scanJSON
			res.json(t, &a)
			winner = a.Gate
		}
	}
	require.Equal(t, 1, admitted, "exactly one of %d concurrent scans admits", n)
	for _, res := range answers {
		if res.status != http.StatusOK {
			require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
			var u scanJSON
			res.json(t, &u)
			assert.Equal(t, winner, u.Gate, "every refusal names the gate that won")
		}
	}
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 1, AlreadyUsed: n - 1})
}

// A scan and the buyer's cancellation at once: either the holder is let in
// and the cancellation refused, or the booking is cancelled and the ticket
// refused as void; never both, whichever commits first.
func TestScanRacesCancellation(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 40, "overflow_pct": 0})
	let, cancelled := 0, 0
	for i := range 12 {
		user := fmt.Sprintf("u%d", i)
		b, tks := h.tickets(ev.ID, user, 1, payment.MethodVisa)
		var scan, cancel result
		var wg sync.WaitGroup
		wg.Go(func() { scan = h.scan(ev.ID, tks[0].Code, "north-1") })
		wg.Go(func() {
			cancel = h.do(http.MethodPost, "/v1/bookings/"+b.BookingID+"/cancellation", nil, h.auth(user, ev.ID))
		})
		wg.Wait()
		switch {
		case scan.status == http.StatusOK:
			require.Equal(t, http.StatusConflict, cancel.status, "let in, then cancelled: %s", cancel.body)
			assert.Equal(t, "confirmed", h.booking(ev.ID, user, b.BookingID).Status)
			let++
		case cancel.status == http.StatusOK:
			require.Equal(t, http.StatusGone, scan.status, "cancelled, then let in: %s", scan.body)
			cancelled++
		default:
			t.Fatalf("neither went through: scan %d %s, cancellation %d %s", scan.status, scan.body, cancel.status, cancel.body)
		}
	}
	t.Logf("let in first %d times, cancelled first %d times", let, cancelled)
	h.requireScanTotals(ev.ID, scanTotals{Admitted: int64(let), Void: int64(cancelled)})
}

// A cancelled or refunded booking's tickets are refused, scanned before or
// not.
func TestScanVoidTicket(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})

	annB, refunded := h.tickets(ev.ID, "ann", 2, payment.MethodVisa)
	bobB, cancelled := h.tickets(ev.ID, "bob", 1, payment.MethodRefundFails)
	atProvider, refundedThere := h.tickets(ev.ID, "cat", 1, payment.MethodVisa)

	assert.Equal(t, "refunded", h.cancel(ev.ID, "ann", annB.BookingID).Status)
	assert.Equal(t, "cancelled", h.cancel(ev.ID, "bob", bobB.BookingID).Status, "its refund failed: cancelled, the tickets void all the same")
	_, err := h.fp.Refund(context.Background(), payment.RefundRequest{PaymentID: atProvider.PaymentID, BookingID: atProvider.BookingID, IdempotencyKey: "dashboard"})
	require.NoError(t, err)
	res := h.webhook([]byte(fmt.Sprintf(`{"id":"evt_%s","object":"event","type":"charge.refunded","data":{"object":`+
		`{"id":"ch_1","object":"charge","amount":%d,"amount_refunded":%d,"payment_intent":%q}}}`,
		uuid.NewString(), atProvider.Amount, atProvider.Amount, atProvider.PaymentID)))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)

	for name, code := range map[string]string{
		"refunded": refunded[0].Code, "refunded too": refunded[1].Code,
		"cancelled": cancelled[0].Code, "refunded at the provider": refundedThere[0].Code,
	} {
		res := h.scan(ev.ID, code, "south-1")
		require.Equal(t, http.StatusGone, res.status, "%s: %s", name, res.body)
		assert.Equal(t, "ticket_void", res.errorCode(t), name)
		var v scanJSON
		res.json(t, &v)
		require.NotNil(t, v.Ticket, name)
		assert.Equal(t, code, v.Ticket.Code, name)
	}
	h.requireScanTotals(ev.ID, scanTotals{Void: 4})
}

// A buyer let in at the gate cannot cancel: the refund would pay back a
// seat its holder sits in, and put it back on sale for someone else. The
// booking, its tickets and the seats stay as they were; another booking
// of the event, nobody let in, cancels as before. A refund the merchant
// makes at the provider after the entry returns the money and keeps the
// sale: the seats are in use.
func TestLetInBookingIsNotCancellable(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10, "overflow_pct": 0})
	dan, tks := h.tickets(ev.ID, "dan", 2, payment.MethodVisa)
	eve, _ := h.tickets(ev.ID, "eve", 1, payment.MethodVisa)
	require.Equal(t, http.StatusOK, h.scan(ev.ID, tks[1].Code, "north-3").status)
	before := h.invariant(ev.ID)

	res := h.do(http.MethodPost, "/v1/bookings/"+dan.BookingID+"/cancellation", nil, h.auth("dan", ev.ID))
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	var e struct{ Error, Message string }
	res.json(t, &e)
	assert.Equal(t, "booking_not_cancellable", e.Error)
	assert.Contains(t, e.Message, "let in at the gate")

	got := h.booking(ev.ID, "dan", dan.BookingID)
	assert.Equal(t, "confirmed", got.Status)
	assert.Empty(t, got.RefundStatus)
	assert.Equal(t, tks, got.Tickets, "the tickets stand")
	assert.Equal(t, before, h.invariant(ev.ID), "no seat back on sale")
	assert.Empty(t, h.fp.RefundsForPayment(dan.PaymentID), "no refund asked for")
	other := h.scan(ev.ID, tks[0].Code, "south-1")
	assert.Equal(t, http.StatusOK, other.status, "the booking's other ticket still admits: %s", other.body)

	assert.Equal(t, "refunded", h.cancel(ev.ID, "eve", eve.BookingID).Status, "nobody of eve's let in")
	h.requireInvariant(ev.ID, 2)

	_, err := h.fp.Refund(context.Background(), payment.RefundRequest{PaymentID: dan.PaymentID, BookingID: dan.BookingID, IdempotencyKey: "dashboard"})
	require.NoError(t, err)
	for range 2 { // the provider sends it again: acted on once
		res = h.webhook([]byte(fmt.Sprintf(`{"id":"evt_%s","object":"event","type":"charge.refunded","data":{"object":`+
			`{"id":"ch_1","object":"charge","amount":%d,"amount_refunded":%d,"payment_intent":%q}}}`,
			uuid.NewString(), dan.Amount, dan.Amount, dan.PaymentID)))
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	}
	var full struct {
		bookingJSON
		AmountRefunded int64 `json:"amount_refunded"`
	}
	res = h.do(http.MethodGet, "/v1/bookings/"+dan.BookingID, nil, h.auth("dan", ev.ID))
	require.Equal(t, http.StatusOK, res.status)
	res.json(t, &full)
	assert.Equal(t, "confirmed", full.Status, "the sale stands")
	assert.Equal(t, dan.Amount, full.AmountRefunded, "all of the money back")
	assert.Equal(t, tks, full.Tickets)
	h.requireInvariant(ev.ID, 2)
	assert.Equal(t, http.StatusConflict, h.scan(ev.ID, tks[0].Code, "south-1").status, "a ticket let in is used, not void")
}

func TestScanRefusesForgedAndMalformed(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	b, tks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)

	ours, err := ticketcode.NewSigner(ticketKey)
	require.NoError(t, err)
	theirs, err := ticketcode.NewSigner([]byte(strings.Repeat("f", 32)))
	require.NoError(t, err)
	claims := ticketcode.Claims{BookingID: b.BookingID, EventID: ev.ID, Seat: "99"}
	otherKey, err := theirs.Sign(claims)
	require.NoError(t, err)
	neverIssued, err := ours.Sign(claims)
	require.NoError(t, err)
	// The ledger finds a code on the booking it names: one naming a
	// booking that has none is no ticket.
	noBooking, err := ours.Sign(ticketcode.Claims{BookingID: uuid.NewString(), EventID: ev.ID, Seat: "1"})
	require.NoError(t, err)

	for name, code := range map[string]string{
		"empty": "", "garbage": "not-a-ticket", "tampered": tamper(tks[0].Code), "truncated": tks[0].Code[:40],
		"signed by another key": otherKey, "signed, never issued": neverIssued, "signed, of no booking": noBooking,
	} {
		res := h.scan(ev.ID, code, "north-3")
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
		assert.Equal(t, "invalid_ticket", res.errorCode(t), name)
	}
	now := h.clock.Now()
	for name, body := range map[string]any{
		"no gate":            map[string]any{"code": tks[0].Code, "event": ev.ID},
		"bad gate":           map[string]any{"code": tks[0].Code, "event": ev.ID, "gate": "north 3"},
		"no event":           map[string]any{"code": tks[0].Code, "gate": "north-3"},
		"event 0":            map[string]any{"code": tks[0].Code, "gate": "north-3", "event": 0},
		"no code":            map[string]any{"gate": "north-3", "event": ev.ID},
		"code and scans":     map[string]any{"code": tks[0].Code, "gate": "north-3", "event": ev.ID, "scans": []any{offline(tks[0].Code, now)}},
		"empty upload":       map[string]any{"gate": "north-3", "event": ev.ID, "scans": []any{}},
		"upload, no event":   map[string]any{"gate": "north-3", "scans": []any{offline(tks[0].Code, now)}},
		"unknown field":      map[string]any{"code": tks[0].Code, "gate": "north-3", "event": ev.ID, "seat": 1},
		"bad scan time":      map[string]any{"code": tks[0].Code, "gate": "north-3", "event": ev.ID, "scanned_at": "yesterday"},
		"scan in the future": map[string]any{"code": tks[0].Code, "gate": "north-3", "event": ev.ID, "scanned_at": now.Add(6 * time.Minute).Format(time.RFC3339)},
		"upload, no time":    map[string]any{"gate": "north-3", "event": ev.ID, "scans": []any{map[string]any{"code": tks[0].Code}}},
		"not json":           "{",
	} {
		res := h.do(http.MethodPost, "/v1/scans", body, gateAuth())
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
		assert.Equal(t, "invalid_request", res.errorCode(t), name)
	}
	h.requireScanTotals(ev.ID, scanTotals{})
}

func TestScanNeedsTheGateToken(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)
	body := map[string]any{"code": tks[0].Code, "gate": "north-3", "event": ev.ID}
	for name, headers := range map[string]map[string]string{
		"none":            nil,
		"wrong":           {"Authorization": "Bearer " + gateToken + "x"},
		"the admin token": admin(),
		"not bearer":      {"Authorization": gateToken},
	} {
		res := h.do(http.MethodPost, "/v1/scans", body, headers)
		require.Equal(t, http.StatusUnauthorized, res.status, name)
		assert.Equal(t, "unauthorized", res.errorCode(t), name)
	}
	assert.Equal(t, http.StatusOK, h.scan(ev.ID, tks[0].Code, "north-3").status, "nothing was recorded before")

	off := newPayHarness(t, payOptions{})
	res := off.do(http.MethodPost, "/v1/scans", body, gateAuth())
	require.Equal(t, http.StatusServiceUnavailable, res.status, "no gate token set: the gate is closed, not open")
	assert.Equal(t, "gate_disabled", res.errorCode(t))
	res = off.do(http.MethodPost, "/v1/scans", body, nil)
	assert.Equal(t, http.StatusServiceUnavailable, res.status)
}

// A device scans offline and uploads later: its earlier scan is the
// admission, even after a later online scan admitted the ticket, and the
// answer and the ledger say which gate was first.
func TestOfflineUploadEarlierScanWins(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 4, payment.MethodVisa)
	ctx := context.Background()
	t0 := h.clock.Now()

	// The device verifies the codes itself, with the public keys alone.
	keys := h.do(http.MethodGet, "/v1/scans/keys", nil, nil)
	require.Equal(t, http.StatusOK, keys.status, "%s", keys.body)
	var kj struct {
		Keys []struct {
			ID        string `json:"id"`
			PublicKey string `json:"public_key"`
		} `json:"keys"`
	}
	keys.json(t, &kj)
	require.Len(t, kj.Keys, 1)
	pub, err := ticketcode.ParsePublicKey(kj.Keys[0].ID + ":" + kj.Keys[0].PublicKey)
	require.NoError(t, err)
	device, err := ticketcode.NewVerifier(pub)
	require.NoError(t, err)
	for _, tk := range tks {
		c, err := device.Verify(tk.Code, t0)
		require.NoError(t, err)
		assert.Equal(t, ev.ID, c.EventID)
	}
	_, err = device.Verify(tamper(tks[0].Code), t0)
	assert.ErrorIs(t, err, ticketcode.ErrInvalid)

	// Online: tks[0] at north-3 a minute after the device let it in.
	h.clock.Advance(time.Minute)
	require.Equal(t, http.StatusOK, h.scan(ev.ID, tks[0].Code, "north-3").status)
	h.clock.Advance(time.Minute)
	require.Equal(t, http.StatusOK, h.scan(ev.ID, tks[2].Code, "north-3").status)

	h.clock.Advance(10 * time.Minute)
	batch := []map[string]any{
		offline(tks[0].Code, t0.Add(time.Millisecond)),      // before north-3: wins
		offline(tks[1].Code, t0.Add(3*time.Second)),         // nobody else: admitted
		offline(tks[2].Code, t0.Add(5*time.Minute)),         // after north-3: used, and let in again
		offline(tks[3].Code, t0.Add(4*time.Minute)),         // scanned twice by the device,
		offline(tks[3].Code, t0.Add(2*time.Minute)),         // the earlier listed last
		offline(tamper(tks[1].Code), t0.Add(6*time.Second)), // forged
	}
	u := h.upload(ev.ID, "field-1", batch...)
	r := u.Results
	for i, want := range []struct {
		status int
		result string
	}{{200, "admitted"}, {200, "admitted"}, {409, "already_used"}, {409, "already_used"}, {200, "admitted"}, {400, "invalid_ticket"}} {
		assert.Equal(t, want.status, r[i].Status, "scan %d: %+v", i, r[i])
		assert.Equal(t, want.result, r[i].Result, "scan %d", i)
		assert.Equal(t, batch[i]["code"], r[i].Code, "answers in the order of the request")
	}
	require.NotNil(t, r[0].Displaced, "the later online admission is named")
	assert.Equal(t, "north-3", r[0].Displaced.Gate)
	assert.True(t, parseTime(t, r[0].Displaced.ScannedAt).Equal(t0.Add(time.Minute)))
	assert.Equal(t, "field-1", r[0].Gate)
	assert.Nil(t, r[1].Displaced)
	assert.Equal(t, "north-3", r[2].Gate)
	assert.Equal(t, "field-1", r[3].Gate, "the device's own earlier scan")
	assert.True(t, parseTime(t, r[3].FirstScannedAt).Equal(t0.Add(2*time.Minute)))

	// Online scans now see the device's scan as the first.
	res := h.scan(ev.ID, tks[0].Code, "north-3")
	require.Equal(t, http.StatusConflict, res.status)
	var used scanJSON
	res.json(t, &used)
	assert.Equal(t, "field-1", used.Gate)
	assert.True(t, parseTime(t, used.FirstScannedAt).Equal(t0.Add(time.Millisecond)), "to the millisecond: %s", used.FirstScannedAt)

	scans, err := h.ledger.ScansOf(ctx, tks[0].Code)
	require.NoError(t, err)
	require.Len(t, scans, 3)
	assert.Equal(t, ledger.Scan{Gate: "field-1", ScannedAt: t0.Add(time.Millisecond), RecordedAt: scans[0].RecordedAt,
		Offline: true, Result: "admitted", First: true}, normalized(scans[0]))
	assert.Equal(t, "north-3", scans[1].Gate)
	assert.Equal(t, "admitted", scans[1].Result, "north-3 did let someone in")
	assert.False(t, scans[1].First, "but not first: a double admission")
	// tks[2]: the device let its holder in, not knowing of north-3's
	// admission: a double admission too, answered as used.
	scans, err = h.ledger.ScansOf(ctx, tks[2].Code)
	require.NoError(t, err)
	require.Len(t, scans, 2)
	assert.Equal(t, []string{"admitted", "admitted"}, []string{scans[0].Result, scans[1].Result})
	assert.Equal(t, []bool{true, false}, []bool{scans[0].First, scans[1].First})
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 4, AlreadyUsed: 2, DoubleAdmissions: 2})

	// The device's answer was lost: it uploads again, and each scan is
	// answered as the ledger stands, recorded once.
	again := h.upload(ev.ID, "field-1", batch...)
	for i := range batch {
		assert.Equal(t, r[i].Status, again.Results[i].Status, "scan %d", i)
		assert.Equal(t, r[i].Gate, again.Results[i].Gate, "scan %d", i)
	}
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 4, AlreadyUsed: 2, DoubleAdmissions: 2})

	// One offline scan alone, with its device time.
	one := h.do(http.MethodPost, "/v1/scans", map[string]any{"code": tks[1].Code, "gate": "field-2", "event": ev.ID,
		"scanned_at": t0.Add(time.Second).Format(time.RFC3339Nano)}, gateAuth())
	require.Equal(t, http.StatusOK, one.status, "earlier than field-1's: %s", one.body)
	var won scanJSON
	one.json(t, &won)
	require.NotNil(t, won.Displaced)
	assert.Equal(t, "field-1", won.Displaced.Gate)
}

func normalized(s ledger.Scan) ledger.Scan {
	s.ScannedAt = s.ScannedAt.UTC()
	return s
}

// Rotation: an origin signing with a new key, the old one retired, still
// admits the tickets signed before, and serves both public keys.
func TestScanAfterKeyRotation(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)
	old, err := ticketcode.NewSigner(ticketKey)
	require.NoError(t, err)

	rotated := h.newServer(h.clock, func(c *origin.Config) {
		c.Payments, c.GateToken = h.fp, gateToken
		c.TicketKey = []byte(strings.Repeat("n", 40))
		c.TicketRetiredKeys = []ticketcode.PublicKey{old.PublicKey()}
	})
	ts := httptest.NewServer(rotated.Handler())
	t.Cleanup(ts.Close)
	n := *h.harness
	n.url = ts.URL
	node := &payHarness{harness: &n, fp: h.fp}

	res := node.scan(ev.ID, tks[0].Code, "north-3")
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	keys := node.do(http.MethodGet, "/v1/scans/keys", nil, nil)
	require.Equal(t, http.StatusOK, keys.status)
	assert.Contains(t, string(keys.body), old.PublicKey().ID)
	assert.Equal(t, 2, strings.Count(string(keys.body), `"Ed25519"`))
}

// Two origin nodes whose clocks differ: an online scan decided second is
// refused even when its node's clock says it came first. Only a device's
// offline scan, uploaded, can be earlier than the admission recorded.
func TestOnlineScanNeverDisplaces(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)

	behind := &clock{t: h.clock.Now().Add(-time.Second)}
	slow := h.newServer(behind, func(c *origin.Config) {
		c.Payments, c.TicketKey, c.GateToken = h.fp, ticketKey, gateToken
	})
	ts := httptest.NewServer(slow.Handler())
	t.Cleanup(ts.Close)
	n := *h.harness
	n.url = ts.URL
	node := &payHarness{harness: &n, fp: h.fp}

	require.Equal(t, http.StatusOK, h.scan(ev.ID, tks[0].Code, "north-3").status)
	res := node.scan(ev.ID, tks[0].Code, "south-1")
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	var u scanJSON
	res.json(t, &u)
	assert.Equal(t, "north-3", u.Gate)
	assert.True(t, parseTime(t, u.ScannedAt).Before(parseTime(t, u.FirstScannedAt)), "by its node's clock it came first: %+v", u)
	h.requireScanTotals(ev.ID, scanTotals{Admitted: 1, AlreadyUsed: 1})
}

// A reserved seat's ticket names its seat id, in the signed code and in the
// gate's answer.
func TestScanSeatedTicket(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createSeated(seating(1, 8), nil)
	res := h.holdBody(ev.ID, "ann", map[string]any{"seat_ids": []string{"A-1-7"}}, "k1")
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	var hold seatedHold
	res.json(t, &hold)
	b := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodVisa)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, h.fp.WaitIdle(ctx))

	type seatedTicket struct {
		Code string `json:"code"`
		Seat any    `json:"seat"`
	}
	var got struct {
		Status  string         `json:"status"`
		Tickets []seatedTicket `json:"tickets"`
	}
	h.do(http.MethodGet, "/v1/bookings/"+b.BookingID, nil, h.auth("ann", ev.ID)).json(t, &got)
	require.Equal(t, "confirmed", got.Status)
	require.Len(t, got.Tickets, 1)
	require.Equal(t, "A-1-7", got.Tickets[0].Seat)
	claims, err := ticketVerifier(t, ticketKey).Verify(got.Tickets[0].Code, h.clock.Now())
	require.NoError(t, err)
	assert.Equal(t, "A-1-7", claims.Seat, "the code carries the seat id")

	first := h.scan(ev.ID, got.Tickets[0].Code, "north-3")
	require.Equal(t, http.StatusOK, first.status, "%s", first.body)
	var a struct {
		Result string       `json:"result"`
		Ticket seatedTicket `json:"ticket"`
	}
	first.json(t, &a)
	assert.Equal(t, "admitted", a.Result)
	assert.Equal(t, "A-1-7", a.Ticket.Seat)
	assert.Equal(t, http.StatusConflict, h.scan(ev.ID, got.Tickets[0].Code, "south-1").status)
}

// An offline scan refused before the ledger could record it (a forged code,
// one signed and never issued, an expired one, a time before the ticket's
// issue) is counted once, as a recorded scan is: its sender sending it
// again, in an upload or alone, is answered the same and not counted again.
// Another sender's scan is its own, and online scans are never deduplicated.
func TestRefusedOfflineScanCountedOnce(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	device := h.addDevice(ev.ID, "field-1", "")
	early := h.clock.Now().Add(30 * time.Second) // after the device, before the tickets
	h.clock.Advance(time.Minute)
	b, tks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)
	h.clock.Advance(time.Minute)
	at := h.clock.Now()
	h.clock.Advance(time.Minute)

	ours, err := ticketcode.NewSigner(ticketKey)
	require.NoError(t, err)
	neverIssued, err := ours.Sign(ticketcode.Claims{BookingID: b.BookingID, EventID: ev.ID, Seat: "99"})
	require.NoError(t, err)
	expired, err := ours.Sign(ticketcode.Claims{BookingID: b.BookingID, EventID: ev.ID, Seat: "98", NotAfter: at.Add(-time.Second)})
	require.NoError(t, err)
	batch := []map[string]any{
		offline(tamper(tks[0].Code), at),
		offline(neverIssued, at),
		offline(expired, at),
		offline(tks[0].Code, early),
	}
	counted := func() map[string]float64 {
		return map[string]float64{"invalid_ticket": h.scans("invalid_ticket"), "expired": h.scans("expired"),
			"before_issue": h.scans("before_issue")}
	}
	deviceUpload := func() uploadJSON {
		t.Helper()
		res := h.do(http.MethodPost, "/v1/scans", map[string]any{"scans": batch}, bearerOf(device.Token))
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		var u uploadJSON
		res.json(t, &u)
		require.Len(t, u.Results, len(batch))
		return u
	}

	first := h.upload(ev.ID, "field-1", batch...)
	for i, want := range []struct {
		status int
		result string
	}{{400, "invalid_ticket"}, {400, "invalid_ticket"}, {410, "ticket_void"}, {400, "invalid_request"}} {
		assert.Equal(t, want.status, first.Results[i].Status, "scan %d: %+v", i, first.Results[i])
		assert.Equal(t, want.result, first.Results[i].Result, "scan %d", i)
	}
	want := map[string]float64{"invalid_ticket": 2, "expired": 1, "before_issue": 1}
	require.Equal(t, want, counted())

	again := h.upload(ev.ID, "field-1", batch...)
	assert.Equal(t, first.Results, again.Results, "answered as before")
	for i, sc := range batch {
		alone := map[string]any{"code": sc["code"], "scanned_at": sc["scanned_at"], "gate": "field-1", "event": ev.ID}
		res := h.do(http.MethodPost, "/v1/scans", alone, gateAuth())
		assert.Equal(t, first.Results[i].Status, res.status, "scan %d alone: %s", i, res.body)
	}
	assert.Equal(t, want, counted(), "the scans sent again are not counted again")

	assert.Equal(t, first.Results, deviceUpload().Results, "another sender")
	want = map[string]float64{"invalid_ticket": 4, "expired": 2, "before_issue": 2}
	assert.Equal(t, want, counted(), "another sender's scans are its own")
	deviceUpload()
	assert.Equal(t, want, counted())

	for range 2 {
		assert.Equal(t, http.StatusBadRequest, h.scan(ev.ID, tamper(tks[0].Code), "north-3").status)
	}
	assert.Equal(t, float64(6), h.scans("invalid_ticket"), "an online scan is never deduplicated")
	h.requireScanTotals(ev.ID, scanTotals{})
}
