package report

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/waitroom/waitroom/loadtest/sale"
)

// PrintSale writes the sale's report.
func PrintSale(w io.Writer, r *sale.Result) {
	ev := r.Event
	fmt.Fprintf(w, "\nFlash sale: %s users over %s for %s seats (%s sellable + %s overflow reserve), event %d\n",
		Count(r.Users), r.Config.Window, Count(ev.Capacity), Count(ev.Sellable), Count(ev.Capacity-ev.Sellable), ev.ID)
	if r.TimedOut {
		fmt.Fprintf(w, "!! the sale was cut off by --timeout %s\n", r.Config.Timeout)
	}
	fmt.Fprintln(w)

	t := Table{Header: []string{"", "", ""}}
	perUser := 0.0
	if r.Users > 0 {
		perUser = float64(r.Requests.Gateway) / float64(r.Users)
	}
	t.Add("users", Count(r.Users), "")
	t.Add("requests to the gateway", Count(r.Requests.Gateway), fmt.Sprintf("%.2f per user", perUser))
	t.Add("answered at the edge (never reached the origin)", Count(r.Requests.Edge), Percent(r.Requests.Edge, r.Requests.Gateway))
	t.Add("passed to the origin (admitted)", Count(r.Requests.Origin), Percent(r.Requests.Origin, r.Requests.Gateway))
	if r.Requests.Unavailable > 0 || r.Requests.NoAnswer > 0 {
		t.Add("503 answers / requests with no answer", fmt.Sprintf("%s / %s", Count(r.Requests.Unavailable), Count(r.Requests.NoAnswer)), "retried")
	}
	t.Add("users admitted", Count(r.Admitted), fmt.Sprintf("autopilot: %d raise(s), %s positions", r.Pilot.Raises, Count(r.Pilot.Admitted)))
	t.Add("holds made", Count(r.Holds), fmt.Sprintf("%s refused sold out", Count(r.HoldSoldOut)))
	t.Add("bookings confirmed / seats sold", fmt.Sprintf("%s / %s", Count(r.Confirmed), Count(r.SeatsSold)), fmt.Sprintf("ledger: %s confirmed", Count(r.Invariant.Confirmed)))
	t.Add("holds expired unpaid / seats re-sold", fmt.Sprintf("%s / %s", Count(r.Expired), Count(r.Resold)), "")
	t.Add("payments declined (then retried)", Count(r.Declined), "")
	t.Add("late payments absorbed / refunded", fmt.Sprintf("%s / %s", Count(r.LateAbsorbed), Count(r.LateRefunded)),
		fmt.Sprintf("%s late webhooks sent, %s settled before", Count(r.LateSent), Count(r.LateEarly)))
	t.Add("double clicks on pay / double bookings", fmt.Sprintf("%s / %s", Count(r.DoubleClicks), Count(r.DoubleBooked)), "")
	if r.Gateways > 1 {
		t.Add("gateways (sharing one Redis, the crowd round-robin)", Count(r.Gateways), "")
		t.Add("queue positions handed out / given twice", fmt.Sprintf("%s / %s", Count(r.Positions), Count(r.DuplicatePositions)), verdict(r.DuplicatePositions == 0))
		if r.AppliedError != "" {
			t.Add("watermark coherence by the gateways' records", "unknown", r.AppliedError)
		} else {
			a := r.AppliedCoherence
			t.Add("watermark coherence by the gateways' records (first to last, per value)", fmt.Sprintf("max %s", Millis(a.Max)),
				fmt.Sprintf("%s values, p50 %s, %s not applied by every gateway; goal ≤ 1 s: %s", Count(a.Count), Millis(a.P50), Count(r.AppliedUnreached),
					verdict(a.Max <= time.Second && r.AppliedUnreached == 0)))
		}
		t.Add("watermark coherence as polled (first gateway to last, per raise)", fmt.Sprintf("max %s", Millis(r.Coherence.Max)),
			fmt.Sprintf("%s raises, p50 %s; every gateway read every 50 ms, %s reads failed", Count(r.Coherence.Count), Millis(r.Coherence.P50), Count(r.CoherenceMisses)))
	}
	t.Add("OVERSOLD", Count(r.Oversold), verdict(r.Oversold == 0))
	drift := Count(r.Invariant.Drift)
	if r.InvariantError != "" {
		drift = "unknown"
	}
	t.Add("invariant drift at the end", drift, verdict(r.InvariantError == "" && r.Invariant.Drift == 0)+
		fmt.Sprintf(" (remaining %d, active %d, sellable %d)", r.Invariant.Remaining, r.Invariant.ActiveHolds, r.Invariant.Sellable))
	if r.Money != nil || r.MoneyError != "" {
		t.Add("money", moneyFigure(r), moneyNote(r))
	}
	if r.RedisErrors != nil {
		t.Add("Redis error answers", byCount(r.RedisErrors, "none"), verdict(r.RedisErrors["CROSSSLOT"] == 0)+" (CROSSSLOT: keys of one command on two hash slots)")
	}
	t.Add("Postgres rows written per seat sold", fmt.Sprintf("%.1f", r.WritesPerSeat),
		fmt.Sprintf("%s rows, %s commits; %s", Count(r.PostgresRows), Count(r.PostgresCommits), byCount(r.PostgresTables, "")))
	t.Add("time to sell out (first hold refused)", orDash(r.SoldOutAfter > 0, Seconds(r.SoldOutAfter)), "")
	t.Add("last seat confirmed", orDash(r.LastSaleAfter > 0, Seconds(r.LastSaleAfter)), fmt.Sprintf("sale lasted %s", Seconds(r.Duration)))
	printPlain(w, t)

	fmt.Fprintln(w)
	lt := Table{Header: []string{"step", "count", "p50", "p95", "p99"}}
	for _, st := range sale.Steps() {
		s, ok := r.Latency[st]
		if !ok {
			continue
		}
		lt.Add(st, Count(s.Count), Millis(s.P50), Millis(s.P95), Millis(s.P99))
	}
	lt.Write(w)
	fmt.Fprintf(w, "load generator lag (request sent after its time): p50 %s, p99 %s, max %s over %s requests scheduled\n",
		Millis(r.Lag.P50), Millis(r.Lag.P99), Millis(r.Lag.Max), Count(r.Lag.Count))

	fmt.Fprintln(w)
	rt := Table{Header: []string{"layer", "per second", "what"}}
	rt.Add("gateway (Caddy + waitroom)", Rate(r.Rates["gateway"]), "requests from the crowd")
	rt.Add("origin", Rate(r.Rates["origin"]), "requests admitted by the gateway, plus webhooks")
	rt.Add("Redis", Rate(r.Rates["redis"]), "commands (queue, inventory, idempotency)")
	rt.Add("PostgreSQL", Rate(r.Rates["postgres"]), "transactions committed")
	rt.Write(w)

	if len(r.Memory) > 0 {
		fmt.Fprintln(w)
		mt := Table{Header: []string{"process", "peak RSS (VmHWM)", "processes", "largest"}}
		for _, m := range r.Memory {
			if m.Error != "" {
				mt.Add(m.Name, "unknown", "", m.Error)
				continue
			}
			mt.Add(m.Name, MiB(m.PeakRSS), Count(m.Processes), MiB(m.Largest))
		}
		mt.Write(w)
	}

	fmt.Fprintln(w)
	ot := Table{Header: []string{"how visits ended", "users"}}
	names := make([]string, 0, len(r.Outcomes))
	for k := range r.Outcomes {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return r.Outcomes[names[i]] > r.Outcomes[names[j]] })
	for _, k := range names {
		ot.Add(k, Count(r.Outcomes[k]))
	}
	ot.Write(w)

	if len(r.Faults) > 0 {
		fmt.Fprintln(w)
		ft := Table{Header: []string{"fault", "at", "took", "what happened"}}
		for _, f := range r.Faults {
			note := f.Note
			if f.Error != "" {
				note += " ERROR: " + f.Error
			}
			ft.Add(f.Name, Seconds(f.At), Seconds(f.Took), note)
		}
		ft.Write(w)
	}
	if r.GateRush != nil {
		printGateRush(w, r.GateRush)
	}
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "\n%d unexpected answers or errors; the first distinct ones:\n", r.ErrCount)
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  - %s\n", e)
		}
	}
}

