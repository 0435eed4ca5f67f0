package waitroom

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// The closed-loop autopilot (docs/gateway.md, autopilot): rather than
// admit at a fixed rate, the node holding the lease admits, every
// Interval, as many of the users still waiting as the seats the origin
// says are free are likely to take, given how many of the users admitted
// lately are still deciding and the share of admitted users who went on
// to hold. It never lets more than MaxUndecided users be admitted and
// undecided at once, so the origin sees a bounded crowd, and it admits
// nobody while the origin's figures are stale, the origin is not ready or
// fails, or nothing is left to sell.

// ClosedLoop configures the closed-loop autopilot. Zero fields take the
// defaults named.
type ClosedLoop struct {
	// Interval is how often the node holding the lease steers; default
	// 500ms.
	Interval time.Duration
	// MaxUndecided caps the users admitted lately (within the decision
	// time) who have not held yet; default 200. It also paces the first
	// wave: at the opening the loop admits up to this many at once and
	// more only as they hold. A cap of 500 for 490 seats brought the 490th
	// hold from 6.4 s to 4.2 s and doubled the peak at the origin, for no
	// sooner last seat (docs/loadtest.md, admission).
	MaxUndecided int64
	// Conversion is the share of admitted users who hold, assumed until
	// enough admitted users have had the decision time to decide; default
	// 0.5.
	Conversion float64
	// DecisionTime is how long an admitted user takes to hold (nine in
	// ten do within it), assumed until enough holds are seen; default 30s.
	// After it an admitted user counts as decided: held, or gone.
	DecisionTime time.Duration
	// ExpiringShare is the share of the seats of holds expiring soon that
	// are counted as free already, so their next buyers are ready when
	// they come back; default 0.5.
	ExpiringShare float64
	// MaxErrorRate is the origin's share of server errors from which no
	// one is admitted; default 0.05.
	MaxErrorRate float64
}

// Defaults of ClosedLoop.
const (
	DefaultClosedLoopInterval = 500 * time.Millisecond
	DefaultMaxUndecided       = 200
	DefaultConversion         = 0.5
	DefaultDecisionTime       = 30 * time.Second
	DefaultExpiringShare      = 0.5
	DefaultMaxErrorRate       = 0.05
)

// WithDefaults fills in the zero fields.
func (c ClosedLoop) WithDefaults() ClosedLoop {
	if c.Interval <= 0 {
		c.Interval = DefaultClosedLoopInterval
	}
	if c.MaxUndecided <= 0 {
		c.MaxUndecided = DefaultMaxUndecided
	}
	if c.Conversion <= 0 {
		c.Conversion = DefaultConversion
	}
	if c.DecisionTime <= 0 {
		c.DecisionTime = DefaultDecisionTime
	}
	if c.ExpiringShare <= 0 {
		c.ExpiringShare = DefaultExpiringShare
	}
	if c.MaxErrorRate <= 0 {
		c.MaxErrorRate = DefaultMaxErrorRate
	}
	return c
}

// Validate reports a configuration that cannot steer.
func (c ClosedLoop) Validate() error {
	switch {
	case c.Interval < 0 || c.DecisionTime < 0 || c.MaxUndecided < 0:
		return fmt.Errorf("autopilot: %w", ErrNegative)
	case c.Conversion < 0 || c.Conversion > 1:
		return fmt.Errorf("autopilot: conversion %v is not a share (0 to 1)", c.Conversion)
	case c.ExpiringShare < 0 || c.ExpiringShare > 1:
		return fmt.Errorf("autopilot: expiring share %v is not a share (0 to 1)", c.ExpiringShare)
	case c.MaxErrorRate < 0 || c.MaxErrorRate > 1:
		return fmt.Errorf("autopilot: max error rate %v is not a share (0 to 1)", c.MaxErrorRate)
	}
	return nil
}

