package waitroom

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/internal/redisurl"
)

// RedisStore shares positions and state between every gateway node and the
// origin through one Redis. Every key of an event carries the event's hash
// tag (package hashtag), as every key of the inventory does, so one event lives on one
// Redis Cluster slot.
type RedisStore struct {
	rdb redis.UniversalClient
	// ctl carries the rooms' own reads and writes of the state (and its
	// change log), the change notices and leases (RedisOptions.Control).
	ctl     redis.UniversalClient
	lease   int64
	node    string
	restore time.Duration
	now     func() time.Time

	mu     sync.Mutex
	events map[int64]*redisEvent
}

// redisEvent is what a node keeps of one event's positions.
type redisEvent struct {
	// next..last is the block of leased positions not handed out yet.
	next, last int64
	// high is the highest counter value this node has had from Redis,
	// taken or read, or a token it was shown proves: a counter found
	// below it was lost, and is put back above it.
	high int64
	// taking is set while a take for arrivals without a lease is in
	// flight; the arrivals that come meanwhile gather in gathering, and
	// the next take gives them all their positions at once.
	taking    bool
	gathering *positionBatch
	// restored is the end (unix ms) of the latest restore of the state
	// this node read: what the store lost before it (the pre-queue's
	// entrants) was put back only by those who remembered it.
	restored int64
}

// RedisOptions tunes a RedisStore.
type RedisOptions struct {
	// Lease is how many positions a node takes from Redis at once. 1 (the
	// default) is strict first-come-first-served across the fleet: an
	// arrival is given a position above every one handed out before it
	// asked. The arrivals that meet on a node while its take is in flight
	// share the next take, in the order they came, so a crowd costs a
	// round trip per batch, not per arrival. A larger block saves the
	// round trip even when arrivals come one at a time, at the cost of
	// ordering between nodes being approximate within a block.
	Lease int64
	// Node names this process in leases; random when empty.
	Node string
	// RestoreWindow is how long a restore of lost state holds new
	// positions back (Defaults.Restore). Default: DefaultRestoreWindow.
	RestoreWindow time.Duration
	// Control, when set, is a client of the same Redis with connections
	// of its own for the state's reads and writes, the change notices and
	// the leases: under a crowd the request path's joins can hold every
	// connection of the main client's pool, and a room's refresh would
	// queue behind them (seconds on a starved machine) before it learns a
	// raise. The client is the caller's to close. Nil: the main client.
	Control redis.UniversalClient
	// Now is the clock of restore windows; time.Now when nil. Every node
	// compares its own clock with the window's end, so clocks should agree
	// to well within the window.
	Now func() time.Time
}

