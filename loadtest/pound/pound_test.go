package pound

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRunStopsAtMaxAndCountsFailures(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if served.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	res := Run(context.Background(), Load{
		Client: srv.Client(), Workers: 4, Duration: 10 * time.Second, Max: 100,
		Request: func(int, int64) *http.Request { r, _ := http.NewRequest(http.MethodGet, srv.URL, nil); return r },
		Check: func(resp *http.Response, _ []byte) error {
			if resp.StatusCode != http.StatusOK {
				return errors.New("not ok")
			}
			return nil
		},
	})
	assert.Equal(t, int64(100), res.Requests)
	assert.Equal(t, int64(10), res.Failed)
	assert.Equal(t, int64(90), res.Statuses[http.StatusOK])
	assert.Equal(t, "not ok", res.FirstErr)
	assert.Equal(t, 100, res.Latency.Count)
	assert.Positive(t, res.PerSecond())
}

func TestRunStopsAtDuration(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	start := time.Now()
	res := Run(context.Background(), Load{
		Client: srv.Client(), Workers: 2, Duration: 200 * time.Millisecond,
		Request: func(int, int64) *http.Request { r, _ := http.NewRequest(http.MethodGet, srv.URL, nil); return r },
	})
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Positive(t, res.Requests)
	assert.Zero(t, res.Failed, res.FirstErr)
}
