package latency

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name             string
		in               []time.Duration
		p50, p95, p99, m time.Duration
	}{
		{"empty", nil, 0, 0, 0, 0},
		{"one", []time.Duration{7}, 7, 7, 7, 7},
		{"hundred", hundred(), 50, 95, 99, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Summarize(tc.in)
			assert.Equal(t, tc.p50, s.P50)
			assert.Equal(t, tc.p95, s.P95)
			assert.Equal(t, tc.p99, s.P99)
			assert.Equal(t, tc.m, s.Max)
			assert.Equal(t, len(tc.in), s.Count)
		})
	}
}

func TestRecorderConcurrent(t *testing.T) {
	var r Recorder
	done := make(chan struct{})
	for i := range 10 {
		go func() {
			for j := range 100 {
				r.Add(time.Duration(i*100 + j + 1))
			}
			done <- struct{}{}
		}()
	}
	for range 10 {
		<-done
	}
	s := r.Summary()
	assert.Equal(t, 1000, s.Count)
	assert.Equal(t, time.Duration(1000), s.Max)
}

func hundred() []time.Duration {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i))
	}
	return s
}
