package waitroom_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

func ptr[T any](v T) *T { return &v }

// stores runs fn against every Store implementation.
func stores(t *testing.T, fn func(t *testing.T, s waitroom.Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, waitroom.NewMemoryStore(nil)) })
	t.Run("redis", func(t *testing.T) {
		fn(t, waitroom.NewRedisStore(testenv.Redis(t), waitroom.RedisOptions{}))
	})
}

func TestStorePositionsAreUniqueAndDense(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		_, err := s.State(ctx, evt)
		require.ErrorIs(t, err, waitroom.ErrNoState, "nothing set up yet")
		_, err = s.Ensure(ctx, evt, waitroom.Defaults{})
		require.NoError(t, err)
		const n = 400
		var mu sync.Mutex
		seen := make(map[int64]bool)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				pos, err := s.NextPosition(ctx, evt)
				assert.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				assert.False(t, seen[pos], "position %d handed out twice", pos)
				seen[pos] = true
			})
		}
		wg.Wait()
		for p := int64(1); p <= n; p++ {
			assert.True(t, seen[p], "position %d never handed out", p)
		}
		st, err := s.State(ctx, evt)
		require.NoError(t, err)
		assert.Equal(t, int64(n), st.LastPosition)
	})
}

func TestStoreEnsureKeepsAnExistingWatermark(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		st, err := s.Ensure(ctx, evt, waitroom.Defaults{Watermark: 100, HardCap: 5000})
		require.NoError(t, err)
		assert.Equal(t, waitroom.State{Event: evt, Watermark: 100, HardCap: 5000}, st)

		_, err = s.Update(ctx, evt, waitroom.Change{RaiseBy: 50})
		require.NoError(t, err)
		// A reload (or a second node) with the configured default must not
		// take the raise back; the hard cap follows the configuration.
		st, err = s.Ensure(ctx, evt, waitroom.Defaults{Watermark: 100, HardCap: 6000})
		require.NoError(t, err)
		assert.Equal(t, int64(150), st.Watermark)
		assert.Equal(t, int64(6000), st.HardCap)

		_, err = s.Ensure(ctx, evt, waitroom.Defaults{Watermark: -1})
		assert.ErrorIs(t, err, waitroom.ErrNegative)

		// The position counter only ever moves forward.
		st, err = s.Ensure(ctx, evt, waitroom.Defaults{HardCap: 6000, LastPosition: 70})
		require.NoError(t, err)
		assert.Equal(t, int64(70), st.LastPosition)
		st, err = s.Ensure(ctx, evt, waitroom.Defaults{HardCap: 6000, LastPosition: 20})
		require.NoError(t, err)
		assert.Equal(t, int64(70), st.LastPosition)
		pos, err := s.NextPosition(ctx, evt)
		require.NoError(t, err)
		assert.Equal(t, int64(71), pos)
	})
}

func TestStoreUpdate(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		_, err := s.Ensure(ctx, evt, waitroom.Defaults{})
		require.NoError(t, err)
		for range 3 {
			_, err := s.NextPosition(ctx, evt)
			require.NoError(t, err)
		}
		st, err := s.Update(ctx, evt, waitroom.Change{SetWatermark: ptr[int64](10), RaiseBy: 5})
		require.NoError(t, err)
		assert.Equal(t, waitroom.State{Event: evt, Watermark: 15, LastPosition: 3}, st)

		st, err = s.Update(ctx, evt, waitroom.Change{SoldOut: ptr(true), Paused: ptr(true), HardCap: ptr[int64](99)})
		require.NoError(t, err)
		assert.Equal(t, waitroom.State{Event: evt, Watermark: 15, LastPosition: 3, HardCap: 99, SoldOut: true, Paused: true}, st)

		st, err = s.Update(ctx, evt, waitroom.Change{SoldOut: ptr(false)})
		require.NoError(t, err)
		assert.False(t, st.SoldOut)
		assert.True(t, st.Paused)

		got, err := s.State(ctx, evt)
		require.NoError(t, err)
		assert.Equal(t, st, got)

		for _, c := range []waitroom.Change{
			{SetWatermark: ptr[int64](-1)}, {RaiseBy: -1}, {HardCap: ptr[int64](-3)},
		} {
			_, err := s.Update(ctx, evt, c)
			assert.ErrorIs(t, err, waitroom.ErrNegative)
		}
		got, err = s.State(ctx, evt)
		require.NoError(t, err)
		assert.Equal(t, st, got, "a refused change changes nothing")
	})
}

