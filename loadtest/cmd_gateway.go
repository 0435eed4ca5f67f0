package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/internal/freeport"
	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/stack"
	"github.com/waitroom/waitroom/loadtest/wrk"
	"github.com/waitroom/waitroom/waitroom"
)

// upstreamBody is what the shared upstream and Caddy's respond both answer,
// so the compared responses are the same size.
const upstreamBody = `{"ok":true}`

// gatewaySites are the sites of one Caddy, measured side by side.
type gatewaySites struct {
	plainProxy, roomProxy, respond, roomWaiting, roomArrivals, roomArrivalsLeased stack.Site
	// The floors answer the waiting room's bytes with Caddy's own header
	// and respond directives (floorSite).
	floorJSON, floorHTML, floorArrival, floorAdmitted stack.Site
}

// gatewayTarget is one measured site and request.
type gatewayTarget struct {
	name   string
	site   stack.Site
	header map[string]string
	// want is the X-Waitroom-Status expected ("" for none), wantType the
	// Content-Type's media type ("" for any), wantEncoding the
	// Content-Encoding ("" for none).
	want, wantType, wantEncoding string
	// profile names the CPU profile taken of it ("" for none).
	profile string
	// store: its answers ask the Redis store, whose calls and CPU time per
	// request are measured too.
	store bool
}

// gatewayRatio is one goal: site a's rate over site b's, the median round.
// floor is the site that sends a's bytes with Caddy's own directives (-1
// for none): the ratio no handler answering those bytes can pass.
type gatewayRatio struct {
	name        string
	a, b, floor int
	goal        float64
}

