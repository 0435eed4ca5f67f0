package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/waitroom/waitroom/caddymodule"
	"github.com/waitroom/waitroom/waitroom"
)

// The bots scenario: one scripted client joins as fast as it can (one
// address, a new visitor each time) among a crowd of humans, each with its
// own address, and the front of the queue is counted. It runs an in-process
// Caddy with the waiting room on loopback, once per set of defences.

// botDefences are the rows of the report.
var botDefences = []string{"none", "challenge", "join_rate", "challenge+join_rate"}

// botAddress is the bot's one client address; humans are 10.x.y.z.
const botAddress = "192.0.2.66"

type botConfig struct {
	humans     int
	window     time.Duration
	botRate    float64
	first      int
	difficulty int
	joinRate   int
	joinPer    time.Duration
	humanSolve time.Duration
	prequeue   bool
	workers    int
}

// botRow is one run's outcome.
type botRow struct {
	defence, order string
	// botAttempts counts the bot's tries, botPlaced the places (or
	// pre-queue entries) it got, botLimited its 429s, botSolved the
	// challenges it solved.
	botAttempts, botPlaced, botLimited, botSolved int
	humansPlaced, humansLimited, humanErrors      int
	botInFirst, first                             int
	positionsTwice                                int
	took                                          time.Duration
}

func runBots(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("bots", "One bot client (one address, a new visitor on every try) joins at --bot-rate among\n--humans humans (one address each) arriving over --window, with no defences, with the\nchallenge, with join_rate and with both; the report is the bot's share of the first\n--first positions. An in-process Caddy on loopback; every run is bounded by --window.", errOut)
	var c botConfig
	fs.IntVar(&c.humans, "humans", 5000, "humans, arriving at random times over --window")
	fs.DurationVar(&c.window, "window", 10*time.Second, "how long humans keep arriving and the bot keeps trying")
	fs.Float64Var(&c.botRate, "bot-rate", 200, "the bot's tries per second")
	fs.IntVar(&c.first, "first", 500, "the front of the queue that is counted")
	fs.IntVar(&c.difficulty, "difficulty", 12, "challenge bits (the product's default is 19; lower keeps 5,000 humans' solving within this machine, and --human-solve stands for a phone's time)")
	rate := fs.String("join-rate", "5/1m", "join_rate as <n>/<duration>")
	fs.DurationVar(&c.humanSolve, "human-solve", time.Second, "how long a human's browser takes over the challenge (a phone at 19 bits)")
	fs.BoolVar(&c.prequeue, "prequeue", false, "also run every row with a scheduled opening (pre-queue and draw)")
	fs.IntVar(&c.workers, "workers", 1024, "concurrent humans at most: above arrivals per second × --human-solve, or humans queue in the load generator")
	only := fs.String("only", "", "run only these defences, comma-separated ("+strings.Join(botDefences, ", ")+")")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if err := positive(map[string]float64{"humans": float64(c.humans), "window": c.window.Seconds(), "bot-rate": c.botRate,
		"first": float64(c.first), "difficulty": float64(c.difficulty), "workers": float64(c.workers)}); err != nil {
		return err
	}
	switch {
	case c.humans > 100_000:
		return usagef("--humans must be at most 100000 (got %d)", c.humans)
	case c.window > 5*time.Minute:
		return usagef("--window must be at most 5m (got %s)", c.window)
	case c.botRate > 10_000:
		return usagef("--bot-rate must be at most 10000 (got %v)", c.botRate)
	case c.difficulty > waitroom.MaxChallengeBits:
		return usagef("--difficulty must be at most %d (got %d)", waitroom.MaxChallengeBits, c.difficulty)
	case c.humanSolve < 0:
		return usagef("--human-solve must not be negative (got %s)", c.humanSolve)
	}
	n, per, ok := strings.Cut(*rate, "/")
	var err error
	if c.joinRate, err = strconv.Atoi(n); !ok || err != nil || c.joinRate < 1 {
		return usagef("--join-rate: want <n>/<duration> such as 5/1m (got %q)", *rate)
	}
	if c.joinPer, err = time.ParseDuration(per); err != nil || c.joinPer <= 0 {
		return usagef("--join-rate: want <n>/<duration> such as 5/1m (got %q)", *rate)
	}
	defences := botDefences
	if *only != "" {
		defences = nil
		for _, d := range strings.Split(*only, ",") {
			if !slices.Contains(botDefences, d) {
				return usagef("unknown defence %q (want %s)", d, strings.Join(botDefences, ", "))
			}
			defences = append(defences, d)
		}
	}
	orders := []bool{false}
	if c.prequeue {
		orders = append(orders, true)
	}

	fmt.Fprintf(out, "bots: 1 bot at %.0f tries/s vs %d humans over %s; challenge %d bits (humans take %s), join_rate %d per %s\n",
		c.botRate, c.humans, c.window, c.difficulty, c.humanSolve, c.joinRate, c.joinPer)
	var rows []botRow
	for _, pre := range orders {
		for _, d := range defences {
			row, err := runBotRow(ctx, c, d, pre)
			if err != nil {
				return fmt.Errorf("%s: %w", d, err)
			}
			rows = append(rows, row)
			fmt.Fprintf(errOut, "  %s, %s: bot %d of the first %d (%.1f s)\n", row.order, d, row.botInFirst, row.first, row.took.Seconds())
		}
	}
	printBotRows(out, rows, c)
	for _, r := range rows {
		if r.positionsTwice > 0 {
			return fmt.Errorf("%w: %d positions handed out twice (%s, %s)", errBroken, r.positionsTwice, r.order, r.defence)
		}
	}
	return nil
}

