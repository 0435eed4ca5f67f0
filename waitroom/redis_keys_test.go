package waitroom

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// Two nodes of a fleet holding one secret under k1 agree; a third with
// another secret under it is told, and so are they, until its check has
// not been noted for a window (it was corrected or left the fleet). Key ids
// are compared one by one: k2 agreeing is not reported.
func TestRedisStoreNoteKeys(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	clock := newClock()
	a := NewRedisStore(rdb, RedisOptions{Node: "a", Now: clock.Now})
	b := NewRedisStore(rdb, RedisOptions{Node: "b", Now: clock.Now})
	c := NewRedisStore(rdb, RedisOptions{Node: "c", Now: clock.Now})
	event := testenv.EventID()
	const window = 90 * time.Second

	fleet := map[string]string{"k1": "check-1", "k2": "check-2"}
	for _, s := range []*RedisStore{a, b} {
		d, err := s.NoteKeys(ctx, event, fleet, window)
		require.NoError(t, err)
		assert.Empty(t, d)
	}

	clock.Advance(10 * time.Second)
	d, err := c.NoteKeys(ctx, event, map[string]string{"k1": "check-typo", "k2": "check-2"}, window)
	require.NoError(t, err)
	want := []KeyDisagreement{{KeyID: "k1", Checks: []string{"check-1", "check-typo"}}}
	assert.Equal(t, want, d, "the odd node is told")
	d, err = a.NoteKeys(ctx, event, fleet, window)
	require.NoError(t, err)
	assert.Equal(t, want, d, "and the fleet is told")

	// The odd node is corrected: it notes the fleet's check from now on,
	// and its old one goes once no node noted it for a window.
	clock.Advance(window / 2)
	_, err = c.NoteKeys(ctx, event, fleet, window)
	require.NoError(t, err)
	clock.Advance(window/2 + time.Second)
	d, err = b.NoteKeys(ctx, event, fleet, window)
	require.NoError(t, err)
	assert.Empty(t, d, "the corrected secret's old check was forgotten")

	// Another event's keys are its own.
	d, err = c.NoteKeys(ctx, testenv.EventID(), map[string]string{"k1": "check-typo"}, window)
	require.NoError(t, err)
	assert.Empty(t, d)
}
