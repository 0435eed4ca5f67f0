package waitroom

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// TestRoomAdmissionWindow: a position is admitted for the window from the
// watermark's reaching it; an extension by subject keeps it admitted; an
// account whose window passed queues anew (docs/api.md §3).
func TestRoomAdmissionWindow(t *testing.T) {
	for name, store := range clockedStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := newClock()
			ctx := context.Background()
			r := readyRoom(t, store(clock), clock, RoomOptions{AdmissionWindow: time.Minute})
			for _, who := range []string{"alice", "bob", "carol"} {
				_, _, _, err := r.JoinAccountAt(ctx, who, time.Hour)
				require.NoError(t, err)
			}
			_, err := r.Update(ctx, Change{SetWatermark: ptrTo[int64](2)})
			require.NoError(t, err)
			clock.Advance(30 * time.Second)
			_, err = r.Update(ctx, Change{SetWatermark: ptrTo[int64](3)})
			require.NoError(t, err)
			assert.False(t, r.AdmissionOver(1))

			require.NoError(t, r.ExtendAdmission(ctx, "bob", 10*time.Minute))
			clock.Advance(31 * time.Second)
			assert.True(t, r.AdmissionOver(1), "61 s after the watermark reached it")
			assert.True(t, r.AdmissionOver(2))
			assert.False(t, r.AdmissionOver(3), "admitted 31 s ago")
			ext, err := r.Extended(ctx, "bob")
			require.NoError(t, err)
			assert.True(t, ext)
			ext, err = r.Extended(ctx, "alice")
			require.NoError(t, err)
			assert.False(t, ext)

			pos, _, again, err := r.JoinAccountAt(ctx, "alice", time.Hour)
			require.NoError(t, err)
			assert.Equal(t, int64(4), pos, "alice's turn passed: the back of the queue")
			assert.False(t, again)
			pos, _, again, err = r.JoinAccountAt(ctx, "bob", time.Hour)
			require.NoError(t, err)
			assert.Equal(t, int64(2), pos, "bob's was extended")
			assert.True(t, again)

			clock.Advance(10 * time.Minute)
			ext, err = r.Extended(ctx, "bob")
			require.NoError(t, err)
			assert.False(t, ext, "the extension ended")
		})
	}
}

// TestAdmissionWindowStartsAtHandout: with the watermark set ahead of the
// arrivals, a position's window runs from its handout, not from the
// watermark's passing it before anyone held it.
func TestAdmissionWindowStartsAtHandout(t *testing.T) {
	for name, store := range clockedStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := newClock()
			ctx := context.Background()
			r := NewRoom(store(clock), testenv.EventID(), RoomOptions{Now: clock.Now, AdmissionWindow: time.Minute,
				Defaults: Defaults{Watermark: 10}})
			_, err := r.Refresh(ctx)
			require.NoError(t, err)
			clock.Advance(2 * time.Minute)
			_, err = r.Refresh(ctx)
			require.NoError(t, err)

			pos, err := r.Join(ctx)
			require.NoError(t, err)
			assert.False(t, r.AdmissionOver(pos), "handed out just now")
			clock.Advance(59 * time.Second)
			_, err = r.Refresh(ctx)
			require.NoError(t, err)
			assert.False(t, r.AdmissionOver(pos))
			clock.Advance(2 * time.Second)
			assert.True(t, r.AdmissionOver(pos), "a minute after its handout")
		})
	}
}

