package waitroom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/waitroom/lottery"
)

// A scheduled opening: before Opening.At, arrivals enter a pre-queue (they
// are registered by their token's subject and get a token without a
// position); at Opening.At the entries close, positions after every one
// handed out so far are reserved for the entrants, and one node of the
// fleet draws who gets which with the lottery package, seeded by a seed
// whose SHA-256 was published before the opening. Later arrivals queue
// after the entrants.

// DefaultLotteryRetention is how long after the opening the lottery's
// records (seed, entrants, drawn positions) are kept in the store: entrants
// who come back late still find their place, auditors the draw.
const DefaultLotteryRetention = 7 * 24 * time.Hour

// drawLease is how long the node that draws holds the draw: should it die
// half way, another node draws again (the same draw) after it.
const drawLease = 30 * time.Second

// Errors of the pre-queue.
var (
	// ErrNotOpen is returned by Join before the opening: arrivals enter the
	// pre-queue instead.
	ErrNotOpen = errors.New("the queue opens later")
	// ErrDrawing is returned while the draw is under way: try again in a
	// moment.
	ErrDrawing = errors.New("the opening's draw is under way")
	// ErrNotEntrant is returned by DrawnPosition for a subject that was not
	// in the draw.
	ErrNotEntrant = errors.New("not an entrant of the draw")
	// ErrNoOpening is returned for an event without a scheduled opening.
	ErrNoOpening = errors.New("no scheduled opening")
)

// Opening configures a scheduled opening.
type Opening struct {
	// At is when the queue opens. Required.
	At time.Time
	// Seed is the lottery's seed; a random one (crypto/rand) when nil. The
	// first seed a store keeps for the event is the one every node uses.
	Seed []byte
	// Retention is how long the records live after At; default
	// DefaultLotteryRetention.
	Retention time.Duration
}

// roomLottery is a room's side of the opening.
type roomLottery struct {
	opening Opening
	store   LotteryStore
	until   time.Time

	mu sync.Mutex
	// seed is the seed the store kept (the fleet's), once synced.
	seed           []byte
	synced         bool
	configuredSeed bool
	// reserved is what closing the entries fixed, once closed.
	reserved Closed
	closed   atomic.Bool
	drawn    atomic.Bool
	// drawing makes this node's callers wait for its own draw rather than
	// be told ErrDrawing; other nodes' callers wait for the store.
	drawing sync.Mutex
}

func newRoomLottery(store Store, o Opening) (*roomLottery, error) {
	ls, ok := store.(LotteryStore)
	if !ok {
		return nil, fmt.Errorf("store %T keeps no lottery", store)
	}
	if o.Retention <= 0 {
		o.Retention = DefaultLotteryRetention
	}
	configured := o.Seed != nil
	if !configured {
		o.Seed = lottery.NewSeed()
	}
	return &roomLottery{opening: o, store: ls, until: o.At.Add(o.Retention), seed: o.Seed, configuredSeed: configured}, nil
}

// Opening reports the room's scheduled opening, if any.
func (r *Room) Opening() (Opening, bool) {
	if r.lot == nil {
		return Opening{}, false
	}
	return r.lot.opening, true
}

// PreQueue reports whether arrivals enter the pre-queue now: the event has
// an opening that has not come yet.
func (r *Room) PreQueue() bool {
	return r.lot != nil && r.opts.Now().Before(r.lot.opening.At) && !r.lot.closed.Load()
}

// syncSeed makes the room use the seed the store keeps, writing its own
// first when the store has none.
func (r *Room) syncSeed(ctx context.Context) ([]byte, error) {
	l := r.lot
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.synced {
		return l.seed, nil
	}
	kept, err := l.store.EnsureSeed(ctx, r.event, l.seed, l.until)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(kept, l.seed) && l.configuredSeed {
		// A random seed that lost to another node's is no news; a
		// configured one is.
		r.opts.Logger.Warn("the store keeps another lottery seed for the event than the configured one; using the store's, whose commitment is published",
			"event", r.event)
	}
	l.seed, l.synced = kept, true
	return kept, nil
}

// Commitment is the hex SHA-256 of the fleet's seed.
func (r *Room) Commitment(ctx context.Context) (string, error) {
	if r.lot == nil {
		return "", ErrNoOpening
	}
	seed, err := r.syncSeed(ctx)
	if err != nil {
		return "", err
	}
	return lottery.Commitment(seed), nil
}

// Enter registers subject in the pre-queue. ErrEntriesClosed means the
// opening came (by another node's clock, perhaps): join instead.
func (r *Room) Enter(ctx context.Context, subject string) error {
	if r.lot == nil {
		return ErrNoOpening
	}
	if _, err := r.syncSeed(ctx); err != nil {
		return err
	}
	err := r.lot.store.Enter(ctx, r.event, subject, r.lot.until)
	if errors.Is(err, ErrEntriesClosed) {
		r.lot.closed.Store(true)
	}
	return err
}

// restoreClock is a store that can lose the event's state, pre-queue
// entrants included (Redis): it tells when the latest restore of the
// state it read ended (zero when it read none).
type restoreClock interface {
	lastRestore(event int64) time.Time
}

