package sale

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/latency"
	"github.com/waitroom/waitroom/waitroom"
)

// Coherence by the gateways' records: per value, from the first gateway
// admitting by it (or by a higher one) to the last.
func TestAppliedCoherence(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rec := func(dropped int64, marks ...any) api.Applied {
		a := api.Applied{Dropped: dropped}
		for i := 0; i < len(marks); i += 2 {
			a.Applied = append(a.Applied, waitroom.AppliedWatermark{Watermark: int64(marks[i].(int)), At: at(marks[i+1].(int))})
		}
		return a
	}
	tests := []struct {
		name      string
		records   []api.Applied
		lags      []time.Duration // sorted
		unreached int64
	}{
		{"together", []api.Applied{rec(0, 10, 0, 20, 500), rec(0, 10, 0, 20, 500)}, []time.Duration{0, 0}, 0},
		{"one behind", []api.Applied{rec(0, 10, 0, 20, 500), rec(0, 10, 30, 20, 900)}, []time.Duration{30 * time.Millisecond, 400 * time.Millisecond}, 0},
		// The second gateway went from 10 straight to 30: it admitted by
		// 20 from the moment it applied 30.
		{"a value skipped", []api.Applied{rec(0, 10, 0, 20, 100, 30, 200), rec(0, 10, 0, 30, 250)},
			[]time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond}, 0},
		// Whoever applied first counts from then, whichever gateway it is.
		{"the first is not always the same", []api.Applied{rec(0, 10, 40, 20, 100), rec(0, 10, 0, 20, 300)},
			[]time.Duration{40 * time.Millisecond, 200 * time.Millisecond}, 0},
		{"never applied by one", []api.Applied{rec(0, 10, 0, 20, 100), rec(0, 10, 5)}, []time.Duration{5 * time.Millisecond}, 1},
		// A lowered watermark is not a new value to reach.
		{"lowered and raised again", []api.Applied{rec(0, 10, 0, 5, 50, 10, 60), rec(0, 10, 20)}, []time.Duration{20 * time.Millisecond, 20 * time.Millisecond}, 0},
		// A gateway that forgot its oldest records says nothing about the
		// values up to its oldest one left.
		{"dropped records", []api.Applied{rec(0, 10, 0, 20, 100, 30, 200), rec(2048, 20, 150, 30, 260)}, []time.Duration{60 * time.Millisecond}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lag, unreached := appliedCoherence(tc.records)
			want := latency.Summarize(tc.lags)
			assert.Equal(t, want, lag)
			assert.Equal(t, tc.unreached, unreached)
		})
	}
}
