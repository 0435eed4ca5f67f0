package waitroom

import (
	"context"
	_ "embed"
	"fmt"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"
)

// Positions from Redis: next.lua takes them from the event's counter, one
// arrival's, a batch of arrivals' that met on this node, or a leased block.

//go:embed next.lua
var nextLua string

var nextScript = redis.NewScript(nextLua)

// Answers of next.lua that are not a position.
const (
	nextLost      = -1
	nextRestoring = -2
)

// positionBatch is the arrivals that gathered while a take was in flight:
// n of them, given last-n+1..last in the order they came.
type positionBatch struct {
	n    int64
	last int64
	err  error
	done chan struct{}
	// expired is closed by timer, the bound of the batch's first bounded
	// arrival, which all of its arrivals share.
	expired chan struct{}
	timer   *time.Timer
}

// passed reports whether b's bound has passed, so its arrivals gave up.
func (b *positionBatch) passed() bool {
	if b.expired == nil {
		return false
	}
	select {
	case <-b.expired:
		return true
	default:
		return false
	}
}

// high is the highest counter value this node has had for event.
func (r *RedisStore) high(event int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.event(event).high
}

// take runs next.lua for n positions and returns the last one taken.
func (r *RedisStore) take(ctx context.Context, event, n, floor int64) (int64, error) {
	last, err := nextScript.Run(ctx, r.rdb, []string{stateKey(event), positionsKey(event)},
		n, r.now().UnixMilli(), floor).Int64()
	switch {
	case err != nil:
		return 0, unavailable("next position", err)
	case last == nextLost:
		return 0, fmt.Errorf("next position: %w", ErrNoState)
	case last == nextRestoring:
		return 0, fmt.Errorf("next position: %w", ErrRestoring)
	}
	return last, nil
}

// NextPosition implements Store.
func (r *RedisStore) NextPosition(ctx context.Context, event int64) (int64, error) {
	if r.lease == 1 {
		return r.nextGathered(ctx, event, 0)
	}
	return r.nextLeased(ctx, event)
}

// nextPositionWithin implements boundedPositions.
func (r *RedisStore) nextPositionWithin(ctx context.Context, event int64, d time.Duration) (int64, error) {
	if r.lease == 1 {
		return r.nextGathered(ctx, event, d)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return r.nextLeased(ctx, event)
}

// nextLeased hands out the next position of the node's block, leasing the
// next block when it is used up.
func (r *RedisStore) nextLeased(ctx context.Context, event int64) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.event(event)
	if e.next == 0 || e.next > e.last {
		last, err := r.take(ctx, event, r.lease, e.high)
		if err != nil {
			return 0, err
		}
		e.next, e.last = last-r.lease+1, last
		e.high = max(e.high, last)
	}
	pos := e.next
	e.next++
	return pos, nil
}

// positionAtHand implements positionsAtHand: the next position of the
// leased block, while one is left.
func (r *RedisStore) positionAtHand(event int64) (int64, bool) {
	if r.lease == 1 {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.event(event)
	if e.next == 0 || e.next > e.last {
		return 0, false
	}
	pos := e.next
	e.next++
	return pos, true
}

// takeTimeout bounds a take made for a batch of arrivals: it answers them
// all, so no one request's context may cut it short. The client's own
// timeouts (NewRedisClient) end it well before.
const takeTimeout = 5 * time.Second

// nextGathered joins the batch of arrivals gathering for event's next take,
// and starts the takes when none is in flight: one arrival alone is taken
// at once, as before; arrivals that come while it is in flight gather and
// are taken together when it returns. Positions stay dense and in arrival
// order; a waiter whose context ends, or whose batch's bound d (0: none)
// passes first, leaves its position unused, as a reply lost in flight
// does. A batch whose bound passed before its take is not taken at all.
func (r *RedisStore) nextGathered(ctx context.Context, event int64, d time.Duration) (int64, error) {
	r.mu.Lock()
	e := r.event(event)
	b := e.gathering
	if b == nil || b.passed() {
		// A batch whose bound passed has lost its arrivals: it is left
		// untaken, and this arrival starts the next with its own bound.
		b = &positionBatch{done: make(chan struct{})}
		e.gathering = b
	}
	if d > 0 && b.expired == nil {
		expired := make(chan struct{})
		b.expired, b.timer = expired, time.AfterFunc(d, func() { close(expired) })
	}
	b.n++
	nth := b.n
	expired := b.expired
	if !e.taking {
		e.taking = true
		go r.takeBatches(event, e)
	}
	r.mu.Unlock()
	select {
	case <-b.done:
	case <-ctx.Done():
		return 0, unavailable("next position", ctx.Err())
	case <-expired:
		// The batch's answer may have come at the same moment.
		select {
		case <-b.done:
		default:
			return 0, unavailable("next position", context.DeadlineExceeded)
		}
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.last - b.n + nth, nil
}

// takeBatches takes the gathered batches of e, one call each, until none
// is left.
func (r *RedisStore) takeBatches(event int64, e *redisEvent) {
	for {
		// The arrival that started this goroutine, or the batch's
		// answer, made it runnable ahead of requests already read: let
		// them run first, so they join this take rather than the next.
		runtime.Gosched()
		r.mu.Lock()
		b := e.gathering
		if b == nil {
			e.taking = false
			r.mu.Unlock()
			return
		}
		e.gathering = nil
		floor := e.high
		r.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), takeTimeout)
		b.last, b.err = r.take(ctx, event, b.n, floor)
		cancel()
		if b.err == nil {
			r.mu.Lock()
			e.high = max(e.high, b.last)
			r.mu.Unlock()
		}
		close(b.done)
		if b.timer != nil {
			b.timer.Stop()
		}
	}
}
