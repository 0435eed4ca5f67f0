package waitroom

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom/lottery"
)

// TestPreQueueTokenIsNeverAdmitted: a pre-queue token carries no position,
// and the verification the gateway and the origin share refuses it, freshly
// issued (from the cache) or parsed; nor does any state admit position 0.
func TestPreQueueTokenIsNeverAdmitted(t *testing.T) {
	clk := newClock()
	ks := mustKeySet(t, clk.Now, Key{ID: "a", Secret: secretA})
	pre, err := ks.IssuePreQueue("alice", 42, clk.Now().Add(time.Hour))
	require.NoError(t, err)
	var claims map[string]any
	decodeSegment(t, splitToken(pre.Raw)[1], &claims)
	assert.NotContains(t, claims, "pos", "no position claim")
	assert.Equal(t, true, claims["pre"])

	fresh := mustKeySet(t, clk.Now, Key{ID: "a", Secret: secretA}) // nothing cached
	for name, k := range map[string]*KeySet{"cached": ks, "parsed": fresh} {
		t.Run(name, func(t *testing.T) {
			_, err := k.Verify(pre.Raw, 42)
			assert.ErrorIs(t, err, ErrInvalidToken)
			assert.ErrorIs(t, err, ErrPreQueueToken)
			got, err := k.VerifyPreQueue(pre.Raw, 42)
			require.NoError(t, err)
			assert.True(t, got.PreQueue)
			assert.Zero(t, got.Position)
			assert.Equal(t, "alice", got.Subject)
			got, err = k.VerifyAny(pre.Raw, 42)
			require.NoError(t, err)
			assert.True(t, got.PreQueue)
		})
	}

	placed, err := ks.Issue("alice", 42, 3, time.Hour)
	require.NoError(t, err)
	_, err = fresh.VerifyPreQueue(placed.Raw, 42)
	assert.ErrorIs(t, err, ErrInvalidToken, "a placed token is not a pre-queue one")

	// Signed with the key but claiming both: refused by the claims check.
	both := jwt.NewWithClaims(jwt.SigningMethodHS256, Claims{Event: 42, Position: 1, PreQueue: true,
		RegisteredClaims: jwt.RegisteredClaims{Issuer: Issuer, Subject: "m", IssuedAt: jwt.NewNumericDate(clk.Now()), ExpiresAt: jwt.NewNumericDate(clk.Now().Add(time.Hour))}})
	both.Header["kid"] = "a"
	raw, err := both.SignedString(secretA)
	require.NoError(t, err)
	_, err = fresh.VerifyAny(raw, 42)
	assert.ErrorIs(t, err, ErrInvalidToken)

	s := State{Event: 42, Watermark: 100}
	assert.False(t, s.Admits(0))
	assert.False(t, s.Admits(-1))
	assert.True(t, s.Admits(1))
}

func splitToken(raw string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] == '.' {
			parts = append(parts, raw[start:i])
			start = i + 1
		}
	}
	return append(parts, raw[start:])
}

// openingRooms are one event's rooms on n gateway nodes of one store kind.
func openingRooms(t *testing.T, kind string, clk *lockedClock, event int64, at time.Time, seeds [][]byte, n int) []*Room {
	t.Helper()
	var rooms []*Room
	var mem *MemoryStore
	var rdbStore func() Store
	switch kind {
	case "memory":
		mem = NewMemoryStore(clk.Now)
	case "redis":
		rdb := testenv.Redis(t)
		rdbStore = func() Store { return NewRedisStore(rdb, RedisOptions{Now: clk.Now}) }
	}
	for i := range n {
		var st Store = mem
		if rdbStore != nil {
			st = rdbStore()
		}
		var seed []byte
		if i < len(seeds) {
			seed = seeds[i]
		}
		r := NewRoom(st, event, RoomOptions{Now: clk.Now, Opening: &Opening{At: at, Seed: seed}})
		_, err := r.Refresh(context.Background())
		require.NoError(t, err)
		rooms = append(rooms, r)
	}
	// A new event waits out a restore window before its first position.
	clk.Advance(DefaultRestoreWindow)
	return rooms
}

