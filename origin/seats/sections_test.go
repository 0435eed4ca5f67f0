package seats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seatmap"
)

var sectionsStart = time.Date(2026, 6, 1, 18, 0, 0, 0, time.UTC)

// clock is a protocol clock tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// sectionProtocol is a protocol over fresh Redis and PostgreSQL servers'
// databases, with an event whose seat map is a general-admission section
// GA of capacity places (one bucket in the ledger) beside a reserved row.
func sectionProtocol(t *testing.T, capacity int64) (*Protocol, *Event, *clock) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l, err := ledger.Open(ctx, testenv.Postgres(t), ledger.Options{})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	c := &clock{now: sectionsStart}
	p, err := New(Config{Ledger: l, Redis: testenv.Redis(t), Clock: c.Now})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	m := seatmap.Map{Sections: []seatmap.Section{
		{ID: "A", Price: 100, Rows: []seatmap.Row{{ID: "1", Seats: 2}}},
		{ID: "GA", Price: 50, Capacity: capacity},
	}}
	e, err := p.CreateEvent(ctx, ledger.Event{ID: testenv.EventID(), Name: "sections", Capacity: m.Capacity(),
		Sellable: m.Capacity(), Price: 50, Currency: "inr", HoldTTLSeconds: 60, MaxPerUser: 4, CreatedAt: sectionsStart,
		Seating: &m})
	require.NoError(t, err)
	ev, err := p.Registry().Event(ctx, e.ID)
	require.NoError(t, err)
	return p, ev, c
}

func placeSection(t *testing.T, p *Protocol, ev *Event, user string, qty int64) ledger.Hold {
	t.Helper()
	key := "k-" + user
	res := p.Place(context.Background(), PlaceRequest{Event: ev, User: user, Quantity: qty, Section: "GA", Key: key,
		Digest: "d-" + user, Scope: idem.Scope{Kind: "holds", Event: ev.ID, User: user, Key: key},
		Render: func(ledger.Hold) []byte { return []byte("{}") }})
	require.Equal(t, Held, res.Outcome, "%s's hold of %d places: %+v", user, qty, res)
	return res.Hold
}

// sectionSound checks the section's count in Redis against the ledger's
// live holds, and the ledger's own account of it.
func sectionSound(t *testing.T, p *Protocol, ev *Event, msg string) SectionDrift {
	t.Helper()
	ctx := context.Background()
	inv, err := p.Recovery().CheckInvariant(ctx, ev.ID)
	require.NoError(t, err)
	var ga SectionDrift
	for _, s := range inv.Sections {
		if s.Section == "GA" {
			ga = s
		}
	}
	require.NotNil(t, ga.Remaining, msg)
	assert.Equal(t, *ga.Capacity-*ga.Active, *ga.Remaining,
		"%s: places left in redis == capacity − places of the ledger's live holds (capacity %d, live %d)", msg, *ga.Capacity, *ga.Active)
	assert.Zero(t, inv.Drift, "%s: the event's drift", msg)
	_, err = p.ledger.CheckSections(ctx, ev.ID)
	assert.NoError(t, err, msg)
	return ga
}

var errLedgerStep = errors.New("the ledger step failed")

// TestLapsedConfirmationExpiredByAnotherHold builds the interleaving step
// by step: a hold of a section is confirmed in Redis and its ledger step
// fails (its row stays pending), then lapses; another buyer's hold finds
// the ledger's buckets short (a lapsed hold's places are still counted
// there) and expires the section's lapsed holds itself, that one with
// them. The ledger has its places back; Redis must have them back too,
// once, whatever comes after: the next maintenance pass, the payment's
// retry, another pass.
func TestLapsedConfirmationExpiredByAnotherHold(t *testing.T) {
	p, ev, c := sectionProtocol(t, 4)
	ctx := context.Background()

	// Carol's hold lapses as an abandoned one does: Redis reclaims it, the
	// ledger's row stays pending until someone marks it.
	placeSection(t, p, ev, "carol", 1)
	// Ann's payment lands: Redis confirms her hold, and the ledger step
	// fails after it.
	ann := placeSection(t, p, ev, "ann", 2)
	_, err := p.ConfirmHold(ctx, ann.ID, func(ledger.Tx, ledger.Hold) error { return errLedgerStep })
	require.ErrorIs(t, err, errLedgerStep)
	h, err := p.ledger.Hold(ctx, ann.ID)
	require.NoError(t, err)
	require.Equal(t, ledger.StatusPending, h.Status, "confirmed in redis, pending in the ledger")

	// Both lapse. Redis has 2 places left (ann's stay confirmed there);
	// the ledger's bucket has 1.
	c.Add(2 * time.Minute)
	bob := placeSection(t, p, ev, "bob", 2)
	h, err = p.ledger.Hold(ctx, ann.ID)
	require.NoError(t, err)
	require.Equal(t, ledger.StatusExpired, h.Status, "bob's hold expired the section's lapsed holds")

	// The maintenance pass (the reaper retries what Redis is owed).
	require.NoError(t, p.Releases().RetryReleases(ctx))
	ga := sectionSound(t, p, ev, "after the maintenance pass")
	assert.Equal(t, int64(2), *ga.Remaining, "bob has 2 of the 4")

	// Ann's payment is retried: the ledger has her hold expired, and
	// nothing is given back twice.
	_, err = p.ConfirmHold(ctx, ann.ID, nil)
	require.ErrorIs(t, err, ledger.ErrHoldNotActive)
	require.NoError(t, p.Releases().RetryReleases(ctx))
	ga = sectionSound(t, p, ev, "after the payment's retry")
	assert.Equal(t, int64(2), *ga.Remaining)

	// The places are sold to others, and no more than there are.
	placeSection(t, p, ev, "dan", 2)
	res := p.Place(ctx, PlaceRequest{Event: ev, User: "eve", Quantity: 1, Section: "GA", Key: "k-eve", Digest: "d-eve",
		Scope:  idem.Scope{Kind: "holds", Event: ev.ID, User: "eve", Key: "k-eve"},
		Render: func(ledger.Hold) []byte { return []byte("{}") }})
	assert.Equal(t, SoldOut, res.Outcome, "the section is sold out: %+v", res)
	sectionSound(t, p, ev, "sold out")
	_ = bob
}

