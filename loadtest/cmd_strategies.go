package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/inventory/strategy"
	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/stack"
)

func runStrategies(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("strategies", "Four ways to sell the last ticket, side by side against the real Redis and\nPostgreSQL: every buyer tries once, all released at the same instant.", errOut)
	var srv servers
	srv.register(fs, true)
	buyers := fs.Int("buyers", 500, "concurrent buyers, distinct users")
	capacity := fs.Int64("capacity", 100, "tickets")
	rounds := fs.Int("rounds", 3, "rounds per strategy (interleaved); the table shows each strategy's median round by time")
	pgConns := fs.Int("pg-conns", 100, "PostgreSQL connections shared by the buyers")
	only := fs.String("only", strings.Join(strategy.Names, ","), "strategies to run, comma-separated")
	jsonPath := fs.String("json", "", "also write the rounds to this JSON file")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := positive(map[string]float64{"buyers": float64(*buyers), "capacity": float64(*capacity), "rounds": float64(*rounds), "pg-conns": float64(*pgConns)}); err != nil {
		return err
	}
	names := strings.Split(*only, ",")
	for _, n := range names {
		if !slices.Contains(strategy.Names, n) {
			return usagef("--only: unknown strategy %q (want some of %s)", n, strings.Join(strategy.Names, ","))
		}
	}
	if err := srv.check(true, true); err != nil {
		return err
	}

	db, err := stack.CreateDatabase(ctx, srv.databaseURL, "waitroom_strategies")
	if err != nil {
		return err
	}
	defer func() { _ = db.Drop(context.WithoutCancel(ctx)) }()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(*pgConns)
	cfg.MinConns = int32(*pgConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	if err := strategy.Prepare(ctx, pool); err != nil {
		return err
	}
	rdb, err := oneRedis(srv.redisURL, redisurl.Defaults{PoolSize: *pgConns})
	if err != nil {
		return err
	}
	defer rdb.Close()
	// An event id nobody else uses; its keys are removed afterwards.
	event := 9_000_000_000 + rand.Int64N(1_000_000_000)
	defer func() {
		k := inventory.KeysFor(event)
		rdb.Del(context.WithoutCancel(ctx), k.Remaining, k.Users, k.Holds, k.Expiry, k.Frozen)
	}()

	strategies := make([]strategy.Strategy, len(names))
	for i, n := range names {
		if strategies[i], err = strategy.New(n, pool, rdb, event); err != nil {
			return err
		}
	}
	// Warm every connection up front so no strategy pays for dialling.
	if err := warm(ctx, pool, rdb, *pgConns); err != nil {
		return err
	}

	fmt.Fprintf(out, "%d concurrent buyers, %d tickets, %d round(s) per strategy, %d PostgreSQL connections\n\n", *buyers, *capacity, *rounds, *pgConns)
	results := make([][]strategy.Round, len(names))
	for r := range *rounds {
		for i, s := range strategies {
			round, err := strategy.Contend(ctx, s, *capacity, *buyers)
			if err != nil {
				return fmt.Errorf("round %d: %w", r+1, err)
			}
			results[i] = append(results[i], round)
		}
	}

	t := report.Table{Header: []string{"strategy", "capacity", "sold", "OVERSOLD", "time", "buys/s"}}
	var medians []strategy.Round
	broken := false
	for i, rs := range results {
		m := median(rs)
		medians = append(medians, m)
		t.Add(m.Strategy, m.Capacity, m.Sold, m.Oversold, report.Seconds(m.Elapsed), report.Rate(m.BuysPerSecond()))
		if names[i] != strategy.NaiveName && slices.ContainsFunc(rs, func(r strategy.Round) bool { return r.Oversold != 0 }) {
			broken = true
		}
	}
	t.Write(out)
	if *jsonPath != "" {
		if err := report.WriteJSON(*jsonPath, map[string]any{"buyers": *buyers, "capacity": *capacity, "median": medians, "rounds": results}); err != nil {
			return err
		}
	}
	if broken {
		return fmt.Errorf("%w: a correct strategy oversold", errBroken)
	}
	return nil
}

// median is the round with the median time.
func median(rs []strategy.Round) strategy.Round {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b strategy.Round) int { return int(a.Elapsed - b.Elapsed) })
	return s[len(s)/2]
}

func warm(ctx context.Context, pool *pgxpool.Pool, rdb *redis.Client, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	errs := make(chan error, 2*n)
	for range n {
		go func() {
			_, err := pool.Exec(ctx, "SELECT pg_sleep(0.01)")
			errs <- err
		}()
		go func() { errs <- rdb.Ping(ctx).Err() }()
	}
	for range 2 * n {
		if err := <-errs; err != nil {
			return fmt.Errorf("warm up connections: %w", err)
		}
	}
	return nil
}
