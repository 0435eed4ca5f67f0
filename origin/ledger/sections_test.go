package ledger

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin/seatmap"
)

// sectionEvent creates an event whose seat map has a reserved section of 4
// seats and the general-admission section GA-East of capacity places.
func sectionEvent(t *testing.T, l *Ledger, capacity int64) Event {
	t.Helper()
	m := seatmap.Map{Sections: []seatmap.Section{
		{ID: "A", Price: 100, Rows: []seatmap.Row{{ID: "1", Seats: 4}}},
		{ID: "GA-East", Price: 50, Capacity: capacity},
	}}
	ev, err := l.CreateEvent(context.Background(), Event{ID: testenv.EventID(), Name: "sections", Capacity: m.Capacity(),
		Sellable: m.Capacity(), Price: 50, Currency: "inr", HoldTTLSeconds: 60, MaxPerUser: 4, CreatedAt: writerNow, Seating: &m})
	require.NoError(t, err)
	return ev
}

func sectionRow(event int64, user string, qty int64) Hold {
	h := pendingRow(event, user, "k-"+user)
	h.Quantity, h.Section = qty, "GA-East"
	return h
}

// buckets reads the section's buckets' places left, by bucket.
func buckets(t *testing.T, l *Ledger, event int64) []int64 {
	t.Helper()
	rows, err := l.Pool().Query(context.Background(),
		`SELECT remaining::bigint FROM ga_inventory WHERE event_id = $1 AND section = 'GA-East' ORDER BY bucket`, event)
	require.NoError(t, err)
	var out []int64
	for rows.Next() {
		var n int64
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}

func setBuckets(t *testing.T, l *Ledger, event int64, left ...int64) {
	t.Helper()
	for b, n := range left {
		_, err := l.Pool().Exec(context.Background(),
			`UPDATE ga_inventory SET remaining = $3 WHERE event_id = $1 AND section = 'GA-East' AND bucket = $2`, event, b, n)
		require.NoError(t, err)
	}
}

func countOf(ns []int64, v int64) (n int) {
	for _, x := range ns {
		if x == v {
			n++
		}
	}
	return n
}

func sum(ns []int64) (s int64) {
	for _, n := range ns {
		s += n
	}
	return s
}

func TestSectionBuckets(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	ev := sectionEvent(t, l, 400)
	assert.Equal(t, int64(404), ev.Capacity)
	got := buckets(t, l, ev.ID)
	require.Len(t, got, 10, "400 places for parties of up to 4: the most buckets")
	assert.Equal(t, int64(400), sum(got))

	// A hold's places come out of one bucket, every other left alone.
	_, err := l.InsertSectionHold(ctx, sectionRow(ev.ID, "eve", 3), writerNow)
	require.NoError(t, err)
	got = buckets(t, l, ev.ID)
	assert.Equal(t, int64(397), sum(got))
	assert.Equal(t, 9, countOf(got, 40), "%v", got)
	_, err = l.ReleaseHold(ctx, mustLive(t, l, ev.ID, "eve").ID, writerNow, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, 10, countOf(buckets(t, l, ev.ID), 40), "and go back to it")

	// One bucket has the places: only it is touched.
	setBuckets(t, l, ev.ID, 1, 0, 0, 3, 0, 0, 0, 0, 0, 0)
	_, err = l.InsertSectionHold(ctx, sectionRow(ev.ID, "ann", 3), writerNow)
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, buckets(t, l, ev.ID))

	// No bucket has them alone: taken across buckets.
	setBuckets(t, l, ev.ID, 1, 1, 0, 0, 1, 0, 0, 2, 0, 0)
	_, err = l.InsertSectionHold(ctx, sectionRow(ev.ID, "bob", 4), writerNow)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, buckets(t, l, ev.ID))
	var from []int32
	require.NoError(t, l.Pool().QueryRow(ctx, `SELECT ga_buckets FROM holds WHERE user_id = 'bob' AND event_id = $1`, ev.ID).Scan(&from))
	assert.Equal(t, []int32{0, 1, 4, 7}, from, "the bucket of each place")

	// Every bucket short: nothing is written, nothing taken.
	_, err = l.InsertSectionHold(ctx, sectionRow(ev.ID, "cat", 2), writerNow)
	var short *SectionSoldOutError
	require.ErrorAs(t, err, &short)
	assert.Equal(t, int64(1), short.Left)
	assert.Equal(t, []int64{0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, buckets(t, l, ev.ID))
	_, err = l.LiveHoldOfUser(ctx, ev.ID, "cat")
	assert.ErrorIs(t, err, ErrNotFound)

	// Holds that end give their places back where they came from; a hold
	// past its expiry counts as free when the buckets fall short.
	_, err = l.ReleaseHold(ctx, mustLive(t, l, ev.ID, "bob").ID, writerNow, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 1, 0, 0, 1, 0, 0, 2, 0, 0}, buckets(t, l, ev.ID))
	setBuckets(t, l, ev.ID, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
	lapsed := writerNow.Add(11 * time.Minute)
	_, err = l.InsertSectionHold(ctx, sectionRow(ev.ID, "dan", 4), lapsed)
	require.NoError(t, err, "ann's 3 places, lapsed, make up the 4")
	assert.Equal(t, StatusExpired, mustHold(t, l, mustKey(t, l, ev.ID, "ann")).Status)
	assert.Equal(t, int64(2+3-4), sum(buckets(t, l, ev.ID)))

	audit, err := l.AuditSections(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, []SectionAudit{{Section: "GA-East", Capacity: 400, Remaining: 1, Taken: 4}}, audit,
		"the buckets were set by hand above: the places they lost stay lost")
}

