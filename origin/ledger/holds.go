package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Hold statuses.
const (
	StatusPending   = "pending"
	StatusConfirmed = "confirmed"
	StatusExpired   = "expired"
	StatusReleased  = "released"
)

// Hold is a row of the holds table.
type Hold struct {
	ID             string    `db:"id"`
	EventID        int64     `db:"event_id"`
	UserID         string    `db:"user_id"`
	Quantity       int64     `db:"quantity"`
	Amount         int64     `db:"amount"`
	Status         string    `db:"status"`
	ExpiresAt      time.Time `db:"expires_at"`
	CreatedAt      time.Time `db:"created_at"`
	UpdatedAt      time.Time `db:"updated_at"`
	IdempotencyKey string    `db:"idempotency_key"`
	RequestDigest  string    `db:"request_digest"`
	// Response is the 201 body the hold was created with.
	Response []byte `db:"response"`
	// Position is the queue position of the token the hold was made with,
	// 0 when unknown.
	Position int64 `db:"position"`
	// Seats are the reserved seats of the hold (sorted), nil for general
	// admission. A hold with seats is written by InsertSeatedHold.
	Seats []string `db:"seats"`
	// Section is the general-admission section of a seat map the hold
	// has places of, "" otherwise; such a hold is written by
	// InsertSectionHold.
	Section string `db:"ga_section"`
}

// StatusAt is the status a buyer sees at now: a pending hold past its expiry
// is expired, whether or not the reaper has marked it yet.
func (h Hold) StatusAt(now time.Time) string {
	if h.Status == StatusPending && h.ExpiresAt.Before(now) {
		return StatusExpired
	}
	return h.Status
}

// SeatCounts are the seats an event's holds take, as the invariant counts
// them at one instant.
type SeatCounts struct {
	Confirmed int64 `db:"confirmed"`
	// Pending counts pending holds that have not expired.
	Pending int64 `db:"pending"`
	// OverflowUsed counts the seats confirmed from the overflow reserve
	// (late payments); they take no seat of the sellable pool.
	OverflowUsed int64 `db:"overflow_used"`
	// Tickets counts the valid tickets (one per seat sold).
	Tickets int64 `db:"tickets"`
}

// Active is the seats the invariant subtracts from sellable.
func (c SeatCounts) Active() int64 { return c.Confirmed + c.Pending }

// LiveHold is a hold as a rebuild loads it into Redis.
type LiveHold struct {
	ID             string    `db:"id"`
	UserID         string    `db:"user_id"`
	Quantity       int64     `db:"quantity"`
	Status         string    `db:"status"`
	ExpiresAt      time.Time `db:"expires_at"`
	IdempotencyKey string    `db:"idempotency_key"`
	RequestDigest  string    `db:"request_digest"`
	Seats          []string  `db:"seats"`
	Section        string    `db:"ga_section"`
}

// InsertHold writes a new pending hold alone: one INSERT, no transaction
// (holds are written in batches by InsertHolds; this is for the rows a
// batch skipped or could not write). When the user's previous hold lapsed
// without the reaper marking it yet, it is marked expired and the insert
// retried in one transaction. ctx's deadline is the write's: the server
// writes nothing after it (ErrPastDeadline).
// The returned outcome says whether a failed write may still be applied.
func (l *Ledger) InsertHold(ctx context.Context, h Hold, now time.Time) (WriteOutcome, error) {
	args := []any{h.ID, h.EventID, h.UserID, h.Quantity, h.Amount, h.ExpiresAt, h.CreatedAt,
		h.IdempotencyKey, h.RequestDigest, h.Response, deadlineOf(ctx), h.Position}
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return WriteFailed, fmt.Errorf("insert hold %s: acquire connection: %w", h.ID, err)
	}
	defer conn.Release()
	buyer := []any{[]int64{h.EventID}, []string{h.UserID}}
	// The buyer's lock and the row, one round trip, one (implicit)
	// transaction.
	var tag pgconn.CommandTag
	b := &pgx.Batch{}
	b.Queue(sqlLockBuyers, buyer...)
	b.Queue(sqlInsertHold, args...).Exec(func(t pgconn.CommandTag) error { tag = t; return nil })
	err = conn.SendBatch(ctx, b).Close()
	if cerr := constraintError(err); cerr == ErrLiveHoldExists {
		err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sqlLockBuyers, buyer...); err != nil {
				return err
			}
			if _, err := expireLapsedOfUser(ctx, tx, h.EventID, h.UserID, now); err != nil {
				return err
			}
			tag, err = tx.Exec(ctx, sqlInsertHold, args...)
			return err
		})
	}
	if cerr := constraintError(err); cerr != nil {
		return WriteFailed, fmt.Errorf("insert hold %s: %w", h.ID, cerr)
	}
	if err != nil {
		return Classify(err), fmt.Errorf("insert hold %s: %w", h.ID, err)
	}
	if tag.RowsAffected() == 0 {
		var has bool
		if err := conn.QueryRow(ctx, sqlBuyerHasOverflow, h.EventID, h.UserID).Scan(&has); err == nil && has {
			return WriteFailed, fmt.Errorf("insert hold %s: %w", h.ID, ErrBuyerHasSeats)
		}
		return WriteFailed, fmt.Errorf("insert hold %s: %w", h.ID, ErrPastDeadline)
	}
	return WriteDone, nil
}