// TestOpeningDrawAcrossNodes follows docs/opening.md: entrants of the pre-queue,
// registered through any node (some twice), all get positions from one
// draw at the opening, every node hands out the same ones, later arrivals
// queue after them, and the published draw rebuilds the same order.
func TestOpeningDrawAcrossNodes(t *testing.T) {
	for _, c := range []struct {
		kind  string
		nodes int
	}{{"memory", 1}, {"redis", 3}} {
		t.Run(c.kind, func(t *testing.T) {
			ctx := context.Background()
			// Redis ends the lottery's records at an instant, by its own
			// clock: the test's starts now, so they outlive the test.
			clk := &lockedClock{t: time.Now().UTC().Truncate(time.Second)}
			ev := testenv.EventID()
			at := clk.Now().Add(time.Hour)
			configured := lottery.NewSeed()
			rooms := openingRooms(t, c.kind, clk, ev, at, [][]byte{configured, lottery.NewSeed(), nil}, c.nodes)

			commitment, err := rooms[0].Commitment(ctx)
			require.NoError(t, err)
			assert.Equal(t, lottery.Commitment(configured), commitment, "the first node's seed is the fleet's")
			for _, r := range rooms {
				got, err := r.Commitment(ctx)
				require.NoError(t, err)
				assert.Equal(t, commitment, got, "one seed for every node")
				assert.True(t, r.PreQueue())
			}
			_, err = rooms[0].Join(ctx)
			require.ErrorIs(t, err, ErrNotOpen, "nobody queues before the opening")
			_, err = rooms[0].DrawnPosition(ctx, "e000")
			require.ErrorIs(t, err, ErrNotOpen)

			const n = 300
			var subjects []string
			for i := range n {
				subjects = append(subjects, fmt.Sprintf("e%03d", i))
			}
			var wg sync.WaitGroup
			for i, s := range subjects {
				wg.Go(func() {
					assert.NoError(t, rooms[i%len(rooms)].Enter(ctx, s))
					if i%7 == 0 { // entering again changes nothing
						assert.NoError(t, rooms[(i+1)%len(rooms)].Enter(ctx, s))
					}
				})
			}
			wg.Wait()
			view, err := rooms[0].Lottery(ctx)
			require.NoError(t, err)
			assert.False(t, view.Drawn)
			assert.Equal(t, commitment, view.Commitment)

			clk.Advance(time.Hour)
			for _, r := range rooms {
				assert.False(t, r.PreQueue())
			}
			// Every node asks at once: one draw, the same answers.
			got := make([]map[string]int64, len(rooms))
			for i, r := range rooms {
				got[i] = map[string]int64{}
				wg.Go(func() {
					for _, s := range subjects {
						var pos int64
						require.Eventually(t, func() bool {
							var err error
							pos, err = r.DrawnPosition(ctx, s)
							if err != nil {
								require.ErrorIs(t, err, ErrDrawing)
							}
							return err == nil
						}, 10*time.Second, time.Millisecond)
						got[i][s] = pos
					}
				})
			}
			wg.Wait()
			var positions []int64
			for _, p := range got[0] {
				positions = append(positions, p)
			}
			slices.Sort(positions)
			for i, p := range positions {
				require.Equal(t, int64(i+1), p, "positions 1…%d, each once", n)
			}
			for i := range rooms {
				assert.Equal(t, got[0], got[i], "node %d hands out the same positions", i)
			}
			_, err = rooms[0].DrawnPosition(ctx, "stranger")
			assert.ErrorIs(t, err, ErrNotEntrant)
			assert.ErrorIs(t, rooms[len(rooms)-1].Enter(ctx, "late"), ErrEntriesClosed)

			// Later arrivals queue after the entrants, on any node.
			for i, r := range rooms {
				pos, err := r.Join(ctx)
				require.NoError(t, err)
				assert.Equal(t, int64(n+1+i), pos)
			}

			view, err = rooms[len(rooms)-1].Lottery(ctx)
			require.NoError(t, err)
			require.True(t, view.Drawn)
			assert.Equal(t, hex.EncodeToString(configured), view.Published.Seed)
			assert.Equal(t, subjects, view.Published.Entrants, "sorted, each once")
			order, err := lottery.Check(view.Published)
			require.NoError(t, err)
			for x, s := range order {
				assert.Equal(t, view.Published.Base+int64(x)+1, got[0][s])
			}
		})
	}
}

