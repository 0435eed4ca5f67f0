package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/pound"
	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/stack"
)

// upstreamBody is what the shared upstream and Caddy's respond both answer,
// so the compared responses are the same size.
const upstreamBody = `{"ok":true}`

// gatewaySites are the sites of one Caddy, measured side by side.
type gatewaySites struct {
	plainProxy, roomProxy, respond, roomWaiting, roomArrivals, roomArrivalsLeased stack.Site
}

func runGateway(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("gateway", "The gateway's cost, as ratios measured side by side in one run with one Caddy,\none upstream and one client:\n  (a) plain reverse_proxy vs the waiting room admitting the same traffic (goal ≥ 0.95)\n  (b) respond vs the waiting response to a queued token (goal ≥ 0.8)\n  (c) new arrivals per second with the Redis store vs respond (goals ≥ 20,000/s, ≥ 0.4)", errOut)
	var srv servers
	srv.register(fs, false)
	caddyBin := fs.String("caddy", "bin/caddy", "Caddy with the waitroom module (make build)")
	workers := fs.Int("workers", 64, "concurrent client connections per measurement")
	each := fs.Duration("each", time.Second, "length of one measurement")
	rounds := fs.Int("rounds", 7, "rounds; each round measures every site once, in turn")
	jsonPath := fs.String("json", "", "also write the measurements to this JSON file")
	keep := fs.Bool("keep", false, "keep the run's folder (Caddyfile, logs)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := positive(map[string]float64{"workers": float64(*workers), "each": each.Seconds(), "rounds": float64(*rounds)}); err != nil {
		return err
	}
	if err := srv.check(true, false); err != nil {
		return err
	}
	if err := needBinary(*caddyBin, "make build"); err != nil {
		return err
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
		if ports[i], err = stack.FreePort(); err != nil {
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
	caddy, err := stack.StartCaddy(ctx, stack.CaddyConfig{
		Bin: *caddyBin, Dir: dir, KeyID: "k1", Secret: secret,
		Sites: []stack.Site{sites.plainProxy, sites.roomProxy, sites.respond, sites.roomWaiting, sites.roomArrivals, sites.roomArrivalsLeased},
	})
	if err != nil {
		return err
	}
	defer caddy.Stop(10 * time.Second)

	client := api.NewHTTPClient(*workers, 10*time.Second)
	admitted, err := joinOnce(ctx, client, sites.roomProxy.URL(), api.StatusAdmitted)
	if err != nil {
		return err
	}
	queued, err := joinOnce(ctx, client, sites.roomWaiting.URL(), api.StatusWaiting)
	if err != nil {
		return err
	}

	type target struct {
		name  string
		site  stack.Site
		token string
		want  string // X-Waitroom-Status expected, "" for none
	}
	targets := []target{
		{"reverse_proxy", sites.plainProxy, "", ""},
		{"waitroom + reverse_proxy (admitted)", sites.roomProxy, admitted, api.StatusAdmitted},
		{"respond", sites.respond, "", ""},
		{"waitroom waiting response (queued token)", sites.roomWaiting, queued, api.StatusWaiting},
		{"waitroom new arrival (Redis store)", sites.roomArrivals, "", api.StatusWaiting},
		{fmt.Sprintf("waitroom new arrival (Redis store, lease %d)", arrivalLease), sites.roomArrivalsLeased, "", api.StatusWaiting},
	}
	load := func(t target, d time.Duration) pound.Result {
		return pound.Run(ctx, pound.Load{
			Client: client, Workers: *workers, Duration: d,
			Request: func(int, int64) *http.Request {
				req, _ := http.NewRequest(http.MethodGet, t.site.URL()+"/", nil)
				req.Header.Set("Accept", "application/json")
				if t.token != "" {
					req.Header.Set(api.HeaderToken, t.token)
				}
				return req
			},
			Check: func(resp *http.Response, _ []byte) error {
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("%s: status %d", t.name, resp.StatusCode)
				}
				if got := resp.Header.Get(api.HeaderStatus); got != t.want {
					return fmt.Errorf("%s: X-Waitroom-Status %q, want %q", t.name, got, t.want)
				}
				return nil
			},
		})
	}
	// Warm every site's connections and code paths before measuring.
	for _, t := range targets {
		load(t, 300*time.Millisecond)
	}
	// Each round measures every site once; a round's ratios compare sites
	// measured seconds apart, and the median round is reported, so a burst
	// of noise from elsewhere on the machine spoils one round, not the
	// figure.
	perRound := make([][]pound.Result, *rounds)
	totals := make([]pound.Result, len(targets))
	for rd := range *rounds {
		for i, t := range targets {
			r := load(t, *each)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if r.Failed > 0 {
				return fmt.Errorf("%s: %d of %d requests failed, first: %s", t.name, r.Failed, r.Requests, r.FirstErr)
			}
			perRound[rd] = append(perRound[rd], r)
			totals[i].Requests += r.Requests
			totals[i].Elapsed += r.Elapsed
			totals[i].Latency = r.Latency
		}
	}
	medianRatio := func(a, b int) float64 {
		var rs []float64
		for _, round := range perRound {
			rs = append(rs, round[a].PerSecond()/round[b].PerSecond())
		}
		slices.Sort(rs)
		return rs[len(rs)/2]
	}
	ra, rb, rc, rl := medianRatio(1, 0), medianRatio(3, 2), medianRatio(4, 2), medianRatio(5, 2)
	medianRate := func(site int) float64 {
		var rates []float64
		for _, round := range perRound {
			rates = append(rates, round[site].PerSecond())
		}
		slices.Sort(rates)
		return rates[len(rates)/2]
	}
	arrivals, leased := medianRate(4), medianRate(5)

	fmt.Fprintf(out, "One Caddy, one upstream, one client: %d connections, %d rounds of %s per site, interleaved\n\n", *workers, *rounds, *each)
	t := report.Table{Header: []string{"site", "requests", "req/s (all rounds)", "p50 (last round)", "p99 (last round)"}}
	for i, tg := range targets {
		r := totals[i]
		t.Add(tg.name, report.Count(r.Requests), report.Rate(r.PerSecond()), report.Millis(r.Latency.P50), report.Millis(r.Latency.P99))
	}
	t.Write(out)
	fmt.Fprintln(out)
	r := report.Table{Header: []string{"ratio (median round)", "measured", "goal", "met"}}
	r.Add("(a) admitted through waitroom / plain reverse_proxy", fmt.Sprintf("%.2f", ra), "≥ 0.95", met(ra >= 0.95))
	r.Add("(b) waiting response / respond", fmt.Sprintf("%.2f", rb), "≥ 0.80", met(rb >= 0.8))
	r.Add("(c) new arrivals (Redis store) / respond", fmt.Sprintf("%.2f", rc), "≥ 0.40", met(rc >= 0.4))
	r.Add("(c) new arrivals per second (Redis store)", report.Rate(arrivals), "≥ 20,000", met(arrivals >= 20000))
	r.Add(fmt.Sprintf("(c) new arrivals, lease %d / respond", arrivalLease), fmt.Sprintf("%.2f", rl), "≥ 0.40", met(rl >= 0.4))
	r.Add(fmt.Sprintf("(c) new arrivals per second, lease %d", arrivalLease), report.Rate(leased), "≥ 20,000", met(leased >= 20000))
	r.Write(out)

	if *jsonPath != "" {
		m := map[string]any{"workers": *workers, "rounds": *rounds, "each_ns": *each,
			"ratios": map[string]float64{"admitted_vs_proxy": ra, "waiting_vs_respond": rb,
				"arrivals_vs_respond": rc, "leased_arrivals_vs_respond": rl},
			"arrivals_per_second": arrivals, "leased_arrivals_per_second": leased}
		sites := map[string][]pound.Result{}
		for _, round := range perRound {
			for i, tg := range targets {
				sites[tg.name] = append(sites[tg.name], round[i])
			}
		}
		m["rounds_by_site"] = sites
		if err := report.WriteJSON(*jsonPath, m); err != nil {
			return err
		}
	}
	return nil
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
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, usagef("redis url: %v", err)
	}
	return redis.NewClient(opts), nil
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