// EnterAgain registers subject in the pre-queue again when its token,
// issued at issuedAt, may have entered before the store lost the event's
// state: the entrants went with it, and only the entrant's next poll can
// put it back. again reports that it did, so the caller issues the token
// anew (a later poll then costs no store call). Without a scheduled
// opening, before the state's latest restore or once the entries closed,
// it does nothing.
func (r *Room) EnterAgain(ctx context.Context, subject string, issuedAt time.Time) (again bool, err error) {
	if r.lot == nil || r.lot.closed.Load() {
		return false, nil
	}
	rc, ok := r.store.(restoreClock)
	if !ok {
		return false, nil
	}
	// Tokens carry whole seconds, rounded down: one from before the
	// restore's end is always before it (one from just after it, in the
	// same second, enters again too, which changes nothing).
	if restored := rc.lastRestore(r.event); restored.IsZero() || !issuedAt.Before(restored) {
		return false, nil
	}
	if err := r.Enter(ctx, subject); err != nil {
		if errors.Is(err, ErrEntriesClosed) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// closeEntries closes the entries once the opening has come, or learns that
// another node did.
func (r *Room) closeEntries(ctx context.Context) error {
	l := r.lot
	if l.closed.Load() {
		return nil
	}
	if _, err := r.syncSeed(ctx); err != nil {
		return err
	}
	c, err := l.store.CloseEntries(ctx, r.event, l.until)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.reserved = c
	l.mu.Unlock()
	l.closed.Store(true)
	raiseTo(&r.issued, c.Base+c.Count)
	// The entrants' positions are handed out now: those the watermark
	// passed already are admitted from the opening, not from before it.
	s := r.State()
	s.LastPosition = max(s.LastPosition, c.Base+c.Count)
	r.window.observe(r.opts.Now(), s)
	r.opts.Logger.Info("pre-queue closed", "event", r.event, "entrants", c.Count, "after_position", c.Base)
	return nil
}

// open closes the entries and, if nobody has yet and this node holds the
// draw's lease, draws and stores every entrant's position. Safe to call
// again and from any node: the draw is a function of the seed, the
// entrants and the base, so a draw made twice is the same draw.
func (r *Room) open(ctx context.Context) error {
	l := r.lot
	if l.drawn.Load() {
		return nil
	}
	l.drawing.Lock()
	defer l.drawing.Unlock()
	if l.drawn.Load() {
		return nil
	}
	if err := r.closeEntries(ctx); err != nil {
		return err
	}
	rec, err := l.store.Lottery(ctx, r.event)
	if err != nil {
		return err
	}
	if rec.Drawn {
		l.drawn.Store(true)
		return nil
	}
	lead, err := r.store.Lead(ctx, r.event, "draw", drawLease)
	if err != nil {
		return err
	}
	if !lead {
		return ErrDrawing
	}
	entrants, err := l.store.Entrants(ctx, r.event)
	if err != nil {
		return err
	}
	seed := l.seed
	if rec.Seed != nil {
		seed = rec.Seed
	}
	start := time.Now()
	positions := lottery.Positions(seed, entrants, rec.Reserved.Base)
	if err := l.store.SaveDraw(ctx, r.event, positions, l.until); err != nil {
		return err
	}
	l.drawn.Store(true)
	r.opts.Logger.Info("pre-queue drawn", "event", r.event, "entrants", len(entrants),
		"first_position", rec.Reserved.Base+1, "took", time.Since(start))
	return nil
}

// openIfDue opens the queue when the opening has come and it is not drawn
// yet; the room's loop calls it.
func (r *Room) openIfDue(ctx context.Context) {
	if r.lot == nil || r.lot.drawn.Load() || r.opts.Now().Before(r.lot.opening.At) {
		return
	}
	if err := r.open(ctx); err != nil && !errors.Is(err, ErrDrawing) && ctx.Err() == nil {
		r.opts.Logger.Warn("opening the queue failed; trying again", "event", r.event, "error", err)
	}
}

// DrawnPosition is the position the draw gave subject. ErrDrawing while
// the draw is under way; ErrNotEntrant when subject was not in it.
func (r *Room) DrawnPosition(ctx context.Context, subject string) (int64, error) {
	if r.lot == nil {
		return 0, ErrNoOpening
	}
	if r.opts.Now().Before(r.lot.opening.At) && !r.lot.closed.Load() {
		return 0, ErrNotOpen
	}
	if err := r.open(ctx); err != nil {
		return 0, err
	}
	pos, ok, err := r.lot.store.DrawnPosition(ctx, r.event, subject)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, ErrNotEntrant
	}
	raiseTo(&r.issued, pos)
	return pos, nil
}

// LotteryView is the lottery as the admin API shows it: before the draw
// only the commitment; after it the seed and the entrants too.
type LotteryView struct {
	OpensAt    time.Time
	Commitment string
	Drawn      bool
	Published  lottery.Published
}

// Lottery reads the event's lottery from the store.
func (r *Room) Lottery(ctx context.Context) (LotteryView, error) {
	if r.lot == nil {
		return LotteryView{}, ErrNoOpening
	}
	seed, err := r.syncSeed(ctx)
	if err != nil {
		return LotteryView{}, err
	}
	rec, err := r.lot.store.Lottery(ctx, r.event)
	if err != nil {
		return LotteryView{}, err
	}
	if rec.Seed != nil {
		seed = rec.Seed
	}
	v := LotteryView{OpensAt: r.lot.opening.At, Commitment: lottery.Commitment(seed), Drawn: rec.Drawn}
	if !rec.Drawn {
		return v, nil
	}
	entrants, err := r.lot.store.Entrants(ctx, r.event)
	if err != nil {
		return LotteryView{}, err
	}
	v.Published = lottery.Published{
		Event:      r.event,
		OpensAt:    r.lot.opening.At.UTC().Format(time.RFC3339Nano),
		Commitment: v.Commitment,
		Seed:       fmt.Sprintf("%x", seed),
		Entrants:   lottery.Sorted(entrants),
		Algorithm:  lottery.Algorithm,
		Base:       rec.Reserved.Base,
	}
	if v.Published.Entrants == nil {
		v.Published.Entrants = []string{}
	}
	return v, nil
}
