package waitroom

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// TestSteer: the closed loop's decision from the origin's figures, the
// crowd and the measured conversion.
func TestSteer(t *testing.T) {
	c := ClosedLoop{}.WithDefaults()
	healthy := Inventory{Sellable: 100, Remaining: 20, Healthy: true}
	base := steerInput{state: State{Watermark: 100, LastPosition: 1000}, inv: healthy, fresh: true, waiting: 900}
	with := func(f func(*steerInput)) steerInput {
		in := base
		f(&in)
		return in
	}
	tests := []struct {
		name   string
		in     steerInput
		admit  int64
		reason string
	}{
		{"seats free, nobody undecided: admit for them at the assumed conversion", base, 40, "20 seats free, 0 undecided, conversion 0.50 (assumed)"},
		{"sold out", with(func(in *steerInput) { in.state.SoldOut = true }), 0, "sold out"},
		{"paused", with(func(in *steerInput) { in.state.Paused = true }), 0, "paused"},
		{"nobody waiting", with(func(in *steerInput) { in.waiting = 0 }), 0, "nobody waiting"},
		{"stale figures", with(func(in *steerInput) { in.fresh = false }), 0, "stale"},
		{"origin not ready", with(func(in *steerInput) { in.inv.Healthy = false }), 0, "not ready"},
		{"origin failing", with(func(in *steerInput) { in.inv.ErrorRate = 0.2 }), 0, "fails 20%"},
		{"nothing left, all held", with(func(in *steerInput) { in.inv.Remaining, in.inv.Held = 0, 100 }), 0, "no seat free, 100 held"},
		{"holds released: their seats are free again", with(func(in *steerInput) { in.inv.Remaining, in.inv.Held = 5, 95 }), 10, "5 seats free"},
		{"holds expiring soon count in part", with(func(in *steerInput) { in.inv.Remaining, in.inv.ExpiringSoon = 0, 10 }), 10, "5 seats free"},
		{"the undecided will take the seats", with(func(in *steerInput) { in.admitted = 60 }), 0, "likely to take them"},
		{"undecided cap reached", with(func(in *steerInput) {
			in.inv.Remaining, in.admitted = 1000, DefaultMaxUndecided
		}), 0, "200 undecided at most"},
		{"the cap bounds a raise", with(func(in *steerInput) { in.inv.Remaining, in.admitted = 1000, DefaultMaxUndecided-50 }), 50, "150 undecided"},
		{"no more than wait", with(func(in *steerInput) { in.waiting = 7 }), 7, "20 seats free"},
		{"conversion measured once enough decided", with(func(in *steerInput) {
			in.admitted, in.matured, in.held = 100, 100, Holds{UpTo: 25, Total: 25, TriedUpTo: 25, TriedTotal: 25}
			in.latest, in.latestTried = 100, 25
		}), 80, "conversion 0.25 (measured)"},
		{"holds of the undecided count as decided", with(func(in *steerInput) {
			in.admitted, in.matured, in.held = 140, 100, Holds{UpTo: 25, Total: 35, TriedUpTo: 25, TriedTotal: 35}
			in.latest, in.latestTried = 100, 25
		}), 50, "30 undecided, conversion 0.25 (measured)"},
		{"conversion measured on the latest decided", with(func(in *steerInput) {
			in.admitted, in.matured, in.held = 400, 400, Holds{UpTo: 120, Total: 120, TriedUpTo: 120, TriedTotal: 120}
			in.latest, in.latestTried = 50, 10
		}), 100, "conversion 0.20 (measured)"},
		{"the latest conversion never below half the conversion since the start", with(func(in *steerInput) {
			in.admitted, in.matured, in.held = 400, 400, Holds{UpTo: 300, Total: 300, TriedUpTo: 300, TriedTotal: 300}
			in.latest, in.latestTried = 50, 2
		}), 54, "conversion 0.38 (measured)"},
		{"those refused for want of seats came to buy, and the recent ones may buy yet", with(func(in *steerInput) {
			in.admitted, in.matured, in.held = 140, 100, Holds{UpTo: 25, Total: 30, TriedUpTo: 50, TriedTotal: 90}
			in.latest, in.latestTried = 100, 50
		}), 5, "35 undecided, conversion 0.50 (measured)"},
		{"seats per holder", with(func(in *steerInput) {
			in.inv.Held, in.inv.Confirmed = 30, 50
			in.admitted, in.matured, in.held = 80, 80, Holds{UpTo: 40, Total: 40, TriedUpTo: 40, TriedTotal: 40}
			in.latest, in.latestTried = 80, 40
		}), 20, "conversion 0.50 (measured), 2.0 seats each"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admit, reason := steer(c, tt.in)
			assert.Equal(t, tt.admit, admit, reason)
			assert.Contains(t, reason, tt.reason)
		})
	}
}

