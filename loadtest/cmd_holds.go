package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/internal/freeport"
	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/stack"
	"github.com/waitroom/waitroom/loadtest/wrk"
	"github.com/waitroom/waitroom/waitroom"
)

//go:embed holds.lua
var holdsScript []byte

func runHolds(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("holds", "Durable holds per second through the origin's HTTP API (token check, Lua hold,\nPostgreSQL row), driven by wrk at many connections, each request a distinct\nuser, on an event large enough never to sell out; then redis-benchmark runs the\nsame hold script (EVALSHA) on the same Redis, and the ratio of the two is\nreported with where a hold's CPU time went.", errOut)
	var srv servers
	srv.register(fs, true)
	originBin := fs.String("origin", "bin/origin", "the origin (go build -o bin/origin ./cmd/origin)")
	clients := fs.Int("clients", 1000, "wrk connections")
	threads := fs.Int("threads", 2, "wrk threads")
	duration := fs.Duration("duration", 10*time.Second, "length of the measurement")
	warmup := fs.Duration("warmup", 2*time.Second, "unmeasured load before it")
	capacity := fs.Int64("capacity", 10_000_000, "seats of the event (never sold out)")
	tokenRate := fs.Int("tokens-per-second", 25_000, "queue tokens signed beforehand per second of load (each used once; too few fails the run)")
	rounds := fs.Int("rounds", 5, "rounds, each the origin measured and then the bare script; the goals are judged on the median round")
	benchN := fs.Int("bench-requests", 200_000, "redis-benchmark requests")
	benchC := fs.Int("bench-clients", 50, "redis-benchmark connections")
	profileDir := fs.String("profile", "", "take CPU and allocation profiles (pprof) of the origin over the measurement into this folder")
	jsonPath := fs.String("json", "", "also write the figures to this JSON file")
	keep := fs.Bool("keep", false, "keep the run's folder (server logs)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := positive(map[string]float64{"clients": float64(*clients), "threads": float64(*threads), "duration": duration.Seconds(),
		"capacity": float64(*capacity), "tokens-per-second": float64(*tokenRate), "bench-requests": float64(*benchN), "bench-clients": float64(*benchC),
		"rounds": float64(*rounds)}); err != nil {
		return err
	}
	if *warmup < 0 {
		return usagef("--warmup must not be negative")
	}
	if err := srv.check(true, true); err != nil {
		return err
	}
	if err := needBinary(*originBin, "go build -o bin/origin ./cmd/origin"); err != nil {
		return err
	}
	if _, err := wrk.Path(); err != nil {
		return err
	}
	benchBin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return fmt.Errorf("redis-benchmark is not installed (Debian package redis-tools): %w", err)
	}
	dir, cleanup, err := workDir("holds", *keep, errOut)
	if err != nil {
		return err
	}
	defer cleanup()

	env := []string{"ORIGIN_LOG_FORMAT=json"}
	var debugURL string
	if *profileDir != "" {
		port, err := freeport.Take()
		if err != nil {
			return err
		}
		debugURL = fmt.Sprintf("http://127.0.0.1:%d", port)
		env = append(env, fmt.Sprintf("ORIGIN_DEBUG_ADDR=127.0.0.1:%d", port))
	}
	fmt.Fprintln(errOut, "starting the origin…")
	sys, err := stack.Up(ctx, stack.SystemConfig{
		OriginBin: *originBin, Dir: dir, RedisURL: srv.redisURL, DatabaseURL: srv.databaseURL, NoGateway: true,
		OriginEnv: env,
		Event:     api.NewEvent{Name: "Holds benchmark", Capacity: *capacity, Price: 90000, Currency: "inr", HoldTTLSeconds: 3600, MaxPerUser: 1},
	})
	if err != nil {
		return err
	}
	defer func() {
		for _, e := range sys.Down(context.WithoutCancel(ctx)) {
			fmt.Fprintf(errOut, "stopping: %v\n", e)
		}
	}()
	rdb, err := redisClient(sys.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	keys, err := signedUsers(ctx, rdb, sys, sys.Event.ID)
	if err != nil {
		return err
	}

	script := filepath.Join(dir, "holds.lua")
	if err := os.WriteFile(script, holdsScript, 0o644); err != nil {
		return err
	}
	var users int64
	load := func(name string, d time.Duration) (wrk.Result, error) {
		file := filepath.Join(dir, name+".tokens")
		n := int64(*tokenRate) * int64(max(1, d.Round(time.Second)/time.Second))
		if err := writeTokens(file, keys, sys.Event.ID, users, n); err != nil {
			return wrk.Result{}, err
		}
		users += n
		return wrk.Run(ctx, wrk.Load{
			URL:    sys.Origin.URL + "/v1/events/" + strconv.FormatInt(sys.Event.ID, 10) + "/holds",
			Script: script, ScriptArgs: []string{file, "/v1/events/" + strconv.FormatInt(sys.Event.ID, 10) + "/holds", api.HeaderToken, strconv.Itoa(*threads)},
			Conns: *clients, Threads: *threads, Duration: d,
		})
	}
	fmt.Fprintf(errOut, "wrk, %d connections: %s warm-up, then %s measured…\n", *clients, *warmup, *duration)
	if *warmup >= time.Second {
		if _, err := load("warmup", *warmup); err != nil {
			return err
		}
	}
	// One round: the origin under wrk, then the bare script alone, so the
	// two sides of a round's ratio are seconds apart; over several rounds
	// the median round's ratio is the one judged (docs/loadtest.md).
	measure := func(profileDir string) (holdsRound, error) {
		var r holdsRound
		before, err := sys.DB.SettledWrites(ctx, 15*time.Second)
		if err != nil {
			return r, err
		}
		costBefore, err := readHoldCosts(ctx, rdb, sys.DB.URL, sys.Origin.PID())
		if err != nil {
			return r, err
		}
		profiles := startProfiles(ctx, debugURL, profileDir, *duration)
		if r.measured, err = load("measured", *duration); err != nil {
			return r, err
		}
		costAfter, err := readHoldCosts(ctx, rdb, sys.DB.URL, sys.Origin.PID())
		if err != nil {
			return r, err
		}
		if err := profiles(); err != nil {
			return r, err
		}
		after, err := sys.DB.SettledWrites(ctx, 15*time.Second)
		if err != nil {
			return r, err
		}
		r.writes, r.costs = after.Sub(before), costAfter.sub(costBefore)
		if f := r.measured.Failed(); f > 0 {
			fmt.Fprintf(errOut, "%d of %d holds failed (%d non-2xx answers, %d socket errors; 4xx answers also come from a thread that ran out of tokens: raise --tokens-per-second)\n",
				f, r.measured.Requests, r.measured.Non2xx, r.measured.SocketErrors)
		}

		fmt.Fprintf(errOut, "redis-benchmark: %d EVALSHA of the hold script, %d connections…\n", *benchN, *benchC)
		bareBefore, err := readHoldCosts(ctx, rdb, sys.DB.URL, sys.Origin.PID())
		if err != nil {
			return r, err
		}
		if r.raw, r.cmdline, err = benchHoldScript(ctx, rdb, benchBin, sys.RedisURL, *benchN, *benchC); err != nil {
			return r, err
		}
		bareAfter, err := readHoldCosts(ctx, rdb, sys.DB.URL, sys.Origin.PID())
		if err != nil {
			return r, err
		}
		r.bareRedis = bareAfter.sub(bareBefore).redis
		r.held = r.measured.Requests - r.measured.Failed()
		r.perSecond = float64(r.held) / r.measured.Elapsed.Seconds()
		r.ratio = r.perSecond / r.raw
		return r, nil
	}
	var all []holdsRound
	for i := range *rounds {
		if *rounds > 1 {
			fmt.Fprintf(errOut, "round %d of %d\n", i+1, *rounds)
		}
		dir := ""
		if i == 0 {
			dir = *profileDir // the first round's
		}
		r, err := measure(dir)
		if err != nil {
			return err
		}
		all = append(all, r)
	}
	if *rounds > 1 {
		writeHoldsRounds(out, all)
	}
	m := medianRound(all)
	measured, held, perSecond, raw, ratio := m.measured, m.held, m.perSecond, m.raw, m.ratio
	writes, costs, cmdline := m.writes, m.costs, m.cmdline
	t := report.Table{Header: []string{"path", "holds/s", "p50", "p99", "held", "client CPU"}}
	t.Add(fmt.Sprintf("origin HTTP API, wrk -c %d (durable)", *clients), report.Rate(perSecond), report.Millis(measured.P50), report.Millis(measured.P99),
		report.Count(held), fmt.Sprintf("%.0f%%", 100*measured.CPUShare))
	t.Add(fmt.Sprintf("hold script alone, redis-benchmark -c %d", *benchC), report.Rate(raw), "", "", report.Count(*benchN), "")
	t.Write(out)
	holdRows := m.rows()
	perHold := func(n int64) float64 { return float64(n) / float64(max(holdRows, 1)) }
	fmt.Fprintf(out, "\norigin / bare script: %.3f (goals: ≥ 12,000 durable holds/s: %s; ≥ 0.35 of the bare script: %s; wrk's CPU share ≤ 40%%: %s)\n",
		ratio, met(perSecond >= 12000), met(ratio >= 0.35), met(measured.CPUShare <= 0.4))
	fmt.Fprintf(out, "PostgreSQL per hold: %.2f rows written, %.2f commits (%.0f commits/s; goal ≤ 2 writes: %s); rows by table: %v\n",
		perHold(writes.Rows()), perHold(writes.Commits), float64(writes.Commits)/measured.Elapsed.Seconds(), met(perHold(writes.Rows()) <= 2), writes.Tables)
	costs.write(out, holdRows, measured.CPU)
	fmt.Fprintf(out, "Redis CPU time per call of the bare script (redis-benchmark): %.1f µs\n", float64(m.bareRedis.Microseconds())/float64(*benchN))
	fmt.Fprintf(out, "redis-benchmark command: %s\n", cmdline)
	if *profileDir != "" {
		fmt.Fprintf(out, "origin profiles written to %s (go tool pprof -top %s %s/cpu.pprof; -sample_index=alloc_space %s/allocs.pprof)\n",
			*profileDir, *originBin, *profileDir, *profileDir)
	}
	if *jsonPath != "" {
		return report.WriteJSON(*jsonPath, map[string]any{
			"connections": *clients, "origin": measured, "holds_per_second": perSecond,
			"script_per_second": raw, "ratio": ratio, "postgres": writes,
			"rows_per_hold": perHold(writes.Rows()), "commits_per_hold": perHold(writes.Commits),
			"redis_commands": costs.commands, "redis_benchmark": cmdline, "rounds": roundsJSON(all),
		})
	}
	return nil
}