// InsertHolds writes new pending holds in one statement, so in one commit.
// deadlines[i] is hs[i]'s deadline (nil: none), checked by the server as
// InsertHold's is. A row that conflicts with a unique index, or that the
// server got past its deadline, is skipped, not an error: inserted[i] says
// whether hs[i] went in, and the caller writes the others with InsertHold,
// which tells the cases apart. An error means no row was written, or
// (WriteUncertain) that all of them may have been.
func (l *Ledger) InsertHolds(ctx context.Context, hs []Hold, deadlines []*time.Time) (inserted []bool, outcome WriteOutcome, err error) {
	n := len(hs)
	var (
		ids, users, keys, digests = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		events, quantities, amts  = make([]int64, n), make([]int64, n), make([]int64, n)
		expires, created          = make([]time.Time, n), make([]time.Time, n)
		positions                 = make([]int64, n)
		responses                 = make([][]byte, n)
		index                     = make(map[string]int, n)
	)
	for i, h := range hs {
		ids[i], events[i], users[i], quantities[i], amts[i] = h.ID, h.EventID, h.UserID, h.Quantity, h.Amount
		expires[i], created[i], keys[i], digests[i], responses[i] = h.ExpiresAt, h.CreatedAt, h.IdempotencyKey, h.RequestDigest, h.Response
		positions[i] = h.Position
		index[h.ID] = i
	}
	// The buyers' locks and the rows, one round trip, one (implicit)
	// transaction.
	var got []string
	b := &pgx.Batch{}
	b.Queue(sqlLockBuyers, events, users)
	b.Queue(sqlInsertHolds, ids, events, users, quantities, amts, expires, created, keys, digests, responses, deadlines, positions).
		Query(func(rows pgx.Rows) error {
			var err error
			got, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
	if err := l.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, Classify(err), fmt.Errorf("insert %d holds: %w", n, err)
	}
	inserted = make([]bool, n)
	for _, id := range got {
		if i, ok := index[id]; ok {
			inserted[i] = true
		}
	}
	return inserted, WriteDone, nil
}

// Hold reads one hold.
func (l *Ledger) Hold(ctx context.Context, id string) (Hold, error) {
	rows, err := l.pool.Query(ctx, sqlHold, id)
	return collectOne[Hold](rows, err, "read hold "+id)
}

// HoldByKey reads the hold a user made with an Idempotency-Key.
func (l *Ledger) HoldByKey(ctx context.Context, event int64, user, key string) (Hold, error) {
	rows, err := l.pool.Query(ctx, sqlHoldByKey, event, user, key)
	return collectOne[Hold](rows, err, "read hold by idempotency key")
}

// LiveHoldOfUser reads the user's pending or confirmed hold (a pending one
// may have expired since).
func (l *Ledger) LiveHoldOfUser(ctx context.Context, event int64, user string) (Hold, error) {
	rows, err := l.pool.Query(ctx, sqlLiveHoldOfUser, event, user)
	return collectOne[Hold](rows, err, "read live hold of user")
}

// ErrHoldWritesBusy: writes of the holds table kept the lock of
// lockHoldWrites for longer than its short wait; ask again later.
var ErrHoldWritesBusy = errors.New("writes of the holds table still running")

// lockHoldWrites waits, in tx, until no transaction that wrote to the holds
// table before it can still commit, so a row that will ever exist is seen.
// While it waits, every new write of the table waits behind it; so it waits
// at most 100 ms and fails with ErrHoldWritesBusy rather than stall the hold
// writes into missing their deadlines (each would become an uncertain write
// that needs this lock again).
func lockHoldWrites(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, sqlLockHoldWritesTimeout); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, sqlLockHoldWrites)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return ErrHoldWritesBusy
	}
	return err
}

