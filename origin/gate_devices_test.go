package origin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

type deviceJSON struct {
	ID         string  `json:"id"`
	Gate       string  `json:"gate"`
	Event      *int64  `json:"event"`
	Name       string  `json:"name"`
	CreatedAt  string  `json:"created_at"`
	RevokedAt  *string `json:"revoked_at"`
	LastScanAt *string `json:"last_scan_at"`
	Token      string  `json:"token"`
}

func (h *payHarness) addDevice(event int64, gate, name string) deviceJSON {
	h.t.Helper()
	res := h.do(http.MethodPost, "/v1/admin/gate-devices", map[string]any{"gate": gate, "event": event, "name": name}, admin())
	require.Equal(h.t, http.StatusCreated, res.status, "%s", res.body)
	var d deviceJSON
	res.json(h.t, &d)
	require.NotEmpty(h.t, d.Token)
	return d
}

func (h *payHarness) devices() []deviceJSON {
	h.t.Helper()
	res := h.do(http.MethodGet, "/v1/admin/gate-devices", nil, admin())
	require.Equal(h.t, http.StatusOK, res.status, "%s", res.body)
	var out struct {
		Devices []deviceJSON `json:"devices"`
	}
	res.json(h.t, &out)
	return out.Devices
}

func (h *payHarness) revoke(id string) result {
	h.t.Helper()
	return h.do(http.MethodPost, "/v1/admin/gate-devices/"+id+"/revocation", nil, admin())
}

func bearerOf(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// A device's token scans at its own gate, whatever the body would have;
// the shared token keeps scanning beside it.
func TestGateDeviceScansAtItsGate(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 4, payment.MethodVisa)
	north := h.addDevice(ev.ID, "north-3", "scanner 12")
	assert.Equal(t, "north-3", north.Gate)
	assert.Equal(t, "scanner 12", north.Name)
	assert.Nil(t, north.RevokedAt)
	assert.True(t, strings.HasPrefix(north.Token, "gd."+north.ID+"."), north.Token)

	res := h.do(http.MethodPost, "/v1/scans", map[string]any{"code": tks[0].Code}, bearerOf(north.Token))
	require.Equal(t, http.StatusOK, res.status, "no gate in the body: the device's: %s", res.body)
	var a scanJSON
	res.json(t, &a)
	assert.Equal(t, "north-3", a.Gate)

	res = h.do(http.MethodPost, "/v1/scans", map[string]any{"code": tks[1].Code, "gate": "north-3"}, bearerOf(north.Token))
	require.Equal(t, http.StatusOK, res.status, "its own gate named: %s", res.body)

	res = h.do(http.MethodPost, "/v1/scans", map[string]any{"code": tks[2].Code, "gate": "south-1"}, bearerOf(north.Token))
	require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
	assert.Equal(t, "gate_mismatch", res.errorCode(t))
	assert.Contains(t, string(res.body), "north-3")

	h.clock.Advance(time.Minute)
	up := h.do(http.MethodPost, "/v1/scans", map[string]any{"scans": []any{offline(tks[2].Code, h.clock.Now().Add(-time.Second))}}, bearerOf(north.Token))
	require.Equal(t, http.StatusOK, up.status, "%s", up.body)
	var u uploadJSON
	up.json(t, &u)
	assert.Equal(t, "north-3", u.Gate)
	require.Len(t, u.Results, 1)
	assert.Equal(t, "admitted", u.Results[0].Result)

	assert.Equal(t, http.StatusOK, h.scan(ev.ID, tks[3].Code, "south-1").status, "the shared token scans as before")
	res = h.do(http.MethodPost, "/v1/scans", map[string]any{"code": tks[3].Code, "event": ev.ID}, gateAuth())
	assert.Equal(t, http.StatusBadRequest, res.status, "the shared token names its gate")

	ctx := context.Background()
	for i, want := range []struct{ gate, device string }{{"north-3", north.ID}, {"north-3", north.ID}, {"north-3", north.ID}, {"south-1", ""}} {
		scans, err := h.ledger.ScansOf(ctx, tks[i].Code)
		require.NoError(t, err)
		require.NotEmpty(t, scans)
		assert.Equal(t, want.gate, scans[0].Gate, "ticket %d", i)
		assert.Equal(t, want.device, scans[0].Device, "ticket %d: the device that sent it", i)
	}

	list := h.devices()
	require.Len(t, list, 1)
	assert.Empty(t, list[0].Token, "the token is shown once")
	assert.Equal(t, north.ID, list[0].ID)
	require.NotNil(t, list[0].LastScanAt)
	assert.True(t, parseTime(t, *list[0].LastScanAt).Equal(h.clock.Now()), "recorded at the upload")
}

