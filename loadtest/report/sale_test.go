package report

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/latency"
	"github.com/waitroom/waitroom/loadtest/sale"
)

func sampleResult() *sale.Result {
	r := &sale.Result{Config: sale.Defaults(), Users: 50000, Duration: 40 * time.Second}
	r.Event = api.Event{ID: 42, Capacity: 500, Sellable: 490}
	r.Requests.Gateway, r.Requests.Origin, r.Requests.Edge = 90000, 9000, 81000
	r.Admitted, r.Holds, r.Confirmed, r.SeatsSold = 5000, 560, 495, 495
	r.Invariant = api.Invariant{Event: 42, Capacity: 500, Sellable: 490, ActiveHolds: 490, Confirmed: 495}
	r.Money = &sale.Money{
		Captured: sale.MoneyCount{Count: 500, Amount: 45_000_000}, Confirmed: sale.MoneyCount{Count: 480, Amount: 43_200_000},
		Refunded: sale.MoneyCount{Count: 15, Amount: 1_350_000}, RefundFailed: sale.MoneyCount{Count: 5, Amount: 450_000},
	}
	r.Event.Currency = "inr"
	r.Outcomes = map[string]int64{"bought": 480, "told sold out by the gateway": 44000}
	r.Latency = map[string]latency.Summary{"join": {Count: 50000, P50: time.Millisecond, P95: 5 * time.Millisecond, P99: 9 * time.Millisecond}}
	r.Rates = map[string]float64{"gateway": 2250, "origin": 225}
	r.Faults = []sale.FaultRecord{{Name: "Redis restarted", At: 7 * time.Second, Took: 2 * time.Second, Note: "reloaded"}}
	for i := range 100 {
		r.Timeline = append(r.Timeline, sale.Sample{T: time.Duration(i) * 250 * time.Millisecond,
			Queue: int64(40000 - 400*i), Admitted: int64(50 * i), Holds: int64(i % 30), Sold: int64(5 * i), Remaining: int64(max(0, 490-5*i))})
	}
	return r
}

func TestPrintSale(t *testing.T) {
	var b bytes.Buffer
	PrintSale(&b, sampleResult())
	out := b.String()
	for _, want := range []string{
		"Flash sale: 50,000 users over 5s for 500 seats (490 sellable + 10 overflow reserve), event 42",
		"answered at the edge (never reached the origin)", "90.0%",
		"OVERSOLD", "invariant drift at the end", "join", "Redis restarted", "told sold out by the gateway",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "FAILED")
	assert.Contains(t, out, "captured 500 (45,000,000) = confirmed 480 (43,200,000) + refunded 15 (1,350,000) + refund pending 0 (0) + refund failed 5 (450,000)")
	assert.Contains(t, out, "kept silently: 0")
	r := sampleResult()
	r.Oversold = 3
	b.Reset()
	PrintSale(&b, r)
	assert.Contains(t, b.String(), "FAILED")
}

// With more than one gateway the report shows whether they agreed; and the
// peak memory of every process.
func TestPrintSaleGatewaysAndMemory(t *testing.T) {
	r := sampleResult()
	r.Gateways, r.Positions = 3, 44000
	r.Coherence = latency.Summary{Count: 4, P50: 100 * time.Millisecond, Max: 400 * time.Millisecond}
	r.AppliedCoherence = latency.Summary{Count: 5, P50: 3 * time.Millisecond, Max: 250 * time.Millisecond}
	r.Memory = []sale.ProcessMemory{
		{Name: "loadtest (this process)", Processes: 1, PeakRSS: 300 << 20, Largest: 300 << 20},
		{Name: "PostgreSQL", Processes: 12, PeakRSS: 480 << 20, Largest: 40 << 20},
		{Name: "Redis", Error: "connection refused"},
	}
	var b bytes.Buffer
	PrintSale(&b, r)
	out := b.String()
	for _, want := range []string{"queue positions handed out / given twice", "44,000 / 0", "max 400 ms", "max 250 ms", "goal ≤ 1 s: ok",
		"300 MiB", "480 MiB", "40 MiB", "connection refused"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "FAILED")

	r.Coherence.Max = 1500 * time.Millisecond
	b.Reset()
	PrintSale(&b, r)
	assert.NotContains(t, b.String(), "FAILED", "the goal is judged by the gateways' records, not by the polls")

	r.AppliedUnreached = 1
	b.Reset()
	PrintSale(&b, r)
	assert.Contains(t, b.String(), "goal ≤ 1 s: FAILED", "a value one gateway never applied")

	r.DuplicatePositions = 2
	r.AppliedUnreached = 0
	r.AppliedCoherence.Max = 1500 * time.Millisecond
	b.Reset()
	PrintSale(&b, r)
	assert.Contains(t, b.String(), "goal ≤ 1 s: FAILED")
	assert.True(t, r.Broken(), "a position given twice breaks the run")
}

// Redis's error answers are listed by code; a CROSSSLOT one (keys of one
// command on two cluster slots) fails the run.
func TestPrintSaleRedisErrors(t *testing.T) {
	r := sampleResult()
	var b bytes.Buffer
	PrintSale(&b, r)
	assert.NotContains(t, b.String(), "Redis error answers", "not read, not shown")

	r.RedisErrors = map[string]int64{}
	b.Reset()
	PrintSale(&b, r)
	assert.Regexp(t, `Redis error answers +none +ok`, b.String())
	assert.False(t, r.Broken())

	r.RedisErrors = map[string]int64{"NOSCRIPT": 3, "CROSSSLOT": 12}
	b.Reset()
	PrintSale(&b, r)
	assert.Contains(t, b.String(), "CROSSSLOT 12, NOSCRIPT 3")
	assert.Contains(t, b.String(), "FAILED (CROSSSLOT")
	assert.True(t, r.Broken(), "a command refused for keys on two slots breaks the run")
}

// A captured payment in none of the honest ends fails the money line.
func TestPrintSaleMoneyKept(t *testing.T) {
	tests := []struct {
		name  string
		money *sale.Money
		err   string
		want  []string
	}{
		{"kept", &sale.Money{Captured: sale.MoneyCount{Count: 2, Amount: 2000}, Confirmed: sale.MoneyCount{Count: 1, Amount: 1000},
			Kept: sale.MoneyCount{Count: 1, Amount: 1000}}, "", []string{"captured 2 (2,000) ≠ confirmed 1 (1,000)", "FAILED (kept silently: 1, 1,000 inr"}},
		{"unreadable", nil, "connection refused", []string{"money", "unknown", "FAILED (account unreadable: connection refused)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := sampleResult()
			r.Money, r.MoneyError = tc.money, tc.err
			var b bytes.Buffer
			PrintSale(&b, r)
			for _, w := range tc.want {
				assert.Contains(t, b.String(), w)
			}
			assert.True(t, r.Broken())
		})
	}
}

func TestSaleChart(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"sale.svg", "sale.png"} {
		path := filepath.Join(dir, name)
		require.NoError(t, SaleChart(path, sampleResult()))
		st, err := os.Stat(path)
		require.NoError(t, err)
		assert.Greater(t, st.Size(), int64(1000))
	}
	require.Error(t, SaleChart(filepath.Join(dir, "sale.gif"), sampleResult()))
}
