package waitroom

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore shares positions and state between every gateway node and the
// origin through one Redis. Every key of an event carries the event's hash
// tag ({evt:42}), the same tag the inventory uses, so one event lives on one
// Redis Cluster slot.
type RedisStore struct {
	rdb   redis.UniversalClient
	lease int64
	node  string

	mu     sync.Mutex
	blocks map[int64]*block
}

// block is a run of positions leased from Redis and handed out locally.
type block struct{ next, last int64 }

// RedisOptions tunes a RedisStore.
type RedisOptions struct {
	// Lease is how many positions a node takes from Redis at once. 1 (the
	// default) is strict first-come-first-served across the fleet; a larger
	// block saves a round trip per arrival at the cost of ordering between
	// nodes being approximate within a block.
	Lease int64
	// Node names this process in leases; random when empty.
	Node string
}

// NewRedisStore wraps rdb. The client is the caller's to close.
func NewRedisStore(rdb redis.UniversalClient, opts RedisOptions) *RedisStore {
	if opts.Lease < 1 {
		opts.Lease = 1
	}
	if opts.Node == "" {
		opts.Node = NewVisitorID()
	}
	return &RedisStore{rdb: rdb, lease: opts.Lease, node: opts.Node, blocks: make(map[int64]*block)}
}

// NewRedisClient parses a redis:// URL and sets timeouts fit for a request
// path: a dead Redis costs a request about a second, never a hang.
func NewRedisClient(url string) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	if opts.DialTimeout == 5*time.Second || opts.DialTimeout == 0 {
		opts.DialTimeout = time.Second
	}
	if opts.ReadTimeout == 3*time.Second || opts.ReadTimeout == 0 {
		opts.ReadTimeout = time.Second
	}
	if opts.WriteTimeout == 3*time.Second || opts.WriteTimeout == 0 {
		opts.WriteTimeout = time.Second
	}
	opts.PoolTimeout = 2 * time.Second
	opts.MaxRetries = 1
	return redis.NewClient(opts), nil
}

// EventTag is the Redis Cluster hash tag shared by every key of an event.
func EventTag(event int64) string { return "{evt:" + strconv.FormatInt(event, 10) + "}" }

func stateKey(event int64) string     { return "waitroom:" + EventTag(event) + ":state" }
func positionsKey(event int64) string { return "waitroom:" + EventTag(event) + ":positions" }
func changedChannel(event int64) string {
	return "waitroom:" + EventTag(event) + ":changed"
}
func leaseKey(event int64, name string) string {
	return "waitroom:" + EventTag(event) + ":lease:" + name
}

//go:embed ensure.lua
var ensureLua string

var ensureScript = redis.NewScript(ensureLua)

const (
	fieldWatermark = "watermark"
	fieldHardCap   = "hard_cap"
	fieldSoldOut   = "sold_out"
	fieldPaused    = "paused"
)

func unavailable(op string, err error) error {
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
}

// NextPosition implements Store.
func (r *RedisStore) NextPosition(ctx context.Context, event int64) (int64, error) {
	if r.lease == 1 {
		pos, err := r.rdb.Incr(ctx, positionsKey(event)).Result()
		if err != nil {
			return 0, unavailable("next position", err)
		}
		return pos, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.blocks[event]
	if b == nil || b.next > b.last {
		last, err := r.rdb.IncrBy(ctx, positionsKey(event), r.lease).Result()
		if err != nil {
			return 0, unavailable("lease positions", err)
		}
		b = &block{next: last - r.lease + 1, last: last}
		r.blocks[event] = b
	}
	pos := b.next
	b.next++
	return pos, nil
}

// readState queues the reads of event's state on p.
func readState(ctx context.Context, p redis.Pipeliner, event int64) (*redis.SliceCmd, *redis.StringCmd) {
	return p.HMGet(ctx, stateKey(event), fieldWatermark, fieldHardCap, fieldSoldOut, fieldPaused),
		p.Get(ctx, positionsKey(event))
}

func decodeState(event int64, fields *redis.SliceCmd, last *redis.StringCmd) (State, error) {
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
		str, _ := v.(string)
		n, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return s, fmt.Errorf("state field %d: %w", i, err)
		}
		ints[i] = n
	}
	s.Watermark, s.HardCap, s.SoldOut, s.Paused = ints[0], ints[1], ints[2] != 0, ints[3] != 0
	s.LastPosition, err = last.Int64()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	if err == nil && vals[0] == nil {
		// Ensure always writes the watermark: without it the state is
		// missing or was lost.
		err = ErrNoState
	}
	return s, err
}