// TestPreQueueClaim: the position a pre-queue token was handed outside the
// draw is the first one claimed, with its handout, for every later claim.
func TestPreQueueClaim(t *testing.T) {
	for name, store := range map[string]func(*fakeClock) PreQueueStore{
		"memory": func(c *fakeClock) PreQueueStore { return NewMemoryStore(c.Now) },
		"redis": func(c *fakeClock) PreQueueStore {
			return NewRedisStore(testenv.Redis(t), RedisOptions{Now: c.Now})
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, ev, ctx := store(newClock()), testenv.EventID(), context.Background()
			_, _, ok, err := s.PreQueuePosition(ctx, ev, "v_a")
			require.NoError(t, err)
			assert.False(t, ok)
			at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
			got, gotAt, err := s.ClaimPreQueue(ctx, ev, "v_a", 7, at, time.Hour)
			require.NoError(t, err)
			assert.Equal(t, int64(7), got)
			assert.Equal(t, at, gotAt)
			got, gotAt, err = s.ClaimPreQueue(ctx, ev, "v_a", 9, at.Add(time.Minute), time.Hour)
			require.NoError(t, err)
			assert.Equal(t, int64(7), got, "the first claim stays")
			assert.Equal(t, at, gotAt, "with its handout")
			pos, gotAt, ok, err := s.PreQueuePosition(ctx, ev, "v_a")
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, int64(7), pos)
			assert.Equal(t, at, gotAt)
			got, gotAt, err = s.ClaimPreQueue(ctx, ev, "v_drawn", 3, time.Time{}, time.Hour)
			require.NoError(t, err)
			assert.Equal(t, int64(3), got)
			assert.True(t, gotAt.IsZero(), "a draw's position: nothing says when")
			_, _, ok, err = s.PreQueuePosition(ctx, ev, "v_b")
			require.NoError(t, err)
			assert.False(t, ok)
		})
	}
}

// TestWindowKeepsAStepASecond: rises within one second are one step, at the
// latest of them, so no admission looks earlier than it was.
func TestWindowKeepsAStepASecond(t *testing.T) {
	w := window{length: time.Minute}
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for i := range int64(100) {
		w.observe(at.Add(time.Duration(i)*5*time.Millisecond), State{Watermark: 1000, LastPosition: i + 1})
	}
	require.Len(t, w.steps, 1)
	last := at.Add(99 * 5 * time.Millisecond)
	assert.Equal(t, step{at: last, through: 100}, w.steps[0])
	assert.False(t, w.over(last.Add(time.Minute-time.Millisecond), 1), "never earlier than its last rise in the second")
	assert.True(t, w.over(last.Add(time.Minute), 1))
	w.observe(at.Add(time.Second), State{Watermark: 1000, LastPosition: 101})
	assert.Len(t, w.steps, 2)
}

// TestWindowStopsWhilePaused: the time the event is paused does not count
// towards a window: a buyer whose turn came just before or during a pause
// could not come in, and keeps the place until entry has been open for
// the window (defect: the window ran on, and a place reached during a long
// pause was given up before its holder could use it).
func TestWindowStopsWhilePaused(t *testing.T) {
	for name, store := range clockedStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := newClock()
			ctx := context.Background()
			r := readyRoom(t, store(clock), clock, RoomOptions{AdmissionWindow: time.Minute})
			for range 3 {
				_, err := r.Join(ctx)
				require.NoError(t, err)
			}
			handedOut := clock.Now()
			_, err := r.Update(ctx, Change{SetWatermark: ptrTo[int64](1)})
			require.NoError(t, err)
			clock.Advance(40 * time.Second)
			_, err = r.Update(ctx, Change{Paused: ptrTo(true)})
			require.NoError(t, err)
			_, err = r.Update(ctx, Change{SetWatermark: ptrTo[int64](2)})
			require.NoError(t, err)

			clock.Advance(10 * time.Minute)
			_, err = r.Refresh(ctx)
			require.NoError(t, err)
			assert.False(t, r.AdmissionOver(1), "40 s of its window ran before the pause")
			assert.False(t, r.AdmissionOverSince(1, handedOut))
			assert.False(t, r.AdmissionOver(2), "reached while paused: none of its window ran")

			_, err = r.Update(ctx, Change{Paused: ptrTo(false)})
			require.NoError(t, err)
			clock.Advance(20*time.Second - time.Millisecond)
			assert.False(t, r.AdmissionOver(1))
			assert.False(t, r.AdmissionOverSince(1, handedOut))
			clock.Advance(time.Millisecond)
			assert.True(t, r.AdmissionOver(1), "a minute of open entry since the watermark reached it")
			assert.True(t, r.AdmissionOverSince(1, handedOut))
			assert.False(t, r.AdmissionOver(2))
			clock.Advance(40 * time.Second)
			assert.True(t, r.AdmissionOver(2), "a minute since entry resumed")
			assert.False(t, r.AdmissionOver(3), "never reached")
		})
	}
}