// A revoked device is refused from its next request on, at every node,
// with no restart; the others go on.
func TestGateDeviceRevocation(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 3, payment.MethodVisa)
	lost := h.addDevice(ev.ID, "north-3", "lost")
	h.clock.Advance(time.Second)
	kept := h.addDevice(ev.ID, "south-1", "")

	// A second origin node over the same ledger.
	other := h.newServer(h.clock, func(c *origin.Config) { c.Payments, c.TicketKey, c.GateToken = h.fp, ticketKey, gateToken })
	ts := httptest.NewServer(other.Handler())
	t.Cleanup(ts.Close)
	n := *h.harness
	n.url = ts.URL
	node := &payHarness{harness: &n, fp: h.fp}

	scan := func(h *payHarness, token, code string) result {
		return h.do(http.MethodPost, "/v1/scans", map[string]any{"code": code}, bearerOf(token))
	}
	require.Equal(t, http.StatusOK, scan(node, lost.Token, tks[0].Code).status)

	h.clock.Advance(time.Second)
	res := h.revoke(lost.ID)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	var revoked deviceJSON
	res.json(t, &revoked)
	require.NotNil(t, revoked.RevokedAt)
	assert.True(t, parseTime(t, *revoked.RevokedAt).Equal(h.clock.Now()))
	assert.Empty(t, revoked.Token)

	for name, hh := range map[string]*payHarness{"this node": h, "the other node": node} {
		res := scan(hh, lost.Token, tks[1].Code)
		require.Equal(t, http.StatusUnauthorized, res.status, "%s: %s", name, res.body)
		assert.Equal(t, "unauthorized", res.errorCode(t))
		res = hh.do(http.MethodGet, fmt.Sprintf("/v1/scans/void?event=%d", ev.ID), nil, bearerOf(lost.Token))
		assert.Equal(t, http.StatusUnauthorized, res.status, "%s: the void feed too", name)
	}
	assert.Equal(t, http.StatusOK, scan(node, kept.Token, tks[1].Code).status, "the other device scans on")

	h.clock.Advance(time.Second)
	again := h.revoke(lost.ID)
	require.Equal(t, http.StatusOK, again.status)
	var twice deviceJSON
	again.json(t, &twice)
	assert.Equal(t, *revoked.RevokedAt, *twice.RevokedAt, "revoked once, at the first time")

	list := h.devices()
	require.Len(t, list, 2)
	assert.Equal(t, lost.ID, list[0].ID, "oldest first")
	assert.NotNil(t, list[0].RevokedAt)
	assert.Nil(t, list[1].RevokedAt)

	// A forged secret for a device that exists, and other tokens.
	forged := lost.Token[:strings.LastIndex(lost.Token, ".")+1] + strings.Repeat("A", 43)
	keptForged := kept.Token[:strings.LastIndex(kept.Token, ".")+1] + strings.Repeat("A", 43)
	for name, token := range map[string]string{
		"another secret": keptForged, "no secret": "gd." + kept.ID + ".", "not a uuid": "gd.x.y",
		"unknown device": "gd.00000000-0000-0000-0000-000000000000.abc", "revoked, forged": forged,
	} {
		res := scan(h, token, tks[2].Code)
		require.Equal(t, http.StatusUnauthorized, res.status, "%s: %s", name, res.body)
	}

	for name, tc := range map[string]struct {
		method, path string
		headers      map[string]string
		status       int
	}{
		"list with a device token": {http.MethodGet, "/v1/admin/gate-devices", bearerOf(kept.Token), http.StatusUnauthorized},
		"add with the gate token":  {http.MethodPost, "/v1/admin/gate-devices", gateAuth(), http.StatusUnauthorized},
		"revoke, no token":         {http.MethodPost, "/v1/admin/gate-devices/" + kept.ID + "/revocation", nil, http.StatusUnauthorized},
		"revoke an unknown device": {http.MethodPost, "/v1/admin/gate-devices/00000000-0000-0000-0000-000000000000/revocation", admin(), http.StatusNotFound},
		"revoke a malformed id":    {http.MethodPost, "/v1/admin/gate-devices/north-3/revocation", admin(), http.StatusNotFound},
	} {
		var body any
		if tc.method == http.MethodPost && strings.HasSuffix(tc.path, "gate-devices") {
			body = map[string]any{"gate": "west-1", "event": ev.ID}
		}
		res := h.do(tc.method, tc.path, body, tc.headers)
		assert.Equal(t, tc.status, res.status, "%s: %s", name, res.body)
	}
	for name, body := range map[string]any{
		"no gate": map[string]any{"name": "x", "event": ev.ID}, "bad gate": map[string]any{"gate": "north 3", "event": ev.ID},
		"long name":     map[string]any{"gate": "north-3", "event": ev.ID, "name": strings.Repeat("n", 101)},
		"unknown field": map[string]any{"gate": "n", "event": ev.ID, "token": "x"},
		"no event":      map[string]any{"gate": "north-3"}, "event 0": map[string]any{"gate": "north-3", "event": 0},
		"event not a number": map[string]any{"gate": "north-3", "event": "42"},
	} {
		res := h.do(http.MethodPost, "/v1/admin/gate-devices", body, admin())
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
		assert.Equal(t, "invalid_request", res.errorCode(t), name)
	}
	assert.Len(t, h.devices(), 2, "nothing registered by the refusals")
}