// HoldsWritten returns the rows of those of the holds ids that have one,
// by id. Meant for writes past their deadline (and the clock-skew margin):
// it waits for any write of the holds table still committing, so a row, or
// a change of one, that will ever be committed is seen. ErrHoldWritesBusy:
// try again later.
func (l *Ledger) HoldsWritten(ctx context.Context, ids []string) (map[string]Hold, error) {
	written := make(map[string]Hold, len(ids))
	err := pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := lockHoldWrites(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sqlHoldsWritten, ids)
		found, err := collectAll[Hold](rows, err, "read hold rows")
		for _, h := range found {
			written[h.ID] = h
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("check %d hold rows: %w", len(ids), err)
	}
	return written, nil
}

// ReleaseHold marks a pending, unexpired hold released, unless a booking
// of it waits for its payment. The hold's row is locked first, in a
// statement of its own: a booking is written in the transaction that
// extends the hold (which locks the row), so once the lock is had the
// check, a new statement with a new snapshot under READ COMMITTED, sees the
// booking that transaction committed. In one statement the check would
// read the bookings as they were before it waited, and release the hold
// under a payment.
//
// With a non-zero deadline it commits only before it (InTx): a release
// whose commit answer was lost (ErrUncertain) can be settled once the
// deadline has passed, by asking HoldsWritten, which also waits for a
// COMMIT still on its way.
func (l *Ledger) ReleaseHold(ctx context.Context, id string, now, deadline time.Time) (Hold, error) {
	var h Hold
	err := l.InTx(ctx, deadline, func(tx Tx) error {
		if _, err := tx.tx.Exec(ctx, sqlLockHoldRow, id); err != nil {
			return fmt.Errorf("lock hold %s: %w", id, err)
		}
		rows, err := tx.tx.Query(ctx, sqlReleaseHold, id, now)
		h, err = collectOne[Hold](rows, err, "release hold "+id)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return Hold{}, fmt.Errorf("release hold %s: %w", id, ErrHoldNotActive)
	}
	return h, err
}

// ConfirmHold marks a pending hold confirmed.
func (t Tx) ConfirmHold(ctx context.Context, id string, now time.Time) (Hold, error) {
	rows, err := t.tx.Query(ctx, sqlConfirmHold, id, now)
	h, err := collectOne[Hold](rows, err, "confirm hold "+id)
	if errors.Is(err, ErrNotFound) {
		return Hold{}, fmt.Errorf("confirm hold %s: %w", id, ErrHoldNotActive)
	}
	return h, err
}

// ExtendHold moves a pending, unexpired hold's own expiry to until (never
// earlier).
func (t Tx) ExtendHold(ctx context.Context, id string, now, until time.Time) (Hold, error) {
	rows, err := t.tx.Query(ctx, sqlExtendHold, id, now, until)
	h, err := collectOne[Hold](rows, err, "extend hold "+id)
	if errors.Is(err, ErrNotFound) {
		return Hold{}, fmt.Errorf("extend hold %s: %w", id, ErrHoldNotActive)
	}
	return h, err
}

// LockHoldForBooking locks a pending, unexpired hold for the booking the
// transaction inserts next, which keeps it until until: the hold as the
// booking leaves it (its expiry until, never earlier). The hold's row is
// not written; the booking's (NewBooking.HoldUntil) carries the extension,
// so the caller must insert it in this transaction.
func (t Tx) LockHoldForBooking(ctx context.Context, id string, now, until time.Time) (Hold, error) {
	if _, err := t.tx.Exec(ctx, sqlLockHoldsForWrite); err != nil {
		return Hold{}, fmt.Errorf("lock hold %s: %w", id, err)
	}
	rows, err := t.tx.Query(ctx, sqlLockLiveHold, id, now)
	h, err := collectOne[Hold](rows, err, "lock hold "+id)
	if errors.Is(err, ErrNotFound) {
		return Hold{}, fmt.Errorf("lock hold %s: %w", id, ErrHoldNotActive)
	}
	if err == nil && until.After(h.ExpiresAt) {
		h.ExpiresAt = until
	}
	return h, err
}

// ExpireDue marks up to limit pending holds past their expiry expired and
// returns them, of those whose own expiry is at or after from (zero: all;
// see ReapFrom).
func (l *Ledger) ExpireDue(ctx context.Context, now, from time.Time, limit int) ([]Hold, error) {
	var ended []Hold
	err := pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		ids, err := lockLapsed(ctx, tx, sqlLockDue, now, limit, orNull(from))
		if err != nil || len(ids) == 0 {
			return err
		}
		rows, err := tx.Query(ctx, sqlExpireLocked, ids, now)
		ended, err = collectAll[Hold](rows, err, "end")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("expire due holds: %w", err)
	}
	return ended, nil
}