func runGateway(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("gateway", "The gateway's cost, as ratios measured side by side in one run with one Caddy\nand one upstream, driven by wrk (Debian's package; a C client that costs far\nless per request than the server):\n  (a) plain reverse_proxy vs the waiting room admitting the same traffic (goal ≥ 0.95)\n  (b) respond vs the waiting answer to a queued token, both sent the same\n      request: JSON (goal ≥ 0.9) and HTML as a browser asks for it (goal ≥ 0.8)\n  (c) new arrivals with the Redis store vs respond (goals ≥ 0.8 with lease, ≥ 0.7\n      without, and ≥ 20,000/s with lease)\nBeside each waiting-room ratio, its floor: the same answer's bytes and header\nfields sent by Caddy's own header and respond directives, with no waiting room.", errOut)
	var srv servers
	srv.register(fs, false)
	caddyBin := fs.String("caddy", "bin/caddy", "Caddy with the waitroom module (make build)")
	conns := fs.Int("conns", 64, "wrk's connections per measurement")
	threads := fs.Int("threads", 1, "wrk's threads")
	each := fs.Duration("each", 2*time.Second, "length of one measurement (whole seconds)")
	rounds := fs.Int("rounds", 5, "rounds; each round measures every site once, in turn")
	profileDir := fs.String("profile", "", "after the rounds, take a CPU and an allocation profile of Caddy (its admin endpoint's /debug/pprof) under each waiting-room load into this folder")
	profileFor := fs.Duration("profile-seconds", 5*time.Second, "length of each profile")
	jsonPath := fs.String("json", "", "also write the measurements to this JSON file")
	keep := fs.Bool("keep", false, "keep the run's folder (Caddyfile, logs)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := positive(map[string]float64{"conns": float64(*conns), "threads": float64(*threads), "each": each.Seconds(), "rounds": float64(*rounds), "profile-seconds": profileFor.Seconds()}); err != nil {
		return err
	}
	if err := srv.check(true, false); err != nil {
		return err
	}
	if err := needBinary(*caddyBin, "make build"); err != nil {
		return err
	}
	if _, err := wrk.Path(); err != nil {
		return usagef("%v", err)
	}
	dir, cleanup, err := workDir("gateway", *keep, errOut)
	if err != nil {
		return err
	}
	defer cleanup()

	up, err := startUpstream()
	if err != nil {
		return err
	}
	defer up.Close()

	base := 8_000_000_000 + rand.Int64N(1_000_000_000)
	events := [4]int64{base, base + 1, base + 2, base + 3}
	rdb, err := redisClient(srv.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	defer removeQueueKeys(context.WithoutCancel(ctx), rdb, events[:]...)

	var sites gatewaySites
	ports := make([]int, 6)
	for i := range ports {
		if ports[i], err = freeport.Take(); err != nil {
			return err
		}
	}
	upstream := up.Addr().String()
	sites.plainProxy = stack.Site{Port: ports[0], Upstream: upstream}
	sites.roomProxy = stack.Site{Port: ports[1], Upstream: upstream,
		Waitroom: &stack.Waitroom{Event: events[0], Store: "memory", Watermark: 1 << 40}}
	sites.respond = stack.Site{Port: ports[2], Respond: upstreamBody}
	sites.roomWaiting = stack.Site{Port: ports[3], Respond: upstreamBody,
		Waitroom: &stack.Waitroom{Event: events[1], Store: "memory", Watermark: 0}}
	sites.roomArrivals = stack.Site{Port: ports[4], Respond: upstreamBody,
		Waitroom: &stack.Waitroom{Event: events[2], Store: srv.redisURL, Watermark: 0}}
	// The same with positions leased from Redis in blocks (lease), as a
	// fleet of gateways would run on sale day.
	sites.roomArrivalsLeased = stack.Site{Port: ports[5], Respond: upstreamBody,
		Waitroom: &stack.Waitroom{Event: events[3], Store: srv.redisURL, Watermark: 0, Lease: arrivalLease}}

	secret := api.NewKey() + api.NewKey()
	client := api.NewHTTPClient(4, 10*time.Second)
	answers, err := askRoomAnswers(ctx, client, *caddyBin, filepath.Join(dir, "answers"), secret, events[1])
	if err != nil {
		return err
	}
	floorPorts := make([]int, 4)
	for i := range floorPorts {
		if floorPorts[i], err = freeport.Take(); err != nil {
			return err
		}
	}
	sites.floorJSON = floorSite(floorPorts[0], answers.json)
	sites.floorHTML = floorSite(floorPorts[1], answers.html)
	sites.floorArrival = floorSite(floorPorts[2], answers.arrival)
	// The plain proxy, with what the waiting room adds to an admitted
	// request and its answer set by Caddy's header_up and header.
	sites.floorAdmitted = stack.Site{Port: floorPorts[3], Upstream: up.Addr().String(), HeaderUp: answers.passedOn, Header: answers.admitted}

	caddy, err := stack.StartCaddy(ctx, stack.CaddyConfig{
		Bin: *caddyBin, Dir: dir, KeyID: "k1", Secret: secret,
		Sites: []stack.Site{sites.plainProxy, sites.roomProxy, sites.respond, sites.roomWaiting, sites.roomArrivals, sites.roomArrivalsLeased,
			sites.floorJSON, sites.floorHTML, sites.floorArrival, sites.floorAdmitted},
	})
	if err != nil {
		return err
	}
	defer caddy.Stop(10 * time.Second)

	admitted, err := joinOnce(ctx, client, sites.roomProxy.URL(), api.StatusAdmitted)
	if err != nil {
		return err
	}
	queued, err := joinOnce(ctx, client, sites.roomWaiting.URL(), api.StatusWaiting)
	if err != nil {
		return err
	}
	jsonAccept := map[string]string{"Accept": "application/json"}
	// Both proxies get the same request, token included: a plain proxy
	// passes the header on as it is.
	withToken := map[string]string{"Accept": "application/json", api.HeaderToken: admitted}
	poll := map[string]string{"Accept": "application/json", api.HeaderToken: queued}
	// The page is asked for as a browser asks for it.
	browser := map[string]string{"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "Accept-Encoding": "gzip, deflate, br",
		"Cookie": waitroom.CookieName(events[1]) + "=" + queued}
	targets := []gatewayTarget{
		{name: "reverse_proxy", site: sites.plainProxy, header: withToken},
		{name: "waitroom + reverse_proxy (admitted)", site: sites.roomProxy, want: api.StatusAdmitted, profile: "admitted", header: withToken},
		// respond gets the request of each answer it is compared with, as
		// the plain proxy does: what a client sends is not the server's work.
		{name: "respond", site: sites.respond, header: jsonAccept},
		{name: "respond, a JSON poll's request", site: sites.respond, header: poll},
		{name: "respond, a browser's request", site: sites.respond, header: browser},
		{name: "waiting answer, JSON (queued token)", site: sites.roomWaiting, want: api.StatusWaiting, wantType: "application/json", profile: "waiting-json", header: poll},
		{name: "waiting answer, HTML (queued cookie)", site: sites.roomWaiting, want: api.StatusWaiting, wantType: "text/html", wantEncoding: "gzip", profile: "waiting-html", header: browser},
		{name: "new arrival (Redis store)", site: sites.roomArrivals, want: api.StatusWaiting, profile: "arrival", header: jsonAccept, store: true},
		{name: fmt.Sprintf("new arrival (Redis store, lease %d)", arrivalLease), site: sites.roomArrivalsLeased, want: api.StatusWaiting, profile: "arrival-lease", header: jsonAccept, store: true},
		// Each floor gets the request of the answer it stands for.
		{name: "floor: the JSON answer's bytes", site: sites.floorJSON, want: api.StatusWaiting, wantType: "application/json", header: poll},
		{name: "floor: the page's bytes", site: sites.floorHTML, want: api.StatusWaiting, wantType: "text/html", wantEncoding: "gzip", header: browser},
		{name: "floor: an arrival's bytes", site: sites.floorArrival, want: api.StatusWaiting, wantType: "application/json", header: jsonAccept},
		{name: "floor: the admitted request's fields", site: sites.floorAdmitted, want: api.StatusAdmitted, header: withToken},
	}
	ratios := []gatewayRatio{
		{"(a) admitted through waitroom / plain reverse_proxy", 1, 0, 12, 0.95},
		{"(b) waiting answer, JSON / respond", 5, 3, 9, 0.9},
		{"(b) waiting answer, HTML / respond", 6, 4, 10, 0.8},
		{"(c) new arrivals (Redis store) / respond", 7, 2, 11, 0.7},
		{fmt.Sprintf("(c) new arrivals, lease %d / respond", arrivalLease), 8, 2, 11, 0.8},
	}
	for _, t := range targets {
		if err := checkTarget(ctx, client, t); err != nil {
			return err
		}
	}
	caddyPID := caddy.PID()
	// Redis's own CPU time reads 0 for a server of another machine.
	redisPID := 0
	if pids, err := stack.RedisPIDs(ctx, srv.redisURL); err == nil && len(pids) == 1 {
		redisPID = pids[0]
	}
	load := func(t gatewayTarget, d time.Duration) (gatewayRun, error) {
		var store0 storeCounters
		if t.store {
			var err error
			if store0, err = readStoreCounters(ctx, rdb, redisPID); err != nil {
				return gatewayRun{}, err
			}
		}
		cpu0, err := stack.CPUTime(caddyPID)
		if err != nil {
			return gatewayRun{}, err
		}
		r, err := wrk.Run(ctx, wrk.Load{URL: t.site.URL() + "/", Header: t.header, Conns: *conns, Threads: *threads, Duration: d})
		if err != nil {
			return gatewayRun{}, err
		}
		cpu1, err := stack.CPUTime(caddyPID)
		if err != nil {
			return gatewayRun{}, err
		}
		if r.Failed() > 0 {
			return gatewayRun{}, fmt.Errorf("%s: %d of %d requests failed (non-2xx %d, socket errors %d)", t.name, r.Failed(), r.Requests, r.Non2xx, r.SocketErrors)
		}
		run := gatewayRun{Result: r, CaddyCPU: cpu1 - cpu0}
		if t.store {
			store1, err := readStoreCounters(ctx, rdb, redisPID)
			if err != nil {
				return gatewayRun{}, err
			}
			run.RedisCalls, run.RedisCPU = store1.calls-store0.calls, store1.cpu-store0.cpu
		}
		return run, nil
	}
	// Warm every site's connections and code paths before measuring.
	for _, t := range targets {
		if _, err := load(t, time.Second); err != nil {
			return err
		}
	}
	// Each round measures every site once; a round's ratios compare sites
	// measured seconds apart, and the median round is reported, so a burst
	// of noise from elsewhere on the machine spoils one round, not the
	// figure.
	perRound := make([][]gatewayRun, *rounds)
	for rd := range *rounds {
		for _, t := range targets {
			r, err := load(t, *each)
			if err != nil {
				return err
			}
			perRound[rd] = append(perRound[rd], r)
		}
	}
	median := func(f func(round []gatewayRun) float64) float64 {
		var vs []float64
		for _, round := range perRound {
			vs = append(vs, f(round))
		}
		slices.Sort(vs)
		return vs[len(vs)/2]
	}

	fmt.Fprintf(out, "One Caddy (2 cores shared with wrk and the upstream), one upstream; wrk %d thread(s), %d connections; %d rounds of %s per site, interleaved\n\n", *threads, *conns, *rounds, *each)
	t := report.Table{Header: []string{"site", "req/s (median round)", "Caddy CPU µs/request", "wrk CPU share", "p50", "p99"}}
	for i, tg := range targets {
		last := perRound[len(perRound)-1][i]
		t.Add(tg.name, report.Rate(median(func(r []gatewayRun) float64 { return r[i].PerSecond })),
			fmt.Sprintf("%.1f", median(func(r []gatewayRun) float64 { return r[i].cpuPerRequest() })),
			fmt.Sprintf("%.0f%%", 100*median(func(r []gatewayRun) float64 { return r[i].CPUShare })),
			report.Millis(last.P50), report.Millis(last.P99))
	}
	t.Write(out)
	fmt.Fprintln(out)
	// What the store's answers cost Redis: its calls are shared by the
	// arrivals that meet behind one take, or a leased block.
	st := report.Table{Header: []string{"site", "Redis script calls per request", "Redis CPU µs/request"}}
	for i, tg := range targets {
		if !tg.store {
			continue
		}
		cpu := "–"
		if redisPID != 0 {
			cpu = fmt.Sprintf("%.1f", median(func(r []gatewayRun) float64 { return r[i].redisCPUPerRequest() }))
		}
		st.Add(tg.name, fmt.Sprintf("%.3f", median(func(r []gatewayRun) float64 { return r[i].redisCallsPerRequest() })), cpu)
	}
	st.Write(out)
	fmt.Fprintln(out)
	// The goals are on the rates. Beside them, the same ratio by Caddy's
	// CPU time per request (b's over a's), which work elsewhere on the
	// machine moves far less than it moves the rates.
	// The floor beside each: the same bytes sent by Caddy's own header and
	// respond directives, over the same denominator.
	rt := report.Table{Header: []string{"goal (median round)", "measured", "by Caddy CPU", "floor", "floor by CPU", "goal", "met"}}
	measured, byCPU, floors := map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, g := range ratios {
		v := median(func(r []gatewayRun) float64 { return r[g.a].PerSecond / r[g.b].PerSecond })
		c := median(func(r []gatewayRun) float64 { return r[g.b].cpuPerRequest() / r[g.a].cpuPerRequest() })
		measured[g.name], byCPU[g.name] = v, c
		floor, floorCPU := "", ""
		if g.floor >= 0 {
			f := median(func(r []gatewayRun) float64 { return r[g.floor].PerSecond / r[g.b].PerSecond })
			floors[g.name] = f
			floor = fmt.Sprintf("%.2f", f)
			floorCPU = fmt.Sprintf("%.2f", median(func(r []gatewayRun) float64 { return r[g.b].cpuPerRequest() / r[g.floor].cpuPerRequest() }))
		}
		// Three places: a ratio just under its goal would print as the goal.
		rt.Add(g.name, fmt.Sprintf("%.3f", v), fmt.Sprintf("%.2f", c), floor, floorCPU, fmt.Sprintf("≥ %.2f", g.goal), met(v >= g.goal))
	}
	leased := median(func(r []gatewayRun) float64 { return r[8].PerSecond })
	rt.Add(fmt.Sprintf("(c) new arrivals per second, lease %d", arrivalLease), report.Rate(leased), "", "", "", "≥ 20,000", met(leased >= 20000))
	rt.Write(out)

	if *profileDir != "" {
		if err := profileCaddy(ctx, caddy, targets, *profileDir, *profileFor, func(t gatewayTarget, d time.Duration) error {
			_, err := load(t, d)
			return err
		}); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nCPU and allocation profiles of Caddy written to %s (go tool pprof -top %s %s/<site>.pprof, <site>.allocs.pprof)\n", *profileDir, *caddyBin, *profileDir)
	}

	if *jsonPath != "" {
		m := map[string]any{"conns": *conns, "threads": *threads, "rounds": *rounds, "each_ns": *each,
			"ratios": measured, "ratios_by_caddy_cpu": byCPU, "floors": floors, "leased_arrivals_per_second": leased}
		bySite := map[string][]gatewayRun{}
		for _, round := range perRound {
			for i, tg := range targets {
				bySite[tg.name] = append(bySite[tg.name], round[i])
			}
		}
		m["rounds_by_site"] = bySite
		if err := report.WriteJSON(*jsonPath, m); err != nil {
			return err
		}
	}
	return nil
}

// gatewayRun is one measurement of a site, and the CPU Caddy spent on it.
type gatewayRun struct {
	wrk.Result
	CaddyCPU time.Duration `json:"caddy_cpu_ns"`
	// RedisCalls and RedisCPU are the store's script calls (a take of
	// positions is one) and its CPU time over the run, for a site that
	// asks it.
	RedisCalls int64         `json:"redis_calls,omitempty"`
	RedisCPU   time.Duration `json:"redis_cpu_ns,omitempty"`
}

// redisCallsPerRequest is the store's script calls per request answered.
func (r gatewayRun) redisCallsPerRequest() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.RedisCalls) / float64(r.Requests)
}

