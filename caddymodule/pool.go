package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/exp/zapslog"

	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/waitroom"
)

// Stores and rooms outlive a config: `caddy reload` provisions the new config
// before the old one is cleaned up, so the new handlers take a reference to
// the same store (the memory store's positions and watermark, the Redis
// client) and the same room (its in-memory state and measured pace) and
// nothing is lost or reconnected. So do the join rate's counts, shared by
// every handler guarding the event at that rate.
var (
	stores   = caddy.NewUsagePool()
	rooms    = caddy.NewUsagePool()
	limiters = caddy.NewUsagePool()
)

// poolClock is the clock of the stores and rooms created from now on (the
// restore windows of lost state, the pace of the queue); tests replace it.
var poolClock = time.Now

// storeSpec says which store a handler uses; its key names the store in the
// pool.
type storeSpec struct {
	redisURL string // empty for the memory store
	lease    int64
}

const memoryStore = "memory"

// parseStoreSpec reads the store field, after placeholders were replaced:
// "memory" (or nothing) or a redis URL.
func parseStoreSpec(store string, lease int64) (storeSpec, error) {
	switch {
	case store == "" || store == memoryStore:
		return storeSpec{}, nil
	case strings.HasPrefix(store, "redis://"), strings.HasPrefix(store, "rediss://"), strings.HasPrefix(store, "unix://"):
		if err := redisurl.Check(store); err != nil {
			return storeSpec{}, fmt.Errorf("store: %w", err)
		}
		return storeSpec{redisURL: store, lease: max(lease, 1)}, nil
	default:
		// The value is not repeated: a Redis URL may carry a password.
		return storeSpec{}, fmt.Errorf("store: want %q or a redis://, rediss:// or unix:// URL", memoryStore)
	}
}

func (s storeSpec) key() string {
	if s.redisURL == "" {
		return memoryStore
	}
	return s.redisURL + " lease=" + strconv.FormatInt(s.lease, 10)
}

// storeEntry is a pooled store.
type storeEntry struct {
	store   waitroom.Store
	clients []redis.UniversalClient // none for the memory store
}

