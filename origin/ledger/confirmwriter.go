package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit of confirmations. Each paid booking used to be confirmed in
// a transaction of its own (hold and booking confirmed, seat numbers taken,
// tickets inserted, then the commit), and once the seat numbers stopped
// queueing on the event's row what bounded the confirmations of an event was
// the WAL flush of every one of those commits. The ConfirmWriter confirms
// the bookings paid at the same moment in one transaction: one statement
// that locks and checks all their holds and bookings, one take of seat
// numbers per event, one statement that confirms the ready bookings with
// their tickets (which keeps their holds sold), one commit. Each
// confirmation stays all or nothing, and no confirmation fails another:
//
//   - the statement that locks the holds and bookings checks each item's
//     conditions (its hold pending, its booking waiting for its payment, its
//     deadline not passed, by the server's clock, after the transaction took
//     its lock of the holds table), and only the items that meet them are
//     written; the others are answered with the condition they failed
//     (ErrHoldNotActive, ErrBookingSettled, ErrPastDeadline) and written
//     nothing, as their own transaction would have;
//   - a batch that fails as a whole (the server refused a statement, or
//     too few seat numbers are left for all of it) is rolled back and its
//     items written again one by one, so a fault is only its own item's;
//   - an item whose own step fails outside SQL (its tickets cannot be
//     signed, its seats do not match its quantity) is answered with that
//     fault, and the batch, rolled back, is written again without it;
//   - every caller is answered once the commit's outcome is known, the same
//     outcome for all: committed, failed, or (the answer to the commit lost)
//     ErrUncertain.
//
// Like the HoldWriter there is no timer: a batch takes what queued while the
// batches before it were being written.
type ConfirmWriter struct {
	ledger *Ledger
	// maxBatch bounds the confirmations of one transaction; maxInFlight
	// the transactions under way at once, each on a connection of its own.
	maxBatch, maxInFlight int
	// onBatch, when set (tests), is called with each batch's size before it
	// is written.
	onBatch func(int)

	mu       sync.Mutex
	queue    []*confirmWrite
	inFlight int
}

const (
	defaultConfirmBatch   = 256
	defaultConfirmWriters = 2
)

// ErrBookingSettled: the booking no longer waits for its payment (confirmed,
// failed, cancelled or refunded already).
var ErrBookingSettled = errors.New("booking is no longer waiting for its payment")

// Confirmation is a paid booking to confirm with its hold.
type Confirmation struct {
	HoldID, BookingID string
	// PaymentID is recorded on the booking if it has none yet.
	PaymentID string
	EventID   int64
	// Seated: the event has reserved seats, and the tickets carry those the
	// hold claimed; otherwise seat numbers come from the event's seat blocks.
	Seated bool
	// Now is the confirmation's time.
	Now time.Time
	// Deadline: the confirmation is written only before it, by the server's
	// clock (ErrPastDeadline otherwise); zero for none.
	Deadline time.Time
	// Event is the provider's webhook event that paid the booking, recorded
	// with the confirmation ("" for none; see Bookings.EventSeen).
	Event string
	// Sign signs the booking's ticket codes, one per seat: seats[i] is the
	// seat's number, seatIDs[i] its reserved seat (nil for general
	// admission).
	Sign func(seats []int32, seatIDs []string) ([]string, error)
}

// NewConfirmWriter confirms bookings into l.
func NewConfirmWriter(l *Ledger) *ConfirmWriter {
	return &ConfirmWriter{ledger: l, maxBatch: defaultConfirmBatch, maxInFlight: defaultConfirmWriters}
}

// OnBatch has w call f with the size of each batch before it is written;
// f may hold it back. For tests that need batches of a known shape; set it
// before any confirmation.
func (w *ConfirmWriter) OnBatch(f func(size int)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onBatch = f
}

// Queued is how many confirmations wait for a batch (for tests).
func (w *ConfirmWriter) Queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

// confirmWrite is one queued confirmation and, once done is closed, its
// outcome.
type confirmWrite struct {
	ctx  context.Context
	c    Confirmation
	done chan struct{}
	err  error
}

// Confirm confirms c's hold and booking and issues its tickets, committed
// with the confirmations queued at the same time, and returns once the
// commit's outcome is known. ErrHoldNotActive: the hold is not pending;
// ErrBookingSettled: the booking does not wait for its payment;
// ErrPastDeadline: the server got it after c.Deadline; ErrNoSeatLeft: too
// few seat numbers are left; ErrUncertain: the commit's answer was lost, and
// the server may still apply it until c.Deadline. In every case but the
// last nothing of c was written. ctx bounds the wait of a confirmation not
// sent yet; once sent it is waited for.
func (w *ConfirmWriter) Confirm(ctx context.Context, c Confirmation) error {
	cw := &confirmWrite{ctx: ctx, c: c, done: make(chan struct{})}
	w.mu.Lock()
	w.queue = append(w.queue, cw)
	if w.inFlight < w.maxInFlight {
		w.inFlight++
		go w.run()
	}
	w.mu.Unlock()
	<-cw.done
	return cw.err
}