// holdsRound is one round: the origin measured under wrk, then the bare
// script alone.
type holdsRound struct {
	measured       wrk.Result
	held           int64
	perSecond, raw float64
	ratio          float64
	writes         stack.Writes
	costs          holdCosts
	bareRedis      time.Duration
	cmdline        string
}

// rows is the holds the round counts. Holds whose request was cut off at
// the end of the warm-up land in the measured counts too: it is the hold
// rows the ledger got.
func (r holdsRound) rows() int64 {
	if n := r.writes.Tables["holds"]; n > 0 {
		return n
	}
	return r.held
}

// medianRound is the round whose ratio is the median (the lower middle one
// of an even count): its figures all come from one round.
func medianRound(rs []holdsRound) holdsRound {
	sorted := slices.Clone(rs)
	slices.SortStableFunc(sorted, func(a, b holdsRound) int { return cmp.Compare(a.ratio, b.ratio) })
	return sorted[(len(sorted)-1)/2]
}

// writeHoldsRounds writes a line per round and the medians.
func writeHoldsRounds(out io.Writer, rs []holdsRound) {
	t := report.Table{Header: []string{"round", "holds/s", "bare script/s", "of the bare script", "origin CPU per hold"}}
	for i, r := range rs {
		t.Add(strconv.Itoa(i+1), report.Rate(r.perSecond), report.Rate(r.raw), fmt.Sprintf("%.3f", r.ratio),
			fmt.Sprintf("%.1f µs", float64(r.costs.origin.Microseconds())/float64(max(r.rows(), 1))))
	}
	m := medianRound(rs)
	t.Add("median round", report.Rate(m.perSecond), report.Rate(m.raw), fmt.Sprintf("%.3f", m.ratio), "")
	t.Write(out)
	fmt.Fprintln(out, "\nThe median round (by its ratio), in full:")
}