func mustLive(t *testing.T, l *Ledger, event int64, user string) Hold {
	t.Helper()
	h, err := l.LiveHoldOfUser(context.Background(), event, user)
	require.NoError(t, err)
	return h
}

func mustKey(t *testing.T, l *Ledger, event int64, user string) string {
	t.Helper()
	h, err := l.HoldByKey(context.Background(), event, user, "k-"+user)
	require.NoError(t, err)
	return h.ID
}

func mustHold(t *testing.T, l *Ledger, id string) Hold {
	t.Helper()
	h, err := l.Hold(context.Background(), id)
	require.NoError(t, err)
	return h
}

// TestConcurrentSectionHoldsNeverOversell races many holds of 1–4 places
// for a section of 150, with reapers ending lapsed ones meanwhile: the
// ledger never has more places taken than the section has, and the
// buckets always account for every place.
func TestConcurrentSectionHoldsNeverOversell(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	ev := sectionEvent(t, l, 150)
	var wg sync.WaitGroup
	var mu sync.Mutex
	held, refused := int64(0), 0
	for i := range 120 {
		wg.Go(func() {
			h := sectionRow(ev.ID, fmt.Sprintf("u%d", i), int64(1+i%4))
			if i%5 == 0 {
				h.ExpiresAt = writerNow.Add(-time.Second) // lapsed at once: the reapers end it
			}
			_, err := l.InsertSectionHold(ctx, h, writerNow)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				held += h.Quantity
			case assert.ErrorIs(t, err, ErrSectionSoldOut):
				refused++
			}
		})
		if i%20 == 0 {
			wg.Go(func() {
				_, err := l.ExpireDue(ctx, writerNow, time.Time{}, 100)
				assert.NoError(t, err)
			})
		}
	}
	wg.Wait()
	assert.Greater(t, refused, 0, "more was asked for than the section has")
	_, err := l.ExpireDue(ctx, writerNow, time.Time{}, 1000)
	require.NoError(t, err)
	audit, err := l.AuditSections(ctx, ev.ID)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	a := audit[0]
	assert.LessOrEqual(t, a.Taken, int64(150), "never more places than the section has")
	assert.Equal(t, a.Capacity, a.Remaining+a.Taken, "every place is in a bucket or a hold: %+v", a)
	counts, err := l.SectionCounts(ctx, ev.ID, writerNow)
	require.NoError(t, err)
	assert.Equal(t, a.Taken, counts["GA-East"])
	assert.LessOrEqual(t, a.Taken, held)
}

// TestSectionHoldOutlivesItsDeadlock makes a new hold of a section the
// victim of a deadlock the ledger cannot order away: the reaper ends the
// user's lapsed hold (its places going back to their bucket) while the
// user's new hold, with another bucket taken, waits on the unique index
// for that very row. PostgreSQL rolls the new hold back; the ledger writes
// it again, and the buyer gets the place.
func TestSectionHoldOutlivesItsDeadlock(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ev := sectionEvent(t, l, 150)
	// Two places, in two buckets: the lapsed hold has one, the new hold
	// can only take the other, and no third bucket lets its second try
	// slip past the reaper.
	require.Len(t, buckets(t, l, ev.ID), 4)
	setBuckets(t, l, ev.ID, 1, 1, 0, 0)
	lapsed := sectionRow(ev.ID, "ann", 1)
	lapsed.ExpiresAt = writerNow.Add(-time.Second)
	_, err := l.InsertSectionHold(ctx, lapsed, writerNow)
	require.NoError(t, err)
	var lapsedBucket int32
	require.NoError(t, l.Pool().QueryRow(ctx, `SELECT ga_buckets[1] FROM holds WHERE id = $1`, lapsed.ID).Scan(&lapsedBucket))
	other := 1 - lapsedBucket

	// The reaper's side, stopped halfway: the lapsed hold ended, its
	// bucket locked by the trigger. It waits long before it looks for a
	// deadlock, so the new hold is the one PostgreSQL rolls back.
	reaper, err := l.Pool().Begin(ctx)
	require.NoError(t, err)
	defer reaper.Rollback(context.Background())
	_, err = reaper.Exec(ctx, `SET LOCAL deadlock_timeout = '1min'`)
	require.NoError(t, err)
	_, err = reaper.Exec(ctx, `UPDATE holds SET status = 'expired', updated_at = $2 WHERE id = $1`, lapsed.ID, writerNow)
	require.NoError(t, err)

	fresh := sectionRow(ev.ID, "ann", 1)
	fresh.IdempotencyKey = "k-ann-again"
	done := make(chan error, 1)
	go func() {
		_, err := l.InsertSectionHold(ctx, fresh, writerNow)
		done <- err
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		err := l.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO holds%')`).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 10*time.Millisecond, "the new hold waits on the unique index for the reaper")

	// The reaper wants the new hold's bucket too: a cycle. Its statement
	// can only return once the new hold's transaction is gone, and that
	// cannot commit while it waits for the reaper.
	_, err = reaper.Exec(ctx, `SELECT 1 FROM ga_inventory WHERE event_id = $1 AND section = 'GA-East' AND bucket = $2 FOR UPDATE`, ev.ID, other)
	require.NoError(t, err)
	select {
	case err := <-done:
		t.Fatalf("the new hold ended before the reaper did: %v", err)
	default:
	}
	require.NoError(t, reaper.Commit(ctx))

	require.NoError(t, <-done, "the deadlock's victim is written again")
	assert.Equal(t, StatusPending, mustHold(t, l, fresh.ID).Status)
	assert.Equal(t, StatusExpired, mustHold(t, l, lapsed.ID).Status)
	assert.Equal(t, int64(1), sum(buckets(t, l, ev.ID)), "the lapsed hold's place is back, the new hold has one")
}