// The conversion is the share of the admitted who came to hold seats,
// whether they got them or were refused for want of them (the origin notes
// both). Measured on holds alone it fed back on itself: the more were
// admitted per free seat, the fewer found one, the lower the conversion and
// the more were admitted next, each of them refused, most of them gone
// disappointed. Those who came and were refused show that the crowd still
// buys; the seats left are what steer counts as free.
//
// conversionWindow is how many of the latest decided positions it is
// measured on: later positions waited longer and more of their holders
// have left, so a conversion since the start would take the undecided for
// buyers long after they left, and a seat would wait a decision time for
// each. The latest are never taken below conversionFloor of the
// conversion since the start, a bound on the users admitted per free seat
// should a few unlucky positions come in a row.
const (
	conversionWindow = 50
	conversionFloor  = 0.5
)

// Samples below which a measurement is not trusted and the configured
// value is used instead.
const (
	minConversionSample = 20
	minDecisionSample   = 10
	minHoldersSample    = 10
)

// Bounds of a measured decision time: a user needs a moment to hold, and
// one who takes longer than this has most likely gone.
const (
	minDecisionTime = time.Second
	maxDecisionTime = 10 * time.Minute
)

// steerInput is what one steering decision is made from.
type steerInput struct {
	state State
	inv   Inventory
	// fresh tells the figures were published lately (Room.Inventory).
	fresh bool
	// waiting counts the present positions waiting.
	waiting int64
	// admitted counts the present positions admitted, in all; matured
	// those of them admitted at least the decision time ago.
	admitted, matured int64
	// held counts the positions that held, and that came to hold: UpTo
	// those admitted at least the decision time ago.
	held Holds
	// latest and latestTried are the latest of the matured positions (at
	// least conversionWindow of them, or all) and how many of them came to
	// hold: the conversion is measured on them.
	latest, latestTried int64
	// decision is the time from admission to hold, measured or assumed.
	decision time.Duration
}

// steer decides how many of the positions waiting to admit now, and why.
// It admits nobody (0) when it should not, with the reason.
func steer(c ClosedLoop, in steerInput) (admit int64, reason string) {
	s, inv := in.state, in.inv
	switch {
	// Sold out once nothing can come back: the origin's flag alone only
	// says no seat is left to hold right now, and it flaps as holds lapse.
	case Judge(s, inv, in.fresh).SoldOut:
		return 0, "sold out"
	case s.Paused:
		return 0, "paused"
	case in.waiting <= 0:
		return 0, "nobody waiting"
	case !in.fresh:
		return 0, "the origin's figures are stale"
	case !inv.Healthy:
		return 0, "the origin is not ready"
	case inv.ErrorRate >= c.MaxErrorRate:
		return 0, fmt.Sprintf("the origin fails %.0f%% of its answers", inv.ErrorRate*100)
	}
	free := float64(inv.Remaining) + c.ExpiringShare*float64(inv.ExpiringSoon)
	if free <= 0 {
		return 0, fmt.Sprintf("no seat free, %d held", inv.Held)
	}
	conversion, measured := c.Conversion, "assumed"
	if in.latest >= minConversionSample {
		since := float64(in.held.TriedUpTo) / float64(in.matured)
		latest := float64(in.latestTried) / float64(in.latest)
		conversion, measured = min(1, max(0.05, latest, conversionFloor*since)), "measured"
	}
	perHolder := 1.0
	if in.held.Total >= minHoldersSample {
		perHolder = math.Max(1, float64(inv.Held+inv.Confirmed)/float64(in.held.Total))
	}
	// Those refused stay undecided for the decision time: some keep trying,
	// and take the next seat that comes back.
	undecided := max(0, (in.admitted-in.matured)-(in.held.Total-in.held.UpTo))
	figures := fmt.Sprintf("%d seats free, %d undecided, conversion %.2f (%s), %.1f seats each, decision time %s",
		int64(math.Round(free)), undecided, conversion, measured, perHolder, in.decision.Round(100*time.Millisecond))
	likely := conversion * perHolder * float64(undecided)
	if likely >= free {
		return 0, figures + ": the undecided are likely to take them"
	}
	room := c.MaxUndecided - undecided
	if room <= 0 {
		return 0, figures + fmt.Sprintf(": %d undecided at most", c.MaxUndecided)
	}
	admit = int64(math.Ceil((free - likely) / (conversion * perHolder)))
	admit = min(admit, room, in.waiting)
	return admit, figures
}

