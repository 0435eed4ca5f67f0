package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/stack"
	"github.com/waitroom/waitroom/waitroom"
)

// gateRun is one row of the gate table.
type gateRun struct {
	Admission string        `json:"admission"`
	Peak      int64         `json:"peak_concurrency"`
	Sold      int64         `json:"sold"`
	Oversold  int64         `json:"oversold"`
	Drift     int64         `json:"drift"`
	Elapsed   time.Duration `json:"elapsed_ns"`
}

func runGate(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("gate", "The waiting room as admission control: arrivals all try to hold a ticket at\nonce, first straight at the origin, then through the gateway admitting at most\n--gate of them at a time (the watermark is raised as admitted requests\nfinish). A proxy in front of the origin counts the holds in flight.", errOut)
	var srv servers
	srv.register(fs, true)
	caddyBin := fs.String("caddy", "bin/caddy", "Caddy with the waitroom module (make build)")
	originBin := fs.String("origin", "bin/origin", "the origin (go build -o bin/origin ./cmd/origin)")
	arrivals := fs.Int("arrivals", 800, "buyers arriving at once, distinct users")
	gate := fs.Int64("gate", 50, "most admitted buyers at the inventory at once")
	tickets := fs.Int64("tickets", 100, "tickets (no overflow reserve)")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on each run")
	jsonPath := fs.String("json", "", "also write the table to this JSON file")
	keep := fs.Bool("keep", false, "keep the run's folder (configs, server logs)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := positive(map[string]float64{"arrivals": float64(*arrivals), "gate": float64(*gate), "tickets": float64(*tickets), "timeout": timeout.Seconds()}); err != nil {
		return err
	}
	if err := srv.check(true, true); err != nil {
		return err
	}
	for bin, build := range map[string]string{*caddyBin: "make build", *originBin: "go build -o bin/origin ./cmd/origin"} {
		if err := needBinary(bin, build); err != nil {
			return err
		}
	}
	dir, cleanup, err := workDir("gate", *keep, errOut)
	if err != nil {
		return err
	}
	defer cleanup()

	isHold := func(r *http.Request) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/holds")
	}
	var counter *stack.Counter
	noReserve := int64(0)
	newEvent := func(name string) api.NewEvent {
		return api.NewEvent{Name: name, Capacity: *tickets, Price: 90000, Currency: "inr", HoldTTLSeconds: 3600, MaxPerUser: 1, OverflowPct: &noReserve}
	}
	fmt.Fprintln(errOut, "starting the origin and Caddy…")
	sys, err := stack.Up(ctx, stack.SystemConfig{
		CaddyBin: *caddyBin, OriginBin: *originBin, Dir: dir, RedisURL: srv.redisURL, DatabaseURL: srv.databaseURL,
		OriginEnv: []string{"ORIGIN_LOG_FORMAT=json"},
		Event:     newEvent("Gate: through the waiting room"),
		Upstream: func(origin string) (string, error) {
			c, err := stack.StartCounter(origin, isHold)
			counter = c
			return c.URL(), err
		},
	})
	if counter != nil {
		defer counter.Close()
	}
	if err != nil {
		return err
	}
	defer func() {
		for _, e := range sys.Down(context.WithoutCancel(ctx)) {
			fmt.Fprintf(errOut, "stopping: %v\n", e)
		}
	}()
	httpc := api.NewHTTPClient(0, 30*time.Second)
	admin := api.OriginAdmin{Client: api.Client{HTTP: httpc, Base: sys.Origin.URL}, Token: sys.AdminToken}
	direct, err := admin.CreateEvent(ctx, newEvent("Gate: straight at the origin"))
	if err != nil {
		return err
	}
	defer func() { _ = stack.RemoveEventKeys(context.WithoutCancel(ctx), sys.RedisURL, direct.ID) }()

	rdb, err := redisClient(sys.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	keys, err := signedUsers(ctx, rdb, sys, direct.ID)
	if err != nil {
		return err
	}

	var runs []gateRun
	fmt.Fprintf(errOut, "%d arrivals straight at the origin…\n", *arrivals)
	runCtx, cancel := context.WithTimeout(ctx, *timeout)
	r, err := gateDirect(runCtx, httpc, counter, keys, direct, *arrivals)
	cancel()
	if err != nil {
		return err
	}
	runs = append(runs, r)

	fmt.Fprintf(errOut, "%d arrivals through the waiting room, gate %d…\n", *arrivals, *gate)
	runCtx, cancel = context.WithTimeout(ctx, *timeout)
	r, err = gateThrough(runCtx, httpc, counter, sys, *arrivals, *gate)
	cancel()
	if err != nil {
		return err
	}
	runs = append(runs, r)

	for i, ev := range []int64{direct.ID, sys.Event.ID} {
		inv, err := admin.Invariant(ctx, ev)
		if err != nil {
			return err
		}
		runs[i].Drift = inv.Drift
		runs[i].Oversold = max(0, runs[i].Sold-*tickets)
	}

	fmt.Fprintf(out, "%d arrivals, %d tickets, gate of %d (peak: holds in flight at the origin at once)\n\n", *arrivals, *tickets, *gate)
	t := report.Table{Header: []string{"admission", "peak concurrency", "sold", "oversold", "drift", "took"}}
	for _, r := range runs {
		t.Add(r.Admission, r.Peak, r.Sold, r.Oversold, r.Drift, report.Seconds(r.Elapsed))
	}
	t.Write(out)
	if *jsonPath != "" {
		if err := report.WriteJSON(*jsonPath, map[string]any{"arrivals": *arrivals, "gate": *gate, "tickets": *tickets, "runs": runs}); err != nil {
			return err
		}
	}
	for _, r := range runs {
		if r.Oversold != 0 || r.Drift != 0 {
			return fmt.Errorf("%w: %s: oversold %d, drift %d", errBroken, r.Admission, r.Oversold, r.Drift)
		}
	}
	return nil
}

