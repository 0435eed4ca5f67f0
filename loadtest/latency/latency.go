// Package latency records how long steps take and summarises them as
// percentiles. Every sample is kept: a run has at most a few hundred
// thousand, and exact percentiles need no bucket tuning.
package latency

import (
	"slices"
	"sync"
	"time"
)

// Recorder collects durations; safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	samples []time.Duration
}

// Add records one sample.
func (r *Recorder) Add(d time.Duration) {
	r.mu.Lock()
	r.samples = append(r.samples, d)
	r.mu.Unlock()
}

// Since records the time elapsed since start.
func (r *Recorder) Since(start time.Time) { r.Add(time.Since(start)) }

// Summary is the percentiles of a set of samples.
type Summary struct {
	Count int           `json:"count"`
	P50   time.Duration `json:"p50_ns"`
	P95   time.Duration `json:"p95_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
	Mean  time.Duration `json:"mean_ns"`
}

// Summary sorts a copy of the samples and reads the percentiles off it.
func (r *Recorder) Summary() Summary {
	r.mu.Lock()
	s := slices.Clone(r.samples)
	r.mu.Unlock()
	return Summarize(s)
}

// Summarize reads the percentiles of samples (it sorts them in place).
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	slices.Sort(samples)
	var total time.Duration
	for _, d := range samples {
		total += d
	}
	return Summary{
		Count: len(samples),
		P50:   at(samples, 0.50),
		P95:   at(samples, 0.95),
		P99:   at(samples, 0.99),
		Max:   samples[len(samples)-1],
		Mean:  total / time.Duration(len(samples)),
	}
}

// at is the nearest-rank percentile of sorted samples.
func at(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