func TestDecisionTime(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	admittedAt := func(p int64) (time.Time, bool) { return t0, p <= 1000 }
	later := t0.Add(time.Minute)
	holds := func(n int, lag func(i int) time.Duration) []Held {
		out := make([]Held, n)
		for i := range out {
			out[i] = Held{Position: int64(i + 1), At: t0.Add(lag(i))}
		}
		return out
	}
	assert.Equal(t, 30*time.Second, decisionTime(holds(9, func(int) time.Duration { return time.Second }), admittedAt, later, 30*time.Second),
		"too few holds: assumed")
	assert.Equal(t, 9*time.Second, decisionTime(holds(10, func(i int) time.Duration { return time.Duration(i) * time.Second }), admittedAt, later, 30*time.Second),
		"nine in ten held within it")
	assert.Equal(t, minDecisionTime, decisionTime(holds(10, func(int) time.Duration { return 0 }), admittedAt, later, 30*time.Second))
	unknown := holds(10, func(int) time.Duration { return 0 })
	for i := range unknown {
		unknown[i].Position += 1000
	}
	assert.Equal(t, 30*time.Second, decisionTime(unknown, admittedAt, later, 30*time.Second), "admission unknown: not a sample")
}

func TestAdmissions(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	var a admissions
	// Every other position is present.
	present := func(lo, hi int64) int64 { return hi/2 - (lo-1)/2 }
	a.observe(t0, State{Watermark: 0, LastPosition: 50}, present)
	a.observe(t0.Add(time.Second), State{Watermark: 10, LastPosition: 50}, present)
	a.observe(t0.Add(2*time.Second), State{Watermark: 30, LastPosition: 50}, present)
	a.observe(t0.Add(3*time.Second), State{Watermark: 60, LastPosition: 50}, present)
	a.observe(t0.Add(4*time.Second), State{Watermark: 60, LastPosition: 60}, present)

	at, ok := a.admittedAt(10)
	require.True(t, ok)
	assert.Equal(t, t0.Add(time.Second), at)
	at, ok = a.admittedAt(11)
	require.True(t, ok)
	assert.Equal(t, t0.Add(2*time.Second), at)
	_, ok = a.admittedAt(61)
	assert.False(t, ok)

	w, live := a.by(t0.Add(2500 * time.Millisecond))
	assert.Equal(t, int64(30), w)
	assert.Equal(t, int64(15), live)
	w, live = a.by(t0.Add(-time.Second))
	assert.Zero(t, w+live)
	assert.Equal(t, int64(30), a.total(), "positions handed out after the watermark passed them count once they are")

	w, live = a.upTo(20)
	assert.Equal(t, int64(30), w, "the last rise that had admitted at most 20 present positions")
	assert.Equal(t, int64(15), live)
	w, live = a.upTo(4)
	assert.Zero(t, w+live, "no rise had admitted so few")
}

func TestStoreHolds(t *testing.T) {
	for name, store := range map[string]func() HeldStore{
		"memory": func() HeldStore { return NewMemoryStore(nil) },
		"redis":  func() HeldStore { return NewRedisStore(testenv.Redis(t), RedisOptions{}) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s, evt := store(), testenv.EventID()
			t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
			// 65 was refused for want of seats before it held: its hold is
			// counted, but its lag measured the wait for a seat.
			require.NoError(t, s.MarkRefused(ctx, evt, 65))
			for i, p := range []int64{3, 64, 65, 200, 3} {
				first, err := s.MarkHeld(ctx, evt, p, t0.Add(time.Duration(i)*time.Second))
				require.NoError(t, err)
				assert.Equal(t, i < 4, first, "position %d", p)
			}
			require.NoError(t, s.MarkRefused(ctx, evt, 7))
			h, err := s.Holds(ctx, evt, 64)
			require.NoError(t, err)
			assert.Equal(t, int64(2), h.UpTo)
			assert.Equal(t, int64(4), h.Total)
			assert.Equal(t, int64(3), h.TriedUpTo, "3, 7 and 64 came to hold")
			assert.Equal(t, int64(5), h.TriedTotal, "and 65 and 200, refused or not")
			assert.Equal(t, []Held{{200, t0.Add(3 * time.Second)}, {64, t0.Add(time.Second)}, {3, t0}},
				utc(h.Recent), "a hold after a refusal is not listed")
			require.NoError(t, s.MarkRefused(ctx, evt, 200))
			h, err = s.Holds(ctx, evt, 64)
			require.NoError(t, err)
			assert.Len(t, h.Recent, 3, "a refusal after the first hold changes nothing")
			h, err = s.Holds(ctx, evt, 0)
			require.NoError(t, err)
			assert.Zero(t, h.UpTo)
		})
	}
}

