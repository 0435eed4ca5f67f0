// Package pound drives a fixed number of workers, each sending requests one
// after the other for a bounded time: a closed loop, so the rate measured is
// what the server sustains, not what the client offered.
package pound

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/loadtest/latency"
)

// Load is one measurement.
type Load struct {
	Client  *http.Client
	Workers int
	// Duration bounds the run; Max bounds the requests (0: no bound).
	Duration time.Duration
	Max      int64
	// Request returns worker w's n-th request.
	Request func(w int, n int64) *http.Request
	// Check judges an answer (status and headers; the body has been read
	// into body). A non-nil error counts the request as failed.
	Check func(resp *http.Response, body []byte) error
}

// Result is what a Load measured.
type Result struct {
	Requests int64           `json:"requests"`
	Failed   int64           `json:"failed"`
	Elapsed  time.Duration   `json:"elapsed_ns"`
	Latency  latency.Summary `json:"latency"`
	FirstErr string          `json:"first_error,omitempty"`
	Statuses map[int]int64   `json:"statuses"`
}

// PerSecond is the rate of successful requests.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests-r.Failed) / r.Elapsed.Seconds()
}

// Run runs l until its duration or count is reached or ctx ends.
func Run(ctx context.Context, l Load) Result {
	ctx, cancel := context.WithTimeout(ctx, l.Duration)
	defer cancel()
	var (
		sent, failed atomic.Int64
		rec          latency.Recorder
		mu           sync.Mutex
		firstErr     string
		statuses     = map[int]int64{}
		wg           sync.WaitGroup
	)
	fail := func(err error) {
		failed.Add(1)
		mu.Lock()
		if firstErr == "" {
			firstErr = err.Error()
		}
		mu.Unlock()
	}
	start := time.Now()
	for w := range l.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[int]int64{}
			defer func() {
				mu.Lock()
				for k, v := range local {
					statuses[k] += v
				}
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				n := sent.Add(1)
				if l.Max > 0 && n > l.Max {
					sent.Add(-1)
					return
				}
				req := l.Request(w, n).WithContext(ctx)
				t0 := time.Now()
				resp, err := l.Client.Do(req)
				if err != nil {
					if ctx.Err() != nil {
						// Cut off by the end of the run: not a failure.
						sent.Add(-1)
						return
					}
					fail(err)
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				rec.Since(t0)
				local[resp.StatusCode]++
				if err != nil {
					fail(fmt.Errorf("read body: %w", err))
					continue
				}
				if l.Check != nil {
					if err := l.Check(resp, body); err != nil {
						fail(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	return Result{
		Requests: sent.Load(), Failed: failed.Load(), Elapsed: time.Since(start),
		Latency: rec.Summary(), FirstErr: firstErr, Statuses: statuses,
	}
}
