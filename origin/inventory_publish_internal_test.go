package origin

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestErrorRate: the share of 5xx answers over the last ten seconds.
func TestErrorRate(t *testing.T) {
	clock := &testClock{t: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}
	e := newErrorRate(clock.Now)
	answer := func(status int) {
		h := e.count(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if status != http.StatusOK {
				w.WriteHeader(status)
			}
			_, _ = w.Write([]byte("x"))
		}))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}
	assert.Zero(t, e.rate(), "no answers, no errors")
	for range 3 {
		answer(http.StatusOK)
	}
	answer(http.StatusServiceUnavailable)
	assert.InDelta(t, 0.25, e.rate(), 1e-9)
	clock.Advance(5 * time.Second)
	answer(http.StatusConflict)
	answer(http.StatusOK)
	assert.InDelta(t, 1.0/6, e.rate(), 1e-9, "a 4xx is the client's")
	clock.Advance(6 * time.Second)
	assert.Zero(t, e.rate(), "the failure is older than the window")
}