// State implements Store.
func (r *RedisStore) State(ctx context.Context, event int64) (State, error) {
	p := r.rdb.Pipeline()
	fields, last := readState(ctx, p, event)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return State{}, unavailable("read state", err)
	}
	s, err := decodeState(event, fields, last)
	if errors.Is(err, ErrNoState) {
		return s, err
	}
	if err != nil {
		return State{}, unavailable("read state", err)
	}
	return s, nil
}

// Ensure implements Store.
func (r *RedisStore) Ensure(ctx context.Context, event int64, d Defaults) (State, error) {
	if err := d.validate(); err != nil {
		return State{}, err
	}
	return r.apply(ctx, event, "ensure state", func(p redis.Pipeliner) {
		// EVAL rather than EVALSHA: inside MULTI a missing script can't be
		// retried, and Ensure is rare.
		ensureScript.Eval(ctx, p, []string{stateKey(event), positionsKey(event)},
			d.Watermark, d.HardCap, boolInt(d.SoldOut), boolInt(d.Paused), d.LastPosition)
	})
}

// Update implements Store.
func (r *RedisStore) Update(ctx context.Context, event int64, c Change) (State, error) {
	if err := c.validate(); err != nil {
		return State{}, err
	}
	key := stateKey(event)
	var incr *redis.IntCmd
	s, err := r.apply(ctx, event, "update state", func(p redis.Pipeliner) {
		if c.SetWatermark != nil {
			p.HSet(ctx, key, fieldWatermark, *c.SetWatermark)
		}
		if c.RaiseBy != 0 {
			incr = p.HIncrBy(ctx, key, fieldWatermark, c.RaiseBy)
		}
		if c.SoldOut != nil {
			p.HSet(ctx, key, fieldSoldOut, boolInt(*c.SoldOut))
		}
		if c.Paused != nil {
			p.HSet(ctx, key, fieldPaused, boolInt(*c.Paused))
		}
		if c.HardCap != nil {
			p.HSet(ctx, key, fieldHardCap, *c.HardCap)
		}
	})
	// HINCRBY refuses to overflow and leaves the watermark alone; it is
	// the only write of a change that can fail on its value.
	if err != nil && incr != nil && isOverflow(incr.Err()) {
		return State{}, fmt.Errorf("update state: %w: %w", ErrOverflow, incr.Err())
	}
	return s, err
}

// isOverflow tells Redis's answer to an increment past the int64 range.
func isOverflow(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.Contains(rerr.Error(), "overflow")
}

// apply runs writes, the state read and the change notice in one MULTI, so
// the state returned is exactly the one the writes produced.
func (r *RedisStore) apply(ctx context.Context, event int64, op string, writes func(redis.Pipeliner)) (State, error) {
	var fields *redis.SliceCmd
	var last *redis.StringCmd
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		writes(p)
		fields, last = readState(ctx, p, event)
		p.Publish(ctx, changedChannel(event), r.node)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return State{}, unavailable(op, err)
	}
	s, err := decodeState(event, fields, last)
	if errors.Is(err, ErrNoState) {
		// Changes that don't set the watermark (sold out from the origin)
		// can come before any gateway set the event up.
		return s, nil
	}
	if err != nil {
		return State{}, unavailable(op, err)
	}
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
// watcher's polling.
func (r *RedisStore) Watch(ctx context.Context, event int64) <-chan struct{} {
	out := make(chan struct{}, 1)
	ps := r.rdb.Subscribe(ctx, changedChannel(event))
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
	ok, err := r.rdb.SetNX(ctx, leaseKey(event, name), r.node, ttl).Result()
	if err != nil {
		return false, unavailable("lease "+name, err)
	}
	return ok, nil
}

var _ Store = (*RedisStore)(nil)