// run writes batches until the queue is empty.
func (w *ConfirmWriter) run() {
	for {
		w.mu.Lock()
		batch := w.take()
		if len(batch) == 0 {
			w.inFlight--
			w.mu.Unlock()
			return
		}
		onBatch := w.onBatch
		w.mu.Unlock()
		if onBatch != nil {
			onBatch(len(batch))
		}
		w.write(batch)
	}
}

// take takes the next batch off the queue, under w.mu: at most maxBatch
// confirmations, no two of one hold or one booking (the second of a pair
// waits for the next batch, where it finds the first's outcome).
func (w *ConfirmWriter) take() []*confirmWrite {
	var batch, rest []*confirmWrite
	seen := make(map[string]bool, min(len(w.queue), w.maxBatch))
	for _, cw := range w.queue {
		if len(batch) == w.maxBatch || seen[cw.c.HoldID] || seen[cw.c.BookingID] {
			rest = append(rest, cw)
			continue
		}
		seen[cw.c.HoldID], seen[cw.c.BookingID] = true, true
		batch = append(batch, cw)
	}
	w.queue = rest
	return batch
}

// write writes one batch and answers its callers.
func (w *ConfirmWriter) write(batch []*confirmWrite) {
	send := batch[:0:0]
	var latest time.Time
	for _, cw := range batch {
		switch {
		case cw.ctx.Err() != nil:
			cw.finish(fmt.Errorf("confirm booking %s: not sent: %w", cw.c.BookingID, cw.ctx.Err()))
			continue
		case !cw.c.Deadline.IsZero() && !time.Now().Before(cw.c.Deadline):
			cw.finish(fmt.Errorf("confirm booking %s: %w", cw.c.BookingID, ErrPastDeadline))
			continue
		}
		if cw.c.Deadline.After(latest) {
			latest = cw.c.Deadline
		}
		send = append(send, cw)
	}
	if len(send) == 0 {
		return
	}
	// The batch waits as long as its latest deadline: each confirmation's
	// own deadline is checked by the server, so one item's nearer deadline
	// does not cut the others' transaction short.
	ctx, cancel := untilDeadline(context.Background(), latest)
	defer cancel()
	cs := make([]Confirmation, len(send))
	for i, cw := range send {
		cs[i] = cw.c
	}
	errs, err := w.ledger.confirmAll(ctx, cs)
	var pgErr *pgconn.PgError
	var item *itemError
	switch {
	case err == nil:
		for i, cw := range send {
			cw.finish(errs[i])
		}
	case errors.As(err, &item):
		// Rolled back, so nothing was written: the faulty item is answered
		// and the rest written again without it.
		send[item.i].finish(item.err)
		rest := append(send[:item.i:item.i], send[item.i+1:]...)
		if len(rest) > 0 {
			w.write(rest)
		}
	case len(send) > 1 && (errors.As(err, &pgErr) || errors.Is(err, ErrNoSeatLeft)):
		// Rolled back, so nothing was written; the fault may be one
		// item's. Each is written alone.
		for _, cw := range send {
			w.write([]*confirmWrite{cw})
		}
	default:
		for _, cw := range send {
			cw.finish(fmt.Errorf("confirm booking %s: %w", cw.c.BookingID, err))
		}
	}
}

func (cw *confirmWrite) finish(err error) {
	cw.err = err
	close(cw.done)
}

// confirmAll confirms cs in one transaction. errs[i] is why cs[i] was not
// applied (nil: it was, if err is nil). err is the transaction's failure:
// nothing was written, or, ErrUncertain, all of it may have been.
func (l *Ledger) confirmAll(ctx context.Context, cs []Confirmation) (errs []error, err error) {
	var ferr error
	err = pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		errs, ferr = confirmInTx(ctx, Tx{tx}, cs)
		return ferr
	})
	if err != nil && ferr == nil && Classify(err) == WriteUncertain {
		return nil, fmt.Errorf("%w: %w", ErrUncertain, err)
	}
	return errs, err
}

