package waitroom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPollInterval bounds how stale a node's view of the state can get
// when a change notice is lost: changes are seen within a second.
const DefaultPollInterval = 500 * time.Millisecond

// Autopilot raises the watermark by Step every Interval while visitors wait
// and the event is neither sold out nor paused. Across a fleet sharing a
// store only one node raises per interval.
type Autopilot struct {
	Step     int64
	Interval time.Duration
}

// Enabled reports whether the autopilot is configured.
func (a Autopilot) Enabled() bool { return a.Step > 0 && a.Interval > 0 }

// RoomOptions configures a Room.
type RoomOptions struct {
	Defaults Defaults
	// Follow makes the room read-only towards the store: it never writes
	// Defaults. The origin follows the state that the gateways own.
	Follow       bool
	PollInterval time.Duration
	// Autopilot raises the watermark at a fixed rate; ClosedLoop, when
	// set, by the origin's published inventory instead (Autopilot is then
	// ignored).
	Autopilot  Autopilot
	ClosedLoop *ClosedLoop
	// Opening schedules the queue's opening with a pre-queue and a draw;
	// nil opens at once. The store must be a LotteryStore (both of this
	// package's are).
	Opening *Opening
	// AbandonAfter is how long after its last poll a waiting position
	// stops counting in Ahead and the estimate; 0 counts every position.
	// The store must be a PresenceStore (both of this package's are).
	AbandonAfter time.Duration
	// AdmissionWindow is how long an admitted position stays admitted
	// after the watermark reached it, unless its holder's admission was
	// extended (ExtendAdmission); 0 for ever.
	AdmissionWindow time.Duration
	// Replaces is the room of the same event this one takes over on this
	// node (a reload that changed the room's configuration): the new room
	// starts from what that one saw of the admission windows, so a place
	// whose window ended stays given up; from its revocations, those the
	// store did not take yet included, so a revoked token stays out even
	// while the store is unreachable and the store still gets them; from
	// the positions pre-queue tokens yielded and the highest positions it
	// knew handed out, so a lost state is put back as fully. Nil for a
	// room of its own.
	Replaces *Room
	// Now is the clock; time.Now when nil.
	Now    func() time.Time
	Logger *slog.Logger
}

// Room is one event as a node sees it: the state held in memory for the
// request path, kept fresh from the store by Run.
type Room struct {
	event int64
	store Store
	opts  RoomOptions
	state atomic.Pointer[State]
	// synced is set once the store has confirmed the defaults.
	synced atomic.Bool
	// known is set once a state of the event was read from the store.
	known atomic.Bool
	rate  *rateMeter
	// issued is the highest position the room knows was handed out, by
	// its joins and in the store's state: a counter found below it was
	// lost. shown is the highest on a token it was shown. A lost counter is
	// put back above both.
	issued atomic.Int64
	shown  atomic.Int64
	// handed is the highest position the room's own joins handed out,
	// folded into State at read time: a copy of the state per arrival, to
	// move its last position, was an allocation and a compare-and-swap.
	handed atomic.Int64
	// joined is the end (unix ms) of the last restore the room added what
	// it remembers to, so it does so once per restore.
	joined atomic.Int64
	// wake asks Run for a refresh now: a join found the state lost, or a
	// read at a change notice failed or found a restore.
	wake chan struct{}
	// ready is closed once the room has read the store (or failed to) and
	// no restore holds new positions back.
	ready     chan struct{}
	readyOnce sync.Once
	// lot is the scheduled opening; nil without one.
	lot *roomLottery
	// revoked is the event's revocations, as last read.
	revoked revocations
	// unsent is this node's revocations the store did not take.
	unsent unsentRevocations
	// yields is the position each anonymous pre-queue token was seen to
	// yield, written back when the store loses it (prequeue.go).
	yields yields
	// presence tells abandoned positions from waiting ones.
	presence presence
	// window tells when positions were admitted.
	window window
	// inventory is the origin's figures as last read (or published).
	inventory atomic.Pointer[Inventory]
	// admitted is when the watermark rose, for the closed loop.
	admitted admissions
	// decision is the closed loop's last measure of the time from
	// admission to hold.
	pilotMu  sync.Mutex
	decision time.Duration
	// syncMu orders a read of the state with a change of it, so a read
	// made before a change never replaces the change's state in memory.
	syncMu sync.Mutex
	// changed is closed, and replaced, when the state in memory changes.
	changed atomic.Pointer[chan struct{}]
	// applied is when each watermark came into memory.
	applied appliedMarks
}

