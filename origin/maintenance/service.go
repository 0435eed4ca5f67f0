// Package maintenance holds the origin's background services, each one job
// with its own small Config (zero values mean the documented defaults), as
// River keeps its maintenance services: Start runs one loop on a jittered
// ticker until its context ends, Stop waits for it, and RunOnce is the
// single pass the loop makes, which tests drive with an injected clock.
//
//   - Reaper: expires lapsed holds in the ledger and returns their seats.
//   - DriftCorrector: checks every event's invariant, corrects drift while
//     the sale goes on, rebuilds an event whose drift lasts.
//   - UncertainResolver: settles the hold writes whose outcome was unknown,
//     once they are final.
//   - PaymentReconciler: asks the provider about the bookings whose payment
//     or refund has not been heard of.
package maintenance

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// loop runs a service's pass every interval, jittered, until stopped.
type loop struct {
	name     string
	interval time.Duration
	log      *slog.Logger
	pass     func(context.Context) error
	// passed, when set (tests), is sent the error of each pass.
	passed chan<- error

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// jittered is d ± 10 %, so the services of many nodes do not run in step.
func jittered(d time.Duration) time.Duration {
	return d - d/10 + rand.N(d/5+1)
}

func (l *loop) start(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go l.run(ctx, l.done)
}

func (l *loop) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTimer(jittered(l.interval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := l.pass(ctx)
		if err != nil && ctx.Err() == nil {
			l.log.Warn(l.name+" failed", "error", err)
		}
		if l.passed != nil {
			select {
			case l.passed <- err:
			case <-ctx.Done():
				return
			}
		}
		t.Reset(jittered(l.interval))
	}
}

func (l *loop) stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