// Destruct closes the Redis clients once no config uses them.
func (e *storeEntry) Destruct() error {
	var errs []error
	for _, c := range e.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// acquireStore returns the pooled store for spec; release it with
// stores.Delete(spec.key()). It does no I/O: go-redis connects on first use.
func acquireStore(spec storeSpec) (*storeEntry, error) {
	v, _, err := stores.LoadOrNew(spec.key(), func() (caddy.Destructor, error) {
		if spec.redisURL == "" {
			return &storeEntry{store: waitroom.NewMemoryStore(nil)}, nil
		}
		// go-redis's own lines (failed dials, reconnects) go to Caddy's
		// current default logger, not past it to stderr.
		redis.SetLogger(redisurl.Logger{Log: roomLogger()})
		client, err := waitroom.NewRedisClient(spec.redisURL)
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		// The rooms' refreshes get connections the crowd's joins cannot
		// take (waitroom.RedisOptions.Control).
		control, err := waitroom.NewRedisClient(spec.redisURL)
		if err != nil {
			_ = client.Close()
			return nil, fmt.Errorf("store: %w", err)
		}
		return &storeEntry{
			store:   waitroom.NewRedisStore(client, waitroom.RedisOptions{Lease: spec.lease, Control: control, Now: poolClock}),
			clients: []redis.UniversalClient{client, control},
		}, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*storeEntry), nil
}

// roomKey names a room in the pool. Besides the store and the event it holds
// the room's configuration, so a reload that changes the hard cap or the
// autopilot gets a room built with the new values (which then writes them to
// the store), while a reload that leaves them alone keeps the running room.
type roomKey struct {
	Store     string
	Event     int64
	Watermark int64
	HardCap   int64
	// HardCapPerRemaining is hard_cap_per_remaining.
	HardCapPerRemaining float64
	PilotStep           int64
	PilotInterval       time.Duration
	// ClosedLoop is the closed-loop autopilot, zero for none.
	ClosedLoop waitroom.ClosedLoop
	// OpensAt (unix ns, 0 for none) and Seed (hex, as configured) are the
	// scheduled opening.
	OpensAt int64
	Seed    string
	// AbandonAfter is abandon_after.
	AbandonAfter time.Duration
	// AdmissionWindow is admission_window.
	AdmissionWindow time.Duration
}

// roomEntry is a pooled room and the goroutine that keeps it fresh.
type roomEntry struct {
	key   roomKey
	room  *waitroom.Room
	store *storeEntry
	// ready is closed after the room's first read of the store, successful
	// or not, once no restore of the state holds new arrivals back; until
	// then its state is only the configured defaults.
	ready <-chan struct{}
	// soldOutAtZero is the sold_out_at_zero of the config that last took
	// the room: the figures it reports count what its visitors were
	// answered.
	soldOutAtZero atomic.Bool
	cancel        context.CancelFunc
	done          chan struct{}
}

// Destruct stops the room's goroutine and lets go of its store.
func (e *roomEntry) Destruct() error {
	e.cancel()
	<-e.done
	_, err := stores.Delete(e.key.Store)
	return err
}

// roomLogger writes the room's own messages (store unreachable, autopilot
// steps) to Caddy's default logger: a room lives across configs, so it must
// not hold on to the logger of the config that happened to create it.
func roomLogger() *slog.Logger {
	return slog.New(zapslog.NewHandler(caddy.Log().Core(),
		zapslog.WithName("http.handlers.waitroom"),
		zapslog.AddStacktraceAt(slog.Level(127))))
}

// acquireRoom returns the pooled room for key, creating it (and starting the
// goroutine that follows the store) when no config has it yet. Release it
// with rooms.Delete(key).
func acquireRoom(key roomKey, spec storeSpec, seed []byte) (*roomEntry, error) {
	// Looked up before LoadOrNew, which holds the new entry's lock while
	// it constructs, and Range waits for every entry's.
	replaces := roomToReplace(key)
	v, _, err := rooms.LoadOrNew(key, func() (caddy.Destructor, error) {
		st, err := acquireStore(spec)
		if err != nil {
			return nil, err
		}
		opts := waitroom.RoomOptions{
			Defaults:        waitroom.Defaults{Watermark: key.Watermark, HardCap: key.HardCap, HardCapPerRemaining: key.HardCapPerRemaining},
			Autopilot:       waitroom.Autopilot{Step: key.PilotStep, Interval: key.PilotInterval},
			Now:             poolClock,
			Logger:          roomLogger(),
			AbandonAfter:    key.AbandonAfter,
			AdmissionWindow: key.AdmissionWindow,
			Replaces:        replaces,
		}
		if key.ClosedLoop != (waitroom.ClosedLoop{}) {
			c := key.ClosedLoop
			opts.ClosedLoop = &c
		}
		if key.OpensAt != 0 {
			opts.Opening = &waitroom.Opening{At: time.Unix(0, key.OpensAt).UTC(), Seed: seed}
		}
		room := waitroom.NewRoom(st.store, key.Event, opts)
		// The room's life is the pool entry's, not a config's: a config's
		// context ends at every reload.
		ctx, cancel := context.WithCancel(context.Background())
		e := &roomEntry{key: key, room: room, store: st, ready: room.Ready(), cancel: cancel, done: make(chan struct{})}
		// The ticks are taken here, in the provisioning config's goroutine,
		// not in the recorder's: tests swap reportTicks between loads.
		ticks, stopTicks := reportTicks()
		go func() {
			defer close(e.done)
			reported := make(chan struct{})
			go func() {
				defer close(reported)
				defer stopTicks()
				recordReport(ctx, e, opts.Now, ticks)
			}()
			defer func() { <-reported }()
			room.Run(ctx)
		}()
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*roomEntry), nil
}

// roomToReplace returns the room of key's store and event that a config
// being replaced uses under another key (its hard cap, autopilot or opening
// changed), or nil: the new room takes over what that one saw of the
// admission windows, so a place whose window ended is not admitted again
// after the reload, and its revocations, so a token revoked while the store
// was unreachable stays out and the store still learns it
// (waitroom.RoomOptions.Replaces).
func roomToReplace(key roomKey) *waitroom.Room {
	var found *waitroom.Room
	rooms.Range(func(k, v any) bool {
		e := v.(*roomEntry)
		if k != key && e.key.Store == key.Store && e.key.Event == key.Event {
			found = e.room
			return false
		}
		return true
	})
	return found
}

// eventRooms returns one room per event among those every loaded config
// uses, ordered by event id. Two configs being swapped may briefly hold two
// rooms of one event; they share a store, so either tells the same state.
func eventRooms() []*roomEntry {
	byEvent := map[int64]*roomEntry{}
	rooms.Range(func(_, v any) bool {
		e := v.(*roomEntry)
		if _, ok := byEvent[e.key.Event]; !ok {
			byEvent[e.key.Event] = e
		}
		return true
	})
	out := make([]*roomEntry, 0, len(byEvent))
	for _, e := range byEvent {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key.Event < out[j].key.Event })
	return out
}

// findRoom returns a room of event, or nil when no loaded config has one.
func findRoom(event int64) *roomEntry {
	var found *roomEntry
	rooms.Range(func(_, v any) bool {
		e := v.(*roomEntry)
		if e.key.Event == event {
			found = e
			return false
		}
		return true
	})
	return found
}
