package waitroom_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

// TestStoreTakeOverOnce: of accounts claiming one anonymous place at once,
// one gets it, and every claim is told which; another place, or the same
// position of another token, is a claim of its own.
func TestStoreTakeOverOnce(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ts, ok := s.(waitroom.TakeOverStore)
		require.True(t, ok)
		ctx := context.Background()
		evt := testenv.EventID()
		const n = 20
		owners := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				got, err := ts.ClaimTakeOver(ctx, evt, "anon-1", 5, fmt.Sprintf("acct%d", i), time.Minute)
				assert.NoError(t, err)
				owners[i] = got
			})
		}
		wg.Wait()
		for i := range owners {
			assert.Equal(t, owners[0], owners[i], "claim %d", i)
		}
		again, err := ts.ClaimTakeOver(ctx, evt, "anon-1", 5, owners[0], time.Minute)
		require.NoError(t, err)
		assert.Equal(t, owners[0], again, "the owner asks again")
		other, err := ts.ClaimTakeOver(ctx, evt, "anon-2", 5, "acct-x", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, "acct-x", other, "another token's place")
		other, err = ts.ClaimTakeOver(ctx, evt, "anon-1", 6, "acct-y", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, "acct-y", other, "another position")
	})
}
