package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/sale"
	"github.com/waitroom/waitroom/loadtest/stack"
)

// admissionRun is one sale of the admission measure: one seeded crowd under
// one autopilot. The measures are defined in docs/loadtest.md (Admission).
type admissionRun struct {
	// Mode is "closed" (the closed loop) or "fixed <step>/<interval>".
	Mode string `json:"mode"`
	Seed uint64 `json:"seed"`
	// LastSeatS is when the last sellable seat was confirmed, in seconds
	// from the sale's start; nil when some were never sold.
	LastSeatS *float64 `json:"last_seat_s"`
	SoldOut   bool     `json:"sold_out"`
	// UnsoldWhileWaiting is the sellable seats left unsold at the end
	// while someone who wanted one went without.
	UnsoldWhileWaiting int64 `json:"unsold_while_waiting"`
	// AdmittedDisappointed is the users admitted who found nothing to buy.
	AdmittedDisappointed int64 `json:"admitted_disappointed"`
	// PeakOriginConcurrency is the most requests in flight at the origin
	// at once.
	PeakOriginConcurrency int64 `json:"peak_origin_concurrency"`
	// EdgeShare is the share (0 to 1) of the crowd's requests the gateway
	// answered itself.
	EdgeShare float64 `json:"edge_share"`
	// PositionsAdmitted is how far the autopilot raised the watermark.
	PositionsAdmitted int64 `json:"positions_admitted"`

	// For the table, not the JSON.
	usersAdmitted, stillWaiting, oversold, drift int64
	raises                                       int
	broken                                       bool
}

const closedMode = "closed"

func runAdmission(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("admission", "The same seeded crowds under the gateway's closed loop and under a sweep of\nfixed rates, one sale after the other on fresh servers. Writes, per run,\nthe time the last seat sold, the seats left unsold while people waited, the\nusers admitted who found nothing to buy, the peak concurrency at the\norigin, the share answered at the edge and the positions admitted; then the\nclosed loop's goals against the fastest fixed rate. Exits 1 when the closed\nloop left a seat unsold while people waited, or a sale broke the inventory.", errOut)
	var f saleFlags
	f.register(fs)
	// The crowd of the measure: 30% of holders never pay, 10% of cards
	// are declined.
	for name, v := range map[string]string{"abandon": "0.3", "decline": "0.1"} {
		if err := fs.Set(name, v); err != nil {
			return err
		}
	}
	rates := fs.String("rates", "100/1s,400/1s,800/1s", "the fixed rates of the sweep, comma-separated <step>/<interval>")
	seeds := fs.Int("seeds", 1, "crowds: seeds --seed, --seed+1, …")
	if err := fs.parse(args); err != nil {
		return err
	}
	if f.autopilot != "closed" {
		return usagef("--autopilot: the admission measure runs the closed loop and --rates; set the loop's cap with --max-undecided")
	}
	if *seeds < 1 {
		return usagef("--seeds must be at least 1")
	}
	faults, err := f.check()
	if err != nil {
		return err
	}
	type mode struct {
		name  string
		pilot *stack.Autopilot
	}
	modes := []mode{{closedMode, f.pilot}}
	for _, v := range strings.Split(*rates, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		p, err := parseAutopilot(v, 0)
		if err != nil {
			return err
		}
		if p.ClosedLoop {
			return usagef("--rates: %q is not a fixed rate, <step>/<interval>", v)
		}
		modes = append(modes, mode{"fixed " + v, p})
	}
	first := f.cfg.Seed
	if first == 0 {
		first = 1
	}
	jsonPath := f.jsonPath
	f.chartPath, f.jsonPath = "", ""
	var runs []admissionRun
	for i := range *seeds {
		for _, m := range modes {
			g := f
			g.pilot = m.pilot
			g.cfg.Seed = first + uint64(i)
			var counter *stack.Counter
			g.upstream = func(origin string) (string, error) {
				c, err := stack.StartCounter(origin, func(*http.Request) bool { return true })
				counter = c
				return c.URL(), err
			}
			fmt.Fprintf(errOut, "\nseed %d, %s\n", g.cfg.Seed, m.name)
			res, err := flashSale(ctx, g, faults, io.Discard, errOut)
			if counter != nil {
				counter.Close()
			}
			if err != nil {
				return err
			}
			runs = append(runs, admissionOf(m.name, g.cfg.Seed, res, counter))
			if jsonPath != "" {
				// Written after every sale: a long sweep cut short keeps
				// what it measured.
				if err := writeAdmissionJSON(jsonPath, runs); err != nil {
					return err
				}
			}
		}
	}
	printAdmission(out, f, runs)
	var errs []error
	for _, r := range runs {
		if r.broken {
			errs = append(errs, fmt.Errorf("%w: %s, seed %d: oversold %d, drift %d", errBroken, r.Mode, r.Seed, r.oversold, r.drift))
		}
		if r.Mode == closedMode && r.UnsoldWhileWaiting > 0 {
			errs = append(errs, fmt.Errorf("%w: the closed loop left %d seats unsold while people waited (seed %d)", errAdmission, r.UnsoldWhileWaiting, r.Seed))
		}
	}
	return errors.Join(errs...)
}

