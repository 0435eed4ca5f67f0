// Package gaterush is how a flash sale ends at the venue: every ticket
// sold is scanned once at the gates, and a share of them is shown a second
// time at another gate at the same moment (a screenshot passed back over
// the fence). Each ticket must be admitted exactly once.
package gaterush

import (
	"context"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/latency"
)

// Config configures a rush. Zero values take the defaults named.
type Config struct {
	// Origin is where the gates scan; Admin registers a device per gate
	// for Event before and reads the ledger's counts after.
	Origin api.Client
	Admin  api.OriginAdmin
	// Event is the event whose tickets are scanned: every gate's device is
	// registered for it, as a gate admits to one event.
	Event int64
	// Gates is how many gates scan; default 8.
	Gates int
	// Twice is the share of tickets shown a second time, at another gate,
	// at the same moment as the first; default 0.05.
	Twice float64
	// Scanners is how many tickets are scanned at once; default 64.
	Scanners int
	// Seed picks the tickets shown twice and their gates; 0: random.
	Seed uint64
}

// Defaults are the defaults of Config.
func Defaults() Config { return Config{Gates: 8, Twice: 0.05, Scanners: 64} }

// maxErrors is how many unexpected answers a result keeps.
const maxErrors = 10

// Result is what the rush came to.
type Result struct {
	Tickets  int64 `json:"tickets"`
	Gates    int   `json:"gates"`
	Scans    int64 `json:"scans"`
	Admitted int64 `json:"admitted"`
	// ShownTwice is the tickets scanned a second time at another gate;
	// DuplicatesRefused the scans answered 409 already_used.
	ShownTwice        int64 `json:"shown_twice"`
	DuplicatesRefused int64 `json:"duplicates_refused"`
	// DoubleAdmissions is the tickets more than one scan admitted;
	// NeverAdmitted the tickets no scan did. Both must be 0.
	DoubleAdmissions int64 `json:"double_admissions"`
	NeverAdmitted    int64 `json:"never_admitted"`
	// Unexpected counts any other answer (or none).
	Unexpected int64    `json:"unexpected"`
	Errors     []string `json:"errors,omitempty"`
	// Ledger is the origin's own count, read after the rush.
	Ledger      api.ScanTotals  `json:"ledger"`
	LedgerError string          `json:"ledger_error,omitempty"`
	Duration    time.Duration   `json:"duration_ns"`
	PerSecond   float64         `json:"scans_per_second"`
	Latency     latency.Summary `json:"latency"`
}

// Broken reports whether a ticket was admitted twice or not at all, by the
// answers or by the ledger, or refused as another event's: every ticket of
// a rush is of its event.
func (r *Result) Broken() bool {
	return r.DoubleAdmissions != 0 || r.NeverAdmitted != 0 || r.LedgerError != "" ||
		r.Ledger.DoubleAdmissions != 0 || r.Ledger.Admitted != r.Tickets || r.Ledger.WrongEvent != 0
}

// Run registers a gate device per gate for the event, scans every code of
// codes (the event's tickets) with the device of its gate, the ones picked
// twice at two gates at once, and reads the ledger's count after.
func Run(ctx context.Context, cfg Config, codes []string) (*Result, error) {
	d := Defaults()
	if cfg.Gates <= 0 {
		cfg.Gates = d.Gates
	}
	if cfg.Twice == 0 {
		cfg.Twice = d.Twice
	}
	if cfg.Scanners <= 0 {
		cfg.Scanners = d.Scanners
	}
	if cfg.Event <= 0 {
		return nil, fmt.Errorf("gate rush: want the event the gates admit to (got %d)", cfg.Event)
	}
	if cfg.Twice < 0 || cfg.Twice > 1 || cfg.Gates < 2 {
		return nil, fmt.Errorf("gate rush: want a share shown twice within [0, 1] and at least 2 gates (got %v, %d)", cfg.Twice, cfg.Gates)
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	// A ticket's gates: the first by its place in the queue, the second
	// any other.
	type ticket struct {
		code  string
		gates []string
	}
	gate := func(i int) string { return fmt.Sprintf("gate-%d", i+1) }
	devices := make(map[string]api.Gate, cfg.Gates)
	for i := range cfg.Gates {
		d, err := cfg.Admin.AddGateDevice(ctx, cfg.Event, gate(i), "gate rush")
		if err != nil {
			return nil, fmt.Errorf("gate rush: %w", err)
		}
		devices[d.Gate] = api.Gate{Client: cfg.Origin, Token: d.Token}
	}
	order := rng.Perm(len(codes))
	twice := int(math.Round(cfg.Twice * float64(len(codes))))
	tickets := make([]ticket, len(codes))
	for i, j := range order {
		first := i % cfg.Gates
		t := ticket{code: codes[j], gates: []string{gate(first)}}
		if i < twice {
			t.gates = append(t.gates, gate((first+1+rng.IntN(cfg.Gates-1))%cfg.Gates))
		}
		tickets[i] = t
	}
	rng.Shuffle(len(tickets), func(a, b int) { tickets[a], tickets[b] = tickets[b], tickets[a] })

	r := &Result{Tickets: int64(len(codes)), Gates: cfg.Gates, ShownTwice: int64(twice)}
	var (
		rec        latency.Recorder
		mu         sync.Mutex
		unexpected atomic.Int64
		admitted   = make([]atomic.Int32, len(tickets))
		refused    atomic.Int64
		scans      atomic.Int64
	)
	note := func(err error) {
		unexpected.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if len(r.Errors) < maxErrors {
			r.Errors = append(r.Errors, err.Error())
		}
	}
	scan := func(i int, gate string) {
		start := time.Now()
		a, err := devices[gate].Scan(ctx, tickets[i].code, gate)
		rec.Since(start)
		scans.Add(1)
		switch {
		case err != nil:
			note(err)
		case a.Status == 200 && a.Result == api.ScanAdmitted:
			admitted[i].Add(1)
		case a.Status == 409 && a.Result == api.ScanAlreadyUsed:
			refused.Add(1)
		default:
			note(fmt.Errorf("scan at %s: %d %s", gate, a.Status, a.Result))
		}
	}

	start := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	for range cfg.Scanners {
		wg.Go(func() {
			for i := range next {
				// A ticket shown twice is scanned at both gates at once.
				var both sync.WaitGroup
				for _, g := range tickets[i].gates {
					both.Go(func() { scan(i, g) })
				}
				both.Wait()
			}
		})
	}
feed:
	for i := range tickets {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	r.Duration = time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("gate rush: %w", err)
	}

	r.Scans, r.DuplicatesRefused, r.Unexpected = scans.Load(), refused.Load(), unexpected.Load()
	for i := range admitted {
		switch n := admitted[i].Load(); {
		case n == 0:
			r.NeverAdmitted++
		case n > 1:
			r.DoubleAdmissions++
		}
		r.Admitted += int64(admitted[i].Load())
	}
	if r.Duration > 0 {
		r.PerSecond = float64(r.Scans) / r.Duration.Seconds()
	}
	r.Latency = rec.Summary()
	var err error
	if r.Ledger, err = cfg.Admin.ScanTotals(ctx, cfg.Event); err != nil {
		r.LedgerError = err.Error()
	}
	return r, nil
}
