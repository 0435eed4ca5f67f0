package outbox_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/outbox"
)

var (
	saleStart = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	secret    = []byte("whsec_0123456789abcdef")
)

// sale is a ledger with the outbox on and an event to book.
type sale struct {
	t      *testing.T
	l      *ledger.Ledger
	ev     ledger.Event
	writer *ledger.ConfirmWriter
	// start is when its bookings are made.
	start time.Time
}

func newSale(t *testing.T, dbURL string) *sale { return newSaleAt(t, dbURL, saleStart) }

func newSaleAt(t *testing.T, dbURL string, saleStart time.Time) *sale {
	t.Helper()
	ctx := context.Background()
	l, err := ledger.Open(ctx, dbURL, ledger.Options{Outbox: true})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	ev, err := l.CreateEvent(ctx, ledger.Event{ID: testenv.EventID(), Name: "outbox", Capacity: 10_000, Sellable: 10_000,
		Price: 100, Currency: "inr", HoldTTLSeconds: 600, MaxPerUser: 4, CreatedAt: saleStart})
	require.NoError(t, err)
	return &sale{t: t, l: l, ev: ev, writer: ledger.NewConfirmWriter(l), start: saleStart}
}

// confirm books a seat and confirms the booking as a paid one is: one
// booking.confirmed event.
func (s *sale) confirm() string {
	s.t.Helper()
	ctx := context.Background()
	h := ledger.Hold{ID: uuid.Must(uuid.NewV7()).String(), EventID: s.ev.ID, UserID: "u-" + uuid.NewString(), Quantity: 1,
		Amount: 100, Status: ledger.StatusPending, ExpiresAt: s.start.Add(10 * time.Minute), CreatedAt: s.start,
		UpdatedAt: s.start, IdempotencyKey: uuid.NewString(), RequestDigest: "d", Response: []byte("{}\n")}
	_, err := s.l.InsertHold(ctx, h, s.start)
	require.NoError(s.t, err)
	b, err := s.l.Bookings().Insert(ctx, ledger.NewBooking{ID: uuid.NewString(), HoldID: h.ID, EventID: s.ev.ID,
		UserID: h.UserID, Quantity: 1, Amount: 100, Currency: "inr", Provider: "fakepay", PaymentMethod: "pm_card_visa",
		IdempotencyKey: uuid.NewString(), RequestDigest: "d", CreatedAt: s.start})
	require.NoError(s.t, err)
	require.NoError(s.t, s.writer.Confirm(ctx, ledger.Confirmation{HoldID: h.ID, BookingID: b.ID, PaymentID: "pay_" + b.ID,
		EventID: s.ev.ID, Now: s.start, Sign: func(seats []int32, _ []string) ([]string, error) {
			codes := make([]string, len(seats))
			for i, n := range seats {
				codes[i] = b.ID + "/" + strconv.Itoa(int(n))
			}
			return codes, nil
		}}))
	return b.ID
}

// cancel cancels a confirmed booking, with no refund due, and voids its
// ticket: booking.cancelled and ticket.voided.
func (s *sale) cancel(id string) {
	s.t.Helper()
	ctx := context.Background()
	require.NoError(s.t, s.l.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		if _, _, err := tx.Bookings().Cancel(ctx, id, "cancelled_by_buyer", "", s.start.Add(time.Second)); err != nil {
			return err
		}
		return tx.VoidTickets(ctx, id, s.ev.ID)
	}))
}

// received is an event as the site got it.
type received struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Booking string `json:"booking"`
	} `json:"data"`
}

// receiver is the site: it checks every signature, dedups by event id, and
// answers what answer says (200 when nil).
type receiver struct {
	t   *testing.T
	srv *httptest.Server
	now func() time.Time

	mu sync.Mutex
	// answer picks the status of the n-th request (from 1); 0 leaves the
	// request unanswered until the client gives up.
	answer func(n int, ev received) int
	n      int
	// got is every acknowledged event, in the order acknowledged; seen
	// counts the requests per event id.
	got     []received
	seen    map[string]int
	badSigs int
	// log is every request and its answer, in order.
	log []request
	// arrived, when set, is told of every request as it arrives; hold, when
	// set, holds back every 200 until it is closed.
	arrived chan received
	hold    chan struct{}
}

type request struct {
	ev     received
	status int
}

func newReceiver(t *testing.T, now func() time.Time) *receiver {
	r := &receiver{t: t, now: now, seen: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	var ev received
	if err := outbox.Verify(req.Header.Get(outbox.SignatureHeader), body, secret, r.now(), outbox.DefaultTolerance); err != nil {
		r.mu.Lock()
		r.badSigs++
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.n++
	r.seen[ev.ID]++
	status := http.StatusOK
	if r.answer != nil {
		status = r.answer(r.n, ev)
	}
	r.log = append(r.log, request{ev: ev, status: status})
	if status == http.StatusOK && !r.acked(ev.ID) {
		r.got = append(r.got, ev)
	}
	hold := r.hold
	r.mu.Unlock()
	if r.arrived != nil {
		r.arrived <- ev
	}
	if status == http.StatusOK && hold != nil {
		<-hold // a slow answer
	}
	if status == 0 {
		<-req.Context().Done() // never answered: the sender's timeout ends it
		return
	}
	w.WriteHeader(status)
}

func (r *receiver) acked(id string) bool {
	for _, ev := range r.got {
		if ev.ID == id {
			return true
		}
	}
	return false
}

func (r *receiver) events() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func (r *receiver) requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// setAnswer sets how the site answers.
func (r *receiver) setAnswer(f func(n int, ev received) int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = f
}

// seenCounts is how many requests each event id got.
func (r *receiver) seenCounts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.seen))
	for k, v := range r.seen {
		out[k] = v
	}
	return out
}
