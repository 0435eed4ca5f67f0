package strategy_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/inventory/strategy"
)

func strategyEnv(t *testing.T) (*pgxpool.Pool, func(name string) strategy.Strategy) {
	t.Helper()
	rdb := testenv.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(testenv.Postgres(t))
	require.NoError(t, err)
	cfg.MaxConns = 32
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	require.NoError(t, strategy.Prepare(ctx, db))
	return db, func(name string) strategy.Strategy {
		s, err := strategy.New(name, db, rdb, testenv.EventID())
		require.NoError(t, err)
		return s
	}
}

// The three correct strategies sell exactly the capacity however many buyers
// contend; the naive one never sells fewer (its oversell is a race, so how
// much it oversells is the benchmark's to show, not a test's to assert).
func TestStrategiesUnderContention(t *testing.T) {
	_, newStrategy := strategyEnv(t)
	tests := []struct {
		name     string
		capacity int64
		buyers   int
		exact    bool
	}{
		{strategy.PessimisticName, 100, 500, true},
		{strategy.AtomicDBName, 100, 500, true},
		{strategy.AtomicRedisName, 100, 500, true},
		{strategy.AtomicRedisName, 7, 50, true},
		{strategy.NaiveName, 100, 500, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := strategy.Contend(ctx, newStrategy(tc.name), tc.capacity, tc.buyers)
			require.NoError(t, err)
			assert.Equal(t, tc.name, r.Strategy)
			assert.LessOrEqual(t, r.Sold, int64(tc.buyers))
			if tc.exact {
				assert.Equal(t, tc.capacity, r.Sold)
				assert.Zero(t, r.Oversold)
			} else {
				assert.GreaterOrEqual(t, r.Sold, tc.capacity)
				assert.Equal(t, r.Sold-tc.capacity, r.Oversold)
			}
		})
	}
}

// A second round starts from a full stock and no orders.
func TestStrategyRoundsAreIndependent(t *testing.T) {
	_, newStrategy := strategyEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{strategy.AtomicDBName, strategy.AtomicRedisName} {
		s := newStrategy(name)
		for range 2 {
			r, err := strategy.Contend(ctx, s, 10, 30)
			require.NoError(t, err)
			assert.Equal(t, int64(10), r.Sold, name)
		}
	}
}

// Fewer buyers than seats: everyone buys, nothing is left over unsold by a
// strategy that mistakes contention for a sell-out.
func TestStrategiesSellToEveryBuyerWhenStockSuffices(t *testing.T) {
	_, newStrategy := strategyEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{strategy.PessimisticName, strategy.AtomicDBName, strategy.AtomicRedisName} {
		r, err := strategy.Contend(ctx, newStrategy(name), 100, 40)
		require.NoError(t, err)
		assert.Equal(t, int64(40), r.Sold, name)
	}
}

func TestUnknownStrategy(t *testing.T) {
	_, err := strategy.New("optimistic", nil, nil, 1)
	require.Error(t, err)
	_, err = strategy.New(strategy.AtomicRedisName, nil, nil, 1)
	require.Error(t, err)
}