// sell confirms h with its booking and tickets, one per place, numbered
// in the confirmation's transaction as a paid booking's are.
func sell(t *testing.T, p *Protocol, h ledger.Hold) string {
	t.Helper()
	ctx := context.Background()
	booking := uuid.NewString()
	_, err := p.ConfirmHold(ctx, h.ID, func(tx ledger.Tx, h ledger.Hold) error {
		now := p.now()
		if _, err := tx.Bookings().Insert(ctx, ledger.NewBooking{ID: booking, HoldID: h.ID, EventID: h.EventID,
			UserID: h.UserID, Quantity: h.Quantity, Amount: h.Amount, Currency: "inr", Provider: "fakepay",
			PaymentMethod: "pm_card_visa", IdempotencyKey: "b-" + h.ID, RequestDigest: "d", CreatedAt: now}); err != nil {
			return err
		}
		if _, ok, err := tx.Bookings().Confirm(ctx, booking, "pay_"+booking, false, "", now); err != nil || !ok {
			return errors.Join(err, errors.New("booking not confirmed"))
		}
		numbers, _, err := tx.SeatsOfHold(ctx, h.EventID, h.ID)
		if err != nil {
			return err
		}
		if int64(len(numbers)) != h.Quantity {
			return fmt.Errorf("%d numbers for %d places", len(numbers), h.Quantity)
		}
		codes := make([]string, len(numbers))
		for i, n := range numbers {
			codes[i] = fmt.Sprintf("%s/%d", booking, n)
		}
		return tx.IssueTickets(ctx, booking, codes, numbers, nil, now)
	})
	require.NoError(t, err)
	return booking
}

// TestConfirmedThenReleasedSectionHold: a sale of a section's places
// ends (a cancellation, a refund at the provider: its hold released and
// its tickets voided in one transaction, then its places returned in
// Redis). Its places and their numbers are free again, in Redis and in
// the ledger alike, and sold again to one buyer each.
func TestConfirmedThenReleasedSectionHold(t *testing.T) {
	p, ev, _ := sectionProtocol(t, 4)
	ctx := context.Background()
	ann := placeSection(t, p, ev, "ann", 3)
	annBooking := sell(t, p, ann)
	ga := sectionSound(t, p, ev, "ann's sale")
	assert.Equal(t, int64(1), *ga.Remaining)

	require.NoError(t, p.ledger.InTx(ctx, time.Time{}, func(tx ledger.Tx) error {
		ok, err := tx.ReleaseConfirmedHold(ctx, ann.ID, p.now())
		if err == nil && !ok {
			err = errors.New("ann's hold was not confirmed")
		}
		if err != nil {
			return err
		}
		return tx.VoidTickets(ctx, annBooking, ev.ID)
	}))
	p.Releases().ReleaseSeats(ctx, ev, ann.ID, inventory.AnyHold)
	ga = sectionSound(t, p, ev, "ann's sale ended")
	assert.Equal(t, int64(4), *ga.Remaining)

	bob := placeSection(t, p, ev, "bob", 4)
	sell(t, p, bob)
	ga = sectionSound(t, p, ev, "bob bought every place")
	assert.Equal(t, int64(0), *ga.Remaining)
	audit, err := p.ledger.CheckSections(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, []ledger.SectionAudit{{Section: "GA", Capacity: 4, Taken: 4, Sold: 4, Numbered: 4, Ticketed: 4}}, audit)
}