// NewRoom returns a room for event that starts from opts.Defaults. It does no
// I/O; Run connects it to the store.
func NewRoom(store Store, event int64, opts RoomOptions) *Room {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ClosedLoop != nil {
		c := opts.ClosedLoop.WithDefaults()
		opts.ClosedLoop = &c
	}
	r := &Room{event: event, store: store, opts: opts, rate: newRateMeter(opts.Now),
		wake: make(chan struct{}, 1), ready: make(chan struct{})}
	r.state.Store(&State{Event: event, Watermark: opts.Defaults.Watermark, HardCap: opts.Defaults.HardCap})
	changed := make(chan struct{})
	r.changed.Store(&changed)
	r.window.length = opts.AdmissionWindow
	if p := opts.Replaces; p != nil && p.event == event {
		r.window.takeOver(&p.window)
		r.revoked.takeOver(&p.revoked)
		r.unsent.takeOver(&p.unsent)
		r.yields.takeOver(&p.yields)
		raiseTo(&r.issued, p.issued.Load())
		raiseTo(&r.shown, p.shown.Load())
	}
	// The old room goes with its config; this one must not keep it alive.
	r.opts.Replaces = nil
	if opts.AbandonAfter > 0 {
		r.presence = presence{after: opts.AbandonAfter, slot: max(opts.AbandonAfter/(presenceSlots-1), time.Millisecond),
			since: opts.Now()}
	}
	if opts.Opening != nil {
		lot, err := newRoomLottery(store, *opts.Opening)
		if err != nil {
			panic(fmt.Sprintf("waitroom: opening of event %d: %v", event, err))
		}
		r.lot = lot
	}
	return r
}

// Event is the room's event id.
func (r *Room) Event() int64 { return r.event }

// Store is the store the room reads and writes.
func (r *Room) Store() Store { return r.store }

// State is the last state seen, from memory, with the positions the room
// handed out since.
func (r *Room) State() State {
	return r.state.Load().with(r.handed.Load())
}

// Changed returns a channel closed at the next change of the state a read
// of the store or the room's own update brings into memory, for followers
// of the state such as the edge publisher. Positions handed out by Join
// between reads do not count.
func (r *Room) Changed() <-chan struct{} { return *r.changed.Load() }

func (r *Room) observe(s State) {
	r.known.Store(true)
	handed := r.handed.Load()
	if old := r.state.Swap(&s); old.with(handed) != s.with(handed) {
		if old.Watermark != s.Watermark {
			r.applied.add(s.Watermark, r.opts.Now())
		}
		next := make(chan struct{})
		close(*r.changed.Swap(&next))
	}
	r.rate.observe(s.Watermark)
	r.window.observe(r.opts.Now(), s)
	if r.opts.ClosedLoop != nil {
		r.admitted.observe(r.opts.Now(), s, func(lo, hi int64) int64 { return r.presentBetween(lo, hi, hi-lo+1) })
	}
	raiseTo(&r.issued, s.LastPosition)
}

// Seen records that position was handed out, as a valid token for it
// proves: should the store lose its counter, it is put back above it (a
// gateway that restarted along with Redis remembers nothing else). A
// position above the counter the room knows may be the proof that it was
// lost already, the store with the gateway (one box restarted, or a memory
// store), and the state set up afresh before any token came back: the
// store hands out no position up to it again. Only a token above what the
// room knows costs more than a load; even then no call to the store.
func (r *Room) Seen(position int64) {
	if position <= r.shown.Load() {
		return
	}
	raiseTo(&r.shown, position)
	if position <= r.issued.Load() || position <= r.state.Load().LastPosition {
		return
	}
	if f, ok := r.store.(positionFloor); ok {
		f.raiseFloor(r.event, position)
	}
}