// moneyFigure is the money line's equation, in bookings and amounts.
func moneyFigure(r *sale.Result) string {
	if r.Money == nil {
		return "unknown"
	}
	m := r.Money
	c := func(mc sale.MoneyCount) string { return fmt.Sprintf("%s (%s)", Count(mc.Count), Count(mc.Amount)) }
	eq := "="
	if !m.Balanced() {
		eq = "≠"
	}
	return fmt.Sprintf("captured %s %s confirmed %s + refunded %s + refund pending %s + refund failed %s",
		c(m.Captured), eq, c(m.Confirmed), c(m.Refunded), c(m.RefundPending), c(m.RefundFailed))
}

func moneyNote(r *sale.Result) string {
	if r.Money == nil {
		return verdict(false) + " (account unreadable: " + r.MoneyError + ")"
	}
	m := r.Money
	note := fmt.Sprintf("%s (kept silently: %s", verdict(!r.MoneyKept()), Count(m.Kept.Count))
	if m.Kept.Count > 0 {
		note += fmt.Sprintf(", %s %s", Count(m.Kept.Amount), r.Event.Currency)
	}
	note += fmt.Sprintf("; amounts in %s's smallest unit", r.Event.Currency)
	if m.PaymentPending.Count > 0 {
		note += fmt.Sprintf("; %s payments still without an outcome", Count(m.PaymentPending.Count))
	}
	return note + ")"
}

// byCount lists counts by name (rows by table, errors by code), most
// first; empty when there are none.
func byCount(counts map[string]int64, empty string) string {
	if len(counts) == 0 {
		return empty
	}
	names := make([]string, 0, len(counts))
	for t := range counts {
		names = append(names, t)
	}
	sort.Slice(names, func(i, j int) bool { return counts[names[i]] > counts[names[j]] })
	parts := make([]string, len(names))
	for i, t := range names {
		parts[i] = fmt.Sprintf("%s %s", t, Count(counts[t]))
	}
	return strings.Join(parts, ", ")
}

// printPlain writes a table without its header and rule.
func printPlain(w io.Writer, t Table) {
	widths := make([]int, 3)
	for _, r := range t.Rows {
		for i, c := range r {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for _, r := range t.Rows {
		fmt.Fprintf(w, "  %-*s  %*s   %s\n", widths[0], r[0], widths[1], r[1], r[2])
	}
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAILED"
}

func orDash(ok bool, s string) string {
	if ok {
		return s
	}
	return "–"
}