// Without ORIGIN_GATE_TOKEN the gate is closed until a device is
// registered, and closed again once every device is revoked.
func TestGateDevicesWithoutSharedToken(t *testing.T) {
	h := newPayHarness(t, payOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10})
	_, tks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)
	body := map[string]any{"code": tks[0].Code, "gate": "north-3", "event": ev.ID}

	closed := func(name string) {
		t.Helper()
		for _, headers := range []map[string]string{nil, gateAuth()} {
			res := h.do(http.MethodPost, "/v1/scans", body, headers)
			require.Equal(t, http.StatusServiceUnavailable, res.status, "%s: %s", name, res.body)
			assert.Equal(t, "gate_disabled", res.errorCode(t), name)
		}
	}
	closed("no device yet")
	d := h.addDevice(ev.ID, "north-3", "")
	res := h.do(http.MethodPost, "/v1/scans", body, gateAuth())
	require.Equal(t, http.StatusUnauthorized, res.status, "a device exists: the gate is open, to its token only")
	res = h.do(http.MethodPost, "/v1/scans", body, bearerOf(d.Token))
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, http.StatusOK, h.revoke(d.ID).status)
	closed("every device revoked")
}

type voidFeedJSON struct {
	Event   int64        `json:"event"`
	Tickets []ticketJSON `json:"tickets"`
	Next    string       `json:"next"`
	More    bool         `json:"more"`
}

// readVoids follows the feed from since to its end, limit tickets a page,
// with the gate token headers.
func (h *payHarness) readVoids(event int64, since string, limit int, headers map[string]string) ([]string, string) {
	h.t.Helper()
	var codes []string
	for range 100 {
		q := url.Values{"event": {fmt.Sprint(event)}, "since": {since}, "limit": {fmt.Sprint(limit)}}
		res := h.do(http.MethodGet, "/v1/scans/void?"+q.Encode(), nil, headers)
		require.Equal(h.t, http.StatusOK, res.status, "%s", res.body)
		var page voidFeedJSON
		res.json(h.t, &page)
		require.Equal(h.t, event, page.Event)
		require.LessOrEqual(h.t, len(page.Tickets), limit)
		for _, tk := range page.Tickets {
			codes = append(codes, tk.Code)
		}
		require.NotEmpty(h.t, page.Next)
		since = page.Next
		if !page.More {
			return codes, since
		}
	}
	h.t.Fatal("the void feed never ended")
	return nil, ""
}