func printBotRows(out io.Writer, rows []botRow, c botConfig) {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "order\tdefences\tbot tries\tbot placed\tbot 429s\tbot solved\thumans placed\tbot in first\tbot share\tfair share\t")
	fair := 1 / float64(c.humans+1)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d/%d\t%.1f%%\t%.2f%%\t\n", r.order, r.defence, r.botAttempts, r.botPlaced,
			r.botLimited, r.botSolved, r.humansPlaced, r.botInFirst, r.first, 100*float64(r.botInFirst)/float64(r.first), 100*fair)
	}
	_ = tw.Flush()
}

// joinAnswer is what the gateway's JSON answers carry.
type joinAnswer struct {
	Status     string `json:"status"`
	Position   int64  `json:"position"`
	Token      string `json:"token"`
	Challenge  string `json:"challenge"`
	Difficulty int    `json:"difficulty"`
}

// botClient asks one gateway.
type botClient struct {
	url    string
	client *http.Client
}

// ask sends one JSON request as the client at addr, with a solution or a
// token when given.
func (b botClient) ask(ctx context.Context, addr, solution, token string) (int, joinAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url, nil)
	if err != nil {
		return 0, joinAnswer{}, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Forwarded-For", addr)
	if solution != "" {
		req.Header.Set(waitroom.HeaderSolution, solution)
	}
	if token != "" {
		req.Header.Set("X-Waitroom-Token", token)
	}
	res, err := b.client.Do(req)
	if err != nil {
		return 0, joinAnswer{}, err
	}
	defer res.Body.Close()
	var a joinAnswer
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, joinAnswer{}, err
	}
	if res.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &a); err != nil {
			return 0, joinAnswer{}, fmt.Errorf("answer %q: %w", body, err)
		}
	}
	return res.StatusCode, a, nil
}

// join is a new arrival at addr: it solves the challenge if given one
// (taking at least think for it) and returns the final answer.
func (b botClient) join(ctx context.Context, addr string, think time.Duration) (int, joinAnswer, bool, error) {
	code, a, err := b.ask(ctx, addr, "", "")
	if err != nil || a.Status != "challenge" {
		return code, a, false, err
	}
	start := time.Now()
	solution := waitroom.Solve(a.Challenge, a.Difficulty)
	if rest := think - time.Since(start); rest > 0 {
		select {
		case <-ctx.Done():
			return 0, joinAnswer{}, true, ctx.Err()
		case <-time.After(rest):
		}
	}
	code, a, err = b.ask(ctx, addr, solution, "")
	return code, a, true, err
}

// botConfigJSON is the in-process Caddy's config: one site on loopback that
// trusts loopback as its proxy, so each client's X-Forwarded-For is its
// address.
func botConfigJSON(port int, event int64, c botConfig, defence string, opensAt time.Time) ([]byte, error) {
	room := map[string]any{
		"handler": "waitroom",
		"event":   event,
		"keys":    []map[string]string{{"id": "k1", "secret": waitroom.NewVisitorID() + waitroom.NewVisitorID()}},
	}
	if strings.Contains(defence, "challenge") {
		room["challenge"] = c.difficulty
	}
	if strings.Contains(defence, "join_rate") {
		room["join_rate"] = map[string]any{"joins": c.joinRate, "per": c.joinPer.Nanoseconds()}
	}
	if !opensAt.IsZero() {
		room["opens_at"] = opensAt.UTC().Format(time.RFC3339)
	}
	return json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{"http": map[string]any{"servers": map[string]any{"bots": map[string]any{
			"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
			"automatic_https": map[string]any{"disable": true},
			"trusted_proxies": map[string]any{"source": "static", "ranges": []string{"127.0.0.1/32"}},
			"routes": []any{map[string]any{"handle": []any{room,
				map[string]any{"handler": "static_response", "body": "the site"}}}},
		}}}},
	})
}

func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// entry is one place (or pre-queue entry) someone got.
type entry struct {
	bot      bool
	position int64
	token    string
}