// TestReplacingRoomKeepsTheWindows: a room that takes over another of its
// event (a reload that changed the room's configuration) keeps what that
// one saw: a place whose window ended stays given up, and a pause it saw
// still does not count (defect: the new room counted every admitted
// position from its own first read, so a spent place had a window again).
func TestReplacingRoomKeepsTheWindows(t *testing.T) {
	for name, store := range clockedStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := newClock()
			ctx := context.Background()
			st := store(clock)
			old := readyRoom(t, st, clock, RoomOptions{AdmissionWindow: time.Minute})
			for range 2 {
				_, err := old.Join(ctx)
				require.NoError(t, err)
			}
			_, err := old.Update(ctx, Change{SetWatermark: ptrTo[int64](1)})
			require.NoError(t, err)
			clock.Advance(2 * time.Minute)
			_, err = old.Update(ctx, Change{Paused: ptrTo(true)})
			require.NoError(t, err)
			_, err = old.Update(ctx, Change{SetWatermark: ptrTo[int64](2)})
			require.NoError(t, err)
			clock.Advance(10 * time.Minute)
			_, err = old.Refresh(ctx)
			require.NoError(t, err)
			require.True(t, old.AdmissionOver(1))
			require.False(t, old.AdmissionOver(2), "reached while paused")

			r := NewRoom(st, old.Event(), RoomOptions{AdmissionWindow: 2 * time.Minute, Replaces: old, Now: clock.Now})
			_, err = r.Refresh(ctx)
			require.NoError(t, err)
			assert.True(t, r.AdmissionOver(1), "its window ended before the new room")
			assert.False(t, r.AdmissionOver(2))
			_, err = r.Update(ctx, Change{Paused: ptrTo(false)})
			require.NoError(t, err)
			clock.Advance(2*time.Minute - time.Millisecond)
			assert.False(t, r.AdmissionOver(2), "the new room's window, counted from the end of the pause")
			clock.Advance(time.Millisecond)
			assert.True(t, r.AdmissionOver(2))

			other := NewRoom(st, testenv.EventID(), RoomOptions{AdmissionWindow: time.Minute, Replaces: old, Now: clock.Now})
			_, err = other.Refresh(ctx)
			require.NoError(t, err)
			assert.False(t, other.AdmissionOver(1), "another event's room takes nothing over")
		})
	}
}

// TestWindowForgetsPausesLonger: past maxPauses the oldest two pauses are
// remembered as one, gap and all: windows come out longer, never shorter.
func TestWindowForgetsPausesLonger(t *testing.T) {
	w := window{length: 70 * time.Second}
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	w.observe(at, State{Watermark: 1, LastPosition: 1})
	now := at
	for range maxPauses + 1 {
		now = now.Add(time.Second)
		w.observe(now, State{Watermark: 1, LastPosition: 1, Paused: true})
		now = now.Add(time.Second)
		w.observe(now, State{Watermark: 1, LastPosition: 1})
	}
	require.Len(t, w.pauses, maxPauses)
	assert.Equal(t, at.Add(time.Second), w.pauses[0].start)
	assert.Equal(t, at.Add(4*time.Second), w.pauses[0].end, "the first two, and the second between them")
	// 130 s since the reach: 65 paused, 65 open of which 1 is counted
	// paused. A window of 70 s has 6 s to run.
	assert.Equal(t, 64*time.Second, w.open(at, now))
	assert.False(t, w.over(now.Add(6*time.Second-time.Millisecond), 1))
	assert.True(t, w.over(now.Add(6*time.Second), 1))
}