// positionFloor is a store told of a position handed out before it knew:
// it hands out none at or below it again.
type positionFloor interface {
	raiseFloor(event, pos int64)
}

// raiseTo moves v up to n, never down.
func raiseTo(v *atomic.Int64, n int64) {
	for {
		cur := v.Load()
		if n <= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Ready is closed once the room has read the store, or failed to, and no
// restore of the state holds new positions back.
func (r *Room) Ready() <-chan struct{} { return r.ready }

// Refresh reads the state (and the origin's inventory) from the store now. A room that owns its event
// (not Follow) sets the state up the first time, sets it up again from
// what it remembers if the store lost it, and adds what it remembers to a
// restore another node started.
func (r *Room) Refresh(ctx context.Context) (State, error) {
	r.syncMu.Lock()
	s, err := r.refresh(ctx)
	r.syncMu.Unlock()
	if rerr := r.resendRevocations(ctx); err == nil {
		err = rerr
	}
	if rerr := r.syncRevocations(ctx); err == nil {
		err = rerr
	}
	if ierr := r.syncInventory(ctx); err == nil {
		err = ierr
	}
	if r.lot != nil && !r.opts.Follow {
		// The fleet's seed, so the commitment shown is the one drawn with.
		_, _ = r.syncSeed(ctx)
	}
	if err != nil || !s.Restoring(r.opts.Now()) {
		r.readyOnce.Do(func() { close(r.ready) })
	}
	return s, err
}

func (r *Room) refresh(ctx context.Context) (State, error) {
	if !r.opts.Follow && !r.synced.Load() {
		return r.ensure(ctx, false)
	}
	// Positions handed out while the read is in flight may be above the
	// counter it returns: only those handed out, or seen on a token,
	// before it are compared.
	issued := max(r.issued.Load(), r.shown.Load())
	s, err := r.store.State(ctx, r.event)
	switch {
	case errors.Is(err, ErrNoState) && r.opts.Follow:
		// Nobody set the event up yet (nothing is admitted), or the store
		// lost it (a restarted Redis) and no leader has restored it yet: a
		// follower keeps what it last saw rather than forget who was let in.
		return r.State(), nil
	case errors.Is(err, ErrNoState):
		r.opts.Logger.Warn("queue state missing from the store; restoring it from memory", "event", r.event, "error", err)
		return r.ensure(ctx, true)
	case err != nil:
		return r.State(), err
	case r.opts.Follow:
		// A follower hands out no positions: what it saw restores nothing.
	case s.LastPosition < issued:
		r.opts.Logger.Warn("the store's position counter went back; restoring it from memory",
			"event", r.event, "counter", s.LastPosition, "handed_out", issued)
		return r.ensure(ctx, true)
	case s.Restoring(r.opts.Now()) && s.RestoringUntil.UnixMilli() != r.joined.Load():
		return r.ensure(ctx, false)
	}
	r.observe(s)
	return s, nil
}

// Known reports whether the room has found its event's state in the store
// at least once. A follower that never has (the origin beside a gateway
// keeping its queue elsewhere, in memory or another Redis) knows nobody was
// admitted, rather than that nobody is.
func (r *Room) Known() bool { return r.known.Load() }

// ensure sets the state up in the store, or puts it back from what the
// room remembers. lost says the room found it lost: what it put back at
// an earlier restore may have gone too, even within that restore's window.
func (r *Room) ensure(ctx context.Context, lost bool) (State, error) {
	cur, d := r.State(), r.opts.Defaults
	if r.known.Load() {
		// What the room read from the store, even below the configured
		// one (staff lowered it): that is "used when the store has no
		// watermark yet" (docs/api.md §14), when no node remembers one.
		d.Watermark = cur.Watermark
	} else {
		d.WatermarkConfigured = true
	}
	d.LastPosition = max(d.LastPosition, cur.LastPosition, r.issued.Load(), r.shown.Load())
	if cur.SoldOut && (!d.SoldOut || d.SoldOutBy == ActorOrigin) {
		// Whose flag it was goes back with it: the origin's gives way
		// while held seats may come back, an operator's stands.
		d.SoldOutBy = cur.SoldOutBy
	}
	d.SoldOut = d.SoldOut || cur.SoldOut
	d.Paused = d.Paused || cur.Paused
	d.Restore = true
	if r.lot != nil {
		// A store that lost the state may have lost the seed too: put
		// back the one this node knows.
		r.lot.mu.Lock()
		r.lot.synced = false
		r.lot.mu.Unlock()
	}
	s, err := r.store.Ensure(ctx, r.event, d)
	if err != nil {
		return cur, err
	}
	r.synced.Store(true)
	if !s.Restoring(r.opts.Now()) {
		r.observe(s)
		return s, nil
	}
	joined := r.joined.Swap(s.RestoringUntil.UnixMilli()) == s.RestoringUntil.UnixMilli()
	if !joined {
		r.opts.Logger.Info("queue state being restored; new arrivals wait until every gateway added what it remembers",
			"event", r.event, "until", s.RestoringUntil, "watermark", s.Watermark, "last_position", s.LastPosition)
	}
	if !joined || lost {
		// The revocations went with the state: those this room remembers
		// go back, so a revoked visitor stays out of gateways that start
		// later too. A restore that ends when the one the room joined
		// did is not that one when the room found the state lost again
		// (at the same instant): what it wrote then went with it.
		if err := r.restoreRevocations(ctx); err != nil {
			r.opts.Logger.Warn("restoring revocations", "event", r.event, "error", err)
		}
		// So do the positions pre-queue tokens yielded: a token yields
		// the one it yielded before, never a second.
		if err := r.restorePreQueue(ctx); err != nil {
			r.opts.Logger.Warn("restoring pre-queue positions", "event", r.event, "error", err)
		}
	}
	r.observe(s)
	return s, nil
}

// Update changes the state in the store, so every node sees it, and in
// memory at once.
func (r *Room) Update(ctx context.Context, c Change) (State, error) {
	if _, err := r.Refresh(ctx); err != nil {
		return State{}, err
	}
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	s, err := r.store.Update(ctx, r.event, c)
	if err != nil {
		return State{}, err
	}
	r.observe(s)
	return s, nil
}

// Join hands out the next position. While the store's state is being
// restored it hands out none (ErrRestoring); when the store lost it
// (ErrNoState) it asks Run to restore it at once.
func (r *Room) Join(ctx context.Context) (int64, error) {
	return r.join(ctx, 0)
}

// join is Join; with d > 0, the store is a boundedPositions that bounds the
// wait by d itself.
func (r *Room) join(ctx context.Context, d time.Duration) (int64, error) {
	if r.State().Restoring(r.opts.Now()) {
		return 0, ErrRestoring
	}
	if r.lot != nil && !r.lot.closed.Load() {
		// Nobody queues before the entrants: the entries close (and their
		// positions are reserved) before the first position after them.
		if r.opts.Now().Before(r.lot.opening.At) {
			return 0, ErrNotOpen
		}
		if err := r.closeEntries(ctx); err != nil {
			r.wakeOn(err)
			return 0, err
		}
	}
	var pos int64
	var err error
	if d > 0 {
		pos, err = r.store.(boundedPositions).nextPositionWithin(ctx, r.event, d)
	} else {
		pos, err = r.store.NextPosition(ctx, r.event)
	}
	r.wakeOn(err)
	if err != nil {
		return 0, err
	}
	r.handedOut(pos)
	return pos, nil
}

// JoinAtHand hands out the next position as Join does when the store has
// one at hand: the memory store always, a Redis store from the block it
// leased. ok is false when it would have to call the store (or wait for
// a restore or an opening); Join does that. A caller saves what it sets
// up for a call that may wait, such as a timeout's timer: that was a
// twentieth of a leased arrival's time in the gateway (docs/scale.md).
func (r *Room) JoinAtHand() (pos int64, ok bool) {
	if r.lot != nil && !r.lot.closed.Load() {
		return 0, false
	}
	if r.State().Restoring(r.opts.Now()) {
		return 0, false
	}
	s, can := r.store.(positionsAtHand)
	if !can {
		return 0, false
	}
	if pos, ok = s.positionAtHand(r.event); !ok {
		return 0, false
	}
	r.handedOut(pos)
	return pos, true
}

// JoinWithin is Join bounded by d. A store that gathers the arrivals
// meeting its call bounds them together, one timer for the call's batch
// instead of one per arrival: that timer, registered with each request's
// context, was a fortieth of a new arrival's time in the gateway and a
// fifteenth of what it allocated (docs/scale.md).
func (r *Room) JoinWithin(ctx context.Context, d time.Duration) (int64, error) {
	_, gathers := r.store.(boundedPositions)
	// Closing a lottery's entries is bounded by the context alone.
	if !gathers || d <= 0 || (r.lot != nil && !r.lot.closed.Load()) {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return r.join(ctx, 0)
	}
	return r.join(ctx, d)
}

// boundedPositions is a store that bounds a wait for a position itself.
type boundedPositions interface {
	// nextPositionWithin is NextPosition, given up as unavailable after d
	// at most.
	nextPositionWithin(ctx context.Context, event int64, d time.Duration) (int64, error)
}

// positionsAtHand is a store that may hand out a position without a call.
type positionsAtHand interface {
	// positionAtHand is NextPosition when it can answer without waiting
	// on anything; ok is false otherwise.
	positionAtHand(event int64) (pos int64, ok bool)
}

// handedOut notes pos, just handed out.
func (r *Room) handedOut(pos int64) {
	raiseTo(&r.issued, pos)
	raiseTo(&r.handed, pos)
	// A position the watermark passed already is admitted from its
	// handout, now.
	r.window.observe(r.opts.Now(), r.State())
}

// with is s as State shows it after positions through handed were handed
// out: a read that only catches up with them changes nothing.
func (s State) with(handed int64) State {
	s.LastPosition = max(s.LastPosition, handed)
	return s
}

// wakeOn asks Run for a refresh now when err says the store lost the state.
func (r *Room) wakeOn(err error) {
	if errors.Is(err, ErrNoState) || errors.Is(err, ErrRestoring) {
		r.wakeUp()
	}
}

// wakeUp asks Run for a refresh now.
func (r *Room) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// EstimateWait is how long a visitor at position will likely wait, from the
// rate the watermark has actually been advancing. ok is false while no such
// rate is known: nothing admitted yet, or the event paused. A configured
// autopilot rate is not an observation: the autopilot may not be the one
// steering, and it stops when the event sells out.
func (r *Room) EstimateWait(position int64) (wait time.Duration, ok bool) {
	s := r.State()
	if s.Paused {
		// Even a place the watermark has passed waits for as long as the
		// pause lasts, which no rate tells.
		return 0, false
	}
	if position <= s.Watermark {
		return 0, true
	}
	// The positions still waiting ahead, and this one.
	ahead := r.Ahead(position) + 1
	perSecond := r.rate.perSecond()
	if perSecond <= 0 {
		return 0, false
	}
	return time.Duration(float64(ahead) / perSecond * float64(time.Second)), true
}

// Run keeps the room's state fresh until ctx ends: it follows the store's
// change notices (followNotices), polls as a safety net, and drives the
// autopilot.
func (r *Room) Run(ctx context.Context) {
	// Subscribed before the first read below, so a change made after that
	// read always comes with a notice, never only with the next poll.
	changed := r.store.Watch(ctx, r.event)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		r.followNotices(ctx, changed)
	}()
	defer func() { <-followed }()
	poll := time.NewTicker(r.opts.PollInterval)
	defer poll.Stop()
	var pilot <-chan time.Time
	switch {
	case r.opts.ClosedLoop != nil:
		t := time.NewTicker(r.opts.ClosedLoop.Interval)
		defer t.Stop()
		pilot = t.C
	case r.opts.Autopilot.Enabled():
		t := time.NewTicker(r.opts.Autopilot.Interval)
		defer t.Stop()
		pilot = t.C
	}
	// restored fires when a restore's window ends, so new arrivals are
	// taken again at once rather than at the next poll.
	restored := time.NewTimer(time.Hour)
	restored.Stop()
	defer restored.Stop()
	// opening fires at the scheduled opening, so the draw is made then
	// rather than at the next poll.
	opening := time.NewTimer(time.Hour)
	opening.Stop()
	defer opening.Stop()
	if r.lot != nil && !r.opts.Follow {
		opening.Reset(max(r.lot.opening.At.Sub(r.opts.Now()), 0))
	}
	failing := false
	refresh := func() {
		s, err := r.Refresh(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			failing = true
			r.opts.Logger.Warn("queue store unreachable; serving the last known state", "event", r.event, "error", err)
		case err == nil && failing:
			failing = false
			r.opts.Logger.Info("queue store reachable again", "event", r.event)
		}
		if now := r.opts.Now(); s.Restoring(now) {
			restored.Reset(s.RestoringUntil.Sub(now) + time.Millisecond)
		}
	}
	refresh()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
			refresh()
		case <-restored.C:
			refresh()
		case <-poll.C:
			refresh()
			if err := r.syncPresence(ctx); err != nil && ctx.Err() == nil {
				r.opts.Logger.Debug("presence of waiting positions not synced", "event", r.event, "error", err)
			}
			if !r.opts.Follow {
				r.openIfDue(ctx)
				if err := r.deriveHardCap(ctx); err != nil && ctx.Err() == nil {
					r.opts.Logger.Warn("hard cap not derived from the inventory", "event", r.event, "error", err)
				}
			}
		case <-opening.C:
			r.openIfDue(ctx)
		case <-pilot:
			steer := r.autopilot
			if r.opts.ClosedLoop != nil {
				steer = r.steerClosedLoop
			}
			if err := steer(ctx); err != nil && !errors.Is(err, context.Canceled) {
				r.opts.Logger.Warn("autopilot skipped a step", "event", r.event, "error", err)
			}
		}
	}
}

