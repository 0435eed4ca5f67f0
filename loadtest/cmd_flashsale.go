package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/sale"
	"github.com/waitroom/waitroom/loadtest/stack"
	"github.com/waitroom/waitroom/origin/ledger"
)

// faultNames are the faults --faults accepts.
var faultNames = []string{"redis-restart", "pg-pause", "webhooks", "change-mind"}

// saleFlags is the flash sale's command line.
type saleFlags struct {
	srv                 servers
	cfg                 sale.Config
	seats               int64
	holdTTL             time.Duration
	overflowPct         int64
	caddyBin, originBin string
	faults              string
	pgPause             time.Duration
	pgPauseAt           time.Duration
	redisRestartAt      time.Duration
	reaper              time.Duration
	payLatency          time.Duration
	jsonPath, chartPath string
	heapProfile         string
	gateways            int
	seating             bool
	quiet, keep         bool
	gate                gateFlags
	autopilot           string
	maxUndecided        int64
	abandonAfter        time.Duration
	pilot               *stack.Autopilot
	// upstream, when set, is put between the gateways and the origin.
	upstream func(originURL string) (string, error)
}

func (f *saleFlags) register(fs *flagSet) {
	d := sale.Defaults()
	f.cfg = d
	f.srv.register(fs, true)
	fs.IntVar(&f.cfg.Users, "users", d.Users, "virtual users")
	fs.DurationVar(&f.cfg.Window, "window", d.Window, "time over which the users arrive")
	fs.Float64Var(&f.cfg.Refresh, "refresh", d.Refresh, "requests per user while arriving, 1–2 (browsers refresh and retry)")
	fs.Int64Var(&f.seats, "seats", 500, "seats (capacity; the overflow reserve is kept back from it)")
	fs.Int64Var(&f.overflowPct, "overflow-pct", 2, "overflow reserve, percent of the capacity")
	fs.Int64Var(&f.cfg.Quantity, "quantity", d.Quantity, "seats per buyer")
	fs.DurationVar(&f.holdTTL, "hold-ttl", 15*time.Second, "how long a hold lasts (whole seconds)")
	fs.Float64Var(&f.cfg.Abandon, "abandon", d.Abandon, "fraction of holders who never pay")
	fs.Float64Var(&f.cfg.Decline, "decline", d.Decline, "fraction of payments declined (the buyer retries once with a good card)")
	fs.Float64Var(&f.cfg.ChangeMind, "change-mind", d.ChangeMind, "fraction of payments reported failed, then succeeded by the provider (pm_fakepay_fail_then_succeed; the buyer retries with a good card meanwhile); the fault change-mind sets 0.05")
	fs.Float64Var(&f.cfg.Late, "late", d.Late, "fraction of payments whose webhook arrives after the hold expired")
	fs.Float64Var(&f.cfg.DoubleClick, "double-click", d.DoubleClick, "fraction of bookings sent twice at once with the same Idempotency-Key")
	fs.Float64Var(&f.cfg.Persist, "persist", d.Persist, "fraction of admitted users told sold out who keep trying for --patience")
	fs.DurationVar(&f.cfg.Patience, "patience", d.Patience, "how long the persistent keep trying")
	fs.DurationVar(&f.cfg.Think, "think", d.Think, "longest pause of a buyer between two steps")
	fs.StringVar(&f.autopilot, "autopilot", "closed", "the gateway's autopilot: closed (the closed loop, steered by the origin's inventory) or <step>/<interval> (a fixed rate)")
	fs.Int64Var(&f.maxUndecided, "max-undecided", 0, "the closed loop's cap on users admitted and undecided (0: the gateway's default)")
	fs.DurationVar(&f.abandonAfter, "abandon-after", 40*time.Second, "the gateway's abandon_after: a waiting user who has not polled for this long gave up (the crowd polls at most every 30s)")
	fs.DurationVar(&f.cfg.Timeout, "timeout", d.Timeout, "bound on the whole sale")
	fs.DurationVar(&f.cfg.Settle, "settle", d.Settle, "bound on the wait for the invariant to settle afterwards")
	fs.IntVar(&f.cfg.Conns, "conns", d.Conns, "most connections the crowd opens to the gateway")
	fs.Uint64Var(&f.cfg.Seed, "seed", 0, "seed of the crowd's choices (0: random)")
	fs.StringVar(&f.faults, "faults", "", "faults to inject, comma-separated: "+strings.Join(faultNames, ", ")+", or all")
	fs.DurationVar(&f.pgPause, "pg-pause", 3*time.Second, "how long PostgreSQL is paused (fault pg-pause)")
	fs.DurationVar(&f.pgPauseAt, "pg-pause-at", 0, "when PostgreSQL is paused, from the first arrival (default: half the window)")
	fs.DurationVar(&f.redisRestartAt, "redis-restart-at", 0, "when Redis is restarted, from the first arrival (default: the window + 2s)")
	fs.DurationVar(&f.reaper, "reaper", time.Second, "the origin's reaper and reconciler interval")
	fs.DurationVar(&f.payLatency, "pay-latency", 50*time.Millisecond, "latency of each call to the simulated payment provider")
	fs.StringVar(&f.caddyBin, "caddy", "bin/caddy", "Caddy with the waitroom module (make build)")
	fs.StringVar(&f.originBin, "origin", "bin/origin", "the origin (go build -o bin/origin ./cmd/origin)")
	fs.StringVar(&f.jsonPath, "json", "", "also write the report to this JSON file")
	fs.StringVar(&f.chartPath, "chart", "out/flashsale.svg", "chart of the sale over time (.svg or .png; empty: none)")
	fs.IntVar(&f.gateways, "gateways", 1, "Caddy processes in front of the origin, sharing one Redis; the crowd goes round-robin over them")
	fs.StringVar(&f.heapProfile, "heap-profile", "", "write the load generator's heap profile (pprof) to this file once every user has arrived")
	fs.BoolVar(&f.seating, "seating", false, "a reserved-seating event of --seats seats (a general-admission section GA-Floor of a fifth of them first, then rows of 25; no overflow reserve); buyers take the best seats available")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar")
	fs.BoolVar(&f.keep, "keep", false, "keep the run's folder (configs, server logs) and its database")
	f.gate.register(fs)
}