func runBotRow(ctx context.Context, c botConfig, defence string, prequeue bool) (botRow, error) {
	row := botRow{defence: defence, order: "fifo", first: c.first}
	if prequeue {
		row.order = "pre-queue"
	}
	port, err := freeLoopbackPort()
	if err != nil {
		return row, err
	}
	event := 9_000_000_000 + rand.Int64N(1_000_000_000)
	start := time.Now()
	var opensAt time.Time
	if prequeue {
		opensAt = start.Add(c.window + time.Second).Truncate(time.Second).Add(time.Second)
	}
	cfg, err := botConfigJSON(port, event, c, defence, opensAt)
	if err != nil {
		return row, err
	}
	if err := caddy.Load(cfg, true); err != nil {
		return row, fmt.Errorf("starting caddy: %w", err)
	}
	defer func() { _ = caddy.Stop() }()
	run, cancel := context.WithTimeout(ctx, c.window+c.humanSolve+time.Minute)
	defer cancel()

	newClient := func(conns int) botClient {
		return botClient{url: fmt.Sprintf("http://127.0.0.1:%d/", port), client: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns},
		}}
	}
	humans, bot := newClient(c.workers), newClient(1)
	defer humans.client.CloseIdleConnections()
	defer bot.client.CloseIdleConnections()

	var mu sync.Mutex
	var entries []entry
	record := func(e entry) {
		mu.Lock()
		entries = append(entries, e)
		mu.Unlock()
	}
	placed := func(a joinAnswer) (entry, bool) {
		switch a.Status {
		case "waiting":
			return entry{position: a.Position, token: a.Token}, true
		case "pre_queue":
			return entry{token: a.Token}, true
		}
		return entry{}, false
	}

	// Humans: arrival times spread at random over the window.
	arrivals := make([]time.Duration, c.humans)
	for i := range arrivals {
		arrivals[i] = time.Duration(rand.Int64N(int64(c.window)))
	}
	slices.Sort(arrivals)
	next := make(chan int)
	var wg sync.WaitGroup
	for range c.workers {
		wg.Go(func() {
			for i := range next {
				addr := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
				code, a, _, err := humans.join(run, addr, c.humanSolve)
				mu.Lock()
				switch {
				case err != nil:
					row.humanErrors++
				case code == http.StatusTooManyRequests:
					row.humansLimited++
				}
				mu.Unlock()
				if e, ok := placed(a); ok && err == nil {
					record(e)
				}
			}
		})
	}
	wg.Go(func() {
		defer close(next)
		for i, at := range arrivals {
			select {
			case <-run.Done():
				return
			case <-time.After(time.Until(start.Add(at))):
			}
			select {
			case next <- i:
			case <-run.Done():
				return
			}
		}
	})

	// The bot: one client, one address, a try every 1/rate for the window.
	wg.Go(func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / c.botRate))
		defer tick.Stop()
		end := time.After(c.window)
		for {
			select {
			case <-run.Done():
				return
			case <-end:
				return
			case <-tick.C:
			}
			code, a, solved, err := bot.join(run, botAddress, 0)
			mu.Lock()
			row.botAttempts++
			if solved {
				row.botSolved++
			}
			if code == http.StatusTooManyRequests {
				row.botLimited++
			}
			mu.Unlock()
			if e, ok := placed(a); ok && err == nil {
				e.bot = true
				record(e)
			}
		}
	})
	wg.Wait()
	if err := run.Err(); err != nil {
		return row, fmt.Errorf("the run did not finish in time: %w", err)
	}

	if prequeue {
		// At the opening every entry is exchanged for its drawn place.
		select {
		case <-run.Done():
			return row, run.Err()
		case <-time.After(time.Until(opensAt)):
		}
		if err := exchangeEntries(run, humans, entries, c.workers); err != nil {
			return row, err
		}
	}
	seen := make(map[int64]bool, len(entries))
	for _, e := range entries {
		if e.bot {
			row.botPlaced++
		} else {
			row.humansPlaced++
		}
		if e.position == 0 {
			continue
		}
		if seen[e.position] {
			row.positionsTwice++
		}
		seen[e.position] = true
		if e.bot && e.position <= int64(c.first) {
			row.botInFirst++
		}
	}
	row.took = time.Since(start)
	return row, nil
}

// exchangeEntries trades each pre-queue token for the position the draw
// gave it.
func exchangeEntries(ctx context.Context, b botClient, entries []entry, workers int) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				code, a, err := b.ask(ctx, "127.0.0.1", "", entries[i].token)
				for tries := 0; err == nil && code == http.StatusServiceUnavailable && tries < 10; tries++ {
					// Another node is drawing: Retry-After is a second.
					time.Sleep(time.Second)
					code, a, err = b.ask(ctx, "127.0.0.1", "", entries[i].token)
				}
				if err == nil && a.Status != "waiting" {
					err = fmt.Errorf("an entrant after the opening: %d %q", code, a.Status)
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				entries[i].position = a.Position
				mu.Unlock()
			}
		})
	}
	for i := range entries {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil && !errors.Is(firstErr, context.Canceled) {
		return firstErr
	}
	return firstErr
}