// TestStoreLiveHardCapOutlivesTheConfig: a hard cap changed live stays when
// a node (re)configures the event with its configured one.
func TestStoreLiveHardCapOutlivesTheConfig(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		st, err := s.Ensure(ctx, evt, waitroom.Defaults{HardCap: 500})
		require.NoError(t, err)
		require.Equal(t, int64(500), st.HardCap)
		st, err = s.Update(ctx, evt, waitroom.Change{HardCap: ptr[int64](120)})
		require.NoError(t, err)
		require.Equal(t, int64(120), st.HardCap)
		st, err = s.Ensure(ctx, evt, waitroom.Defaults{HardCap: 500})
		require.NoError(t, err)
		assert.Equal(t, int64(120), st.HardCap, "the configured cap does not undo the live one")
		st, err = s.Update(ctx, evt, waitroom.Change{HardCap: ptr[int64](0)})
		require.NoError(t, err)
		st, err = s.Ensure(ctx, evt, waitroom.Defaults{HardCap: 500})
		require.NoError(t, err)
		assert.Equal(t, int64(0), st.HardCap, "no cap, set live, stays too")
	})
}

func TestStoreRefusesWatermarkOverflow(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		before, err := s.Update(ctx, evt, waitroom.Change{SetWatermark: ptr[int64](5)})
		require.NoError(t, err)
		for name, c := range map[string]waitroom.Change{
			"raise past the top":       {RaiseBy: math.MaxInt64},
			"raise by one past it":     {RaiseBy: math.MaxInt64 - 4},
			"set then raise past it":   {SetWatermark: ptr[int64](math.MaxInt64 - 1), RaiseBy: 2},
			"set at the top and raise": {SetWatermark: ptr[int64](math.MaxInt64), RaiseBy: 1},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := s.Update(ctx, evt, c)
				require.ErrorIs(t, err, waitroom.ErrOverflow)
				assert.NotErrorIs(t, err, waitroom.ErrUnavailable)
				got, err := s.State(ctx, evt)
				require.NoError(t, err)
				assert.Equal(t, before, got, "a refused change changes nothing")
			})
		}
		st, err := s.Update(ctx, evt, waitroom.Change{RaiseBy: math.MaxInt64 - 5})
		require.NoError(t, err, "up to the top is fine")
		assert.Equal(t, int64(math.MaxInt64), st.Watermark)
	})
}

// TestStoreConditionalRaisesRaiseOnce: desks that each raise the watermark
// from the one they saw raise it once between them; the others are told.
func TestStoreConditionalRaisesRaiseOnce(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		_, err := s.Update(ctx, evt, waitroom.Change{SetWatermark: ptr[int64](5000)})
		require.NoError(t, err)
		var wg sync.WaitGroup
		var mu sync.Mutex
		applied, moved := 0, 0
		for range 20 {
			wg.Go(func() {
				_, err := s.Update(ctx, evt, waitroom.Change{RaiseBy: 1000, IfWatermark: ptr[int64](5000)})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					applied++
				case errors.Is(err, waitroom.ErrWatermarkMoved):
					assert.NotErrorIs(t, err, waitroom.ErrUnavailable)
					moved++
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, 1, applied)
		assert.Equal(t, 19, moved)
		st, err := s.State(ctx, evt)
		require.NoError(t, err)
		assert.Equal(t, int64(6000), st.Watermark)

		st, err = s.Update(ctx, evt, waitroom.Change{SetWatermark: ptr[int64](7000), IfWatermark: ptr[int64](6000)})
		require.NoError(t, err, "a set too")
		assert.Equal(t, int64(7000), st.Watermark)
		_, err = s.Update(ctx, evt, waitroom.Change{Paused: ptr(true), SetWatermark: ptr[int64](9), IfWatermark: ptr[int64](6000)})
		require.ErrorIs(t, err, waitroom.ErrWatermarkMoved)
		st, err = s.State(ctx, evt)
		require.NoError(t, err)
		assert.Equal(t, int64(7000), st.Watermark)
		assert.False(t, st.Paused, "nothing of a refused change is made")

		other := testenv.EventID()
		st, err = s.Update(ctx, other, waitroom.Change{RaiseBy: 10, IfWatermark: ptr[int64](0)})
		require.NoError(t, err, "an event with no watermark yet has 0")
		assert.Equal(t, int64(10), st.Watermark)
	})
}

