package report

import (
	"fmt"
	"io"

	"github.com/waitroom/waitroom/loadtest/gaterush"
)

// printGateRush writes the gate rush's lines of the sale's report.
func printGateRush(w io.Writer, r *gaterush.Result) {
	fmt.Fprintf(w, "\nGate rush: %s tickets scanned at %d gates, %s of them shown twice at once at a second gate\n\n",
		Count(r.Tickets), r.Gates, Count(r.ShownTwice))
	t := Table{Header: []string{"", "", ""}}
	t.Add("scans", Count(r.Scans), fmt.Sprintf("%s per second over %s; p50 %s, p99 %s",
		Rate(r.PerSecond), Seconds(r.Duration), Millis(r.Latency.P50), Millis(r.Latency.P99)))
	t.Add("scans admitted", Count(r.Admitted), fmt.Sprintf("ledger: %s tickets admitted", Count(r.Ledger.Admitted)))
	t.Add("duplicates refused (already used)", Count(r.DuplicatesRefused), fmt.Sprintf("ledger: %s", Count(r.Ledger.AlreadyUsed)))
	t.Add("DOUBLE ADMISSIONS", Count(r.DoubleAdmissions), verdict(r.DoubleAdmissions == 0 && r.Ledger.DoubleAdmissions == 0)+
		fmt.Sprintf(" (ledger: %s)", Count(r.Ledger.DoubleAdmissions)))
	t.Add("tickets never admitted", Count(r.NeverAdmitted), verdict(r.NeverAdmitted == 0 && r.Ledger.Admitted == r.Tickets))
	if r.Ledger.WrongEvent > 0 {
		t.Add("refused as another event's", "", verdict(false)+fmt.Sprintf(" (ledger: %s)", Count(r.Ledger.WrongEvent)))
	}
	if r.Unexpected > 0 {
		t.Add("other answers", Count(r.Unexpected), "")
	}
	if r.LedgerError != "" {
		t.Add("ledger count", "unknown", verdict(false)+" ("+r.LedgerError+")")
	}
	printPlain(w, t)
	for _, e := range r.Errors {
		fmt.Fprintf(w, "  - %s\n", e)
	}
}