func (f *saleFlags) check() ([]string, error) {
	// check fills in defaults that depend on other flags.
	if err := f.cfg.Validate(); err != nil {
		return nil, usagef("%v", err)
	}
	if f.seats <= 0 {
		return nil, usagef("--seats must be positive")
	}
	if f.gateways < 1 {
		return nil, usagef("--gateways must be at least 1")
	}
	if f.seating {
		f.overflowPct = 0 // reserved seating keeps no overflow reserve
	}
	pilot, err := parseAutopilot(f.autopilot, f.maxUndecided)
	if err != nil {
		return nil, err
	}
	f.pilot = pilot
	if f.overflowPct < 0 || f.overflowPct > 100 {
		return nil, usagef("--overflow-pct must be from 0 to 100")
	}
	if f.holdTTL < time.Second || f.holdTTL%time.Second != 0 {
		return nil, usagef("--hold-ttl must be whole seconds, at least 1s (got %s)", f.holdTTL)
	}
	if f.cfg.Quantity > f.seats {
		return nil, usagef("--quantity %d exceeds --seats %d", f.cfg.Quantity, f.seats)
	}
	if f.reaper <= 0 || f.pgPause <= 0 || f.payLatency < 0 || f.pgPauseAt < 0 || f.redisRestartAt < 0 {
		return nil, usagef("--reaper and --pg-pause must be positive; --pay-latency, --pg-pause-at and --redis-restart-at not negative")
	}
	if err := f.gate.check(); err != nil {
		return nil, err
	}
	if f.pgPauseAt == 0 {
		f.pgPauseAt = f.cfg.Window / 2
	}
	if f.redisRestartAt == 0 {
		f.redisRestartAt = f.cfg.Window + 2*time.Second
	}
	if f.chartPath != "" {
		if ext := strings.ToLower(filepath.Ext(f.chartPath)); ext != ".svg" && ext != ".png" {
			return nil, usagef("--chart must name a .svg or .png file (got %q)", f.chartPath)
		}
	}
	var faults []string
	for _, name := range strings.Split(f.faults, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case name == "all":
			faults = append(faults, faultNames...)
		case slices.Contains(faultNames, name):
			faults = append(faults, name)
		default:
			return nil, usagef("--faults: unknown fault %q (want %s or all)", name, strings.Join(faultNames, ", "))
		}
	}
	slices.Sort(faults)
	faults = slices.Compact(faults)
	if err := f.srv.check(!slices.Contains(faults, "redis-restart"), true); err != nil {
		return nil, err
	}
	if slices.Contains(faults, "redis-restart") && redisurl.IsCluster(f.srv.redisURL) {
		return nil, usagef("--faults redis-restart restarts a Redis server of the run's own, not the cluster %s names", f.srv.redisURL)
	}
	if err := needBinary(f.caddyBin, "make build"); err != nil {
		return nil, err
	}
	if err := needBinary(f.originBin, "go build -o bin/origin ./cmd/origin"); err != nil {
		return nil, err
	}
	return faults, nil
}