func utc(hs []Held) []Held {
	for i := range hs {
		hs[i].At = hs[i].At.UTC()
	}
	return hs
}

// TestRoomClosedLoop: the room steering by the origin's figures, with an
// injected clock: a raise for the free seats, logged with its reason;
// nothing while the figures are stale; more once the admitted held and
// seats came back; nothing at sold out.
func TestRoomClosedLoop(t *testing.T) {
	for name, store := range map[string]func(*fakeClock) (Store, func(event int64)){
		"memory": func(c *fakeClock) (Store, func(int64)) { return NewMemoryStore(c.Now), func(int64) {} },
		"redis": func(c *fakeClock) (Store, func(int64)) {
			rdb := testenv.Redis(t)
			// Redis times the lease by its own clock: end it as its
			// expiry would.
			return NewRedisStore(rdb, RedisOptions{Now: c.Now}), func(event int64) {
				require.NoError(t, rdb.Del(context.Background(), leaseKey(event, "autopilot")).Err())
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clock := newClock()
			s, endLease := store(clock)
			evt := testenv.EventID()
			gw := NewRoom(s, evt, RoomOptions{Now: clock.Now, ClosedLoop: &ClosedLoop{MaxUndecided: 50, DecisionTime: 10 * time.Second}})
			origin := NewRoom(s, evt, RoomOptions{Follow: true, Now: clock.Now})
			_, err := gw.Refresh(ctx)
			require.NoError(t, err)
			clock.Advance(DefaultRestoreWindow) // past the new event's restore window
			for range 300 {
				_, err := gw.Join(ctx)
				require.NoError(t, err)
			}
			step := func() State {
				t.Helper()
				clock.Advance(time.Second) // past the lease
				endLease(evt)
				require.NoError(t, gw.steerClosedLoop(ctx))
				return gw.State()
			}
			assert.Zero(t, step().Watermark, "nothing published yet")

			publish := func(inv Inventory) {
				t.Helper()
				inv.Sellable, inv.Healthy = 100, true
				require.NoError(t, origin.PublishInventory(ctx, inv))
			}
			publish(Inventory{Remaining: 10})
			assert.Equal(t, int64(20), step().Watermark, "10 seats at the assumed conversion 0.5")
			log, err := gw.ChangeLog(ctx, 1)
			require.NoError(t, err)
			require.Len(t, log, 1)
			assert.Equal(t, ActorAutopilot, log[0].Actor)
			assert.Equal(t, "admit 20: 10 seats free, 0 undecided, conversion 0.50 (assumed), 1.0 seats each, decision time 10s", log[0].Reason)

			assert.Equal(t, int64(20), step().Watermark, "the 20 undecided are likely to take the 10 seats")

			for p := int64(1); p <= 5; p++ {
				require.NoError(t, origin.NoteHold(ctx, p))
			}
			publish(Inventory{Remaining: 5, Held: 5})
			assert.Equal(t, int64(20), step().Watermark, "15 undecided still cover the 5 seats left")
			clock.Advance(10 * time.Second)
			publish(Inventory{Remaining: 10, Held: 0})
			assert.Equal(t, int64(60), step().Watermark, "the 20 admitted have decided, 5 of them held: the seats of their holds came back")
			log, err = gw.ChangeLog(ctx, 1)
			require.NoError(t, err)
			assert.Equal(t, "admit 40: 10 seats free, 0 undecided, conversion 0.25 (measured), 1.0 seats each, decision time 10s", log[0].Reason)

			clock.Advance(10 * time.Second)
			publish(Inventory{Remaining: 10})
			stale := clock.Now()
			clock.Advance(InventoryFresh)
			assert.Equal(t, int64(60), step().Watermark, "figures of %s are stale", stale)

			publish(Inventory{Remaining: 10})
			_, err = gw.Update(ctx, Change{SoldOut: ptrTo(true)})
			require.NoError(t, err)
			assert.Equal(t, int64(60), step().Watermark, "sold out")
		})
	}
}