// A device syncs the void feed page by page, and from its cursor on gets
// each ticket voided since, once: cancellations, refunds at the provider.
func TestVoidFeed(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 20})
	other := h.createEvent(map[string]any{"capacity": 5})
	device := bearerOf(h.addDevice(ev.ID, "field-1", "").Token)

	empty, cursor := h.readVoids(ev.ID, "", 1000, device)
	assert.Empty(t, empty)

	var want []string
	for i, user := range []string{"ann", "bob", "cat", "dan"} {
		b, tks := h.tickets(ev.ID, user, 2, payment.MethodVisa)
		if i%2 == 0 {
			h.cancel(ev.ID, user, b.BookingID)
			for _, tk := range tks {
				want = append(want, tk.Code)
			}
		}
	}
	ob, _ := h.tickets(other.ID, "ann", 1, payment.MethodVisa)
	h.cancel(other.ID, "ann", ob.BookingID)

	got, next := h.readVoids(ev.ID, cursor, 3, device)
	assert.ElementsMatch(t, want, got, "every ticket voided, once, this event's only")
	all, _ := h.readVoids(ev.ID, "", 1000, gateAuth())
	assert.ElementsMatch(t, want, all, "from the start, with the shared token")

	nothing, same := h.readVoids(ev.ID, next, 3, device)
	assert.Empty(t, nothing)
	b, tks := h.tickets(ev.ID, "eve", 1, payment.MethodVisa)
	h.cancel(ev.ID, "eve", b.BookingID)
	got, _ = h.readVoids(ev.ID, same, 3, device)
	assert.Equal(t, []string{tks[0].Code}, got, "only what was voided since")
	res := h.scan(ev.ID, tks[0].Code, "north-3")
	assert.Equal(t, http.StatusGone, res.status, "what the feed lists the gate refuses online")

	for name, tc := range map[string]struct {
		query   string
		headers map[string]string
		status  int
		code    string
	}{
		"no token":      {fmt.Sprintf("event=%d", ev.ID), nil, http.StatusUnauthorized, "unauthorized"},
		"admin token":   {fmt.Sprintf("event=%d", ev.ID), admin(), http.StatusUnauthorized, "unauthorized"},
		"no event":      {"", device, http.StatusBadRequest, "invalid_request"},
		"bad event":     {"event=final", device, http.StatusBadRequest, "invalid_request"},
		"unknown event": {fmt.Sprintf("event=%d", ev.ID+1_000_000), gateAuth(), http.StatusNotFound, "not_found"},
		"another event": {fmt.Sprintf("event=%d", other.ID), device, http.StatusForbidden, "wrong_event"},
		"bad cursor":    {fmt.Sprintf("event=%d&since=xyz", ev.ID), device, http.StatusBadRequest, "invalid_request"},
		"forged cursor": {fmt.Sprintf("event=%d&since=%s", ev.ID, "MTox"), device, http.StatusBadRequest, "invalid_request"},
		"limit 0":       {fmt.Sprintf("event=%d&limit=0", ev.ID), device, http.StatusBadRequest, "invalid_request"},
		"limit 1001":    {fmt.Sprintf("event=%d&limit=1001", ev.ID), device, http.StatusBadRequest, "invalid_request"},
	} {
		res := h.do(http.MethodGet, "/v1/scans/void?"+tc.query, nil, tc.headers)
		require.Equal(t, tc.status, res.status, "%s: %s", name, res.body)
		assert.Equal(t, tc.code, res.errorCode(t), name)
	}
}

// A voiding that commits after a later one did is not lost behind the
// cursor a read handed out in between: the feed is read by snapshot, not
// by the order rows were written in.
func TestVoidFeedVoidingCommittedLate(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 10})
	slow, slowTks := h.tickets(ev.ID, "ann", 1, payment.MethodVisa)
	fast, fastTks := h.tickets(ev.ID, "bob", 1, payment.MethodVisa)
	_, cursor := h.readVoids(ev.ID, "", 10, gateAuth())

	voided, commit := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- h.ledger.InTx(context.Background(), time.Time{}, func(tx ledger.Tx) error {
			if err := tx.VoidTickets(context.Background(), slow.BookingID, ev.ID); err != nil {
				return err
			}
			close(voided)
			<-commit
			return nil
		})
	}()
	<-voided
	h.cancel(ev.ID, "bob", fast.BookingID)
	got, cursor := h.readVoids(ev.ID, cursor, 10, gateAuth())
	assert.Equal(t, []string{fastTks[0].Code}, got, "the voiding still running is not seen yet")

	close(commit)
	require.NoError(t, <-done)
	got, _ = h.readVoids(ev.ID, cursor, 10, gateAuth())
	assert.Equal(t, []string{slowTks[0].Code}, got, "and is read once it commits, after the cursor")
}

// A device's token is the one its registration answered: another spelling
// of its id (as a URN, in braces, without hyphens, upper-case) is no
// token, refused as any unknown token is, never a 503 that reads as the
// ledger being down.
func TestGateDeviceTokenSpelledOtherwise(t *testing.T) {
	h := newGateHarness(t)
	ev := h.createEvent(map[string]any{"capacity": 5})
	d := h.addDevice(ev.ID, "north-3", "")
	secret := d.Token[strings.LastIndex(d.Token, ".")+1:]
	body := map[string]any{"code": "not-a-ticket"}

	for name, id := range map[string]string{
		"urn":        "urn:uuid:" + d.ID,
		"braces":     "{" + d.ID + "}",
		"no hyphens": strings.ReplaceAll(d.ID, "-", ""),
		"upper-case": strings.ToUpper(d.ID),
	} {
		token := "gd." + id + "." + secret
		res := h.do(http.MethodPost, "/v1/scans", body, bearerOf(token))
		require.Equal(t, http.StatusUnauthorized, res.status, "%s: %s", name, res.body)
		assert.Equal(t, "unauthorized", res.errorCode(t), name)
		res = h.do(http.MethodGet, fmt.Sprintf("/v1/scans/void?event=%d", ev.ID), nil, bearerOf(token))
		assert.Equal(t, http.StatusUnauthorized, res.status, "%s, the void feed: %s", name, res.body)
	}
	res := h.do(http.MethodPost, "/v1/scans", body, bearerOf(d.Token))
	require.Equal(t, http.StatusBadRequest, res.status, "the token as registered scans: %s", res.body)
	assert.Equal(t, "invalid_ticket", res.errorCode(t))
}