func TestStoreConcurrentRaisesAllCount(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				_, err := s.Update(ctx, evt, waitroom.Change{RaiseBy: 10})
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		st, err := s.State(ctx, evt)
		require.NoError(t, err)
		assert.Equal(t, int64(500), st.Watermark)
	})
}

func TestStoreWatchSignalsChanges(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		evt := testenv.EventID()
		other := testenv.EventID()
		changed := s.Watch(ctx, evt)
		// Watch returns subscribed: the first change after it is signalled.
		_, err := s.Update(ctx, evt, waitroom.Change{RaiseBy: 1})
		require.NoError(t, err)
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatal("the first change after Watch returned was not signalled")
		}

		// A change of another event must not signal this one.
		_, err = s.Update(ctx, other, waitroom.Change{RaiseBy: 1})
		require.NoError(t, err)
		select {
		case <-changed:
			t.Fatal("signalled for another event")
		case <-time.After(200 * time.Millisecond):
		}
	})
}

func TestStoreLead(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
		s := waitroom.NewMemoryStore(func() time.Time { return now })
		ctx := context.Background()
		ok, err := s.Lead(ctx, 1, "autopilot", time.Second)
		require.NoError(t, err)
		assert.True(t, ok)
		ok, _ = s.Lead(ctx, 1, "autopilot", time.Second)
		assert.False(t, ok, "held until it expires")
		ok, _ = s.Lead(ctx, 2, "autopilot", time.Second)
		assert.True(t, ok, "leases are per event")
		now = now.Add(time.Second)
		ok, _ = s.Lead(ctx, 1, "autopilot", time.Second)
		assert.True(t, ok, "free again once expired")
	})
	t.Run("redis fleet", func(t *testing.T) {
		rdb := testenv.Redis(t)
		ctx := context.Background()
		evt := testenv.EventID()
		nodes := []*waitroom.RedisStore{
			waitroom.NewRedisStore(rdb, waitroom.RedisOptions{Node: "a"}),
			waitroom.NewRedisStore(rdb, waitroom.RedisOptions{Node: "b"}),
			waitroom.NewRedisStore(rdb, waitroom.RedisOptions{Node: "c"}),
		}
		leaders := 0
		for _, n := range nodes {
			ok, err := n.Lead(ctx, evt, "autopilot", time.Minute)
			require.NoError(t, err)
			if ok {
				leaders++
			}
		}
		assert.Equal(t, 1, leaders)
	})
}

func TestRedisStoreLeasesBlocks(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	evt := testenv.EventID()
	a := waitroom.NewRedisStore(rdb, waitroom.RedisOptions{Lease: 10})
	b := waitroom.NewRedisStore(rdb, waitroom.RedisOptions{Lease: 10})
	_, err := a.Ensure(ctx, evt, waitroom.Defaults{})
	require.NoError(t, err)

	var got []int64
	var p int64
	for range 3 {
		p, err := a.NextPosition(ctx, evt)
		require.NoError(t, err)
		got = append(got, p)
	}
	p, err = b.NextPosition(ctx, evt)
	require.NoError(t, err)
	got = append(got, p)
	assert.Equal(t, []int64{1, 2, 3, 11}, got, "each node hands out its own block")

	for range 8 {
		_, err := a.NextPosition(ctx, evt)
		require.NoError(t, err)
	}
	p, err = a.NextPosition(ctx, evt)
	require.NoError(t, err)
	assert.Equal(t, int64(22), p, "a spent block is followed by a fresh one")
	st, err := a.State(ctx, evt)
	require.NoError(t, err)
	assert.Equal(t, int64(30), st.LastPosition, "last_position counts leased positions")
}

func TestRedisStoreDown(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb, err := waitroom.NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	s := waitroom.NewRedisStore(rdb, waitroom.RedisOptions{})
	ctx := context.Background()
	_, err = s.Ensure(ctx, 1, waitroom.Defaults{})
	require.NoError(t, err)
	_, err = s.NextPosition(ctx, 1)
	require.NoError(t, err)

	srv.Stop()
	_, err = s.NextPosition(ctx, 1)
	assert.ErrorIs(t, err, waitroom.ErrUnavailable)
	_, err = s.State(ctx, 1)
	assert.ErrorIs(t, err, waitroom.ErrUnavailable)
	_, err = s.Update(ctx, 1, waitroom.Change{RaiseBy: 1})
	assert.ErrorIs(t, err, waitroom.ErrUnavailable)
	assert.False(t, errors.Is(err, waitroom.ErrNegative))

	srv.Start()
	require.Eventually(t, func() bool {
		_, err := s.State(ctx, 1)
		return !errors.Is(err, waitroom.ErrUnavailable)
	}, 10*time.Second, 50*time.Millisecond, "reconnects by itself")
	// This Redis came back empty: its counter would restart at 1.
	_, err = s.NextPosition(ctx, 1)
	assert.ErrorIs(t, err, waitroom.ErrNoState, "no position from a counter that lost what it had handed out")
}