func runFlashSale(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("flashsale", "A whole flash sale on this machine: starts the origin and Caddy with the\nwaiting room (over $REDIS_URL and $DATABASE_URL), creates the event, sends the\ncrowd through the gateway, prints the report and stops what it started.", errOut)
	var f saleFlags
	f.register(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	faults, err := f.check()
	if err != nil {
		return err
	}
	res, err := flashSale(ctx, f, faults, out, errOut)
	if err != nil {
		return err
	}
	if res.Broken() {
		return fmt.Errorf("%w: oversold %d, drift %d%s%s%s", errBroken, res.Oversold, res.Invariant.Drift, invErr(res), moneyErr(res), gateErr(res))
	}
	return nil
}

func moneyErr(r *sale.Result) string {
	switch {
	case r.MoneyError != "":
		return " (money account unreadable: " + r.MoneyError + ")"
	case r.MoneyKept():
		return fmt.Sprintf(", money kept silently: %d payments (%d)", r.Money.Kept.Count, r.Money.Kept.Amount)
	}
	return ""
}

func invErr(r *sale.Result) string {
	if r.InvariantError != "" {
		return " (invariant unreadable: " + r.InvariantError + ")"
	}
	return ""
}

// flashSale brings the system up, runs the sale, reports, and brings the
// system down again whatever happens.
func flashSale(ctx context.Context, f saleFlags, faults []string, out, errOut io.Writer) (*sale.Result, error) {
	dir, cleanup, err := workDir("flashsale", f.keep, errOut)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	has := func(name string) bool { return slices.Contains(faults, name) }
	ttl := int64(f.holdTTL / time.Second)
	env := []string{
		"ORIGIN_REAPER_INTERVAL=" + f.reaper.String(),
		"ORIGIN_RECONCILE_INTERVAL=" + f.reaper.String(),
		"ORIGIN_PAYMENT_RECONCILE_INTERVAL=" + f.reaper.String(),
		// Payments whose webhook is late or lost are asked about soon, so
		// the money is settled when the report is read.
		"ORIGIN_PAYMENT_PENDING_AFTER=" + (3 * f.reaper).String(),
		"ORIGIN_LOG_FORMAT=json",
		"FAKEPAY_LATENCY=" + f.payLatency.String(),
		"FAKEPAY_LATENCY_JITTER=" + f.payLatency.String(),
	}
	if has("change-mind") && f.cfg.ChangeMind == 0 {
		// A provider that reports a payment failed, then succeeded: the
		// buyer pays again meanwhile, and one payment must be refunded.
		f.cfg.ChangeMind = 0.05
	}
	if has("webhooks") {
		// Every webhook five times, each copy delayed at random: duplicates
		// and events out of order.
		env = append(env, "FAKEPAY_MIN_COPIES=5", "FAKEPAY_MAX_COPIES=5", "FAKEPAY_MAX_DELAY=2s")
		f.cfg.LateCopies = 5
	}
	fmt.Fprintf(errOut, "starting the origin and Caddy (run folder %s)…\n", dir)
	sys, err := stack.Up(ctx, stack.SystemConfig{
		CaddyBin: f.caddyBin, OriginBin: f.originBin, Dir: dir,
		RedisURL: f.srv.redisURL, DatabaseURL: f.srv.databaseURL,
		OwnRedis: has("redis-restart"), PausablePostgres: has("pg-pause"),
		OriginEnv: env, KeepDatabase: f.keep, Gateways: f.gateways, Autopilot: f.pilot, AbandonAfter: f.abandonAfter, Upstream: f.upstream,
		Event: api.NewEvent{Name: "Flash sale", Capacity: f.seats, Price: 90000, Currency: "inr",
			HoldTTLSeconds: ttl, MaxPerUser: max(f.cfg.Quantity, 1), OverflowPct: &f.overflowPct, Seating: saleSeating(f)},
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, e := range sys.Down(context.WithoutCancel(ctx)) {
			fmt.Fprintf(errOut, "stopping: %v\n", e)
		}
		if f.keep {
			fmt.Fprintf(errOut, "database kept: %s\n", sys.DB.URL)
		}
	}()
	// A server that dies mid-sale ends the run at once.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchSystem(ctx, sys, cancel)

	var cmds redisCounter
	target := saleTarget(sys, &cmds)
	// A restart resets the error counts; the run's own server answers
	// nobody else.
	var errsBefore map[string]int64
	if !has("redis-restart") {
		if errsBefore, err = stack.RedisErrors(ctx, sys.RedisURL); err != nil {
			return nil, err
		}
	}
	var inject []sale.Fault
	if has("pg-pause") {
		inject = append(inject, sale.Fault{Name: "PostgreSQL paused", At: f.pgPauseAt, Do: func(ctx context.Context) (string, error) {
			sys.Proxy.Pause()
			sleepCtx(ctx, f.pgPause)
			sys.Proxy.Resume()
			return fmt.Sprintf("every byte between the origin and PostgreSQL held for %s", f.pgPause), nil
		}})
	}
	if has("redis-restart") {
		inject = append(inject, sale.Fault{Name: "Redis restarted", At: f.redisRestartAt, Do: func(ctx context.Context) (string, error) {
			return restartRedis(ctx, sys, &cmds)
		}})
	}

	through := sys.Gateway
	if len(sys.More) > 0 {
		through = fmt.Sprintf("%d gateways (%s and %d more)", 1+len(sys.More), sys.Gateway, len(sys.More))
	}
	fmt.Fprintf(errOut, "event %d: %d seats, %d sellable; %s users arriving over %s through %s\n",
		sys.Event.ID, sys.Event.Capacity, sys.Event.Sellable, report.Count(f.cfg.Users), f.cfg.Window, through)
	bar := newBar(f.cfg.Users, f.quiet, errOut)
	var profiled bool
	res, err := sale.Run(ctx, f.cfg, target, inject, func(done, _ int64, s sale.Sample) {
		if f.heapProfile != "" && !profiled && s.T >= f.cfg.Window {
			// The crowd is whole and the queue at its longest: the most the
			// load generator holds.
			profiled = true
			if err := writeHeapProfile(f.heapProfile); err != nil {
				fmt.Fprintf(errOut, "heap profile: %v\n", err)
			}
		}
		if bar == nil {
			return
		}
		bar.Describe(fmt.Sprintf("queue %s · admitted %s · held %d · sold %d of %d seats", report.Count(s.Queue), report.Count(s.Admitted), s.Holds, s.Sold, sys.Event.Capacity))
		_ = bar.Set64(done)
	})
	if bar != nil {
		_ = bar.Finish()
		fmt.Fprintln(errOut)
	}
	if cause := context.Cause(ctx); err != nil && cause != nil && cause != context.Canceled {
		return nil, cause
	}
	if err != nil {
		return nil, err
	}
	res.Memory = readMemory(ctx, sys)
	if err := f.gate.run(ctx, sys, res, errOut); err != nil {
		return nil, err
	}
	if errsBefore != nil {
		after, err := stack.RedisErrors(ctx, sys.RedisURL)
		if err != nil {
			return nil, err
		}
		res.RedisErrors = map[string]int64{}
		for code, n := range after {
			if n -= errsBefore[code]; n != 0 {
				res.RedisErrors[code] = n
			}
		}
	}
	report.PrintSale(out, res)
	if f.seating {
		if err := checkSeats(ctx, sys, res, out); err != nil {
			return res, err
		}
	}
	if f.heapProfile != "" {
		fmt.Fprintf(out, "\nheap profile written to %s (go tool pprof -sample_index=inuse_space %s)\n", f.heapProfile, f.heapProfile)
	}
	if f.jsonPath != "" {
		if err := report.WriteJSON(f.jsonPath, res); err != nil {
			return res, err
		}
		fmt.Fprintf(out, "\nreport written to %s\n", f.jsonPath)
	}
	if f.chartPath != "" {
		if err := os.MkdirAll(filepath.Dir(f.chartPath), 0o755); err != nil {
			return res, err
		}
		if err := report.SaleChart(f.chartPath, res); err != nil {
			return res, err
		}
		fmt.Fprintf(out, "chart written to %s\n", f.chartPath)
	}
	return res, nil
}

// redisCounter adds up Redis's command counter across restarts, which
// reset it.
type redisCounter struct{ before atomic.Int64 }

func (c *redisCounter) read(ctx context.Context, url string) (int64, error) {
	n, err := stack.RedisCommands(ctx, url)
	return c.before.Load() + n, err
}

// saleTarget is how the crowd and the report reach the system.
func saleTarget(sys *stack.System, cmds *redisCounter) sale.Target {
	var more []sale.Gateway
	for _, c := range sys.More {
		more = append(more, sale.Gateway{Site: c.Sites[0].URL(), Admin: c.AdminURL})
	}
	return sale.Target{
		Gateway: sys.Gateway, GatewayAdmin: sys.Caddy.AdminURL, MoreGateways: more, Origin: sys.Origin.URL,
		AdminToken: sys.AdminToken, WebhookSecret: sys.WebhookSecret, Event: sys.Event.ID,
		Writes: func(ctx context.Context) (sale.Writes, error) {
			w, err := sys.DB.SettledWrites(ctx, 15*time.Second)
			return sale.Writes{Rows: w.Rows(), Commits: w.Commits, Tables: w.Tables}, err
		},
		Commands: func(ctx context.Context) (int64, error) {
			return cmds.read(ctx, sys.RedisURL)
		},
		Money: func(ctx context.Context) (sale.Money, error) { return readMoney(ctx, sys) },
	}
}

// readMoney reads the origin's account of the event's money from its
// ledger.
func readMoney(ctx context.Context, sys *stack.System) (sale.Money, error) {
	l, err := ledger.Open(ctx, sys.DB.URL, ledger.Options{MaxConns: 2})
	if err != nil {
		return sale.Money{}, err
	}
	defer l.Close()
	r, err := l.MoneyReport(ctx, sys.Event.ID)
	if err != nil {
		return sale.Money{}, err
	}
	c := func(m ledger.MoneyCount) sale.MoneyCount { return sale.MoneyCount{Count: m.Count, Amount: m.Amount} }
	return sale.Money{
		Captured: c(r.Captured), Confirmed: c(r.Confirmed), Refunded: c(r.Refunded),
		RefundPending: c(r.RefundPending), RefundFailed: c(r.RefundFailed), Kept: c(r.Kept),
		PaymentPending: c(r.PaymentPending),
	}, nil
}

// restartRedis kills the Redis under the origin and the gateway and starts
// it again empty. The origin must rebuild the inventory from its ledger;
// if it has not done so by itself within a few seconds, the operator's
// rebuild call is made (and the note says which happened).
func restartRedis(ctx context.Context, sys *stack.System, cmds *redisCounter) (string, error) {
	if n, err := stack.RedisCommands(ctx, sys.RedisURL); err == nil {
		cmds.before.Add(n)
	}
	if err := sys.Redis.Restart(ctx); err != nil {
		return "", err
	}
	admin := api.OriginAdmin{Client: api.Client{HTTP: api.NewHTTPClient(0, 10*time.Second), Base: sys.Origin.URL}, Token: sys.AdminToken}
	loaded := func() bool {
		n, err := stack.RedisKeyExists(ctx, sys.RedisURL, sys.Event.ID)
		return err == nil && n
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if loaded() {
			return "killed and restarted empty; the origin reloaded the inventory from PostgreSQL by itself", nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	inv, err := admin.Rebuild(ctx, sys.Event.ID)
	if err != nil {
		return "killed and restarted empty; the origin had not reloaded after 5s and the rebuild call failed", err
	}
	return fmt.Sprintf("killed and restarted empty; rebuilt through the admin API after 5s (remaining %d, drift %d)", inv.Remaining, inv.Drift), nil
}

func watchSystem(ctx context.Context, sys *stack.System, cancel context.CancelCauseFunc) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := sys.Failed(); err != nil {
				cancel(err)
				return
			}
		}
	}
}

func newBar(users int, quiet bool, w io.Writer) *progressbar.ProgressBar {
	if quiet {
		return nil
	}
	return progressbar.NewOptions64(int64(users),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("starting"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(24),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
	)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// writeHeapProfile writes the live heap, after a collection, as pprof.
func writeHeapProfile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readMemory reads the peak resident memory of every process of the run:
// this load generator, the gateways, the origin, Redis and PostgreSQL.
func readMemory(ctx context.Context, sys *stack.System) []sale.ProcessMemory {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	one := func(name string, pids []int, err error) sale.ProcessMemory {
		m := sale.ProcessMemory{Name: name}
		if err != nil {
			m.Error = err.Error()
			return m
		}
		for _, pid := range pids {
			rss, err := stack.PeakRSS(pid)
			if err != nil {
				// A backend that ended in the meantime.
				continue
			}
			m.Processes++
			m.PeakRSS += rss
			m.Largest = max(m.Largest, rss)
		}
		return m
	}
	out := []sale.ProcessMemory{one("loadtest (this process)", []int{os.Getpid()}, nil)}
	for i, c := range sys.Caddies() {
		name := "Caddy + waitroom"
		if len(sys.Caddies()) > 1 {
			name = fmt.Sprintf("Caddy + waitroom #%d", i+1)
		}
		out = append(out, one(name, []int{c.PID()}, nil))
	}
	out = append(out, one("origin", []int{sys.Origin.PID()}, nil))
	rpids, err := stack.RedisPIDs(ctx, sys.RedisURL)
	out = append(out, one("Redis", rpids, err))
	pids, err := stack.PostgresPIDs(ctx, sys.DB.URL)
	out = append(out, one("PostgreSQL", pids, err))
	return out
}

// saleSeating is the seat map of a --seating sale: first a
// general-admission section, GA-Floor, of a fifth of f.seats (so the
// buyers' bare quantities, which take the first section that has them,
// sell its places first), then the rest in rows of 25, ten rows a section,
// the last row shorter when they do not divide.
func saleSeating(f saleFlags) *api.Seating {
	if !f.seating {
		return nil
	}
	const perRow, rowsPerSection = 25, 10
	m := &api.Seating{}
	left := f.seats
	if ga := f.seats / 5; ga > 0 {
		m.Sections = append(m.Sections, api.Section{ID: "GA-Floor", Price: 45000, Capacity: int64(ga)})
		left -= ga
	}
	for n := 0; left > 0; n++ {
		sec := api.Section{ID: string(rune('A' + n%26)), Price: 90000}
		if n >= 26 {
			sec.ID += strconv.Itoa(n / 26)
		}
		for r := 1; r <= rowsPerSection && left > 0; r++ {
			k := min(left, perRow)
			sec.Rows = append(sec.Rows, api.Row{ID: strconv.Itoa(r), Seats: int(k)})
			left -= k
		}
		m.Sections = append(m.Sections, sec)
	}
	return m
}

// checkSeats audits a --seating sale's reserved seats in the ledger (no
// seat had by two holds or two tickets), its general-admission sections
// (never more places held or sold than the section has, every place in a
// bucket or a hold, a number for every place sold) and its seat drift,
// which counts the sections' places too.
func checkSeats(ctx context.Context, sys *stack.System, res *sale.Result, out io.Writer) error {
	l, err := ledger.Open(ctx, sys.DB.URL, ledger.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer l.Close()
	a, err := l.AuditSeats(ctx, sys.Event.ID, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nreserved seats: %d held or sold; had twice: %d by two holds, %d by a hold its seat row does not name, %d with two tickets; seat drift %d\n",
		a.Held, a.DoubleHeld, a.Mismatched, a.DoubleTicketed, res.Invariant.SeatDrift)
	if twice := a.DoubleHeld + a.Mismatched + a.DoubleTicketed; twice != 0 || res.Invariant.SeatDrift != 0 {
		return fmt.Errorf("%w: reserved seats had twice %d, seat drift %d", errBroken, twice, res.Invariant.SeatDrift)
	}
	sections, err := l.AuditSections(ctx, sys.Event.ID)
	if err != nil {
		return err
	}
	for _, s := range sections {
		fmt.Fprintf(out, "general-admission section %s: %d places, %d held or sold (%d sold, %d numbered), %d left in its buckets\n",
			s.Section, s.Capacity, s.Taken, s.Sold, s.Numbered, s.Remaining)
		if s.Taken > s.Capacity || s.Remaining+s.Taken != s.Capacity || s.Numbered != s.Sold {
			return fmt.Errorf("%w: section %s: %d places, %d taken, %d in its buckets, %d sold, %d numbered",
				errBroken, s.Section, s.Capacity, s.Taken, s.Remaining, s.Sold, s.Numbered)
		}
	}
	return nil
}