// TestDecisionTimeCensored: early in a sale only the quickest of the
// admitted have held yet; their lags alone are not the decision time, or
// the loop takes everyone slower for gone and admits far too many.
func TestDecisionTimeCensored(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	now := t0.Add(2 * time.Second)
	admittedAt := func(p int64) (time.Time, bool) { return t0, p <= 1000 }
	quick := make([]Held, 20)
	for i := range quick {
		quick[i] = Held{Position: int64(i + 1), At: t0.Add(time.Second)}
	}
	assert.Equal(t, 30*time.Second, decisionTime(quick, admittedAt, now, 30*time.Second),
		"admitted 2s ago: a lag of 1s says nothing of those still deciding")
	later := now.Add(40 * time.Second)
	assert.Equal(t, minDecisionTime, decisionTime(quick, admittedAt, later, 30*time.Second),
		"admitted longer ago than the assumed decision time: their lags are the measure")
}

// TestDecisionTimeKept: once measured, the decision time is kept while the
// latest holders were all admitted lately, rather than falling back to the
// assumed one: the loop would take the admitted of the last half minute
// for undecided again and stall.
func TestDecisionTimeKept(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	now := t0.Add(time.Minute)
	admittedAt := func(p int64) (time.Time, bool) { return now.Add(-10 * time.Second), true }
	recent := make([]Held, 20)
	for i := range recent {
		recent[i] = Held{Position: int64(i + 1), At: now.Add(-5 * time.Second)}
	}
	assert.Equal(t, 12*time.Second, decisionTime(recent, admittedAt, now, 12*time.Second))
}

// TestSteerAllHeld: the origin raises the sold-out flag whenever no seat is
// left to hold, and lowers it as holds lapse; while seats in live holds may
// come back the loop keeps steering, so buyers are ready for the seats of
// holds about to expire instead of being admitted only once each is back.
func TestSteerAllHeld(t *testing.T) {
	c := ClosedLoop{}.WithDefaults()
	allHeld := Inventory{Sellable: 100, Remaining: 0, Held: 20, ExpiringSoon: 10, Healthy: true}
	base := steerInput{state: State{Watermark: 100, LastPosition: 1000, SoldOut: true, SoldOutBy: ActorOrigin},
		inv: allHeld, fresh: true, waiting: 900}
	admit, reason := steer(c, base)
	assert.Equal(t, int64(10), admit, reason)
	assert.Contains(t, reason, "5 seats free")

	operator := base
	operator.state.SoldOutBy = "operator"
	admit, reason = steer(c, operator)
	assert.Zero(t, admit)
	assert.Equal(t, "sold out", reason, "an operator's flag stands")

	nothingBack := base
	nothingBack.inv.Held, nothingBack.inv.ExpiringSoon = 0, 0
	admit, reason = steer(c, nothingBack)
	assert.Zero(t, admit)
	assert.Equal(t, "sold out", reason, "no live hold: nothing can come back")
}

// TestDecisionTimeEarly: a crowd that holds within seconds is measured
// within seconds, not after the assumed half minute, during which the
// loop took everyone admitted for undecided and left seats free while
// people waited; and a second look a moment after an admission is not
// enough to measure it.
func TestDecisionTimeEarly(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	admittedAt := func(p int64) (time.Time, bool) { return t0, p <= 200 }
	// 150 of 200 held, 1 to 4 s after their admission.
	recent := make([]Held, 150)
	for i := range recent {
		recent[i] = Held{Position: int64(i + 1), At: t0.Add(time.Second + time.Duration(i)*20*time.Millisecond)}
	}
	held := func(now time.Time) []Held {
		var out []Held
		for _, h := range recent {
			if !h.At.After(now) {
				out = append(out, h)
			}
		}
		return out
	}
	assumed := 30 * time.Second
	for _, tt := range []struct {
		after time.Duration
		want  time.Duration
	}{
		{2 * time.Second, assumed},  // the quickest only: says nothing yet
		{5 * time.Second, assumed},  // all held by now, but not yet seen for three times as long
		{11 * time.Second, assumed}, // 3.1 s fails (the p90 is 3.7 s); 3.8 s needs them seen for 11.4 s
		{12 * time.Second, 3700 * time.Millisecond},
		{time.Minute, 3700 * time.Millisecond},
	} {
		got := decisionTime(held(t0.Add(tt.after)), admittedAt, t0.Add(tt.after), assumed)
		assert.Equal(t, tt.want, got, "%s after the admission", tt.after)
	}
}
