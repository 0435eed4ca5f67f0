package waitroom

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// TestArrivalsMeetingATakeShareTheNext holds a take in flight while
// arrivals gather behind it, one at a time: one more script call gives them
// the next positions, dense and in the order they came, and the one that
// gave up waiting leaves its position unused.
func TestArrivalsMeetingATakeShareTheNext(t *testing.T) {
	ctx := context.Background()
	s, evt, hook, first := heldTake(t, func(s *RedisStore, evt int64) (int64, error) { return s.NextPosition(ctx, evt) })

	const n, quitter = 20, 7
	got := make([]int64, n)
	errs := make([]error, n)
	quit, giveUp := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	var wg sync.WaitGroup
	for i := range n {
		if i == quitter {
			go func() { _, err := s.NextPosition(quit, evt); gaveUp <- err }()
		} else {
			wg.Go(func() { got[i], errs[i] = s.NextPosition(ctx, evt) })
		}
		require.Eventually(t, func() bool { return s.gathered(evt) == int64(i+1) }, 10*time.Second, time.Millisecond,
			"arrival %d never joined the batch", i)
	}
	giveUp()
	assert.ErrorIs(t, <-gaveUp, ErrUnavailable, "it returns when its context ends, the take still in flight")
	close(hook.release)
	wg.Wait()

	assert.Equal(t, int64(2), <-first)
	for i := range n {
		if i != quitter {
			assert.NoError(t, errs[i])
			assert.Equal(t, int64(3+i), got[i], "arrival %d", i)
		}
	}
	assert.Equal(t, int64(2), hook.calls.Load(), "the held take and one for the whole batch")
	st, err := s.State(ctx, evt)
	require.NoError(t, err)
	assert.Equal(t, int64(2+n), st.LastPosition)
}

// TestGatheredArrivalsShareOneBound: the arrivals gathered behind a take
// in flight share one bound, their batch's first, even one that asked for
// a shorter one; a batch whose bound passed before its take is left
// untaken, and the next arrival starts a new batch with its own bound.
func TestGatheredArrivalsShareOneBound(t *testing.T) {
	ctx := context.Background()
	s, evt, hook, first := heldTake(t, func(s *RedisStore, evt int64) (int64, error) { return s.nextPositionWithin(ctx, evt, time.Minute) })

	// A bound that passes at once: its arrival gives up, its batch with it.
	_, err := s.nextPositionWithin(ctx, evt, time.Nanosecond)
	assert.ErrorIs(t, err, ErrUnavailable)
	gaveUp := s.batch(evt)
	require.True(t, gaveUp.passed())

	// The next arrival starts a batch of its own, bounded by a minute,
	// which one asking for a nanosecond then shares.
	var long, short int64
	var longErr, shortErr error
	var wg sync.WaitGroup
	wg.Go(func() { long, longErr = s.nextPositionWithin(ctx, evt, time.Minute) })
	require.Eventually(t, func() bool { b := s.batch(evt); return b != gaveUp && b != nil && b.n == 1 }, 10*time.Second, time.Millisecond)
	wg.Go(func() { short, shortErr = s.nextPositionWithin(ctx, evt, time.Nanosecond) })
	require.Eventually(t, func() bool { return s.gathered(evt) == 2 }, 10*time.Second, time.Millisecond)
	assert.False(t, s.batch(evt).passed())

	close(hook.release)
	assert.Equal(t, int64(2), <-first, "the take in flight answers in time")
	wg.Wait()
	require.NoError(t, longErr)
	require.NoError(t, shortErr, "bounded by its batch's minute, not its own nanosecond")
	assert.Equal(t, int64(3), long)
	assert.Equal(t, int64(4), short)
	assert.Equal(t, int64(2), hook.calls.Load(), "the held take and the live batch's: the given-up one is not taken")
}