// TestOpeningAfterPositionsWereHandedOut: an opening configured on a queue
// already under way puts its entrants after the positions handed out.
func TestOpeningAfterPositionsWereHandedOut(t *testing.T) {
	ctx := context.Background()
	clk := newLockedClock()
	store := NewMemoryStore(clk.Now)
	plain := NewRoom(store, 5, RoomOptions{Now: clk.Now})
	_, err := plain.Refresh(ctx)
	require.NoError(t, err)
	for range 4 {
		_, err := plain.Join(ctx)
		require.NoError(t, err)
	}
	r := NewRoom(store, 5, RoomOptions{Now: clk.Now, Opening: &Opening{At: clk.Now().Add(time.Minute)}})
	_, err = r.Refresh(ctx)
	require.NoError(t, err)
	require.NoError(t, r.Enter(ctx, "a"))
	require.NoError(t, r.Enter(ctx, "b"))
	clk.Advance(time.Minute)
	pa, err := r.DrawnPosition(ctx, "a")
	require.NoError(t, err)
	pb, err := r.DrawnPosition(ctx, "b")
	require.NoError(t, err)
	assert.ElementsMatch(t, []int64{5, 6}, []int64{pa, pb})
	pos, err := r.Join(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(7), pos)
	v, err := r.Lottery(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(4), v.Published.Base)
}

// TestOpeningPositionsAreAUniformPermutation: 50,000 arrivals in the minute
// before the opening; the draw gives positions 1…50,000 once each, and a
// chi-square test over (arrival decile, position decile) finds no link
// between when one arrived and where one ends up.
func TestOpeningPositionsAreAUniformPermutation(t *testing.T) {
	const n, bins = 50000, 10
	ctx := context.Background()
	clk := newLockedClock()
	at := clk.Now().Add(time.Minute)
	r := openingRooms(t, "memory", clk, testenv.EventID(), at, nil, 1)[0]
	arrivals := make([]string, n)
	for i := range arrivals {
		arrivals[i] = NewVisitorID()
		require.NoError(t, r.Enter(ctx, arrivals[i]))
		if i%1000 == 0 {
			clk.Advance(time.Second)
		}
	}
	clk.Advance(time.Minute)
	seen := make(map[int64]bool, n)
	var table [bins][bins]float64
	for i, id := range arrivals {
		pos, err := r.DrawnPosition(ctx, id)
		require.NoError(t, err)
		require.False(t, seen[pos], "position %d given twice", pos)
		require.True(t, pos >= 1 && pos <= n)
		seen[pos] = true
		table[i*bins/n][(pos-1)*bins/n]++
	}
	expected := float64(n) / bins / bins
	chi := 0.0
	for i := range bins {
		for j := range bins {
			d := table[i][j] - expected
			chi += d * d / expected
		}
	}
	// 81 degrees of freedom. The draw's seed is random, so the bound is
	// the 1 − 10⁻⁶ quantile, about 156.8 (Wilson–Hilferty), not the usual
	// 0.999 one (126.3), which would fail one run in a thousand; an order
	// that kept any link to arrival time is thousands over it.
	t.Logf("chi-square %.1f (81 df)", chi)
	assert.Less(t, chi, 156.8)
}