// confirmInTx runs the statements of confirmAll in tx: the items' rows
// locked and checked, their seat numbers taken and their codes signed, and
// every ready booking confirmed with its tickets in one statement.
func confirmInTx(ctx context.Context, tx Tx, cs []Confirmation) ([]error, error) {
	n := len(cs)
	idx, holds, bookings := make([]int32, n), make([]string, n), make([]string, n)
	deadlines := make([]*time.Time, n)
	for i, c := range cs {
		idx[i], holds[i], bookings[i] = int32(i), c.HoldID, c.BookingID
		if !c.Deadline.IsZero() {
			deadlines[i] = &cs[i].Deadline
		}
	}
	// The holds' rows are not written, but a rebuild must wait for this
	// commit as for a write of them (see sqlLockConfirmations).
	if _, err := tx.tx.Exec(ctx, sqlLockHoldsForWrite); err != nil {
		return nil, fmt.Errorf("confirm %d bookings: %w", n, err)
	}
	rows, err := tx.tx.Query(ctx, sqlLockConfirmations, idx, holds, bookings, deadlines)
	if err != nil {
		return nil, fmt.Errorf("confirm %d bookings: %w", n, err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[confirmRow])
	if err != nil {
		return nil, fmt.Errorf("confirm %d bookings: %w", n, err)
	}
	errs := make([]error, n)
	for i, c := range cs {
		errs[i] = fmt.Errorf("confirm booking %s of hold %s: %w", c.BookingID, c.HoldID, ErrNotFound)
	}
	quantity := make([]int64, n)
	need := map[int64]int64{} // seat numbers each event's bookings need
	for _, r := range found {
		c := cs[r.I]
		switch {
		case r.HoldStatus != StatusPending:
			errs[r.I] = fmt.Errorf("confirm hold %s (%s): %w", c.HoldID, r.HoldStatus, ErrHoldNotActive)
		case r.BookingStatus != BookingPaymentPending:
			errs[r.I] = fmt.Errorf("confirm booking %s (%s): %w", c.BookingID, r.BookingStatus, ErrBookingSettled)
		case !r.InTime:
			errs[r.I] = fmt.Errorf("confirm booking %s: %w", c.BookingID, ErrPastDeadline)
		default:
			errs[r.I], quantity[r.I] = nil, r.Quantity
			if !c.Seated {
				need[c.EventID] += r.Quantity
			}
		}
	}

	// The seat numbers: each event's in one take, handed out in the
	// batch's order; a reserved seat's number is its own.
	numbers := make(map[int64][]int32, len(need))
	for event, q := range need {
		if numbers[event], err = tx.TakeSeats(ctx, event, q); err != nil {
			return nil, err
		}
	}
	var ready, payments, paidBy, codes []string
	var nows []time.Time
	var lo, hi []int32
	var seated []bool
	var seats []int32
	var seatIDs []*string
	for i, c := range cs {
		if errs[i] != nil {
			continue
		}
		var nums []int32
		var ids []string
		if c.Seated {
			if nums, ids, err = tx.seatsOfHold(ctx, c.EventID, c.HoldID, true); err != nil {
				return nil, err
			}
		} else {
			nums, numbers[c.EventID] = numbers[c.EventID][:quantity[i]], numbers[c.EventID][quantity[i]:]
		}
		if int64(len(nums)) != quantity[i] {
			return nil, &itemError{i: i, err: fmt.Errorf("issue tickets of booking %s: %d seat numbers for %d seats", c.BookingID, len(nums), quantity[i])}
		}
		signed, err := c.Sign(nums, ids)
		if err == nil && len(signed) != len(nums) {
			err = fmt.Errorf("%d codes signed for %d seats", len(signed), len(nums))
		}
		if err != nil {
			return nil, &itemError{i: i, err: fmt.Errorf("issue tickets of booking %s: %w", c.BookingID, err)}
		}
		// Its tickets are elements lo to hi (from 1, as SQL counts) of the
		// batch's arrays.
		ready, payments, paidBy, nows = append(ready, c.BookingID), append(payments, c.PaymentID), append(paidBy, c.Event), append(nows, c.Now)
		lo, hi, seated = append(lo, int32(len(codes)+1)), append(hi, int32(len(codes)+len(nums))), append(seated, ids != nil)
		for k, num := range nums {
			var id *string
			if ids != nil {
				id = &ids[k]
			}
			codes, seats, seatIDs = append(codes, signed[k]), append(seats, num), append(seatIDs, id)
		}
	}
	if len(ready) > 0 {
		tag, err := tx.tx.Exec(ctx, sqlConfirmBookings, ready, payments, nows, paidBy, lo, hi, codes, seats, seated, seatIDs)
		if err == nil && tag.RowsAffected() != int64(len(ready)) {
			err = fmt.Errorf("%d of them written", tag.RowsAffected())
		}
		if err != nil {
			return nil, fmt.Errorf("confirm %d bookings: %w", len(ready), err)
		}
	}
	return errs, nil
}

// itemError is the fault of one item of a batch (index i), not of the
// batch: the transaction is rolled back and the others written without it.
type itemError struct {
	i   int
	err error
}

func (e *itemError) Error() string { return e.err.Error() }
func (e *itemError) Unwrap() error { return e.err }

// confirmRow is what sqlLockConfirmations found of one confirmation.
type confirmRow struct {
	I             int    `db:"i"`
	HoldStatus    string `db:"hold_status"`
	BookingStatus string `db:"booking_status"`
	InTime        bool   `db:"in_time"`
	Quantity      int64  `db:"quantity"`
}
