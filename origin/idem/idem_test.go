package idem_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin/idem"
)

// scope is a fresh key of its own, so tests sharing a server never meet.
func scope(t *testing.T) idem.Scope {
	return idem.Scope{Kind: "bookings", Event: testenv.EventID(), User: "v_" + t.Name(), Key: "k1"}
}

func TestBeginRunsOnceThenReplays(t *testing.T) {
	ctx := context.Background()
	s := idem.New(testenv.Redis(t))
	sc := scope(t)
	d := idem.RequestDigest(`{"hold":"h1"}`)

	resp, err := s.Begin(ctx, sc, d)
	require.NoError(t, err)
	assert.Nil(t, resp, "the first request runs")

	_, err = s.Begin(ctx, sc, d)
	require.ErrorIs(t, err, idem.ErrRequestInProgress, "the same request while the first still runs")
	_, err = s.Begin(ctx, sc, idem.RequestDigest(`{"hold":"h2"}`))
	require.ErrorIs(t, err, idem.ErrKeyReused, "the key with another body, while the first runs")

	want := idem.StoredResponse{Status: 201, Body: []byte(`{"id":"b1"}`)}
	require.NoError(t, s.Finish(ctx, sc, d, want))
	for range 2 {
		resp, err = s.Begin(ctx, sc, d)
		require.NoError(t, err)
		require.NotNil(t, resp, "a finished request is replayed")
		assert.Equal(t, want, *resp, "byte for byte")
	}
	_, err = s.Begin(ctx, sc, idem.RequestDigest(`{"hold":"h2"}`))
	require.ErrorIs(t, err, idem.ErrKeyReused, "the key with another body, once answered")

	other := sc
	other.User = sc.User + "-other"
	resp, err = s.Begin(ctx, other, d)
	require.NoError(t, err)
	assert.Nil(t, resp, "another user's key of the same name is its own")
}

func TestServerErrorsAreNotKept(t *testing.T) {
	ctx := context.Background()
	s := idem.New(testenv.Redis(t))
	sc := scope(t)
	d := idem.RequestDigest(`{}`)
	_, err := s.Begin(ctx, sc, d)
	require.NoError(t, err)
	require.NoError(t, s.Finish(ctx, sc, d, idem.StoredResponse{Status: 503, Body: []byte(`{}`)}))
	resp, err := s.Begin(ctx, sc, d)
	require.NoError(t, err)
	assert.Nil(t, resp, "after a 5xx the client's retry runs again")
}

func TestMarkersAndResponsesExpire(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	s := idem.New(rdb)
	s.InFlight, s.Keep = 30*time.Second, time.Hour
	sc := scope(t)
	d := idem.RequestDigest(`{}`)
	_, err := s.Begin(ctx, sc, d)
	require.NoError(t, err)
	ttl, err := rdb.PTTL(ctx, sc.RedisKey()).Result()
	require.NoError(t, err)
	assert.True(t, ttl > 0 && ttl <= s.InFlight, "a crashed request's marker ends: %v", ttl)

	require.NoError(t, s.Finish(ctx, sc, d, idem.StoredResponse{Status: 200}))
	ttl, err = rdb.PTTL(ctx, sc.RedisKey()).Result()
	require.NoError(t, err)
	assert.True(t, ttl > s.InFlight && ttl <= s.Keep, "a response is kept for Keep: %v", ttl)
}

// TestAbandonClaimKeepsAnotherRequests: a request that cannot tell whether
// its hold claim was made gives up only its own claim.
func TestAbandonClaimKeepsAnotherRequests(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	s := idem.New(rdb)
	sc := scope(t)
	d := idem.RequestDigest(`{"quantity":2}`)
	now := time.Date(2026, 6, 1, 18, 0, 0, 0, time.UTC)
	mine := idem.HoldClaim(d, "h1", now)
	theirs := idem.HoldClaim(d, "h2", now.Add(time.Second))

	require.NoError(t, rdb.Set(ctx, sc.RedisKey(), theirs, time.Minute).Err())
	require.NoError(t, s.AbandonClaim(ctx, sc, mine))
	got, err := rdb.Get(ctx, sc.RedisKey()).Result()
	require.NoError(t, err)
	assert.Equal(t, theirs, got, "another request's claim stays")
	_, err = s.Begin(ctx, sc, d)
	require.ErrorIs(t, err, idem.ErrRequestInProgress, "a claim without its answer is a running request")

	require.NoError(t, rdb.Set(ctx, sc.RedisKey(), mine, time.Minute).Err())
	require.NoError(t, s.AbandonClaim(ctx, sc, mine))
	resp, err := s.Begin(ctx, sc, d)
	require.NoError(t, err)
	assert.Nil(t, resp, "its own claim given up, the retry runs")

	require.NoError(t, s.AbandonClaim(ctx, idem.Scope{Kind: "holds", User: "nobody", Key: "none"}, mine),
		"no record is nothing to give up")
}

func TestDigestsAndKeys(t *testing.T) {
	assert.NotEqual(t, idem.KeyDigest("u1", "k"), idem.KeyDigest("u2", "k"), "each user's keys are their own")
	assert.Equal(t, idem.RequestDigest(`{"a":1}`), idem.RequestDigest(`{"a":1}`))
	assert.NotEqual(t, idem.RequestDigest(`{"a":1}`), idem.RequestDigest(`{"a":2}`))

	sc := idem.Scope{Kind: "holds", Event: 42, User: "u1", Key: "k"}
	assert.True(t, strings.HasPrefix(sc.RedisKey(), "idem:"+hashtag.Event(42)+":holds:"),
		"on the event's slot: %s", sc.RedisKey())
	assert.NotContains(t, sc.RedisKey(), "u1", "the user is not stored in clear")
	sc.Event = 0
	assert.Equal(t, "idem:holds:"+idem.KeyDigest("u1", "k"), sc.RedisKey())
}
