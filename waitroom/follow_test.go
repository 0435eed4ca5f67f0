package waitroom

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stalledLead is a store whose lease call does not answer until released:
// a slow round trip in the middle of the autopilot's step.
type stalledLead struct {
	*MemoryStore
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s *stalledLead) Lead(ctx context.Context, event int64, name string, ttl time.Duration) (bool, error) {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-s.release:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return s.MemoryStore.Lead(ctx, event, name, ttl)
}

// Another node's raise reaches memory at its change notice even while the
// room's own autopilot step is waiting on the store: notices are not
// queued behind the loop's slower work.
func TestRoomAppliesNoticesWhileItsPilotWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem := NewMemoryStore(nil)
	stalled := &stalledLead{MemoryStore: mem, entered: make(chan struct{}), release: make(chan struct{})}
	defer close(stalled.release)
	a := NewRoom(stalled, 1, RoomOptions{PollInterval: time.Hour, Autopilot: Autopilot{Step: 1, Interval: time.Millisecond}})
	b := NewRoom(mem, 1, RoomOptions{PollInterval: time.Hour})
	_, err := a.Refresh(ctx)
	require.NoError(t, err)
	for range 3 {
		_, err := a.Join(ctx)
		require.NoError(t, err)
	}
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-stalled.entered

	changed := a.Changed()
	_, err = b.Update(ctx, Change{SetWatermark: ptrTo(int64(2))})
	require.NoError(t, err)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the raise's notice waits behind the autopilot's step")
	}
	assert.Equal(t, int64(2), a.State().Watermark)
}

// slowSubscription is a store whose change notices take a round trip to
// start, and on which another node changes the state right after the
// room's first read of it.
type slowSubscription struct {
	*MemoryStore
	once sync.Once
}

func (s *slowSubscription) Watch(ctx context.Context, event int64) <-chan struct{} {
	time.Sleep(100 * time.Millisecond) // the subscription's round trip
	return s.MemoryStore.Watch(ctx, event)
}

func (s *slowSubscription) Ensure(ctx context.Context, event int64, d Defaults) (State, error) {
	st, err := s.MemoryStore.Ensure(ctx, event, d)
	s.once.Do(func() {
		_, uerr := s.MemoryStore.Update(ctx, event, Change{RaiseBy: 10})
		if err == nil {
			err = uerr
		}
	})
	return st, err
}

// A change made just after the room's first read reaches it by its notice,
// however long the subscription takes to start: Run subscribes before it
// reads, not beside it.
func TestRoomSubscribesBeforeItsFirstRead(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := &slowSubscription{MemoryStore: NewMemoryStore(nil)}
	room := NewRoom(store, 1, RoomOptions{Defaults: Defaults{Watermark: 5}, PollInterval: time.Hour})
	done := make(chan struct{})
	go func() { defer close(done); room.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-room.Ready()
	require.Eventually(t, func() bool { return room.State().Watermark == 15 }, 10*time.Second, time.Millisecond,
		"the change after the first read waits for the hourly poll")
}