// errAdmission is a goal of the closed loop the CI holds it to: no seat
// left unsold while people wait.
var errAdmission = errors.New("admission")

// writeAdmissionJSON writes the runs as a JSON array, one object a line.
func writeAdmissionJSON(path string, runs []admissionRun) error {
	var b strings.Builder
	b.WriteString("[\n")
	for i, r := range runs {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		b.WriteString("  ")
		b.Write(line)
		if i < len(runs)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("]\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func admissionOf(mode string, seed uint64, res *sale.Result, counter *stack.Counter) admissionRun {
	unsold := max(0, res.Invariant.Sellable-res.Invariant.Confirmed)
	r := admissionRun{
		Mode: mode, Seed: seed, SoldOut: unsold == 0,
		AdmittedDisappointed: res.Outcomes[sale.SoldOutAdmitted.String()],
		EdgeShare:            math.Round(res.Requests.EdgePercent*10) / 1000,
		PositionsAdmitted:    res.Pilot.Admitted,
		usersAdmitted:        res.Admitted, stillWaiting: res.Outcomes[sale.TimedOut.String()],
		raises: res.Pilot.Raises, oversold: res.Oversold, drift: res.Invariant.Drift, broken: res.Broken(),
	}
	// Someone went without: told sold out, admitted too late, or still
	// waiting when the sale was cut off.
	wanted := res.Outcomes[sale.SoldOutAtEdge.String()] + r.AdmittedDisappointed + r.stillWaiting
	if wanted > 0 {
		r.UnsoldWhileWaiting = unsold
	}
	if counter != nil {
		r.PeakOriginConcurrency = counter.Peak()
	}
	if r.SoldOut {
		s := math.Round(res.LastSaleAfter.Seconds()*100) / 100
		r.LastSeatS = &s
	}
	return r
}

// admissionSummary is one mode's runs over the seeds.
type admissionSummary struct {
	mode                                  string
	runs, soldOut                         int
	lastSeat                              float64 // worst over the runs; +Inf when one did not sell out
	unsold, disappointed, peak, positions int64   // worst (most) over the runs
	edge                                  float64 // least over the runs
}

func summarize(runs []admissionRun) []admissionSummary {
	var out []admissionSummary
	index := map[string]int{}
	for _, r := range runs {
		i, ok := index[r.Mode]
		if !ok {
			i = len(out)
			index[r.Mode] = i
			out = append(out, admissionSummary{mode: r.Mode, edge: 1})
		}
		s := &out[i]
		s.runs++
		if r.SoldOut {
			s.soldOut++
		}
		last := math.Inf(1)
		if r.LastSeatS != nil {
			last = *r.LastSeatS
		}
		s.lastSeat = max(s.lastSeat, last)
		s.unsold = max(s.unsold, r.UnsoldWhileWaiting)
		s.disappointed = max(s.disappointed, r.AdmittedDisappointed)
		s.peak = max(s.peak, r.PeakOriginConcurrency)
		s.positions = max(s.positions, r.PositionsAdmitted)
		s.edge = min(s.edge, r.EdgeShare)
	}
	return out
}

// printAdmission writes a row per run, then the closed loop's goals, each
// judged on its worst run against the fastest fixed rate's worst run.
func printAdmission(w io.Writer, f saleFlags, runs []admissionRun) {
	fmt.Fprintf(w, "\nAdmission: %s users over %s, %s seats, %.0f%% of holders abandon, %.0f%% of cards declined\n\n",
		report.Count(f.cfg.Users), f.cfg.Window, report.Count(f.seats), f.cfg.Abandon*100, f.cfg.Decline*100)
	t := report.Table{Header: []string{"mode", "seed", "last seat", "sold out", "unsold while waiting", "admitted, disappointed", "peak at origin", "at the edge", "positions admitted", "users admitted / raises", "still waiting", "oversold / drift"}}
	for _, r := range runs {
		last := "—"
		if r.LastSeatS != nil {
			last = fmt.Sprintf("%.1fs", *r.LastSeatS)
		}
		t.Add(r.Mode, strconv.FormatUint(r.Seed, 10), last, strconv.FormatBool(r.SoldOut), report.Count(r.UnsoldWhileWaiting),
			report.Count(r.AdmittedDisappointed), report.Count(r.PeakOriginConcurrency), fmt.Sprintf("%.1f%%", r.EdgeShare*100),
			report.Count(r.PositionsAdmitted), report.Count(r.usersAdmitted)+" / "+strconv.Itoa(r.raises),
			report.Count(r.stillWaiting), fmt.Sprintf("%d / %d", r.oversold, r.drift))
	}
	t.Write(w)
	sums := summarize(runs)
	var closed *admissionSummary
	var fastest *admissionSummary
	for i := range sums {
		s := &sums[i]
		if s.mode == closedMode {
			closed = s
		} else if fastest == nil || s.lastSeat < fastest.lastSeat {
			fastest = s
		}
	}
	if closed == nil || fastest == nil {
		return
	}
	ok := func(v bool) string {
		if v {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintf(w, "\nthe closed loop's goals (worst run of each mode; fastest fixed rate: %s):\n", fastest.mode)
	fmt.Fprintf(w, "  sells out in every run: %d of %d, %s\n", closed.soldOut, closed.runs, ok(closed.soldOut == closed.runs))
	fmt.Fprintf(w, "  last seat ≤ 1.1 × %s: %s against %s, %s\n", fastest.mode, seconds(closed.lastSeat), seconds(1.1*fastest.lastSeat),
		ok(closed.lastSeat <= 1.1*fastest.lastSeat))
	fmt.Fprintf(w, "  unsold while waiting 0: %d, %s\n", closed.unsold, ok(closed.unsold == 0))
	fmt.Fprintf(w, "  admitted and disappointed ≤ 1/5 of %s: %d against %d, %s\n", fastest.mode, closed.disappointed, fastest.disappointed,
		ok(5*closed.disappointed <= fastest.disappointed))
	fmt.Fprintf(w, "  peak at the origin ≤ %s's: %d against %d, %s\n", fastest.mode, closed.peak, fastest.peak, ok(closed.peak <= fastest.peak))
}

func seconds(s float64) string {
	if math.IsInf(s, 1) {
		return "not sold out"
	}
	return fmt.Sprintf("%.1fs", s)
}

// parseAutopilot reads --autopilot: "closed" for the gateway's closed loop
// (with maxUndecided, 0 for its default), or "<step>/<interval>" for a
// fixed rate.
func parseAutopilot(v string, maxUndecided int64) (*stack.Autopilot, error) {
	if maxUndecided < 0 {
		return nil, usagef("--max-undecided must not be negative")
	}
	if v == "closed" {
		return &stack.Autopilot{ClosedLoop: true, MaxUndecided: maxUndecided}, nil
	}
	stepText, intervalText, ok := strings.Cut(v, "/")
	step, err := strconv.ParseInt(stepText, 10, 64)
	if !ok || err != nil || step < 1 {
		return nil, usagef("--autopilot: want closed or <step>/<interval>, e.g. 100/1s (got %q)", v)
	}
	interval, err := time.ParseDuration(intervalText)
	if err != nil || interval <= 0 {
		return nil, usagef("--autopilot: the interval of %q must be a positive duration", v)
	}
	if maxUndecided != 0 {
		return nil, usagef("--max-undecided is the closed loop's; --autopilot %s is a fixed rate", v)
	}
	return &stack.Autopilot{Step: step, Interval: interval}, nil
}
