package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/latency"
	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/stack"
	"github.com/waitroom/waitroom/loadtest/wrk"
	"github.com/waitroom/waitroom/origin/ledger"
)

// seatsHotRow is the width of a row of the hot section.
const seatsHotRow = 20

func runSeats(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("seats", "Reserved seating under contention, through the origin's HTTP API: buyers each\nwanting 1-4 specific seats side by side among the best seats (section A, front\nrows most wanted), mixed with parties asking for 4 seats together, best\navailable, in section B; every request a distinct user. Then the seat map is\nread with wrk. Checked in the ledger: no seat is had by two holds.", errOut)
	var srv servers
	srv.register(fs, true)
	originBin := fs.String("origin", "bin/origin", "the origin (go build -o bin/origin ./cmd/origin)")
	buyers := fs.Int("buyers", 10_000, "buyers of specific seats")
	best := fs.Int("best", 2_000, "best-available requests for 4 together")
	hot := fs.Int("hot", 200, "seats of section A, the best seats (rows of 20)")
	rowsB := fs.Int("rows-b", 20, "rows of 50 seats of section B, where best available asks")
	clients := fs.Int("clients", 200, "concurrent clients")
	wrkDuration := fs.Duration("wrk-duration", 10*time.Second, "length of each wrk run on the seat map")
	wrkConns := fs.Int("wrk-connections", 100, "wrk connections")
	wrkThreads := fs.Int("wrk-threads", 2, "wrk threads")
	jsonPath := fs.String("json", "", "also write the figures to this JSON file")
	keep := fs.Bool("keep", false, "keep the run's folder (server logs)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := positive(map[string]float64{"buyers": float64(*buyers), "best": float64(*best), "hot": float64(*hot), "rows-b": float64(*rowsB),
		"clients": float64(*clients), "wrk-duration": wrkDuration.Seconds(), "wrk-connections": float64(*wrkConns), "wrk-threads": float64(*wrkThreads)}); err != nil {
		return err
	}
	if *hot%seatsHotRow != 0 {
		return usagef("--hot must be a multiple of %d (rows of %d seats)", seatsHotRow, seatsHotRow)
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
	dir, cleanup, err := workDir("seats", *keep, errOut)
	if err != nil {
		return err
	}
	defer cleanup()

	seating := seatsLayout(*hot, *rowsB)
	fmt.Fprintln(errOut, "starting the origin…")
	sys, err := stack.Up(ctx, stack.SystemConfig{
		OriginBin: *originBin, Dir: dir, RedisURL: srv.redisURL, DatabaseURL: srv.databaseURL, NoGateway: true,
		OriginEnv: []string{"ORIGIN_LOG_FORMAT=json"},
		Event: api.NewEvent{Name: "Seats benchmark", Capacity: seating.Seats(), Price: 90000, Currency: "inr",
			HoldTTLSeconds: 3600, MaxPerUser: 4, Seating: &seating},
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

	asks := seatAsks(*buyers, *best, *hot/seatsHotRow, rand.New(rand.NewPCG(1, 2)))
	client := api.NewHTTPClient(0, 30*time.Second)
	base := sys.Origin.URL + "/v1/events/" + strconv.FormatInt(sys.Event.ID, 10)
	fmt.Fprintf(errOut, "%d hold requests (%d for specific seats, %d best available), %d clients…\n", len(asks), *buyers, *best, *clients)
	var rec latency.Recorder
	work := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range *clients {
		wg.Go(func() {
			for i := range work {
				tok, _ := keys.Issue(fmt.Sprintf("seat-buyer-%d", i), sys.Event.ID, int64(i+1), time.Hour)
				asks[i].do(ctx, client, base+"/holds", tok.Raw, &rec)
			}
		})
	}
feed:
	for i := range asks {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	tally := tallySeatAsks(asks)

	l, err := ledger.Open(ctx, sys.DB.URL, ledger.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer l.Close()
	audit, err := l.AuditSeats(ctx, sys.Event.ID, time.Now())
	if err != nil {
		return err
	}
	admin := api.OriginAdmin{Client: api.Client{HTTP: client, Base: sys.Origin.URL}, Token: sys.AdminToken}
	inv, err := admin.Invariant(ctx, sys.Event.ID)
	if err != nil {
		return err
	}

	fmt.Fprintf(errOut, "wrk on the seat map, %s each, gzip and plain…\n", *wrkDuration)
	mapURL := base + "/seats"
	gz, gzCmd, err := seatMapReads(ctx, mapURL, *wrkThreads, *wrkConns, *wrkDuration, true)
	if err != nil {
		return err
	}
	plain, _, err := seatMapReads(ctx, mapURL, *wrkThreads, *wrkConns, *wrkDuration, false)
	if err != nil {
		return err
	}
	sizes, err := seatMapSizes(ctx, client, mapURL)
	if err != nil {
		return err
	}

	lat := rec.Summary()
	holdsPerSecond := float64(tally.held) / elapsed.Seconds()
	t := report.Table{Header: []string{"hot-seat contention", "value"}}
	t.Add("hold requests (specific seats + best available)", fmt.Sprintf("%s + %s", report.Count(*buyers), report.Count(*best)))
	t.Add("seats of the map (hot: section A)", fmt.Sprintf("%s (%s)", report.Count(seating.Seats()), report.Count(*hot)))
	t.Add("holds made / seats held", fmt.Sprintf("%s / %s", report.Count(tally.held), report.Count(audit.Held)))
	t.Add("hold requests answered/s / holds made/s", report.Rate(float64(len(asks))/elapsed.Seconds())+" / "+report.Rate(holdsPerSecond))
	t.Add("latency p50 / p99", report.Millis(lat.P50)+" / "+report.Millis(lat.P99))
	t.Add("multi-seat asks: all seats, or 409 naming the conflicts", fmt.Sprintf("%s of %s (%s)",
		report.Count(tally.multiOK), report.Count(tally.multi), report.Percent(tally.multiOK, tally.multi)))
	t.Add("409 seats_unavailable, every seat named held by another hold", fmt.Sprintf("%s of %s", report.Count(tally.namedHeld), report.Count(tally.conflicts)))
	t.Add("best available: 4 together in one row / other groups / sold out", fmt.Sprintf("%s / %s / %s",
		report.Count(tally.bestTogether), report.Count(tally.bestGroups), report.Count(tally.bestSoldOut)))
	t.Add("answers retried (503)", report.Count(tally.retried))
	t.Add("double-booked seats (ledger: two live holds / row of another hold / two tickets)",
		fmt.Sprintf("%d / %d / %d", audit.DoubleHeld, audit.Mismatched, audit.DoubleTicketed))
	t.Add("drift / seat drift", fmt.Sprintf("%d / %d", inv.Drift, inv.SeatDrift))
	t.Write(out)
	fmt.Fprintln(out)
	w := report.Table{Header: []string{"seat map reads (wrk)", "reads/s", "p50", "p99", "body", "wrk's CPU share"}}
	w.Add(fmt.Sprintf("gzip, -t%d -c%d", *wrkThreads, *wrkConns), report.Rate(gz.PerSecond), report.Millis(gz.P50), report.Millis(gz.P99),
		report.Count(sizes.gzip)+" B", fmt.Sprintf("%.0f%%", 100*gz.CPUShare))
	w.Add(fmt.Sprintf("plain, -t%d -c%d", *wrkThreads, *wrkConns), report.Rate(plain.PerSecond), report.Millis(plain.P50), report.Millis(plain.P99),
		report.Count(sizes.plain)+" B", fmt.Sprintf("%.0f%%", 100*plain.CPUShare))
	w.Write(out)
	fmt.Fprintf(out, "\nwrk command: %s\n", gzCmd)
	fmt.Fprintf(out, "goal ≥ 20,000 seat map reads/s: %s\n", met(gz.PerSecond >= 20_000))

	broken := audit.DoubleHeld+audit.Mismatched+audit.DoubleTicketed > 0 || inv.Drift != 0 || inv.SeatDrift != 0 ||
		tally.multiOK != tally.multi || tally.namedHeld != tally.conflicts || tally.other > 0
	if *jsonPath != "" {
		if err := report.WriteJSON(*jsonPath, map[string]any{
			"buyers": *buyers, "best": *best, "hot": *hot, "clients": *clients, "seats": seating.Seats(),
			"elapsed_ns": elapsed, "requests_per_second": float64(len(asks)) / elapsed.Seconds(), "held": tally.held, "holds_per_second": holdsPerSecond, "latency": lat,
			"multi": tally.multi, "multi_ok": tally.multiOK, "conflicts": tally.conflicts, "named_held": tally.namedHeld,
			"best_together": tally.bestTogether, "best_groups": tally.bestGroups, "best_sold_out": tally.bestSoldOut,
			"retried": tally.retried, "other": tally.other, "audit": audit, "drift": inv.Drift, "seat_drift": inv.SeatDrift,
			"wrk_gzip": gz, "wrk_plain": plain, "wrk_command": gzCmd, "body_plain": sizes.plain, "body_gzip": sizes.gzip,
		}); err != nil {
			return err
		}
	}
	if broken {
		return fmt.Errorf("%w: a seat had twice, drift, or an answer that is not all-or-nothing (%d other answers)", errBroken, tally.other)
	}
	return nil
}

// seatsLayout is the benchmark's map: section A, hot seats in rows of 20
// (the best seats), and section B, rowsB rows of 50.
func seatsLayout(hot, rowsB int) api.Seating {
	rows := func(n, seats int) []api.Row {
		out := make([]api.Row, n)
		for i := range out {
			out[i] = api.Row{ID: strconv.Itoa(i + 1), Seats: seats}
		}
		return out
	}
	return api.Seating{Sections: []api.Section{
		{ID: "A", Price: 150000, Rows: rows(hot/seatsHotRow, seatsHotRow)},
		{ID: "B", Price: 90000, Rows: rows(rowsB, 50)},
	}}
}

// seatAsk is one hold request of the benchmark and what came of it.
type seatAsk struct {
	// seats are the specific seats wanted, sorted; none for best available.
	seats []string

	status  int
	code    string
	got     []string // the hold's seats (201)
	named   []string // the seats a 409 seats_unavailable named
	retried int
	err     error
}

// seatAsks is buyers asks for 1-4 seats side by side in section A (rows
// nearer the front wanted more), and best asks for 4 together in B,
// shuffled.
func seatAsks(buyers, best, rows int, rnd *rand.Rand) []*seatAsk {
	asks := make([]*seatAsk, 0, buyers+best)
	for range buyers {
		u := rnd.Float64()
		row := 1 + int(u*u*float64(rows))
		n := 1 + rnd.IntN(4)
		first := 1 + rnd.IntN(seatsHotRow-n+1)
		a := &seatAsk{}
		for k := range n {
			a.seats = append(a.seats, fmt.Sprintf("A-%d-%d", row, first+k))
		}
		slices.Sort(a.seats)
		asks = append(asks, a)
	}
	for range best {
		asks = append(asks, &seatAsk{})
	}
	rnd.Shuffle(len(asks), func(i, j int) { asks[i], asks[j] = asks[j], asks[i] })
	return asks
}

// do sends the ask as the token's user, again while it is answered 503.
func (a *seatAsk) do(ctx context.Context, c *http.Client, url, token string, rec *latency.Recorder) {
	body := []byte(`{"best_available":{"section":"B","quantity":4}}`)
	if len(a.seats) > 0 {
		body, _ = json.Marshal(map[string]any{"seat_ids": a.seats})
	}
	key := api.NewKey()
	for try := 0; ; try++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(api.HeaderToken, token)
		req.Header.Set(api.HeaderIdempotencyKey, key)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			a.err = err
			return
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		rec.Since(start)
		if err != nil {
			a.err = err
			return
		}
		if resp.StatusCode == http.StatusServiceUnavailable && try < 20 {
			a.retried++
			time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
			continue
		}
		a.status = resp.StatusCode
		var v struct {
			Error string   `json:"error"`
			Seats []string `json:"seats"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			a.err = fmt.Errorf("answer %d: %w: %.200s", resp.StatusCode, err, raw)
			return
		}
		a.code = v.Error
		if a.status == http.StatusCreated {
			a.got = v.Seats
		} else {
			a.named = v.Seats
		}
		return
	}
}

// seatTally is what the asks came to.
type seatTally struct {
	held, multi, multiOK, conflicts, namedHeld int64
	bestTogether, bestGroups, bestSoldOut      int64
	retried, other                             int64
}

func tallySeatAsks(asks []*seatAsk) seatTally {
	var t seatTally
	heldBy := map[string]int{}
	for i, a := range asks {
		if a.status == http.StatusCreated {
			for _, s := range a.got {
				heldBy[s] = i
			}
		}
	}
	for i, a := range asks {
		t.retried += int64(a.retried)
		switch {
		case a.err != nil:
			t.other++
		case a.status == http.StatusCreated:
			t.held++
		}
		if len(a.seats) == 0 {
			switch {
			case a.status == http.StatusCreated && len(a.got) == 4 && sideBySide(a.got):
				t.bestTogether++
			case a.status == http.StatusCreated && len(a.got) == 4:
				t.bestGroups++
			case a.status == http.StatusConflict && a.code == "sold_out":
				t.bestSoldOut++
			case a.err == nil:
				t.other++
			}
			continue
		}
		ok := false
		switch {
		case a.status == http.StatusCreated:
			ok = slices.Equal(a.got, a.seats)
		case a.status == http.StatusConflict && a.code == "seats_unavailable":
			t.conflicts++
			ok = len(a.named) > 0 && !slices.ContainsFunc(a.named, func(s string) bool { return !slices.Contains(a.seats, s) })
			held := ok
			for _, s := range a.named {
				if j, taken := heldBy[s]; !taken || j == i {
					held = false
				}
			}
			if held {
				t.namedHeld++
			}
		}
		if !ok && a.err == nil {
			t.other++
		}
		if len(a.seats) > 1 {
			t.multi++
			if ok {
				t.multiOK++
			}
		}
	}
	return t
}

// sideBySide: the seats are adjacent in one row.
func sideBySide(ids []string) bool {
	row := ""
	var nums []int
	for _, id := range ids {
		parts := strings.Split(id, "-")
		if len(parts) != 3 || (row != "" && parts[1] != row) {
			return false
		}
		row = parts[1]
		n, err := strconv.Atoi(parts[2])
		if err != nil {
			return false
		}
		nums = append(nums, n)
	}
	slices.Sort(nums)
	return nums[len(nums)-1]-nums[0] == len(nums)-1
}

// seatMapReads reads the seat map with wrk, gzip or plain, and names the
// command line it ran.
func seatMapReads(ctx context.Context, url string, threads, conns int, d time.Duration, gzip bool) (wrk.Result, string, error) {
	l := wrk.Load{URL: url, Threads: threads, Conns: conns, Duration: d}
	cmd := fmt.Sprintf("wrk --latency -t %d -c %d -d %ds --timeout 10s", threads, conns, max(1, int(d.Round(time.Second)/time.Second)))
	if gzip {
		l.Header = map[string]string{"Accept-Encoding": "gzip"}
		cmd += " -H 'Accept-Encoding: gzip'"
	}
	r, err := wrk.Run(ctx, l)
	if err == nil && r.Failed() > 0 {
		err = fmt.Errorf("wrk: %d reads of the seat map failed (%d not 2xx)", r.Failed(), r.Non2xx)
	}
	return r, cmd + " " + url, err
}

type mapSizes struct{ plain, gzip int64 }

// seatMapSizes reads the seat map's body, plain and gzipped, and checks
// its answer.
func seatMapSizes(ctx context.Context, c *http.Client, url string) (mapSizes, error) {
	var out mapSizes
	for _, enc := range []string{"", "gzip"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if enc != "" {
			req.Header.Set("Accept-Encoding", enc)
		}
		resp, err := c.Do(req)
		if err != nil {
			return out, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return out, err
		}
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Cache-Control"), "public, max-age=") {
			return out, fmt.Errorf("seat map: %d, Cache-Control %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
		}
		if enc == "" {
			out.plain = int64(len(b))
		} else {
			out.gzip = int64(len(b))
		}
	}
	return out, nil
}