// TestRedisStoreNeverRestartsTheCounter: whatever Redis lost, NextPosition
// refuses rather than hand out a position again, and a restore (Ensure with
// Restore) holds positions back for its window, then carries on.
func TestRedisStoreNeverRestartsTheCounter(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	s := waitroom.NewRedisStore(rdb, waitroom.RedisOptions{Now: clock})
	evt := testenv.EventID()
	tag := hashtag.Event(evt)

	_, err := s.NextPosition(ctx, evt)
	require.ErrorIs(t, err, waitroom.ErrNoState, "nothing set up: no counter to trust")
	st, err := s.Ensure(ctx, evt, waitroom.Defaults{Watermark: 3, Restore: true})
	require.NoError(t, err)
	assert.True(t, st.Restoring(clock()), "a new event cannot be told from a lost one")
	assert.WithinDuration(t, clock().Add(waitroom.DefaultRestoreWindow), st.RestoringUntil, 0)
	_, err = s.NextPosition(ctx, evt)
	require.ErrorIs(t, err, waitroom.ErrRestoring)
	// A node joining the restore raises what was put back, never lowers it.
	st, err = s.Ensure(ctx, evt, waitroom.Defaults{Watermark: 8, LastPosition: 40, Restore: true})
	require.NoError(t, err)
	assert.Equal(t, int64(8), st.Watermark)
	assert.Equal(t, int64(40), st.LastPosition)
	st, err = s.Ensure(ctx, evt, waitroom.Defaults{Watermark: 2, LastPosition: 10, Restore: true})
	require.NoError(t, err)
	assert.Equal(t, int64(8), st.Watermark)
	assert.Equal(t, int64(40), st.LastPosition)

	advance(waitroom.DefaultRestoreWindow)
	pos, err := s.NextPosition(ctx, evt)
	require.NoError(t, err)
	assert.Equal(t, int64(41), pos)
	st, err = s.Ensure(ctx, evt, waitroom.Defaults{Watermark: 100, Restore: true})
	require.NoError(t, err)
	assert.Equal(t, int64(8), st.Watermark, "outside a restore the stored watermark wins")
	assert.False(t, st.Restoring(clock()))

	for name, lose := range map[string]func(){
		"state hash gone": func() { rdb.Del(ctx, "waitroom:"+tag+":state") },
		"counter gone":    func() { rdb.Del(ctx, "waitroom:"+tag+":positions") },
		"counter went back": func() {
			rdb.Set(ctx, "waitroom:"+tag+":positions", 5, 0)
		},
		"watermark rewritten by a raise on an empty hash": func() {
			rdb.Del(ctx, "waitroom:"+tag+":state", "waitroom:"+tag+":positions")
			rdb.HIncrBy(ctx, "waitroom:"+tag+":state", "watermark", 100)
		},
	} {
		t.Run(name, func(t *testing.T) {
			lose()
			_, err := s.NextPosition(ctx, evt)
			require.ErrorIs(t, err, waitroom.ErrNoState)
			_, err = s.State(ctx, evt)
			require.ErrorIs(t, err, waitroom.ErrNoState)
			_, err = s.Ensure(ctx, evt, waitroom.Defaults{Restore: true})
			require.NoError(t, err)
			_, err = s.NextPosition(ctx, evt)
			require.ErrorIs(t, err, waitroom.ErrRestoring)
			advance(waitroom.DefaultRestoreWindow)
			next, err := s.NextPosition(ctx, evt)
			require.NoError(t, err)
			assert.Equal(t, pos+1, next, "carries on after the highest position this node handed out")
			pos = next
		})
	}
}