// NewRedisStore wraps rdb. The client is the caller's to close.
func NewRedisStore(rdb redis.UniversalClient, opts RedisOptions) *RedisStore {
	if opts.Lease < 1 {
		opts.Lease = 1
	}
	if opts.Node == "" {
		opts.Node = NewVisitorID()
	}
	if opts.RestoreWindow <= 0 {
		opts.RestoreWindow = DefaultRestoreWindow
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Control == nil {
		opts.Control = rdb
	}
	return &RedisStore{rdb: rdb, ctl: opts.Control, lease: opts.Lease, node: opts.Node, restore: opts.RestoreWindow,
		now: opts.Now, events: make(map[int64]*redisEvent)}
}

// NewRedisClient makes the client of a Redis URL (internal/redisurl: one
// server, or Redis Cluster for the cluster form) with timeouts fit for a
// request path unless the URL sets its own: a dead Redis costs a request
// about a second, never a hang.
func NewRedisClient(url string) (redis.UniversalClient, error) {
	return redisurl.New(url, redisurl.Defaults{
		DialTimeout:  time.Second,
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
		PoolTimeout:  2 * time.Second,
		MaxRetries:   1,
	})
}

func stateKey(event int64) string     { return "waitroom:" + hashtag.Event(event) + ":state" }
func positionsKey(event int64) string { return "waitroom:" + hashtag.Event(event) + ":positions" }
func changedChannel(event int64) string {
	return "waitroom:" + hashtag.Event(event) + ":changed"
}
func logKey(event int64) string { return "waitroom:" + hashtag.Event(event) + ":log" }
func leaseKey(event int64, name string) string {
	return "waitroom:" + hashtag.Event(event) + ":lease:" + name
}

//go:embed ensure.lua
var ensureLua string

var ensureScript = redis.NewScript(ensureLua)

const (
	fieldWatermark = "watermark"
	fieldHardCap   = "hard_cap"
	fieldSoldOut   = "sold_out"
	// fieldSoldOutBy is State.SoldOutBy.
	fieldSoldOutBy    = "sold_out_by"
	fieldPaused       = "paused"
	fieldRestoreUntil = "restore_until"
	// fieldHardCapK is State.HardCapPerRemaining.
	fieldHardCapK = "hard_cap_k"
	// fieldWatermarkConfigured marks, with the restore's end, a watermark
	// a restore took from the configuration (ensure.lua): the first node
	// that remembers one replaces it. A write of the watermark ends it.
	fieldWatermarkConfigured = "watermark_configured"
	// fieldHardCapLive is set once the hard cap was changed live: Ensure
	// then leaves it alone (ensure.lua).
	fieldHardCapLive = "hard_cap_live"
)

func unavailable(op string, err error) error {
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
}

func (r *RedisStore) event(id int64) *redisEvent {
	e, ok := r.events[id]
	if !ok {
		e = &redisEvent{}
		r.events[id] = e
	}
	return e
}

// stateFields are the state's fields, in the order decodeState reads them.
var stateFields = []string{fieldWatermark, fieldHardCap, fieldSoldOut, fieldPaused, fieldRestoreUntil, fieldHardCapK, fieldSoldOutBy}

// readState queues the reads of event's state on p.
func readState(ctx context.Context, p redis.Pipeliner, event int64) (*redis.SliceCmd, *redis.StringCmd) {
	return p.HMGet(ctx, stateKey(event), stateFields...),
		p.Get(ctx, positionsKey(event))
}

// decodeState reads the state queued by readState. high is what this node
// had taken from the counter before the read was sent: positions it takes
// while the read is in flight may be above the counter the read returns,
// and would look like a counter gone back.
func (r *RedisStore) decodeState(event int64, fields *redis.SliceCmd, last *redis.StringCmd, high int64) (State, error) {
	s := State{Event: event}
	vals, err := fields.Result()
	if err != nil {
		return s, err
	}
	ints := make([]int64, len(vals))
	for i, v := range vals {
		if v == nil {
			continue
		}
		if i == 6 {
			s.SoldOutBy, _ = v.(string)
			continue
		}
		if i == 5 {
			k, err := strconv.ParseFloat(v.(string), 64)
			if err != nil {
				return s, fmt.Errorf("state field %s: %w", fieldHardCapK, err)
			}
			s.HardCapPerRemaining = k
			continue
		}
		str, _ := v.(string)
		n, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return s, fmt.Errorf("state field %d: %w", i, err)
		}
		ints[i] = n
	}
	s.Watermark, s.HardCap, s.SoldOut, s.Paused = ints[0], ints[1], ints[2] != 0, ints[3] != 0
	if !s.SoldOut {
		s.SoldOutBy = ""
	}
	if until := time.UnixMilli(ints[4]); r.now().Before(until) {
		s.RestoringUntil = until
	}
	if ints[4] > 0 {
		r.mu.Lock()
		e := r.event(event)
		e.restored = max(e.restored, ints[4])
		r.mu.Unlock()
	}
	s.LastPosition, err = last.Int64()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	switch {
	case err != nil:
	case vals[0] == nil:
		// Ensure always writes the watermark: without it the state is
		// missing or was lost.
		err = ErrNoState
	case s.LastPosition < high:
		err = fmt.Errorf("%w: the position counter is at %d, below %d this node knows was handed out", ErrNoState, s.LastPosition, high)
	}
	return s, err
}

// State implements Store.
func (r *RedisStore) State(ctx context.Context, event int64) (State, error) {
	p := r.ctl.Pipeline()
	fields, last := readState(ctx, p, event)
	high := r.high(event)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return State{}, unavailable("read state", err)
	}
	s, err := r.decodeState(event, fields, last, high)
	if errors.Is(err, ErrNoState) {
		return s, err
	}
	if err != nil {
		return State{}, unavailable("read state", err)
	}
	r.read(event, s.LastPosition)
	return s, nil
}

// read raises the floor of event's takes to a counter value this node
// read: the counter never goes back but by a loss (a failover to a replica
// that missed the last increments, a restart from a snapshot), and a node
// that took no position above it would otherwise hand out again the ones
// the other nodes took.
func (r *RedisStore) read(event, last int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.event(event)
	e.high = max(e.high, last)
}

// raiseFloor implements positionFloor: the next take, or read of the
// state, that finds the counter below pos finds it lost, and the room puts
// it back above pos before a position is handed out again. A counter at or
// above it is not touched: another node's take may be all pos shows.
func (r *RedisStore) raiseFloor(event, pos int64) { r.read(event, pos) }

