package maintenance

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A service's loop runs its pass on its ticker, hands each pass's error to
// the test signal, and Stop returns only once the pass under way is over;
// a second Start while running, and Stop while stopped, do nothing.
func TestLoopRunsPassesUntilStopped(t *testing.T) {
	passed := make(chan error)
	var running, runs atomic.Int64
	fail := errors.New("pass failed")
	l := &loop{name: "test", interval: time.Millisecond, log: logger(nil), passed: passed,
		pass: func(context.Context) error {
			running.Add(1)
			defer running.Add(-1)
			if runs.Add(1) == 2 {
				return fail
			}
			return nil
		}}
	l.stop()
	l.start(context.Background())
	l.start(context.Background())
	for _, want := range []error{nil, fail, nil} {
		select {
		case err := <-passed:
			assert.Equal(t, want, err)
		case <-time.After(5 * time.Second):
			t.Fatal("no pass ran")
		}
	}
	done := make(chan struct{})
	go func() { l.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return")
	}
	assert.Zero(t, running.Load(), "no pass under way after Stop")
	n := runs.Load()
	time.Sleep(5 * time.Millisecond)
	assert.Equal(t, n, runs.Load(), "no pass after Stop")
}

func TestJitteredStaysWithinTenPercent(t *testing.T) {
	for range 1000 {
		d := jittered(time.Second)
		require.GreaterOrEqual(t, d, 900*time.Millisecond)
		require.LessOrEqual(t, d, 1100*time.Millisecond)
	}
}