// ReapFrom is where ExpireDue's walk can start at now, having walked from
// from (zero: all): before it every pending hold past its own expiry is
// sold, which a sale keeps for good. Sold holds stay pending (migration
// 021), so a walk that always started at the beginning would read every
// sale ever made.
func (l *Ledger) ReapFrom(ctx context.Context, now, from time.Time) (time.Time, error) {
	var next time.Time
	if err := l.pool.QueryRow(ctx, sqlReapFrom, now, orNull(from)).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("find where the reaper starts: %w", err)
	}
	return next, nil
}

// orNull is t, or NULL for the zero time.
func orNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// lockLapsed runs lock, which locks the pending holds it picks as past
// their own expiry and returns their ids. Whoever ends them reads their
// expiry again in a statement of its own (sqlExpireLocked): a booking that
// a transaction holding a lock inserted changed no row of holds, so a
// statement that waited for the lock would not see it and end the hold
// under the booking's payment.
func lockLapsed(ctx context.Context, tx pgx.Tx, lock string, args ...any) ([]string, error) {
	rows, err := tx.Query(ctx, lock, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// expireLapsedOfUser ends the user's pending hold of the event that is
// past its expiry, in tx, and reports how many it ended (0 or 1).
func expireLapsedOfUser(ctx context.Context, tx pgx.Tx, event int64, user string, now time.Time) (int64, error) {
	ids, err := lockLapsed(ctx, tx, sqlLockLapsedHoldOfUser, event, user, now)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	tag, err := tx.Exec(ctx, sqlExpireLocked, ids, now)
	return tag.RowsAffected(), err
}

// SeatCounts counts the seats an event's live holds take at now.
func (l *Ledger) SeatCounts(ctx context.Context, event int64, now time.Time) (SeatCounts, error) {
	rows, err := l.pool.Query(ctx, sqlSeatCounts, event, now)
	return collectOne[SeatCounts](rows, err, fmt.Sprintf("count seats of event %d", event))
}

// LiveHoldsNow reads what liveHolds does, without waiting for writes still
// committing: for the drift correction, which counts those from Redis.
func (l *Ledger) LiveHoldsNow(ctx context.Context, event int64, now time.Time) ([]LiveHold, []OverflowBuyer, error) {
	var live []LiveHold
	var buyers []OverflowBuyer
	err := pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlLiveHolds, event, now)
		if live, err = collectAll[LiveHold](rows, err, "read"); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, sqlOverflowBuyers, event)
		buyers, err = collectAll[OverflowBuyer](rows, err, "read overflow buyers")
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read live holds of event %d: %w", event, err)
	}
	return live, buyers, nil
}

