// Package strategy holds the benchmark's "four ways to sell the last
// ticket" (make bench-strategies): the same buyers and the same durable order
// row, differing only in how the check and the decrement are put together.
// Only AtomicRedis is how the origin sells, through the production hold
// script of package inventory; the others exist to be measured against it,
// and Naive to show the oversell a check-then-act race causes. Nothing on the
// production path imports this package.
package strategy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/inventory"
)

// Strategy sells seats of one stock to buyers.
type Strategy interface {
	// Name is the strategy's name in the benchmark table.
	Name() string
	// Reset starts a new round with capacity seats and no orders.
	Reset(ctx context.Context, capacity int64) error
	// Buy tries to sell one seat to user. It reports whether an order was
	// written; false with a nil error means the stock looked sold out.
	Buy(ctx context.Context, user string) (bool, error)
	// Sold counts the orders of the current round: the seats sold, however
	// many the stock had.
	Sold(ctx context.Context) (int64, error)
}

// Strategy names, as the benchmark prints them.
const (
	NaiveName       = "naive"
	PessimisticName = "pessimistic"
	AtomicDBName    = "atomicDb"
	AtomicRedisName = "atomicRedis"
)

// Names lists the strategies in the order of the reference table.
var Names = []string{NaiveName, PessimisticName, AtomicDBName, AtomicRedisName}

// strategySchema holds every strategy's stock and orders, apart by name.
// remaining >= 0 holds even for Naive: it writes back a stale count, never a
// negative one, so its oversell shows only in the orders.
const strategySchema = `
CREATE TABLE IF NOT EXISTS strategy_stock (
	strategy  text PRIMARY KEY,
	remaining bigint NOT NULL CHECK (remaining >= 0)
);
CREATE TABLE IF NOT EXISTS strategy_orders (
	id         bigserial PRIMARY KEY,
	strategy   text NOT NULL,
	user_id    text NOT NULL,
	hold_id    text,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS strategy_orders_by_strategy ON strategy_orders (strategy);
`

const (
	sqlResetStock   = `INSERT INTO strategy_stock (strategy, remaining) VALUES ($1, $2) ON CONFLICT (strategy) DO UPDATE SET remaining = EXCLUDED.remaining`
	sqlResetOrders  = `DELETE FROM strategy_orders WHERE strategy = $1`
	sqlReadStock    = `SELECT remaining FROM strategy_stock WHERE strategy = $1`
	sqlLockStock    = `SELECT remaining FROM strategy_stock WHERE strategy = $1 FOR UPDATE`
	sqlWriteStock   = `UPDATE strategy_stock SET remaining = $2 WHERE strategy = $1`
	sqlTakeOne      = `UPDATE strategy_stock SET remaining = remaining - 1 WHERE strategy = $1`
	sqlTakeIfLeft   = `UPDATE strategy_stock SET remaining = remaining - 1 WHERE strategy = $1 AND remaining > 0`
	sqlInsertOrder  = `INSERT INTO strategy_orders (strategy, user_id, hold_id) VALUES ($1, $2, $3)`
	sqlCountOrders  = `SELECT count(*) FROM strategy_orders WHERE strategy = $1`
	strategyHoldTTL = 10 * time.Minute
)

// Prepare creates the tables the strategies write to.
func Prepare(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, strategySchema); err != nil {
		return fmt.Errorf("create strategy tables: %w", err)
	}
	return nil
}

// New returns the strategy called name. AtomicRedis sells event's
// inventory in rdb; the others use only db.
func New(name string, db *pgxpool.Pool, rdb redis.UniversalClient, event int64) (Strategy, error) {
	base := sqlStock{db: db, name: name}
	switch name {
	case NaiveName:
		return &naive{base}, nil
	case PessimisticName:
		return &pessimistic{base}, nil
	case AtomicDBName:
		return &atomicDB{base}, nil
	case AtomicRedisName:
		if rdb == nil {
			return nil, errors.New("strategy atomicRedis needs a Redis client")
		}
		return &atomicRedis{sqlStock: base, inv: inventory.New(rdb), event: event}, nil
	}
	return nil, fmt.Errorf("unknown strategy %q (want one of %v)", name, Names)
}

// sqlStock is the stock row and the orders every strategy shares.
type sqlStock struct {
	db   *pgxpool.Pool
	name string
}

func (s sqlStock) Name() string { return s.name }

func (s sqlStock) Reset(ctx context.Context, capacity int64) error {
	return pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlResetStock, s.name, capacity); err != nil {
			return fmt.Errorf("reset %s stock: %w", s.name, err)
		}
		if _, err := tx.Exec(ctx, sqlResetOrders, s.name); err != nil {
			return fmt.Errorf("reset %s orders: %w", s.name, err)
		}
		return nil
	})
}

func (s sqlStock) Sold(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRow(ctx, sqlCountOrders, s.name).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s orders: %w", s.name, err)
	}
	return n, nil
}

// naive reads the count, checks it, and writes back one less: two buyers who
// read the same count both sell.
type naive struct{ sqlStock }

