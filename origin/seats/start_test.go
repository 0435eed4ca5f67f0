package seats

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin/ledger"
)

// TestStartLoadsEventsTogether: an origin on an empty Redis loads each
// event after waiting out other nodes' hold writes (RebuildSettle), seconds
// an event; one after another, a promoter's 200 events took ten minutes
// before the origin was ready. The loads overlap: each rebuild here waits
// until three are under way at once, which a sequential start never reaches.
func TestStartLoadsEventsTogether(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l, err := ledger.Open(ctx, testenv.Postgres(t), ledger.Options{})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	const events = 12
	for range events {
		_, err := l.CreateEvent(ctx, ledger.Event{ID: testenv.EventID(), Name: "e", Capacity: 10, Sellable: 10,
			Price: 50, Currency: "inr", HoldTTLSeconds: 60, MaxPerUser: 4, CreatedAt: sectionsStart})
		require.NoError(t, err)
	}
	p, err := New(Config{Ledger: l, Redis: testenv.Redis(t), RebuildSettle: 100 * time.Millisecond})
	require.NoError(t, err)

	var (
		entered  atomic.Int64
		together = make(chan struct{})
		once     sync.Once
		alone    atomic.Bool
		rebuilds atomic.Int64
	)
	p.Hooks(nil, func() {
		rebuilds.Add(1)
		if entered.Add(1) >= 3 {
			once.Do(func() { close(together) })
		}
		if alone.Load() {
			return
		}
		select {
		case <-together:
		case <-time.After(5 * time.Second):
			alone.Store(true)
		}
	})
	start := time.Now()
	require.NoError(t, p.Start(ctx))
	t.Logf("%d events loaded in %v (RebuildSettle 100ms)", events, time.Since(start))
	assert.False(t, alone.Load(), "no three events were loaded at once")
	assert.EqualValues(t, events, rebuilds.Load())
	loaded, total := p.Loading()
	assert.EqualValues(t, [2]int64{events, events}, [2]int64{loaded, total})
	for _, ev := range p.Registry().Events() {
		_, loaded, err := p.Inventory().Remaining(ctx, ev.ID)
		require.NoError(t, err)
		assert.True(t, loaded, "event %d", ev.ID)
	}
}
