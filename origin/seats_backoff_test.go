package origin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rebuild's read waits for the holds table's lock with a back-off, not in
// a tight loop: each try holds every hold write of the table up.
func TestRebuildReadBacksOffWhileHoldWritesRun(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10})
	ctx := context.Background()

	// A transaction that wrote to the holds table and does not commit.
	tx, err := h.ledger.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE holds IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)

	before := h.ledger.LockTries()
	done := make(chan error, 1)
	go func() {
		_, err := h.srv.Rebuild(ctx, ev.ID)
		done <- err
	}()
	const blocked = 3 * time.Second
	time.Sleep(blocked) // the span over which the tries are counted
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done)
	tries := h.ledger.LockTries() - before
	t.Logf("%d tries in %v", tries, blocked)
	// A tight loop makes one try per lock timeout (100 ms): about 30.
	assert.LessOrEqual(t, tries, int64(16))
	h.requireInvariant(ev.ID, 0)
}