// redisCPUPerRequest is Redis's CPU time per request answered, in µs.
func (r gatewayRun) redisCPUPerRequest() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.RedisCPU.Microseconds()) / float64(r.Requests)
}

// storeCounters are Redis's counters a site's cost in the store is read
// from: its script calls, and the server's CPU time (0 when pid is 0: a
// server of another machine).
type storeCounters struct {
	calls int64
	cpu   time.Duration
}

func readStoreCounters(ctx context.Context, rdb *redis.Client, pid int) (storeCounters, error) {
	var c storeCounters
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return c, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	stats, err := parseCommandStats(info)
	if err != nil {
		return c, err
	}
	// Every call the waiting room makes is a script's (a take of
	// positions is next.lua's); the commands a script runs count apart.
	c.calls = stats["evalsha"].Calls + stats["eval"].Calls
	if pid != 0 {
		if c.cpu, err = stack.CPUTime(pid); err != nil {
			return c, err
		}
	}
	return c, nil
}

// cpuPerRequest is Caddy's CPU time per request answered, in µs: the
// server's cost, whatever else the machine was doing.
func (r gatewayRun) cpuPerRequest() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.CaddyCPU.Microseconds()) / float64(r.Requests)
}

// checkTarget sends a target's request once and checks the answer wrk
// will count blindly: 200, the waiting room's status, the media type and
// the encoding.
func checkTarget(ctx context.Context, client *http.Client, t gatewayTarget) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.site.URL()+"/", nil)
	if err != nil {
		return err
	}
	for k, v := range t.header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", t.name, resp.StatusCode)
	}
	if got := resp.Header.Get(api.HeaderStatus); got != t.want {
		return fmt.Errorf("%s: X-Waitroom-Status %q, want %q", t.name, got, t.want)
	}
	if t.wantType != "" {
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != t.wantType {
			return fmt.Errorf("%s: Content-Type %q, want %s", t.name, resp.Header.Get("Content-Type"), t.wantType)
		}
	}
	if got := resp.Header.Get("Content-Encoding"); got != t.wantEncoding {
		return fmt.Errorf("%s: Content-Encoding %q, want %q", t.name, got, t.wantEncoding)
	}
	return nil
}