// decisionTime is the time within which nine in ten of the admitted who
// hold do so, measured on the latest holders, or current (assumed until
// first measured) when they cannot tell it yet.
//
// A lag says something only next to lags observed for as long. Early in a
// sale only the quickest of the admitted have held: their lags alone would
// make the decision time a second, count everyone slower as gone and admit
// several times the seats. Waiting the assumed time before trusting any
// lag is safe but blind: for half a minute the loop takes everyone
// admitted for undecided, and seats stay free while people wait. So each
// candidate time d is judged on the holders admitted at least
// decisionHorizon × d ago, all of whose holds within that horizon are
// seen: d is the decision time when nine in ten of those holds came within
// it. The smallest candidate that passes is taken, so a quick crowd is
// measured within seconds and a slow one as soon as its lags are seen.
// While none passes the time stays current: falling back to the assumed
// one would take the last half minute's admitted for undecided again and
// stall the loop.
func decisionTime(recent []Held, admittedAt func(int64) (time.Time, bool), now time.Time, current time.Duration) time.Duration {
	type sample struct {
		at  time.Time
		lag time.Duration
	}
	samples := make([]sample, 0, len(recent))
	for _, h := range recent {
		if at, ok := admittedAt(h.Position); ok {
			samples = append(samples, sample{at, max(0, h.At.Sub(at))})
		}
	}
	if len(samples) < minDecisionSample {
		return current
	}
	lags := make([]time.Duration, 0, len(samples))
	for d := minDecisionTime; d <= maxDecisionTime; d = d * 5 / 4 {
		horizon := decisionHorizon * d
		lags = lags[:0]
		for _, s := range samples {
			if !s.at.After(now.Add(-horizon)) && s.lag <= horizon {
				lags = append(lags, s.lag)
			}
		}
		if len(lags) < minDecisionSample {
			continue
		}
		slices.Sort(lags)
		if p90 := lags[(len(lags)*9)/10]; p90 <= d {
			return max(minDecisionTime, p90)
		}
	}
	return current
}

// decisionHorizon is how many times a candidate decision time its holders
// must have had: the admitted who hold later than it are taken to be few.
const decisionHorizon = 3

// admissions remembers when the watermark rose and how many present
// positions each rise admitted, so a node knows when a position was
// admitted and how many users were admitted by a time.
type admissions struct {
	mu    sync.Mutex
	steps []admission
	// counted is the highest position counted in live.
	counted int64
	live    int64
}

type admission struct {
	at        time.Time
	watermark int64
	// live counts the present positions admitted up to this rise.
	live int64
}

// maxAdmissionSteps bounds the rises remembered; the oldest go first,
// which makes the positions they admitted look admitted at the oldest
// rise kept.
const maxAdmissionSteps = 1 << 14

// observe records the state seen at now; present counts the present
// positions in a range.
func (a *admissions) observe(now time.Time, s State, present func(lo, hi int64) int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if through := min(s.Watermark, s.LastPosition); through > a.counted {
		a.live += present(a.counted+1, through)
		a.counted = through
	}
	if n := len(a.steps); n > 0 && s.Watermark <= a.steps[n-1].watermark {
		a.steps[n-1].live = a.live
		return
	}
	a.steps = append(a.steps, admission{at: now, watermark: s.Watermark, live: a.live})
	if n := len(a.steps) - maxAdmissionSteps; n > 0 {
		a.steps = append(a.steps[:0], a.steps[n:]...)
	}
}

// admittedAt is when position was admitted, if it was.
func (a *admissions) admittedAt(position int64) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, _ := slices.BinarySearchFunc(a.steps, position, func(s admission, p int64) int {
		if s.watermark < p {
			return -1
		}
		return 1
	})
	if i == len(a.steps) {
		return time.Time{}, false
	}
	return a.steps[i].at, true
}

