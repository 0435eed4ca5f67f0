package ledger

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

var writerNow = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

func testLedger(t *testing.T, dbURL string) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), dbURL, Options{})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	return l
}

func pendingRow(event int64, user, key string) Hold {
	return Hold{
		ID: uuid.Must(uuid.NewV7()).String(), EventID: event, UserID: user, Quantity: 1, Amount: 100,
		Status: StatusPending, ExpiresAt: writerNow.Add(10 * time.Minute), CreatedAt: writerNow, UpdatedAt: writerNow,
		IdempotencyKey: key, RequestDigest: "d", Response: []byte("{}\n"),
	}
}

type writeResult struct {
	outcome WriteOutcome
	err     error
}

// writeBatched writes first alone, held back by the gate, and rows behind
// it, so that rows are written as one batch. Each row's write gets ctxOf(i)
// (a 5 s deadline when nil).
func writeBatched(t *testing.T, w *HoldWriter, first Hold, rows []Hold, ctxOf func(i int) context.Context) (writeResult, []writeResult) {
	t.Helper()
	gate := gateBatches(w)
	write := func(ctx context.Context, h Hold) writeResult {
		if ctx == nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
		}
		o, err := w.Write(ctx, h, writerNow)
		return writeResult{o, err}
	}
	var firstRes writeResult
	results := make([]writeResult, len(rows))
	var wg sync.WaitGroup
	wg.Go(func() { firstRes = write(nil, first) })
	gate.WaitQueued(t, 0)
	for i, h := range rows {
		var ctx context.Context
		if ctxOf != nil {
			ctx = ctxOf(i)
		}
		wg.Go(func() { results[i] = write(ctx, h) })
	}
	gate.WaitQueued(t, len(rows))
	gate.Open()
	wg.Wait()
	require.Equal(t, []int{1, len(rows)}, gate.Sizes(), "the rows went in one batch")
	return firstRes, results
}

func countHolds(t *testing.T, l *Ledger, event int64) int {
	t.Helper()
	var n int
	require.NoError(t, l.pool.QueryRow(context.Background(), `SELECT count(*) FROM holds WHERE event_id = $1`, event).Scan(&n))
	return n
}

func TestHoldWriterBatchesConcurrentRows(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	w := NewHoldWriter(l)
	event := testenv.EventID()
	rows := make([]Hold, 50)
	for i := range rows {
		rows[i] = pendingRow(event, uuid.NewString(), "k")
	}
	first, results := writeBatched(t, w, pendingRow(event, "first", "k"), rows, nil)
	require.NoError(t, first.err)
	for i, r := range results {
		require.NoError(t, r.err)
		assert.Equal(t, WriteDone, r.outcome)
		got, err := l.Hold(context.Background(), rows[i].ID)
		require.NoError(t, err, "a row acknowledged is committed")
		assert.Equal(t, rows[i].UserID, got.UserID)
	}
	assert.Equal(t, 51, countHolds(t, l, event))
}

func TestHoldWriterConflictsAreWrittenAlone(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	event := testenv.EventID()
	insert := func(h Hold) Hold {
		_, err := l.InsertHold(ctx, h, writerNow)
		require.NoError(t, err)
		return h
	}
	insert(pendingRow(event, "live", "a"))
	lapsed := pendingRow(event, "lapsed", "a")
	lapsed.ExpiresAt = writerNow.Add(-time.Minute)
	insert(lapsed)
	released := insert(pendingRow(event, "released", "k"))
	_, err := l.ReleaseHold(ctx, released.ID, writerNow, time.Time{})
	require.NoError(t, err)

	rows := []Hold{
		pendingRow(event, "live", "b"),     // the ledger has a live hold of this user
		pendingRow(event, "lapsed", "b"),   // its hold lapsed: marked expired, this one goes in
		pendingRow(event, "released", "k"), // this key made a hold already
		pendingRow(event, "twice", "x"),    // two holds of one user in one batch
		pendingRow(event, "twice", "y"),
	}
	for range 20 {
		rows = append(rows, pendingRow(event, uuid.NewString(), "k"))
	}
	_, results := writeBatched(t, NewHoldWriter(l), pendingRow(event, "first", "k"), rows, nil)

	assert.ErrorIs(t, results[0].err, ErrLiveHoldExists)
	assert.NoError(t, results[1].err)
	assert.ErrorIs(t, results[2].err, ErrDuplicateKey)
	assert.ElementsMatch(t, []bool{true, false}, []bool{results[3].err == nil, results[4].err == nil}, "one of the two goes in")
	assert.ErrorIs(t, errors.Join(results[3].err, results[4].err), ErrLiveHoldExists)
	for _, r := range results[5:] {
		assert.NoError(t, r.err, "the rest of the batch is not held up")
	}
	old, err := l.Hold(ctx, lapsed.ID)
	require.NoError(t, err)
	assert.Equal(t, StatusExpired, old.Status)
	// first, 3 earlier holds, lapsed, one of twice, 20 others
	assert.Equal(t, 1+3+1+1+20, countHolds(t, l, event))
}