func (s *naive) Buy(ctx context.Context, user string) (bool, error) {
	var remaining int64
	if err := s.db.QueryRow(ctx, sqlReadStock, s.name).Scan(&remaining); err != nil {
		return false, fmt.Errorf("naive: read stock: %w", err)
	}
	if remaining <= 0 {
		return false, nil
	}
	if _, err := s.db.Exec(ctx, sqlWriteStock, s.name, remaining-1); err != nil {
		return false, fmt.Errorf("naive: write stock: %w", err)
	}
	if _, err := s.db.Exec(ctx, sqlInsertOrder, s.name, user, nil); err != nil {
		return false, fmt.Errorf("naive: insert order: %w", err)
	}
	return true, nil
}

// pessimistic serialises every buyer on the stock row's lock.
type pessimistic struct{ sqlStock }

func (s *pessimistic) Buy(ctx context.Context, user string) (bool, error) {
	sold := false
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var remaining int64
		if err := tx.QueryRow(ctx, sqlLockStock, s.name).Scan(&remaining); err != nil {
			return fmt.Errorf("lock stock: %w", err)
		}
		if remaining <= 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, sqlTakeOne, s.name); err != nil {
			return fmt.Errorf("take seat: %w", err)
		}
		if _, err := tx.Exec(ctx, sqlInsertOrder, s.name, user, nil); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		sold = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("pessimistic: %w", err)
	}
	return sold, nil
}

// atomicDB lets the database fuse the check and the decrement in one
// conditional UPDATE, with the order in the same transaction.
type atomicDB struct{ sqlStock }

func (s *atomicDB) Buy(ctx context.Context, user string) (bool, error) {
	sold := false
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlTakeIfLeft, s.name)
		if err != nil {
			return fmt.Errorf("take seat: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, sqlInsertOrder, s.name, user, nil); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		sold = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("atomicDb: %w", err)
	}
	return sold, nil
}

// atomicRedis takes the seat with the origin's hold script, then writes the
// durable row; a row that can't be written gives the seat back at once.
type atomicRedis struct {
	sqlStock
	inv   *inventory.Inventory
	event int64
}

func (s *atomicRedis) Reset(ctx context.Context, capacity int64) error {
	if err := s.sqlStock.Reset(ctx, capacity); err != nil {
		return err
	}
	err := s.inv.Rebuild(ctx, s.event, func(context.Context) (inventory.Snapshot, error) {
		return inventory.Snapshot{Remaining: capacity}, nil
	})
	if err != nil {
		return fmt.Errorf("atomicRedis: load stock: %w", err)
	}
	return nil
}

func (s *atomicRedis) Buy(ctx context.Context, user string) (bool, error) {
	now := time.Now()
	res, err := s.inv.Hold(ctx, inventory.HoldRequest{
		Event: s.event, HoldID: newHoldID(), User: user, Quantity: 1,
		ExpiresAt: now.Add(strategyHoldTTL), Now: now,
	})
	if err != nil {
		return false, fmt.Errorf("atomicRedis: %w", err)
	}
	if res.Outcome != inventory.Held {
		return false, nil
	}
	if _, err := s.db.Exec(ctx, sqlInsertOrder, s.name, user, res.HoldID); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, rerr := s.inv.Release(rctx, s.event, res.HoldID, inventory.PendingOnly)
		return false, errors.Join(fmt.Errorf("atomicRedis: insert order: %w", err), rerr)
	}
	return true, nil
}

func newHoldID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Round is the result of buyers contending once for a stock.
type Round struct {
	Strategy string
	Capacity int64
	Buyers   int
	// Sold is the orders written; Oversold what they exceed the capacity by.
	Sold, Oversold int64
	Elapsed        time.Duration
	// Errors counts buys that failed (not "sold out": an error).
	Errors int64
}

// BuysPerSecond is the rate buyers were served at, as the reference table
// counts it: every attempt, sold or not.
func (r Round) BuysPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Buyers) / r.Elapsed.Seconds()
}

// Contend resets s to capacity seats and lets buyers distinct users try to
// buy one seat each, all released at the same instant.
func Contend(ctx context.Context, s Strategy, capacity int64, buyers int) (Round, error) {
	if err := s.Reset(ctx, capacity); err != nil {
		return Round{}, err
	}
	start := make(chan struct{})
	errs := make(chan error, buyers)
	ready := make(chan struct{}, buyers)
	prefix := newHoldID()[:8]
	for i := range buyers {
		user := fmt.Sprintf("buyer-%s-%d", prefix, i)
		go func() {
			ready <- struct{}{}
			<-start
			_, err := s.Buy(ctx, user)
			errs <- err
		}()
	}
	for range buyers {
		<-ready
	}
	began := time.Now()
	close(start)
	var failed int64
	var firstErr error
	for range buyers {
		if err := <-errs; err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	elapsed := time.Since(began)
	sold, err := s.Sold(ctx)
	if err != nil {
		return Round{}, err
	}
	r := Round{Strategy: s.Name(), Capacity: capacity, Buyers: buyers, Sold: sold,
		Oversold: max(0, sold-capacity), Elapsed: elapsed, Errors: failed}
	if failed > 0 {
		return r, fmt.Errorf("%s: %d of %d buys failed, first: %w", s.Name(), failed, buyers, firstErr)
	}
	return r, nil
}