// profileCaddy takes a CPU profile and an allocation profile (what was
// allocated meanwhile) of Caddy from its admin endpoint while load drives
// each profiled target: <profile>.pprof and <profile>.allocs.pprof per
// target.
func profileCaddy(ctx context.Context, caddy *stack.Caddy, targets []gatewayTarget, dir string, d time.Duration, load func(gatewayTarget, time.Duration) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	client := &http.Client{Timeout: d + 30*time.Second}
	for _, t := range targets {
		if t.profile == "" {
			continue
		}
		secs := max(1, int(d/time.Second))
		done := make(chan error, 1)
		go func() {
			// The load runs a second longer than the profiles on each side.
			done <- load(t, time.Duration(secs+2)*time.Second)
		}()
		sleepCtx(ctx, time.Second)
		kinds := map[string]string{"profile": t.profile + ".pprof", "allocs": t.profile + ".allocs.pprof"}
		got := make(chan error, len(kinds))
		for kind, file := range kinds {
			go func() {
				got <- fetchProfile(ctx, client, fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", caddy.AdminURL, kind, secs), filepath.Join(dir, file))
			}()
		}
		var errs []error
		for range kinds {
			errs = append(errs, <-got)
		}
		errs = append(errs, <-done)
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("profile %s: %w", t.name, err)
		}
	}
	return nil
}

