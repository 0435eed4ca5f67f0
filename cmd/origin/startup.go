package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/cenkalti/backoff/v5"
)

// attemptTimeout bounds one try to reach a server at start, so a server
// that accepts but never answers is tried again rather than waited on. A
// variable for the tests.
var attemptTimeout = 5 * time.Second

// maxRetryInterval caps the wait between two tries: a server that comes up
// is found within about this long.
const maxRetryInterval = 5 * time.Second

// awaitServer calls try until it succeeds or ctx ends, backing off with
// jitter between tries. It logs one line per kind of failure, not one per try, and one when the server answers, so an origin
// started before its servers says what it waits for without flooding.
// addr, the server's address without credentials, goes in those lines: the
// drivers' own errors do not always name it.
func awaitServer[T any](ctx context.Context, log *slog.Logger, what, addr string, try func(context.Context) (T, error)) (T, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = maxRetryInterval
	seen := map[string]bool{}
	tries := 0
	v, err := backoff.Retry(ctx, func() (T, error) {
		tries++
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		v, err := try(actx)
		if err != nil && ctx.Err() != nil {
			return v, backoff.Permanent(ctx.Err())
		}
		if err != nil && isTimeout(err) {
			// A bare "context deadline exceeded" or "i/o timeout" says
			// nothing of a server that took the connection and kept quiet.
			err = fmt.Errorf("no answer in time: something listens at %s but does not answer as %s "+
				"(the wrong port, TLS on one side only, or a server stopped or overloaded): %w", addr, what, err)
		}
		return v, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, next time.Duration) {
		if kind := failureKind(err); !seen[kind] {
			seen[kind] = true
			log.Warn("waiting for "+what, "addr", addr, "error", err, "retry_in", next.Round(time.Millisecond))
		}
	}))
	if err != nil {
		var zero T
		return zero, fmt.Errorf("waiting for %s: %w", what, err)
	}
	if tries > 1 {
		log.Info(what+" is up", "tries", tries)
	}
	return v, nil
}

// isTimeout: the try ran out of time rather than being refused.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// failureKind is an error's text without its numbers: two refused
// connections differ only in their ports, and are one kind of failure.
func failureKind(err error) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsDigit(r) {
			return -1
		}
		return r
	}, err.Error())
}

// switchHandler serves one handler until it is swapped for another: the
// origin listens at once and answers "starting" until its servers are up.
type switchHandler struct{ h atomic.Pointer[http.Handler] }

func (s *switchHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *switchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// waitList is what the origin still waits for at start, as its 503s say.
type waitList struct {
	mu      sync.Mutex
	pending []string
	// then says what it does once nothing is pending.
	then func() string
}

func newWaitList(names ...string) *waitList { return &waitList{pending: names} }

func (l *waitList) done(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = slices.DeleteFunc(l.pending, func(n string) bool { return n == name })
}

// next says what the origin waits for once its servers are up.
func (l *waitList) next(what func() string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.then = what
}

func (l *waitList) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) == 0 {
		if l.then != nil {
			return l.then()
		}
		return "the service to start"
	}
	return strings.Join(l.pending, " and ")
}