// by is the watermark and the present positions admitted as of t.
func (a *admissions) by(t time.Time) (watermark, live int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, _ := slices.BinarySearchFunc(a.steps, t, func(s admission, t time.Time) int {
		if s.at.After(t) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return 0, 0
	}
	return a.steps[i-1].watermark, a.steps[i-1].live
}

// upTo is the watermark and the present positions admitted by the last
// rise that had admitted at most live of them; 0, 0 when none had.
func (a *admissions) upTo(live int64) (watermark, admitted int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.steps), func(i int) bool { return a.steps[i].live > live })
	if i == 0 {
		return 0, 0
	}
	return a.steps[i-1].watermark, a.steps[i-1].live
}

// total is the present positions admitted so far.
func (a *admissions) total() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.live
}

// steerClosedLoop makes one steering decision, if this node holds the
// lease, and raises the watermark by it.
func (r *Room) steerClosedLoop(ctx context.Context) error {
	c := *r.opts.ClosedLoop
	s, err := r.Refresh(ctx)
	if err != nil {
		return err
	}
	waiting := r.Ahead(s.LastPosition + 1)
	if r.Availability().SoldOut || s.Paused || waiting == 0 {
		return nil
	}
	lead, err := r.store.Lead(ctx, r.event, "autopilot", c.Interval*9/10)
	if err != nil || !lead {
		return err
	}
	now := r.opts.Now()
	r.pilotMu.Lock()
	decision := r.decision
	r.pilotMu.Unlock()
	if decision <= 0 {
		decision = c.DecisionTime
	}
	maturedThrough, matured := r.admitted.by(now.Add(-decision))
	in := steerInput{state: s, waiting: waiting, admitted: r.admitted.total(), matured: matured, decision: decision}
	in.inv, in.fresh = r.Inventory()
	if hs, ok := r.store.(HeldStore); ok {
		if in.held, err = hs.Holds(ctx, r.event, maturedThrough); err != nil {
			return err
		}
		in.latest, in.latestTried = matured, in.held.TriedUpTo
		if before, live := r.admitted.upTo(matured - conversionWindow); before > 0 {
			older, err := hs.Holds(ctx, r.event, before)
			if err != nil {
				return err
			}
			in.latest, in.latestTried = matured-live, in.held.TriedUpTo-older.TriedUpTo
		}
	}
	next := decisionTime(in.held.Recent, r.admitted.admittedAt, now, decision)
	r.pilotMu.Lock()
	r.decision = next
	r.pilotMu.Unlock()
	admit, reason := steer(c, in)
	if admit <= 0 {
		r.opts.Logger.Debug("autopilot admits nobody", "event", r.event, "why", reason)
		return nil
	}
	to := r.watermarkAdmitting(s, admit)
	if to <= s.Watermark {
		return nil
	}
	s, err = r.Update(ctx, Change{RaiseBy: to - s.Watermark, Actor: ActorAutopilot,
		Reason: fmt.Sprintf("admit %d: %s", admit, reason)})
	if err != nil {
		return err
	}
	r.opts.Logger.Info("autopilot raised the watermark", "event", r.event, "admit", admit, "watermark", s.Watermark, "why", reason)
	return nil
}

// watermarkAdmitting is the lowest watermark that admits n more present
// positions, or the last position handed out when fewer wait.
func (r *Room) watermarkAdmitting(s State, n int64) int64 {
	lo, hi := s.Watermark+1, s.LastPosition
	if hi < lo {
		return s.Watermark
	}
	present := func(to int64) int64 { return r.presentBetween(lo, to, to-lo+1) }
	if present(hi) <= n {
		return hi
	}
	// The first to with n present in [lo, to].
	return lo + int64(sort.Search(int(hi-lo+1), func(i int) bool { return present(lo+int64(i)) >= n }))
}
