// Package ledger is the origin's PostgreSQL side, the truth of every sale:
// the migrations and their runner, every SQL statement (queries.go), the
// group-commit writer of new holds (holdwriter.go), and named operations,
// alone or inside a transaction (InTx). No other package of the origin
// speaks to PostgreSQL: pgx stays behind this package's types.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Ledger errors.
var (
	ErrNotFound    = errors.New("not found")
	ErrEventExists = errors.New("event already exists")
	// ErrHoldNotActive: the hold is no longer pending (confirmed, expired,
	// released) or its expiry has passed.
	ErrHoldNotActive = errors.New("hold is not active")
	// ErrLiveHoldExists: the user has a live hold for the event already.
	ErrLiveHoldExists = errors.New("user already has a live hold")
	// ErrDuplicateKey: a hold was made with this Idempotency-Key already.
	ErrDuplicateKey = errors.New("idempotency key already used for a hold")
	// ErrPastDeadline: the server got the write after its deadline and
	// wrote nothing.
	ErrPastDeadline = errors.New("reached the server after its deadline")
	// ErrBuyerHasSeats: the buyer has seats from the overflow reserve (a
	// late payment confirmed), and holds no more.
	ErrBuyerHasSeats = errors.New("the buyer has seats from the overflow reserve")
	// ErrUncertain: the commit was sent and its answer lost; the server may
	// still commit it, until its deadline.
	ErrUncertain = errors.New("commit outcome unknown")
)

// Ledger is the Postgres side of the origin.
type Ledger struct {
	pool *pgxpool.Pool
	// lockTries counts the tries of a rebuild's read for its lock.
	lockTries atomic.Int64
}

// Options tunes the connection pool.
type Options struct {
	// MaxConns is the pool size when the URL sets none (pool_max_conns);
	// default 32.
	MaxConns int32
	// StatementTimeout bounds every statement the origin runs, unless the
	// URL sets statement_timeout; default 5 s. It counts from when the
	// server gets the statement, which may be long after the origin sent it
	// and gave up on it: what bounds a write's outcome is its deadline.
	StatementTimeout time.Duration
	// Outbox turns on the booking events' outbox: every change a site is
	// told of writes its outbox row in its own transaction (migration 014).
	// Off, nothing is written; every node of one ledger sets it alike.
	Outbox bool
}

// Open connects (checking the server answers), and applies the migrations.
func Open(ctx context.Context, url string, opts Options) (*Ledger, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 32
	}
	if opts.StatementTimeout <= 0 {
		opts.StatementTimeout = 5 * time.Second
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = opts.MaxConns
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !ok {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(opts.StatementTimeout.Milliseconds())
	}
	if opts.Outbox {
		cfg.ConnConfig.RuntimeParams[outboxSetting] = "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping postgres: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return &Ledger{pool: pool}, nil
}

// Pool is the connection pool, for tests and tools that read the tables
// directly.
func (l *Ledger) Pool() *pgxpool.Pool { return l.pool }

// Close closes the pool.
func (l *Ledger) Close() { l.pool.Close() }

// Ping checks the server answers.
func (l *Ledger) Ping(ctx context.Context) error { return l.pool.Ping(ctx) }

// querier is what the named operations run on: the pool, or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Tx is an open transaction of the ledger, handed to the function InTx
// runs: the named operations that must commit together run on it.
type Tx struct{ tx pgx.Tx }

// untilDeadline is ctx ending at deadline, or ctx itself when deadline is
// zero (no deadline).
func untilDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

// InTx runs fn in one transaction and commits it if fn returns nil. With a
// non-zero deadline the transaction commits only before it, by the
// server's own clock (ErrPastDeadline otherwise), checked last, after the
// writes whose locks a rebuild's read waits for; and a commit whose answer
// was lost is reported as ErrUncertain: it may still be applied, until the
// deadline.
func (l *Ledger) InTx(ctx context.Context, deadline time.Time, fn func(Tx) error) error {
	ctx, cancel := untilDeadline(ctx, deadline)
	defer cancel()
	var ferr error
	err := pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if ferr = fn(Tx{tx}); ferr != nil {
			return ferr
		}
		if !deadline.IsZero() {
			var inTime bool
			if ferr = tx.QueryRow(ctx, sqlBeforeDeadline, deadline).Scan(&inTime); ferr == nil && !inTime {
				ferr = ErrPastDeadline
			}
		}
		return ferr
	})
	if err != nil && ferr == nil && Classify(err) == WriteUncertain {
		return fmt.Errorf("%w: %w", ErrUncertain, err)
	}
	return err
}

// deadlockAttempts is how many times retryDeadlock runs a write.
const deadlockAttempts = 3

// retryDeadlock runs write, again while PostgreSQL chose it as a
// deadlock's victim (SQLSTATE 40P01) and ctx lasts: the server rolled the
// whole transaction back, so running it again is safe. The ledger takes
// its locks in one order where it can; what it cannot order (a new hold
// waiting on the unique index for the user's hold the reaper is ending, a
// reaper batch ending holds whose seats a claim is taking) is rare, and
// its victim should not cost a buyer the seats.
func retryDeadlock(ctx context.Context, write func() error) error {
	var err error
	for range deadlockAttempts {
		if err = write(); !isDeadlock(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01" // deadlock_detected
}

// Savepoint runs fn in a savepoint of tx: if fn fails, what it did is
// undone and tx goes on.
func (t Tx) Savepoint(ctx context.Context, fn func(Tx) error) error {
	return pgx.BeginFunc(ctx, t.tx, func(sp pgx.Tx) error { return fn(Tx{sp}) })
}

func collectOne[T any](rows pgx.Rows, err error, what string) (T, error) {
	var zero T
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	v, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[T])
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

func collectAll[T any](rows pgx.Rows, err error, what string) ([]T, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	v, err := pgx.CollectRows(rows, pgx.RowToStructByName[T])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

// WriteOutcome says whether a failed write may have been applied anyway.
type WriteOutcome int

const (
	WriteDone WriteOutcome = iota
	// WriteFailed: certainly not applied (refused by the server, or never
	// sent).
	WriteFailed
	// WriteUncertain: the connection broke after the statement was sent; the
	// server may still commit it, until its deadline.
	WriteUncertain
)

// deadlineOf is the deadline of a write bounded by ctx, which the server
// checks itself (NULL: none).
func deadlineOf(ctx context.Context) *time.Time {
	if d, ok := ctx.Deadline(); ok {
		return &d
	}
	return nil
}

// Classify tells a write that certainly failed from one that may have been
// applied: the seat's compensation depends on it.
func Classify(err error) WriteOutcome {
	if err == nil {
		return WriteDone
	}
	var pgErr *pgconn.PgError
	var connectErr *pgconn.ConnectError
	switch {
	case errors.Is(err, pgconn.ErrConnClosed):
		// pgx also answers "conn closed", which it calls safe to retry,
		// when the connection broke after a statement sent by the simple
		// protocol (a COMMIT) went out: reading its result drops the
		// read's error and finds the connection closed. It may have run.
		return WriteUncertain
	case errors.As(err, &pgErr), errors.As(err, &connectErr), pgconn.SafeToRetry(err):
		return WriteFailed
	}
	return WriteUncertain
}

// uniqueViolation is the constraint a unique violation broke, "" for any
// other error.
func uniqueViolation(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return pgErr.ConstraintName
	}
	return ""
}

func constraintError(err error) error {
	switch uniqueViolation(err) {
	case "holds_one_live_per_user":
		return ErrLiveHoldExists
	case "holds_idempotency_key":
		return ErrDuplicateKey
	}
	return nil
}