// lastRestore implements restoreClock.
func (r *RedisStore) lastRestore(event int64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ms := r.event(event).restored; ms > 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// Ensure implements Store.
func (r *RedisStore) Ensure(ctx context.Context, event int64, d Defaults) (State, error) {
	if err := d.validate(); err != nil {
		return State{}, err
	}
	// What this node took from the counter is something it remembers too.
	d.LastPosition = max(d.LastPosition, r.high(event))
	return r.apply(ctx, event, "ensure state", func(p redis.Pipeliner) {
		// EVAL rather than EVALSHA: inside MULTI a missing script can't be
		// retried, and Ensure is rare.
		ensureScript.Eval(ctx, p, []string{stateKey(event), positionsKey(event)},
			d.Watermark, d.HardCap, boolInt(d.SoldOut), boolInt(d.Paused), d.LastPosition,
			boolInt(d.Restore), r.now().UnixMilli(), r.restore.Milliseconds(),
			strconv.FormatFloat(d.HardCapPerRemaining, 'g', -1, 64), d.SoldOutBy, boolInt(d.WatermarkConfigured))
	})
}

// Update implements Store.
func (r *RedisStore) Update(ctx context.Context, event int64, c Change) (State, error) {
	if err := c.validate(); err != nil {
		return State{}, err
	}
	key := stateKey(event)
	var incr *redis.IntCmd
	var beforeFields *redis.SliceCmd
	s, err := r.applyIf(ctx, event, c.IfWatermark, func(p redis.Pipeliner) {
		// The fields the writes start from, in the same MULTI, for the
		// log. HMGET never answers redis.Nil, which would hide a write's
		// error in MULTI's answer.
		beforeFields = p.HMGet(ctx, key, stateFields...)
		if c.SetWatermark != nil {
			p.HSet(ctx, key, fieldWatermark, *c.SetWatermark)
		}
		if c.RaiseBy != 0 {
			incr = p.HIncrBy(ctx, key, fieldWatermark, c.RaiseBy)
		}
		if c.SetWatermark != nil || c.RaiseBy != 0 {
			p.HDel(ctx, key, fieldWatermarkConfigured)
		}
		switch {
		case c.SoldOut == nil:
		case *c.SoldOut:
			p.HSet(ctx, key, fieldSoldOut, 1, fieldSoldOutBy, c.Actor)
		default:
			p.HSet(ctx, key, fieldSoldOut, 0)
			p.HDel(ctx, key, fieldSoldOutBy)
		}
		if c.Paused != nil {
			p.HSet(ctx, key, fieldPaused, boolInt(*c.Paused))
		}
		if c.HardCap != nil {
			p.HSet(ctx, key, fieldHardCap, *c.HardCap, fieldHardCapK, 0, fieldHardCapLive, 1)
		}
		if c.HardCapPerRemaining != nil {
			p.HSet(ctx, key, fieldHardCapK, strconv.FormatFloat(*c.HardCapPerRemaining, 'g', -1, 64), fieldHardCapLive, 1)
		}
	})
	if errors.Is(err, ErrWatermarkMoved) {
		return State{}, err
	}
	// HINCRBY refuses to overflow and leaves the watermark alone; it is
	// the only write of a change that can fail on its value. Asked of the
	// command itself: MULTI's answer may be an earlier read's redis.Nil.
	if incr != nil && isOverflow(incr.Err()) {
		return State{}, fmt.Errorf("update state: %w: %w", ErrOverflow, incr.Err())
	}
	if err != nil {
		return s, err
	}
	before, _ := r.decodeState(event, beforeFields, redis.NewStringResult("0", nil), 0)
	if entries := logEntries(c, before, s, r.now()); len(entries) > 0 {
		// After the change rather than in its MULTI: a log entry lost to a
		// crash in between is the price of not scripting every change.
		vals := make([]any, len(entries))
		for i, e := range entries {
			b, err := json.Marshal(e)
			if err != nil {
				return s, fmt.Errorf("update state: log entry: %w", err)
			}
			vals[i] = b
		}
		p := r.ctl.Pipeline()
		p.LPush(ctx, logKey(event), vals...)
		p.LTrim(ctx, logKey(event), 0, MaxLogEntries-1)
		if _, err := p.Exec(ctx); err != nil {
			return s, unavailable("update state: log", err)
		}
	}
	return s, nil
}

// ChangeLog implements ChangeLogStore.
func (r *RedisStore) ChangeLog(ctx context.Context, event int64, limit int) ([]LogEntry, error) {
	raw, err := r.rdb.LRange(ctx, logKey(event), 0, int64(limit)-1).Result()
	if err != nil {
		return nil, unavailable("change log", err)
	}
	out := make([]LogEntry, 0, len(raw))
	for _, s := range raw {
		var e LogEntry
		if err := json.Unmarshal([]byte(s), &e); err != nil {
			return nil, fmt.Errorf("change log: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}

// isOverflow tells Redis's answer to an increment past the int64 range.
func isOverflow(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.Contains(rerr.Error(), "overflow")
}

// apply runs writes, the state read and the change notice in one MULTI, so
// the state returned is exactly the one the writes produced.
func (r *RedisStore) apply(ctx context.Context, event int64, op string, writes func(redis.Pipeliner)) (State, error) {
	return r.applyIn(ctx, r.ctl, event, op, writes)
}

// txPipeliner runs commands in MULTI: the client itself, or a transaction
// under WATCH.
type txPipeliner interface {
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// maxWatchTries bounds how often applyIf starts again after the state
// changed between its read and its writes.
const maxWatchTries = 10

// applyIf is apply of an update, while the watermark is want when want is
// given (Change.IfWatermark): the state is WATCHed from the read of the
// watermark to the writes, so a change made in between fails the writes,
// which start again from a new read.
func (r *RedisStore) applyIf(ctx context.Context, event int64, want *int64, writes func(redis.Pipeliner)) (State, error) {
	const op = "update state"
	if want == nil {
		return r.apply(ctx, event, op, writes)
	}
	key := stateKey(event)
	for range maxWatchTries {
		var s State
		err := r.ctl.Watch(ctx, func(tx *redis.Tx) error {
			w, err := tx.HGet(ctx, key, fieldWatermark).Int64()
			if errors.Is(err, redis.Nil) {
				w, err = 0, nil
			}
			if err != nil {
				return unavailable(op, err)
			}
			if w != *want {
				return fmt.Errorf("%s: %w: it is %d, not %d", op, ErrWatermarkMoved, w, *want)
			}
			s, err = r.applyIn(ctx, tx, event, op, writes)
			return err
		}, key)
		if !errors.Is(err, redis.TxFailedErr) {
			if err != nil && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrWatermarkMoved) {
				err = unavailable(op, err)
			}
			return s, err
		}
	}
	return State{}, unavailable(op, fmt.Errorf("the state kept changing under %d tries", maxWatchTries))
}

// applyIn is apply, its MULTI run by tx.
func (r *RedisStore) applyIn(ctx context.Context, tx txPipeliner, event int64, op string, writes func(redis.Pipeliner)) (State, error) {
	var fields *redis.SliceCmd
	var last *redis.StringCmd
	high := r.high(event)
	_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
		writes(p)
		fields, last = readState(ctx, p, event)
		p.Publish(ctx, changedChannel(event), r.node)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return State{}, unavailable(op, err)
	}
	s, err := r.decodeState(event, fields, last, high)
	if errors.Is(err, ErrNoState) {
		// Changes that don't set the watermark (sold out from the origin)
		// can come before any gateway set the event up.
		return s, nil
	}
	if err != nil {
		return State{}, unavailable(op, err)
	}
	r.read(event, s.LastPosition)
	return s, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Watch implements Store with Redis pub/sub; go-redis resubscribes by itself
// after a lost connection, and what is published meanwhile is caught by the
// watcher's polling. It returns once Redis has confirmed the subscription
// (or a second has passed): go-redis only sends SUBSCRIBE, and a change
// published before Redis reads it would reach this node at its next poll.
func (r *RedisStore) Watch(ctx context.Context, event int64) <-chan struct{} {
	out := make(chan struct{}, 1)
	ps := r.ctl.Subscribe(ctx, changedChannel(event))
	// The confirmation is the connection's first message; on a timeout
	// the channel below skips it when it comes.
	_, _ = ps.ReceiveTimeout(ctx, time.Second)
	go func() {
		defer ps.Close()
		msgs := ps.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-msgs:
				if !ok {
					return
				}
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out
}

// Lead implements Store with SET NX PX: whoever sets the key first holds the
// lease until it expires.
func (r *RedisStore) Lead(ctx context.Context, event int64, name string, ttl time.Duration) (bool, error) {
	ok, err := r.ctl.SetNX(ctx, leaseKey(event, name), r.node, ttl).Result()
	if err != nil {
		return false, unavailable("lease "+name, err)
	}
	return ok, nil
}

var (
	_ Store          = (*RedisStore)(nil)
	_ ChangeLogStore = (*RedisStore)(nil)
	_ positionFloor  = (*RedisStore)(nil)
)
