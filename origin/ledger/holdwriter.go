package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit of the ledger rows of new holds. Written one INSERT and one
// commit each, thousands of holds a second kept Postgres busy beginning and
// committing one-row transactions, and every request held a pool connection
// for a WAL flush of its own. The HoldWriter puts the rows of holds made at
// the same moment into one multi-row INSERT and one commit. Each request
// still waits until its own row is committed (or known not to be) before it
// answers, so the durability and the compensation of a hold are exactly
// those of a write of its own:
//
//   - a row the batch skipped for a unique conflict (the user's live hold,
//     the Idempotency-Key) or its deadline is written again alone by its
//     request, with InsertHold, which tells the cases apart as before;
//   - a batch the server refused (certainly not applied) is written again
//     row by row, so one bad row fails only its own hold;
//   - a batch that failed otherwise gives every row the same outcome,
//     failed (compensated) or uncertain (resolved later), as InsertHold
//     would have for each.
//
// There is no timer: a batch takes whatever queued while the batches before
// it were being written, so a lone hold is written at once and a busy origin
// writes bigger batches. Batches run on goroutines started when a row is
// queued and ending when the queue is empty: there is nothing to start or
// stop, and a row queued while the server shuts down is still written.
type HoldWriter struct {
	ledger *Ledger
	// maxBatch bounds the rows of one INSERT; maxInFlight the batches being
	// written at once (each on a pool connection of its own). One at a time
	// was measured best: on a busy Postgres, fewer and bigger commits cost
	// less than overlapping ones, and the batch grows with the load.
	maxBatch, maxInFlight int
	// onBatch, when set (tests), is called with each batch before it is
	// written.
	onBatch func([]*holdWrite)

	mu       sync.Mutex
	queue    []*holdWrite
	inFlight int
}

const (
	defaultHoldBatch   = 256
	defaultHoldWriters = 1
)

// NewHoldWriter writes the rows of new holds into l.
func NewHoldWriter(l *Ledger) *HoldWriter {
	return &HoldWriter{ledger: l, maxBatch: defaultHoldBatch, maxInFlight: defaultHoldWriters}
}

// OnBatch has w call f with the size of each batch before it is written,
// and f may hold it back: for tests that need batches of a known shape.
// Set it before any write.
func (w *HoldWriter) OnBatch(f func(size int)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onBatch = func(b []*holdWrite) { f(len(b)) }
}

// Queued is how many rows wait for a batch (for tests).
func (w *HoldWriter) Queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

// holdWrite is one queued row and, once done is closed, its outcome.
type holdWrite struct {
	ctx  context.Context
	row  Hold
	done chan struct{}

	outcome WriteOutcome
	err     error
	// alone: the batch did not write the row; its request writes it alone.
	alone bool
}

// Write writes the row of a new hold, as Ledger.InsertHold does, in a batch
// with the rows queued at the same time. ctx bounds the write: a row still
// queued when it ends is not sent (WriteFailed). write always waits for the
// outcome, whatever ctx does, since the seats depend on it.
func (w *HoldWriter) Write(ctx context.Context, row Hold, now time.Time) (WriteOutcome, error) {
	hw := &holdWrite{ctx: ctx, row: row, done: make(chan struct{})}
	w.mu.Lock()
	w.queue = append(w.queue, hw)
	if w.inFlight < w.maxInFlight {
		w.inFlight++
		go w.run()
	}
	w.mu.Unlock()
	<-hw.done
	if hw.alone {
		return w.ledger.InsertHold(ctx, row, now)
	}
	return hw.outcome, hw.err
}

// run writes batches until the queue is empty.
func (w *HoldWriter) run() {
	for {
		w.mu.Lock()
		n := min(len(w.queue), w.maxBatch)
		if n == 0 {
			w.inFlight--
			w.mu.Unlock()
			return
		}
		batch := w.queue[:n:n]
		w.queue = w.queue[n:]
		w.mu.Unlock()
		w.writeBatch(batch)
	}
}

func (w *HoldWriter) writeBatch(batch []*holdWrite) {
	if w.onBatch != nil {
		w.onBatch(batch)
	}
	// Each row carries its own deadline, which the server checks, so no
	// hold's row is written after the bound a rebuild and the resolution of
	// uncertain writes count on; the batch stops waiting at the earliest. A
	// row whose deadline has passed already is not sent.
	var deadline time.Time
	rows := make([]Hold, 0, len(batch))
	deadlines := make([]*time.Time, 0, len(batch))
	send := batch[:0:0]
	for _, hw := range batch {
		if err := hw.ctx.Err(); err != nil {
			hw.finish(WriteFailed, fmt.Errorf("insert hold %s: not sent: %w", hw.row.ID, err))
			continue
		}
		if d, ok := hw.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
		rows = append(rows, hw.row)
		deadlines = append(deadlines, deadlineOf(hw.ctx))
		send = append(send, hw)
	}
	if len(send) == 0 {
		return
	}
	ctx, cancel := untilDeadline(context.Background(), deadline)
	defer cancel()
	inserted, outcome, err := w.ledger.InsertHolds(ctx, rows, deadlines)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		for i, hw := range send {
			if inserted[i] {
				hw.finish(WriteDone, nil)
			} else {
				hw.finishAlone()
			}
		}
	case len(send) > 1 && errors.As(err, &pgErr):
		// Refused by the server, so nothing was written; the fault may be
		// one row's. Each is written alone.
		for _, hw := range send {
			hw.finishAlone()
		}
	default:
		for _, hw := range send {
			hw.finish(outcome, fmt.Errorf("insert hold %s: %w", hw.row.ID, err))
		}
	}
}

func (hw *holdWrite) finish(o WriteOutcome, err error) {
	hw.outcome, hw.err = o, err
	close(hw.done)
}

func (hw *holdWrite) finishAlone() {
	hw.alone = true
	close(hw.done)
}