// gateDirect sends every buyer at the origin at the same instant, each with
// a token that is already admitted: no waiting room.
func gateDirect(ctx context.Context, httpc *http.Client, counter *stack.Counter, keys *waitroom.KeySet, ev api.Event, arrivals int) (gateRun, error) {
	c := api.Client{HTTP: httpc, Base: counter.URL()}
	path := "/v1/events/" + strconv.FormatInt(ev.ID, 10) + "/holds"
	tokens := make([]string, arrivals)
	for i := range tokens {
		t, err := keys.Issue(fmt.Sprintf("direct-%d", i), ev.ID, int64(i+1), time.Hour)
		if err != nil {
			return gateRun{}, err
		}
		tokens[i] = t.Raw
	}
	var sold atomic.Int64
	errs := make(chan error, arrivals)
	start := make(chan struct{})
	var ready, wg sync.WaitGroup
	counter.Reset()
	for i := range arrivals {
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Done()
			<-start
			resp, err := c.Do(ctx, api.Request{Method: http.MethodPost, Path: path, Token: tokens[i], IdempotencyKey: api.NewKey(), Body: map[string]int{"quantity": 1}})
			switch {
			case err != nil:
				errs <- err
			case resp.Status == http.StatusCreated:
				sold.Add(1)
			case resp.Status != http.StatusConflict:
				errs <- resp.Unexpected("hold")
			}
		}()
	}
	ready.Wait()
	began := time.Now()
	close(start)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return gateRun{}, fmt.Errorf("straight at the origin: %w", err)
	}
	return gateRun{Admission: "no waiting room (direct)", Peak: counter.Peak(), Sold: sold.Load(), Elapsed: time.Since(began)}, nil
}

// gateThrough sends every buyer through the gateway at the same instant.
// The watermark starts at gate and follows the holds answered, so at most
// gate admitted buyers are at the origin at once; the others wait their
// turn, polling as Retry-After says.
func gateThrough(ctx context.Context, httpc *http.Client, counter *stack.Counter, sys *stack.System, arrivals int, gate int64) (gateRun, error) {
	gw := api.Client{HTTP: httpc, Base: sys.Gateway}
	admin := api.GatewayAdmin{Client: api.Client{HTTP: httpc, Base: sys.Caddy.AdminURL}}
	ev := sys.Event.ID
	path := "/v1/events/" + strconv.FormatInt(ev, 10) + "/holds"
	counter.Reset()
	if _, err := admin.SetWatermark(ctx, ev, gate); err != nil {
		return gateRun{}, err
	}
	pilotCtx, stopPilot := context.WithCancel(ctx)
	defer stopPilot()
	go func() {
		set := gate
		for pilotCtx.Err() == nil {
			if want := counter.Done() + gate; want > set {
				if _, err := admin.SetWatermark(pilotCtx, ev, want); err == nil {
					set = want
				}
			}
			sleepCtx(pilotCtx, 10*time.Millisecond)
		}
	}()

	var sold atomic.Int64
	errs := make(chan error, arrivals)
	start := make(chan struct{})
	var ready, wg sync.WaitGroup
	for range arrivals {
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Done()
			<-start
			key, token := api.NewKey(), ""
			for ctx.Err() == nil {
				resp, err := gw.Do(ctx, api.Request{Method: http.MethodPost, Path: path, Token: token, IdempotencyKey: key, Body: map[string]int{"quantity": 1}})
				if err != nil {
					errs <- err
					return
				}
				if t := resp.Header.Get(api.HeaderToken); t != "" {
					token = t
				}
				switch resp.Waitroom() {
				case api.StatusAdmitted:
					switch resp.Status {
					case http.StatusCreated:
						sold.Add(1)
					case http.StatusConflict:
					default:
						errs <- resp.Unexpected("hold")
					}
					return
				case api.StatusSoldOut:
					return
				case api.StatusWaiting:
					sleepCtx(ctx, resp.RetryAfter(3*time.Second))
				default:
					errs <- resp.Unexpected("join")
					return
				}
			}
			errs <- ctx.Err()
		}()
	}
	ready.Wait()
	began := time.Now()
	close(start)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return gateRun{}, fmt.Errorf("through the waiting room: %w", err)
	}
	return gateRun{Admission: fmt.Sprintf("waiting room (gate = %d)", gate), Peak: counter.Peak(), Sold: sold.Load(), Elapsed: time.Since(began)}, nil
}