// TestEntrantsEnterAgainAfterTheStoreLostThem: the store loses the
// pre-queue's entrants with the event's state before the opening; an
// entrant whose token was issued before the restore is entered again at its
// next poll (EnterAgain says so, and the gateway issues its token anew), so
// the draw gives it its place. A token issued after the restore costs no
// store call, before and after one.
func TestEntrantsEnterAgainAfterTheStoreLostThem(t *testing.T) {
	srv := testenvRedis(t)
	rdb, err := NewRedisClient(srv.URL())
	require.NoError(t, err)
	defer rdb.Close()
	ctx := context.Background()
	// Redis ends the lottery's records at an instant (PEXPIREAT), by its
	// own clock: the test's starts now, so they outlive the test.
	clk := &lockedClock{t: time.Now().UTC().Truncate(time.Second)}
	const event = 88
	opening := &Opening{At: clk.Now().Add(time.Minute), Seed: lottery.NewSeed()}
	r := NewRoom(NewRedisStore(rdb, RedisOptions{Now: clk.Now}), event, RoomOptions{Now: clk.Now, Opening: opening})
	_, err = r.Refresh(ctx)
	require.NoError(t, err)
	clk.Advance(DefaultRestoreWindow + time.Second)
	issued := clk.Now().Truncate(time.Second)
	for _, s := range []string{"e1", "e2"} {
		require.NoError(t, r.Enter(ctx, s))
		again, err := r.EnterAgain(ctx, s, issued)
		require.NoError(t, err)
		assert.False(t, again, "nothing lost since its token was issued")
	}

	clk.Advance(10 * time.Second)
	require.NoError(t, rdb.FlushAll(ctx).Err())
	_, err = r.Refresh(ctx)
	require.NoError(t, err)
	clk.Advance(DefaultRestoreWindow)
	_, err = r.Refresh(ctx)
	require.NoError(t, err)
	again, err := r.EnterAgain(ctx, "e1", issued)
	require.NoError(t, err)
	assert.True(t, again, "issued before the restore: entered again")
	clk.Advance(time.Second)
	again, err = r.EnterAgain(ctx, "e1", clk.Now().Truncate(time.Second))
	require.NoError(t, err)
	assert.False(t, again, "its token issued anew is not asked again")

	clk.Advance(time.Minute)
	_, err = r.DrawnPosition(ctx, "e1")
	require.NoError(t, err, "an entrant that polled after the loss is in the draw")
	_, err = r.DrawnPosition(ctx, "e2")
	require.ErrorIs(t, err, ErrNotEntrant, "one that never came back is not")
	again, err = r.EnterAgain(ctx, "e2", issued)
	require.NoError(t, err)
	assert.False(t, again, "the entries are closed")
}

// TestPreQueueYieldOutlivesTheStoreLosingIt: a pre-queue token yielded its
// drawn position on one gateway; Redis then restarts empty, the draw and
// the token's record with it. Once the gateways restored the state, the
// token yields the same position on the other gateway, not a second one at
// the back while the first still admits its bearer.
func TestPreQueueYieldOutlivesTheStoreLosingIt(t *testing.T) {
	srv := testenvRedis(t)
	ctx := context.Background()
	clk := &lockedClock{t: time.Now().UTC().Truncate(time.Second)}
	const event = 89
	opening := &Opening{At: clk.Now().Add(time.Minute), Seed: lottery.NewSeed()}
	var rooms [2]*Room
	var rdb redis.UniversalClient
	for i := range rooms {
		c, err := NewRedisClient(srv.URL())
		require.NoError(t, err)
		defer c.Close()
		rdb = c
		rooms[i] = NewRoom(NewRedisStore(c, RedisOptions{Now: clk.Now}), event, RoomOptions{Now: clk.Now, Opening: opening})
		_, err = rooms[i].Refresh(ctx)
		require.NoError(t, err)
	}
	a, b := rooms[0], rooms[1]
	clk.Advance(DefaultRestoreWindow + time.Second)
	for _, s := range []string{"e1", "e2", "e3"} {
		require.NoError(t, a.Enter(ctx, s))
	}
	clk.Advance(time.Minute)
	drawn, err := a.DrawnPosition(ctx, "e2")
	require.NoError(t, err)
	require.NoError(t, a.RecordDrawnPreQueue(ctx, "e2", false, drawn, time.Hour))
	placed, _, err := a.PlacePreQueue(ctx, "late", false, time.Hour)
	require.NoError(t, err)

	require.NoError(t, rdb.FlushAll(ctx).Err())
	for _, r := range rooms {
		_, err = r.Refresh(ctx)
		require.NoError(t, err)
	}
	clk.Advance(DefaultRestoreWindow + time.Second)
	for _, r := range rooms {
		_, err = r.Refresh(ctx)
		require.NoError(t, err)
	}

	_, err = b.DrawnPosition(ctx, "e2")
	require.ErrorIs(t, err, ErrNotEntrant, "the draw went with the state")
	for subject, want := range map[string]int64{"e2": drawn, "late": placed} {
		pos, _, ok, err := b.PreQueuePlaced(ctx, subject)
		require.NoError(t, err)
		require.True(t, ok, "%s: the position its token yielded is back", subject)
		assert.Equal(t, want, pos, subject)
		pos, _, err = b.PlacePreQueue(ctx, subject, false, time.Hour)
		require.NoError(t, err)
		assert.Equal(t, want, pos, "%s: never a second position", subject)
	}
}