func TestHoldWriterRefusedBatchIsWrittenRowByRow(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	event := testenv.EventID()
	rows := make([]Hold, 10)
	for i := range rows {
		rows[i] = pendingRow(event, uuid.NewString(), "k")
	}
	rows[3].Quantity = 0 // breaks a CHECK: the server refuses the whole statement
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, results := writeBatched(t, NewHoldWriter(l), pendingRow(event, "first", "k"), rows, func(i int) context.Context {
		if i == 5 {
			return gone // its request's deadline passed while it was queued
		}
		return nil
	})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, results[3].err, &pgErr)
	assert.Equal(t, "23514", pgErr.Code)
	assert.Equal(t, WriteFailed, results[3].outcome)
	assert.ErrorIs(t, results[5].err, context.Canceled)
	assert.Equal(t, WriteFailed, results[5].outcome, "not sent")
	for i, r := range results {
		if i != 3 && i != 5 {
			assert.NoError(t, r.err, "row %d fails only if it is at fault", i)
		}
	}
	assert.Equal(t, 1+8, countHolds(t, l, event))
}

func TestHoldWriterFailedBatchFailsEveryRow(t *testing.T) {
	base := testenv.Postgres(t)
	dbURL, proxy := testenv.Proxied(t, base)
	l := testLedger(t, dbURL)
	event := testenv.EventID()
	rows := make([]Hold, 10)
	for i := range rows {
		rows[i] = pendingRow(event, uuid.NewString(), "k")
	}
	w := NewHoldWriter(l)
	gate := gateBatches(w)
	var wg sync.WaitGroup
	results := make([]writeResult, len(rows))
	for i, h := range append([]Hold{pendingRow(event, "first", "k")}, rows...) {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			o, err := w.Write(ctx, h, writerNow)
			if i > 0 {
				results[i-1] = writeResult{o, err}
			}
		})
		if i == 0 {
			gate.WaitQueued(t, 0)
		}
	}
	gate.WaitQueued(t, len(rows))
	proxy.Cut()
	gate.Open()
	wg.Wait()
	require.Equal(t, []int{1, len(rows)}, gate.Sizes())
	for _, r := range results {
		require.Error(t, r.err)
		assert.NotEqual(t, WriteDone, r.outcome)
		assert.Equal(t, results[0].outcome, r.outcome, "one outcome for the whole batch")
	}
	proxy.Restore()
	assert.Zero(t, countHolds(t, testLedger(t, base), event))
}

func TestHoldRowsPastTheirDeadlineAreNotWritten(t *testing.T) {
	l := testLedger(t, testenv.Postgres(t))
	ctx := context.Background()
	event := testenv.EventID()
	// The server's clock decides: a row it gets after its deadline is not
	// written, whatever the client thinks.
	past, future := time.Now().Add(-time.Millisecond), time.Now().Add(time.Minute)
	rows := []Hold{pendingRow(event, "late", "k"), pendingRow(event, "in-time", "k"), pendingRow(event, "unbounded", "k")}
	inserted, outcome, err := l.InsertHolds(ctx, rows, []*time.Time{&past, &future, nil})
	require.NoError(t, err)
	assert.Equal(t, WriteDone, outcome)
	assert.Equal(t, []bool{false, true, true}, inserted)
	written, err := l.HoldsWritten(ctx, []string{rows[0].ID, rows[1].ID, rows[2].ID})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{rows[1].ID, rows[2].ID}, slices.Collect(maps.Keys(written)))
}

// batchGate holds the first batch of hold rows back, so that the rows
// queued meanwhile go into the next batch together: batching made
// deterministic, whatever the machine's speed.
// batchWriter is a group-commit writer a batchGate holds back.
type batchWriter interface {
	OnBatch(func(size int))
	Queued() int
}

type batchGate struct {
	w    batchWriter
	open chan struct{}

	mu    sync.Mutex
	sizes []int
}

func gateBatches(w batchWriter) *batchGate {
	g := &batchGate{w: w, open: make(chan struct{})}
	w.OnBatch(func(n int) {
		g.mu.Lock()
		g.sizes = append(g.sizes, n)
		first := len(g.sizes) == 1
		g.mu.Unlock()
		if first {
			<-g.open
		}
	})
	return g
}

// WaitQueued waits until the first batch is held back and n rows wait
// behind it.
func (g *batchGate) WaitQueued(t *testing.T, n int) {
	t.Helper()
	for range 10_000 {
		g.mu.Lock()
		held := len(g.sizes) > 0
		g.mu.Unlock()
		if held && g.w.Queued() >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d writes never queued behind the first batch", n)
}

func (g *batchGate) Open() { close(g.open) }

func (g *batchGate) Sizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sizes...)
}