// fetchProfile writes what url answers to path.
func fetchProfile(ctx context.Context, client *http.Client, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d, %v", url, resp.StatusCode, err)
	}
	return os.WriteFile(path, b, 0o644)
}

// arrivalLease is the block of positions a gateway takes from Redis at once
// in the leased arrivals run.
const arrivalLease = 100

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// joinOnce joins a site's queue and returns the token, checking the status.
func joinOnce(ctx context.Context, client *http.Client, base, want string) (string, error) {
	c := api.Client{HTTP: client, Base: base}
	resp, err := c.Do(ctx, api.Request{Method: http.MethodGet, Path: "/"})
	if err != nil {
		return "", fmt.Errorf("join %s: %w", base, err)
	}
	if got := resp.Waitroom(); got != want {
		return "", resp.Unexpected(fmt.Sprintf("join %s (X-Waitroom-Status %q, want %q)", base, got, want))
	}
	token := resp.Header.Get(api.HeaderToken)
	if token == "" {
		return "", fmt.Errorf("join %s: no %s header in the answer", base, api.HeaderToken)
	}
	return token, nil
}

// startUpstream serves upstreamBody on a loopback port.
func startUpstream() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	body := []byte(upstreamBody)
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		}))
	}()
	return ln, nil
}

func redisClient(url string) (*redis.Client, error) {
	return oneRedis(url, redisurl.Defaults{})
}

