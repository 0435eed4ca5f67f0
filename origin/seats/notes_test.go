package seats

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/waitroom"
)

// TestHolderNotesGather: a note made alone is sent alone; the notes made
// while a call is in flight wait for the next call, which sends them all,
// and each gets that call's outcome.
func TestHolderNotesGather(t *testing.T) {
	var mu sync.Mutex
	var calls [][]string
	release := make(chan struct{})
	fail := errors.New("store down")
	n := holderNotes{send: func(_ context.Context, hs []waitroom.Holder) error {
		var who []string
		for _, h := range hs {
			who = append(who, h.Subject)
		}
		mu.Lock()
		calls = append(calls, who)
		first := len(calls) == 1
		mu.Unlock()
		if first {
			<-release
			return nil
		}
		return fail
	}}
	ctx := context.Background()

	firstDone := make(chan error, 1)
	go func() { firstDone <- n.note(ctx, waitroom.Holder{Subject: "ann"}) }()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) == 1 }, 5*time.Second, time.Millisecond)

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, who := range []string{"bob", "cat", "dan"} {
		wg.Go(func() { errs[i] = n.note(ctx, waitroom.Holder{Subject: who}) })
		require.Eventually(t, func() bool { return n.gathered() == i+1 }, 5*time.Second, time.Millisecond)
	}
	close(release)
	require.NoError(t, <-firstDone)
	wg.Wait()
	for _, err := range errs {
		assert.ErrorIs(t, err, fail, "the outcome of the call that took it")
	}
	mu.Lock()
	assert.Equal(t, [][]string{{"ann"}, {"bob", "cat", "dan"}}, calls)
	mu.Unlock()

	assert.ErrorIs(t, n.note(ctx, waitroom.Holder{Subject: "eve"}), fail, "alone again")
	assert.Len(t, calls, 3)
	assert.Equal(t, []string{"eve"}, calls[2])
}

// gathered is how many notes wait for the next call.
func (n *holderNotes) gathered() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gathering == nil {
		return 0
	}
	return len(n.gathering.holders)
}