// TestRoomAdmissionWindowLeasedPosition: a position another node leased
// but handed out only later is admitted from its handout, which its token
// tells, not from when this node saw the counter pass it (defect: the
// window ended at the moment of the handout, and the token's bearer was
// sent to the back).
func TestRoomAdmissionWindowLeasedPosition(t *testing.T) {
	clock := newClock()
	ctx := context.Background()
	rdb, event := testenv.Redis(t), testenv.EventID()
	opts := RoomOptions{Now: clock.Now, AdmissionWindow: 15 * time.Minute}
	a := NewRoom(NewRedisStore(rdb, RedisOptions{Now: clock.Now, Node: "a"}), event, opts)
	b := NewRoom(NewRedisStore(rdb, RedisOptions{Now: clock.Now, Node: "b", Lease: 2}), event, opts)
	for _, r := range []*Room{a, b} {
		_, err := r.Refresh(ctx)
		require.NoError(t, err)
	}
	clock.Advance(2 * DefaultRestoreWindow)
	for _, r := range []*Room{a, b} {
		_, err := r.Refresh(ctx)
		require.NoError(t, err)
	}
	first, err := b.Join(ctx) // leases 1 and 2
	require.NoError(t, err)
	require.Equal(t, int64(1), first)
	_, err = b.Update(ctx, Change{SetWatermark: ptrTo[int64](5)})
	require.NoError(t, err)
	_, err = a.Refresh(ctx)
	require.NoError(t, err)

	clock.Advance(16 * time.Minute)
	second, err := b.Join(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), second, "from b's lease")
	handedOut := clock.Now()
	_, err = a.Refresh(ctx)
	require.NoError(t, err)
	assert.False(t, a.AdmissionOverSince(second, handedOut), "handed out just now")
	assert.True(t, a.AdmissionOverSince(first, handedOut.Add(-16*time.Minute)), "handed out and reached 16 min ago")

	clock.Advance(15 * time.Minute)
	assert.True(t, a.AdmissionOverSince(second, handedOut), "15 min after its handout")
}

// TestRoomNoteHolders: the origin's notes of new holds keep each holder
// admitted and count each position's hold, on both stores, in one call
// with Redis however many holds it has; a hold without a position only
// keeps the holder admitted, a position's later holds (in a later call or
// the same) change nothing, and the first hold of a refused position is
// counted but not listed.
func TestRoomNoteHolders(t *testing.T) {
	for name, store := range clockedStores(t) {
		t.Run(name, func(t *testing.T) {
			clock := newClock()
			ctx := context.Background()
			s := store(clock)
			evt := testenv.EventID()
			r := NewRoom(s, evt, RoomOptions{Now: clock.Now})
			require.NoError(t, r.NoteRefused(ctx, 9))
			require.NoError(t, r.NoteHolders(ctx, []Holder{r.Holder("bob", 10*time.Minute, 5)}))
			require.NoError(t, r.NoteHolders(ctx, []Holder{
				r.Holder("bob", 10*time.Minute, 5), // a retry changes nothing
				r.Holder("carol", time.Minute, 0),
				r.Holder("dave", time.Minute, 9),
				r.Holder("erin", time.Minute, 7),
				r.Holder("erin", time.Minute, 7),
			}))

			for _, who := range []string{"bob", "carol", "dave", "erin"} {
				ext, err := r.Extended(ctx, who)
				require.NoError(t, err)
				assert.True(t, ext, who)
			}
			h, err := s.(HeldStore).Holds(ctx, evt, 10)
			require.NoError(t, err)
			h.Recent = utc(h.Recent)
			now := clock.Now().UTC()
			assert.Equal(t, Holds{UpTo: 3, Total: 3, TriedUpTo: 3, TriedTotal: 3, Recent: []Held{{7, now}, {5, now}}}, h)

			clock.Advance(2 * time.Minute)
			ext, err := r.Extended(ctx, "carol")
			require.NoError(t, err)
			assert.False(t, ext, "carol's minute is over")
			ext, err = r.Extended(ctx, "bob")
			require.NoError(t, err)
			assert.True(t, ext)
		})
	}
}