// oneRedis is the client of the one server url names, made as the gateway
// and the origin make theirs.
func oneRedis(url string, d redisurl.Defaults) (*redis.Client, error) {
	c, err := redisurl.New(url, d)
	if err != nil {
		return nil, usagef("%v", err)
	}
	one, ok := c.(*redis.Client)
	if !ok {
		_ = c.Close()
		return nil, usagef("redis url %s: this command needs one server, not a cluster", url)
	}
	return one, nil
}

// removeQueueKeys deletes the queue state a run left in a shared Redis.
func removeQueueKeys(ctx context.Context, rdb *redis.Client, events ...int64) {
	for _, e := range events {
		tag := hashtag.Event(e)
		keys, _ := rdb.Keys(ctx, "*"+tag+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	}
}

// needBinary checks that a program the run starts exists.
func needBinary(path, build string) error {
	st, err := os.Stat(path)
	if err != nil {
		return usagef("%s not found; build it first (%s) or point the flag at it", path, build)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return usagef("%s is not an executable", path)
	}
	return nil
}

// workDir makes the run's folder for generated configs and server logs,
// removed afterwards unless keep.
func workDir(name string, keep bool, errOut io.Writer) (string, func(), error) {
	dir, err := os.MkdirTemp("", "waitroom-loadtest-"+name+"-")
	if err != nil {
		return "", nil, err
	}
	return dir, func() {
		if keep {
			fmt.Fprintf(errOut, "run folder kept: %s\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}, nil
}
