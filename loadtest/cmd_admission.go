package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/sale"
	"github.com/waitroom/waitroom/loadtest/stack"
)

// admissionRun is one column of the admission table: the same crowd under
// one autopilot.
type admissionRun struct {
	Autopilot string `json:"autopilot"`
	// EdgePercent is the share of the crowd's requests the gateway
	// answered itself.
	EdgePercent float64 `json:"edge_percent"`
	// OriginPeak is the most requests in flight at the origin at once.
	OriginPeak int64 `json:"origin_peak_concurrency"`
	// SoldOutIn is when the last sellable seat was confirmed; zero when
	// some were never sold.
	SoldOutIn time.Duration `json:"sold_out_in_ns"`
	// Unsold is the sellable seats not sold when the queue emptied.
	Unsold int64 `json:"unsold"`
	// Disappointed is the users admitted who found nothing to buy.
	Disappointed int64 `json:"admitted_disappointed"`
	Admitted     int64 `json:"admitted"`
	// StillWaiting is the users still queued when the sale was cut off.
	StillWaiting int64 `json:"still_waiting"`
	Raises       int   `json:"raises"`
	Oversold     int64 `json:"oversold"`
	Drift        int64 `json:"drift"`
	Broken       bool  `json:"broken"`
}

func runAdmission(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("admission", "The same crowd under the gateway's two autopilots, one sale after the other:\n(a) a fixed rate, (b) the closed loop steered by the origin's inventory.\nPrints, side by side, the share answered at the edge, the peak concurrency\nat the origin, the time to sell out, the seats left unsold and the users\nadmitted who found nothing to buy.", errOut)
	var f saleFlags
	f.register(fs)
	// The crowd of the measure: 30% of holders never pay, 10% of cards
	// are declined.
	for name, v := range map[string]string{"abandon": "0.3", "decline": "0.1"} {
		if err := fs.Set(name, v); err != nil {
			return err
		}
	}
	fixed := fs.String("fixed", "100/1s", "(a) the fixed rate: <step>/<interval>")
	if err := fs.parse(args); err != nil {
		return err
	}
	if f.autopilot != "closed" {
		return usagef("--autopilot: the admission measure runs both; set (a) with --fixed and (b) with --max-undecided")
	}
	faults, err := f.check()
	if err != nil {
		return err
	}
	fixedPilot, err := parseAutopilot(*fixed, 0)
	if err != nil {
		return err
	}
	if fixedPilot.ClosedLoop {
		return usagef("--fixed must be a fixed rate, <step>/<interval>")
	}
	jsonPath := f.jsonPath
	f.chartPath, f.jsonPath = "", ""
	var runs []admissionRun
	for _, p := range []struct {
		name  string
		pilot *stack.Autopilot
	}{{"(a) autopilot " + strings.Replace(*fixed, "/", " every ", 1), fixedPilot}, {"(b) autopilot { … } (closed loop)", f.pilot}} {
		g := f
		g.pilot = p.pilot
		var counter *stack.Counter
		g.upstream = func(origin string) (string, error) {
			c, err := stack.StartCounter(origin, func(*http.Request) bool { return true })
			counter = c
			return c.URL(), err
		}
		fmt.Fprintf(errOut, "\n%s\n", p.name)
		res, err := flashSale(ctx, g, faults, io.Discard, errOut)
		if counter != nil {
			defer counter.Close()
		}
		if err != nil {
			return err
		}
		runs = append(runs, admissionOf(p.name, res, counter))
	}
	printAdmission(out, f, runs)
	if jsonPath != "" {
		b, err := json.MarshalIndent(runs, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, b, 0o644); err != nil {
			return err
		}
	}
	for _, r := range runs {
		if r.Broken {
			return fmt.Errorf("%w: %s: oversold %d, drift %d", errBroken, r.Autopilot, r.Oversold, r.Drift)
		}
	}
	return nil
}

func admissionOf(name string, res *sale.Result, counter *stack.Counter) admissionRun {
	r := admissionRun{
		Autopilot: name, EdgePercent: res.Requests.EdgePercent,
		Unsold:       max(0, res.Invariant.Sellable-res.Invariant.Confirmed),
		Disappointed: res.Outcomes[sale.SoldOutAdmitted.String()],
		Admitted:     res.Admitted, StillWaiting: res.Outcomes[sale.TimedOut.String()],
		Raises: res.Pilot.Raises, Oversold: res.Oversold, Drift: res.Invariant.Drift, Broken: res.Broken(),
	}
	if counter != nil {
		r.OriginPeak = counter.Peak()
	}
	if r.Unsold == 0 {
		r.SoldOutIn = res.LastSaleAfter
	}
	return r
}

// printAdmission writes the side-by-side table and the goals of (b).
func printAdmission(w io.Writer, f saleFlags, runs []admissionRun) {
	fmt.Fprintf(w, "\nAdmission: %s users over %s, %s seats, %.0f%% of holders abandon, %.0f%% of cards declined\n\n",
		report.Count(f.cfg.Users), f.cfg.Window, report.Count(f.seats), f.cfg.Abandon*100, f.cfg.Decline*100)
	header := []string{""}
	for _, r := range runs {
		header = append(header, r.Autopilot)
	}
	t := report.Table{Header: header}
	row := func(name string, cell func(admissionRun) string) {
		cells := []any{name}
		for _, r := range runs {
			cells = append(cells, cell(r))
		}
		t.Add(cells...)
	}
	row("answered at the edge", func(r admissionRun) string { return fmt.Sprintf("%.1f%%", r.EdgePercent) })
	row("peak concurrent requests at the origin", func(r admissionRun) string { return report.Count(r.OriginPeak) })
	row("time to sell out (last seat confirmed)", func(r admissionRun) string {
		if r.SoldOutIn == 0 {
			return "not sold out"
		}
		return report.Seconds(r.SoldOutIn)
	})
	row("seats left unsold when the queue emptied", func(r admissionRun) string { return report.Count(r.Unsold) })
	row("users admitted who found nothing to buy", func(r admissionRun) string { return report.Count(r.Disappointed) })
	row("users admitted / raises", func(r admissionRun) string {
		return report.Count(r.Admitted) + " / " + strconv.Itoa(r.Raises)
	})
	row("still waiting at the timeout", func(r admissionRun) string { return report.Count(r.StillWaiting) })
	row("oversold / drift", func(r admissionRun) string { return fmt.Sprintf("%d / %d", r.Oversold, r.Drift) })
	t.Write(w)
	if len(runs) != 2 {
		return
	}
	a, b := runs[0], runs[1]
	fewer := "∞"
	if b.Disappointed > 0 {
		fewer = fmt.Sprintf("%.1f×", float64(a.Disappointed)/float64(b.Disappointed))
	}
	ok := func(v bool) string {
		if v {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintf(w, "\ngoals of (b): ≥ 97%% at the edge: %.1f%%, %s; 0 seats unsold: %d, %s; ≥ 5× fewer admitted and disappointed than (a): %s, %s\n",
		b.EdgePercent, ok(b.EdgePercent >= 97), b.Unsold, ok(b.Unsold == 0), fewer,
		ok(a.Disappointed >= 5*b.Disappointed))
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