func roundsJSON(rs []holdsRound) []map[string]float64 {
	out := make([]map[string]float64, len(rs))
	for i, r := range rs {
		out[i] = map[string]float64{"holds_per_second": r.perSecond, "script_per_second": r.raw, "ratio": r.ratio}
	}
	return out
}

// writeTokens writes n queue tokens, one a line, of the users from+1 to
// from+n, each admitted (its position its number).
func writeTokens(path string, keys *waitroom.KeySet, event, from, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for u := from + 1; u <= from+n; u++ {
		tok, err := keys.Issue("bench-"+strconv.FormatInt(u, 10), event, u, time.Hour)
		if err != nil {
			f.Close()
			return fmt.Errorf("sign a queue token: %w", err)
		}
		w.WriteString(tok.Raw)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// signedUsers admits every position of event in the shared queue state (no
// gateway in this run) and returns the key set the origin verifies with.
func signedUsers(ctx context.Context, rdb *redis.Client, sys *stack.System, event int64) (*waitroom.KeySet, error) {
	keys, err := waitroom.NewKeySet(nil, waitroom.Key{ID: sys.KeyID, Secret: []byte(sys.Secret)})
	if err != nil {
		return nil, err
	}
	wm := int64(1) << 40
	store := waitroom.NewRedisStore(rdb, waitroom.RedisOptions{})
	if _, err := store.Update(ctx, event, waitroom.Change{SetWatermark: &wm}); err != nil {
		return nil, fmt.Errorf("admit everyone: %w", err)
	}
	// The origin follows the store within its poll interval.
	time.Sleep(1500 * time.Millisecond)
	return keys, nil
}

// benchHoldScript loads the hold script on a fresh event with more seats
// than redis-benchmark will take, runs redis-benchmark's EVALSHA on it with
// a random user and hold id per call, and returns calls per second.
func benchHoldScript(ctx context.Context, rdb *redis.Client, bin, redisURL string, n, conns int) (float64, string, error) {
	event := 6_000_000_000 + rand.Int64N(1_000_000_000)
	inv := inventory.New(rdb)
	defer func() { _ = stack.RemoveEventKeys(context.WithoutCancel(ctx), redisURL, event) }()
	if err := inv.Rebuild(ctx, event, func(context.Context) (inventory.Snapshot, error) {
		return inventory.Snapshot{Remaining: int64(n) * 10}, nil
	}); err != nil {
		return 0, "", err
	}
	sha, err := rdb.ScriptLoad(ctx, inventory.HoldScriptSource()).Result()
	if err != nil {
		return 0, "", fmt.Errorf("load the hold script: %w", err)
	}
	now := time.Now()
	keys, argv, err := inventory.HoldScriptArgs(inventory.HoldRequest{
		Event: event, HoldID: "hold:__rand_int__", User: "user:__rand_int__", Quantity: 1,
		ExpiresAt: now.Add(time.Hour), Now: now,
	}, inventory.DefaultReclaimLimit)
	if err != nil {
		return 0, "", err
	}
	u, err := url.Parse(redisURL)
	if err != nil {
		return 0, "", err
	}
	args := []string{"-h", u.Hostname(), "-p", u.Port(), "-c", strconv.Itoa(conns), "-n", strconv.Itoa(n), "-r", "1000000000", "--csv",
		"EVALSHA", sha, strconv.Itoa(len(keys))}
	args = append(args, keys...)
	for _, a := range argv {
		args = append(args, fmt.Sprint(a))
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmdline := "redis-benchmark " + strings.Join(args, " ")
	if err := cmd.Run(); err != nil {
		return 0, cmdline, fmt.Errorf("redis-benchmark: %w: %s", err, stderr.String())
	}
	rps, err := benchmarkRate(stdout.String())
	if err != nil {
		return 0, cmdline, err
	}
	// The script must have held, not refused: check the seats went.
	left, _, err := inv.Remaining(ctx, event)
	if err == nil && left > int64(n)*10-int64(n)*9/10 {
		return 0, cmdline, fmt.Errorf("redis-benchmark: the script took only %d seats in %d calls", int64(n)*10-left, n)
	}
	return rps, cmdline, nil
}

// benchmarkRate reads requests per second from redis-benchmark's --csv
// output. The test name column holds the command unescaped (quotes and
// all), so the figures are taken from the end of the line.
func benchmarkRate(out string) (float64, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := strings.Trim(strings.TrimSpace(lines[len(lines)-1]), `"`)
	fields := strings.Split(last, `","`)
	if len(lines) < 2 || len(fields) < 8 {
		return 0, fmt.Errorf("redis-benchmark: unreadable output %q", out)
	}
	rps, err := strconv.ParseFloat(fields[len(fields)-7], 64)
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: requests per second in %q: %w", out, err)
	}
	return rps, nil
}