// TestStoreChangeLog: every field a change moves is logged, newest first,
// with its actor and reason; a change that moves nothing logs nothing, and
// the log keeps the newest MaxLogEntries.
func TestStoreChangeLog(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		_, err := s.Ensure(ctx, evt, waitroom.Defaults{Watermark: 10})
		require.NoError(t, err)
		_, err = s.Update(ctx, evt, waitroom.Change{RaiseBy: 5, Actor: "autopilot", Reason: "step"})
		require.NoError(t, err)
		_, err = s.Update(ctx, evt, waitroom.Change{SetWatermark: ptr[int64](15), Actor: "admin"})
		require.NoError(t, err)
		_, err = s.Update(ctx, evt, waitroom.Change{SoldOut: ptr(true), HardCap: ptr[int64](40), Reason: "no seats"})
		require.NoError(t, err)

		ls := s.(waitroom.ChangeLogStore)
		log, err := ls.ChangeLog(ctx, evt, 10)
		require.NoError(t, err)
		type row struct{ actor, field, from, to, reason string }
		got := make([]row, len(log))
		for i, e := range log {
			got[i] = row{e.Actor, e.Field, string(e.From), string(e.To), e.Reason}
			assert.False(t, e.Time.IsZero())
		}
		assert.Equal(t, []row{
			{"unnamed", "sold_out", "false", "true", "no seats"},
			{"unnamed", "hard_cap", "0", "40", "no seats"},
			{"autopilot", "watermark", "10", "15", "step"},
		}, got, "newest first; setting the watermark it had moves nothing")

		for range waitroom.MaxLogEntries + 5 {
			_, err = s.Update(ctx, evt, waitroom.Change{RaiseBy: 1})
			require.NoError(t, err)
		}
		log, err = ls.ChangeLog(ctx, evt, waitroom.MaxLogEntries+100)
		require.NoError(t, err)
		assert.Len(t, log, waitroom.MaxLogEntries, "bounded")
		assert.JSONEq(t, "1020", string(log[0].To))
	})
}

// TestStoreAccountPositions: an account's first claim is its position; a
// later claim gets that one back; another account's is its own.
func TestStoreAccountPositions(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		as := s.(waitroom.AccountStore)
		_, ok, err := as.AccountPosition(ctx, evt, "alice")
		require.NoError(t, err)
		assert.False(t, ok)
		got, err := as.ClaimAccount(ctx, evt, "alice", 7, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, int64(7), got)
		got, err = as.ClaimAccount(ctx, evt, "alice", 9, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, int64(7), got, "the position it holds")
		pos, ok, err := as.AccountPosition(ctx, evt, "alice")
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, int64(7), pos)
		got, err = as.ClaimAccount(ctx, evt, "bob", 9, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, int64(9), got)
		_, ok, err = as.AccountPosition(ctx, evt+1, "alice")
		require.NoError(t, err)
		assert.False(t, ok, "per event")
	})
}

// TestStoreRevocations: each read returns the revocations made since the
// cursor, none that ended.
func TestStoreRevocations(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		rs := s.(waitroom.RevocationStore)
		got, cursor, err := rs.Revocations(ctx, evt, "")
		require.NoError(t, err)
		assert.Empty(t, got)
		later := time.Now().Add(time.Hour)
		require.NoError(t, rs.Revoke(ctx, evt, waitroom.Revocation{Subject: "alice", Position: 1, Until: later}))
		require.NoError(t, rs.Revoke(ctx, evt, waitroom.Revocation{Subject: "gone", Position: 2, Until: time.Now().Add(-time.Second)}))
		require.NoError(t, rs.Revoke(ctx, evt, waitroom.Revocation{Subject: "bob", Position: 3, Until: later}))
		require.NoError(t, rs.Revoke(ctx, evt, waitroom.Revocation{Subject: "v_anon", Position: 4, Until: later, TakenBy: "carol"}))
		got, cursor, err = rs.Revocations(ctx, evt, cursor)
		require.NoError(t, err)
		require.Len(t, got, 3)
		assert.Equal(t, []string{"alice", "bob", "v_anon"}, []string{got[0].Subject, got[1].Subject, got[2].Subject})
		assert.Equal(t, int64(3), got[1].Position)
		assert.Equal(t, later.UnixMilli(), got[1].Until.UnixMilli())
		assert.Empty(t, got[1].TakenBy, "revoked by the site")
		assert.Equal(t, "carol", got[2].TakenBy, "taken over by an account")
		got, _, err = rs.Revocations(ctx, evt, cursor)
		require.NoError(t, err)
		assert.Empty(t, got, "nothing new")
	})
}
