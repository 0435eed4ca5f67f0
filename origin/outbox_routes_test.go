package origin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/outbox"
	"github.com/waitroom/waitroom/origin/payment"
)

// site is a receiver of booking events: it verifies every signature and
// answers 502 while down.
type site struct {
	mu      sync.Mutex
	down    bool
	got     []map[string]any
	badSigs int
	now     func() time.Time
}

var eventsSecret = []byte("whsec_events_0123456789")

func (s *site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := outbox.Verify(r.Header.Get(outbox.SignatureHeader), body, eventsSecret, s.now(), outbox.DefaultTolerance); err != nil {
		s.badSigs++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if s.down {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	var ev map[string]any
	if err := json.Unmarshal(body, &ev); err == nil {
		s.got = append(s.got, ev)
	}
	w.WriteHeader(http.StatusNoContent)
}

type outboxEventJSON struct {
	ID        string         `json:"id"`
	Type      string         `json:"type"`
	Booking   string         `json:"booking"`
	Status    string         `json:"status"`
	Attempts  int            `json:"attempts"`
	LastError string         `json:"last_error"`
	DeadAt    *string        `json:"dead_at"`
	Body      map[string]any `json:"body"`
}

// TestBookingEventsGivenUpAndSentAgain: a paid booking's event goes to the
// site, signed; given up on while the site is down, it is listed by the
// admin route and sent again through the redelivery route.
func TestBookingEventsGivenUpAndSentAgain(t *testing.T) {
	c := newClock()
	st := &site{down: true, now: c.Now}
	rcv := httptest.NewServer(st)
	t.Cleanup(rcv.Close)
	h := newPayHarness(t, payOptions{clock: c, outbox: true, config: func(cfg *origin.Config) {
		cfg.Events = outbox.Config{URL: rcv.URL, Secret: eventsSecret, MaxAttempts: 2}
	}})
	ev := h.createEvent(map[string]any{"capacity": 10})
	hold := h.holdOne(ev.ID, "ann", 2)
	b := h.mustBook(ev.ID, "ann", hold.HoldID, payment.MethodVisa)
	require.Equal(t, "confirmed", h.settled(ev.ID, "ann", b.BookingID).Status)

	for range 2 {
		c.Advance(time.Hour) // past any backoff
		_, err := h.srv.DeliverEventsOnce(t.Context())
		require.NoError(t, err)
	}

	res := h.do(http.MethodGet, "/v1/admin/outbox?status=dead", nil, nil)
	assert.Equal(t, http.StatusUnauthorized, res.status)
	res = h.do(http.MethodGet, "/v1/admin/outbox?status=pending", nil, admin())
	assert.Equal(t, http.StatusBadRequest, res.status)
	assert.Equal(t, "invalid_request", res.errorCode(t))
	res = h.do(http.MethodGet, "/v1/admin/outbox?status=dead&limit=0", nil, admin())
	assert.Equal(t, http.StatusBadRequest, res.status)
	res = h.do(http.MethodGet, "/v1/admin/outbox?status=dead", nil, admin())
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	var list struct {
		Events []outboxEventJSON `json:"events"`
	}
	res.json(t, &list)
	require.Len(t, list.Events, 1)
	dead := list.Events[0]
	assert.Equal(t, "booking.confirmed", dead.Type)
	assert.Equal(t, b.BookingID, dead.Booking)
	assert.Equal(t, "dead", dead.Status)
	assert.Equal(t, 2, dead.Attempts)
	assert.Equal(t, "answered 502", dead.LastError)
	assert.NotNil(t, dead.DeadAt)
	assert.True(t, strings.HasPrefix(dead.ID, "evt_"))
	assert.Equal(t, dead.ID, dead.Body["id"])
	data, _ := dead.Body["data"].(map[string]any)
	assert.Equal(t, b.BookingID, data["booking"])
	assert.Equal(t, "ann", data["user"])
	assert.EqualValues(t, 180000, data["amount"])
	assert.Len(t, data["tickets"], 2)

	res = h.do(http.MethodPost, "/v1/admin/outbox/evt_nosuch/redelivery", nil, admin())
	assert.Equal(t, http.StatusNotFound, res.status)
	assert.Equal(t, "not_found", res.errorCode(t))
	// Ids the ledger's text column could not hold (NUL, not UTF-8) are no
	// event's either: 404, never a 503 to be retried for ever.
	for _, id := range []string{"evt_%00", "evt_%ff"} {
		res = h.do(http.MethodPost, "/v1/admin/outbox/"+id+"/redelivery", nil, admin())
		assert.Equal(t, http.StatusNotFound, res.status, "%s: %s", id, res.body)
		assert.Equal(t, "not_found", res.errorCode(t), id)
		assert.Empty(t, res.header.Get("Retry-After"), id)
	}
	res = h.do(http.MethodPost, "/v1/admin/outbox/"+dead.ID+"/redelivery", nil, nil)
	assert.Equal(t, http.StatusUnauthorized, res.status)
	res = h.do(http.MethodPost, "/v1/admin/outbox/"+dead.ID+"/redelivery", nil, admin())
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	var again outboxEventJSON
	res.json(t, &again)
	assert.Equal(t, "pending", again.Status)
	assert.Zero(t, again.Attempts)
	res = h.do(http.MethodPost, "/v1/admin/outbox/"+dead.ID+"/redelivery", nil, admin())
	assert.Equal(t, http.StatusConflict, res.status)
	assert.Equal(t, "not_dead", res.errorCode(t))

	st.mu.Lock()
	st.down = false
	st.mu.Unlock()
	p, err := h.srv.DeliverEventsOnce(t.Context())
	require.NoError(t, err)
	assert.Equal(t, outbox.Pass{Taken: 1, Delivered: 1}, p)
	st.mu.Lock()
	defer st.mu.Unlock()
	require.Len(t, st.got, 1)
	assert.Equal(t, dead.ID, st.got[0]["id"])
	assert.Equal(t, "booking.confirmed", st.got[0]["type"])
	assert.Zero(t, st.badSigs)

	metrics := string(h.metrics().body)
	assert.Contains(t, metrics, "waitroom_origin_events_delivered_total 1")
	assert.Contains(t, metrics, "waitroom_origin_events_dead_total 1")
	assert.Contains(t, metrics, "waitroom_origin_events_retried_total 1")
}

// TestRedeliveryWithEventsOff: without ORIGIN_EVENTS_URL nothing would send
// the event again: the route says so.
func TestRedeliveryWithEventsOff(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	res := h.do(http.MethodPost, "/v1/admin/outbox/evt_x/redelivery", nil, admin())
	assert.Equal(t, http.StatusServiceUnavailable, res.status)
	assert.Equal(t, "events_disabled", res.errorCode(t))
	res = h.do(http.MethodGet, "/v1/admin/outbox?status=dead", nil, admin())
	assert.Equal(t, http.StatusOK, res.status)
	assert.JSONEq(t, `{"events":[]}`, string(res.body))
}