// followNotices reads the state at each of the store's change notices
// until ctx ends. It runs beside Run's loop rather than in it, so a raise
// reaches memory one read after its notice, never behind the autopilot's
// step, the poll's presence sync or the hard cap's derivation, each of
// them several round trips to the store. Notices that come during a read
// are taken together by the next one.
func (r *Room) followNotices(ctx context.Context, changed <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changed:
			if !ok {
				return
			}
			s, err := r.Refresh(ctx)
			if err != nil || s.Restoring(r.opts.Now()) {
				// The loop reports a store gone or back, and times the
				// restore's end.
				r.wakeUp()
			}
		}
	}
}

func (r *Room) autopilot(ctx context.Context) error {
	s, err := r.Refresh(ctx)
	if err != nil {
		return err
	}
	// Nobody left waiting, or only positions whose holders gave up
	// (abandon_after): nothing to admit.
	if s.SoldOut || s.Paused || s.Waiting() == 0 || r.Ahead(s.LastPosition+1) == 0 {
		return nil
	}
	// A lease slightly shorter than the interval: one raise per interval
	// across the fleet, and never a skipped one because of timer jitter.
	lead, err := r.store.Lead(ctx, r.event, "autopilot", r.opts.Autopilot.Interval*9/10)
	if err != nil || !lead {
		return err
	}
	step := min(r.opts.Autopilot.Step, s.Waiting())
	s, err = r.Update(ctx, Change{RaiseBy: step, Actor: ActorAutopilot,
		Reason: fmt.Sprintf("%d every %s while %d wait", r.opts.Autopilot.Step, r.opts.Autopilot.Interval, s.Waiting())})
	if err != nil {
		return err
	}
	r.opts.Logger.Info("autopilot raised the watermark", "event", r.event, "raise_by", step, "watermark", s.Watermark)
	return nil
}