// EndedHolds returns those of ids whose holds are over in the ledger
// (expired or released: for good). Ids that are not hold ids are skipped.
func (l *Ledger) EndedHolds(ctx context.Context, ids []string) ([]string, error) {
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if _, err := uuid.Parse(id); err == nil {
			valid = append(valid, id)
		}
	}
	if len(valid) == 0 {
		return nil, nil
	}
	rows, err := l.pool.Query(ctx, sqlEndedHolds, valid)
	if err != nil {
		return nil, fmt.Errorf("read ended holds: %w", err)
	}
	ended, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read ended holds: %w", err)
	}
	return ended, nil
}

// OverflowBuyer is a buyer served from the overflow reserve.
type OverflowBuyer struct {
	ID             string `db:"id"`
	UserID         string `db:"user_id"`
	IdempotencyKey string `db:"idempotency_key"`
	RequestDigest  string `db:"request_digest"`
}

// LiveHolds reads the live holds of an event for a rebuild, after any write
// of the holds table still committing (see lockHoldWrites, tried until it
// gets the lock: the event is frozen, so its writes are ending), and the
// buyers served from the overflow reserve. Between tries it backs off
// (jittered, at most maxLockBackoff): each try holds every hold write of
// the table up while it waits.
func (l *Ledger) LiveHolds(ctx context.Context, event int64, now time.Time) ([]LiveHold, []OverflowBuyer, error) {
	var live []LiveHold
	var buyers []OverflowBuyer
	read := func(tx pgx.Tx) error {
		l.lockTries.Add(1)
		if err := lockHoldWrites(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sqlLiveHolds, event, now)
		if live, err = collectAll[LiveHold](rows, err, "read"); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, sqlOverflowBuyers, event)
		buyers, err = collectAll[OverflowBuyer](rows, err, "read overflow buyers")
		return err
	}
	var err error
	backoff := minLockBackoff
	for {
		err = pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{}, read)
		if !errors.Is(err, ErrHoldWritesBusy) || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, maxLockBackoff)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read live holds of event %d: %w", event, err)
	}
	return live, buyers, nil
}

// The pause between tries of lockHoldWrites for a rebuild's read: it
// doubles from minLockBackoff up to maxLockBackoff, with jitter so that the
// rebuilds of several nodes do not try in step.
const (
	minLockBackoff = 20 * time.Millisecond
	maxLockBackoff = 500 * time.Millisecond
)

// LockTries is how many times the ledger has tried to take the lock a
// rebuild's read waits on (for tests of its back-off).
func (l *Ledger) LockTries() int64 { return l.lockTries.Load() }

// LockHold reads a hold and locks its row until the transaction ends.
func (t Tx) LockHold(ctx context.Context, id string) (Hold, error) {
	rows, err := t.tx.Query(ctx, sqlLockHold, id)
	return collectOne[Hold](rows, err, "lock hold "+id)
}

// ExpireLateHold marks expired a pending hold past its expiry (a late
// payment's) and reports whether it did.
func (t Tx) ExpireLateHold(ctx context.Context, id string, now time.Time) (bool, error) {
	return t.exec(ctx, "expire hold "+id, sqlExpireHold, id, now)
}

// ReleaseConfirmedHold marks a confirmed hold released (its sale ended) and
// reports whether it did.
func (t Tx) ReleaseConfirmedHold(ctx context.Context, id string, now time.Time) (bool, error) {
	return t.exec(ctx, "release hold "+id, sqlReleaseConfirmedHold, id, now)
}

// ReleaseUnseatedHold marks released a pending or confirmed hold whose
// payment is refunded, and reports whether it did.
func (t Tx) ReleaseUnseatedHold(ctx context.Context, id string, now time.Time) (bool, error) {
	return t.exec(ctx, "release hold "+id, sqlReleaseUnseatedHold, id, now)
}

// exec runs a statement that changes at most one row and reports whether
// it did.
func (t Tx) exec(ctx context.Context, what, sql string, args ...any) (bool, error) {
	tag, err := t.tx.Exec(ctx, sql, args...)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return tag.RowsAffected() == 1, nil
}