// TestJoinWithin: a room joins within the bound whatever its store; a
// store that does not gather gets the bound as its context's deadline.
func TestJoinWithin(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	for name, store := range map[string]Store{"redis": NewRedisStore(rdb, RedisOptions{}), "redis leased": NewRedisStore(rdb, RedisOptions{Lease: 10}), "memory": NewMemoryStore(time.Now)} {
		t.Run(name, func(t *testing.T) {
			evt := testenv.EventID()
			_, err := store.Ensure(ctx, evt, Defaults{})
			require.NoError(t, err)
			r := NewRoom(store, evt, RoomOptions{})
			for want := int64(1); want <= 3; want++ {
				pos, err := r.JoinWithin(ctx, time.Minute)
				require.NoError(t, err)
				assert.Equal(t, want, pos)
			}
			assert.Equal(t, int64(3), r.State().LastPosition)
		})
	}
}

// heldTake is a Redis store with position 1 of a new event taken (the
// script loaded, EVALSHA alone from here on), then a take by next held in
// flight until hook.release is closed; first gets the position it answers.
func heldTake(t *testing.T, next func(*RedisStore, int64) (int64, error)) (*RedisStore, int64, *holdTake, <-chan int64) {
	t.Helper()
	rdb := testenv.Redis(t)
	hook := &holdTake{held: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(hook)
	s := NewRedisStore(rdb, RedisOptions{})
	ctx := context.Background()
	evt := testenv.EventID()
	_, err := s.Ensure(ctx, evt, Defaults{})
	require.NoError(t, err)
	pos, err := s.NextPosition(ctx, evt)
	require.NoError(t, err)
	require.Equal(t, int64(1), pos)

	hook.armed.Store(true)
	first := make(chan int64, 1)
	go func() {
		p, err := next(s, evt)
		assert.NoError(t, err)
		first <- p
	}()
	<-hook.held
	return s, evt, hook, first
}

// batch is the batch gathering for event's next take, nil when none.
func (r *RedisStore) batch(event int64) *positionBatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.event(event).gathering
}

// gathered is how many arrivals wait for event's next take.
func (r *RedisStore) gathered(event int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.event(event).gathering; b != nil {
		return b.n
	}
	return 0
}

// holdTake counts the script calls once armed, and holds the first one
// until release is closed.
type holdTake struct {
	armed         atomic.Bool
	calls         atomic.Int64
	held, release chan struct{}
}

func (h *holdTake) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdTake) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *holdTake) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); h.armed.Load() && (name == "evalsha" || name == "eval") {
			if h.calls.Add(1) == 1 {
				close(h.held)
				<-h.release
			}
		}
		return next(ctx, cmd)
	}
}

// TestStateReadMeetingATake: a position this node takes while a read of the
// state is in flight is above the counter that read returns. That is the
// arrivals going on, not a counter gone back: the read must not take the
// state for lost (which would have the room restore it, and warn, many
// times a second in a rush).
func TestStateReadMeetingATake(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	evt := testenv.EventID()
	s := NewRedisStore(rdb, RedisOptions{})
	hook := &afterStateRead{take: func() {
		_, err := s.NextPosition(ctx, evt)
		assert.NoError(t, err)
	}}
	rdb.AddHook(hook)
	_, err := s.Ensure(ctx, evt, Defaults{})
	require.NoError(t, err)
	_, err = s.NextPosition(ctx, evt)
	require.NoError(t, err)

	hook.armed.Store(true)
	st, err := s.State(ctx, evt)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.LastPosition, "the counter as read, before the take")
	assert.False(t, hook.armed.Load(), "the take ran between the read and its decoding")
	st, err = s.State(ctx, evt)
	require.NoError(t, err)
	assert.Equal(t, int64(2), st.LastPosition)
}

// afterStateRead takes a position once armed, right after the next
// pipeline that reads the state returns.
type afterStateRead struct {
	armed atomic.Bool
	take  func()
}

func (h *afterStateRead) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *afterStateRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h *afterStateRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) > 0 && cmds[0].Name() == "hmget" && h.armed.CompareAndSwap(true, false) {
			h.take()
		}
		return err
	}
}
