package origin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seats"
	"github.com/waitroom/waitroom/waitroom"
)

// The origin publishes, per event, what it knows of the seats and of its
// own health in the gateways' store (waitroom.Inventory): the gateways'
// closed-loop autopilot admits by it and the staff console shows it. The
// figures are read often and written when they change, and at least every
// publishMaxAge, so a gateway can tell a silent origin by their age. Every
// origin node publishes: the seat figures come from the shared Redis and
// PostgreSQL, the health is the publishing node's own.

// publishCheck is how often the figures are read; publishMaxAge how long
// unchanged figures go unpublished.
const (
	publishCheck  = 250 * time.Millisecond
	publishMaxAge = time.Second
)

// countPace paces the ledger's counts of an event's holds, which read every
// live hold: a count that took d is made again d×countPace later, so counts
// take about a twentieth of the time however many holds are live (a big
// on-sale's hundreds of thousands took most of a core at every check). A
// small event's count, a millisecond, is still made at every check.
const countPace = 19

// publisher keeps the events' inventory published.
type publisher struct {
	s      *Server
	errors *errorRate
	// countAgain is how long after its start a count that took took is
	// made again.
	countAgain func(took time.Duration) time.Duration

	mu     sync.Mutex
	last   map[int64]waitroom.Inventory
	counts map[int64]heldCount

	cancel context.CancelFunc
	done   chan struct{}
}

// heldCount is an event's last count of its holds in the ledger, and when
// the next is due.
type heldCount struct {
	ledger.SeatCounts
	due time.Time
}

func newPublisher(s *Server) *publisher {
	return &publisher{
		s: s, errors: newErrorRate(s.cfg.Clock),
		countAgain: func(took time.Duration) time.Duration { return countPace * took },
		last:       make(map[int64]waitroom.Inventory), counts: make(map[int64]heldCount),
	}
}

// Start publishes until ctx ends or Stop.
func (p *publisher) Start(ctx context.Context) {
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(publishCheck)
		defer t.Stop()
		keys := time.NewTicker(waitroom.KeyNoteEvery)
		defer keys.Stop()
		p.noteKeys(ctx)
		for {
			if err := p.once(ctx); err != nil && ctx.Err() == nil {
				p.s.log.Debug("inventory not published", "error", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-keys.C:
				p.noteKeys(ctx)
			}
		}
	}()
}

// Stop stops publishing and waits for the last write.
func (p *publisher) Stop() {
	p.cancel()
	<-p.done
}

// once publishes every served event's figures that changed or are due.
func (p *publisher) once(ctx context.Context) error {
	healthy := p.s.Ready(ctx) == nil
	rate := p.errors.rate()
	var errs []error
	for _, ev := range p.s.seats.Registry().Events() {
		inv, err := p.read(ctx, ev)
		if err != nil {
			// What cannot be read is not published: the gateways see the
			// figures age and stop admitting by them.
			errs = append(errs, err)
			continue
		}
		inv.Healthy, inv.ErrorRate = healthy, rate
		p.mu.Lock()
		last, seen := p.last[ev.ID]
		p.mu.Unlock()
		if seen && sameFigures(last, inv) && inv.At.Sub(last.At) < publishMaxAge {
			continue
		}
		if err := ev.Room().PublishInventory(ctx, inv); err != nil {
			errs = append(errs, fmt.Errorf("event %d: %w", ev.ID, err))
			continue
		}
		p.mu.Lock()
		p.last[ev.ID] = inv
		p.mu.Unlock()
	}
	return errors.Join(errs...)
}

func sameFigures(a, b waitroom.Inventory) bool {
	a.At, b.At = time.Time{}, time.Time{}
	return a == b
}

// read gathers one event's seat figures: remaining from Redis (expired
// holds returned first), held and confirmed from the ledger, the seats
// expiring soon from Redis's expiry index.
func (p *publisher) read(ctx context.Context, ev *seats.Event) (waitroom.Inventory, error) {
	now := p.s.now()
	remaining, err := p.s.seats.Recovery().Remaining(ctx, ev)
	if err != nil {
		return waitroom.Inventory{}, fmt.Errorf("event %d: remaining: %w", ev.ID, err)
	}
	counts, held, err := p.held(ctx, ev, remaining)
	if err != nil {
		return waitroom.Inventory{}, fmt.Errorf("event %d: %w", ev.ID, err)
	}
	soon, err := p.expiringSeats(ctx, ev.ID, now)
	if err != nil {
		return waitroom.Inventory{}, fmt.Errorf("event %d: expiring holds: %w", ev.ID, err)
	}
	return waitroom.Inventory{
		Sellable: ev.Sellable, Held: held, Confirmed: counts.Confirmed, Remaining: remaining,
		ExpiringSoon: soon, HoldTTLSeconds: int64(ev.HoldTTL() / time.Second), At: now,
	}, nil
}

// held is the seats live holds keep that are not sold, with remaining
// left in Redis, and the count of the event's holds it comes from
// (seatCounts: paced, so any number of readers costs what one does).
func (p *publisher) held(ctx context.Context, ev *seats.Event, remaining int64) (ledger.SeatCounts, int64, error) {
	counts, fresh, err := p.seatCounts(ctx, ev.ID)
	if err != nil {
		return ledger.SeatCounts{}, 0, err
	}
	if fresh {
		return counts, counts.Pending, nil
	}
	// Between counts, the seats Redis says are taken and the count did not
	// see confirmed are held: a gateway must not take an event whose last
	// seats were just held for sold out. Seats confirmed since the count
	// show as held until the next.
	return counts, max(0, ev.Sellable-remaining-counts.Confirmed), nil
}

// seatCounts is the ledger's count of event's holds: made now if the last
// is due (fresh), else the last.
func (p *publisher) seatCounts(ctx context.Context, event int64) (ledger.SeatCounts, bool, error) {
	start := p.s.now()
	p.mu.Lock()
	last, counted := p.counts[event]
	p.mu.Unlock()
	if counted && start.Before(last.due) {
		return last.SeatCounts, false, nil
	}
	c, err := p.s.ledger.SeatCounts(ctx, event, start)
	if err != nil {
		return ledger.SeatCounts{}, false, err
	}
	p.mu.Lock()
	p.counts[event] = heldCount{SeatCounts: c, due: start.Add(p.countAgain(p.s.now().Sub(start)))}
	p.mu.Unlock()
	return c, true, nil
}

// expiringSeats counts the seats of pending holds expiring from now to
// waitroom.InventorySoon later.
func (p *publisher) expiringSeats(ctx context.Context, event int64, now time.Time) (int64, error) {
	k := inventory.KeysFor(event)
	ids, err := p.s.rdb.ZRangeByScore(ctx, k.Expiry, &redis.ZRangeBy{
		Min: strconv.FormatInt(now.UnixMilli(), 10), Max: strconv.FormatInt(now.Add(waitroom.InventorySoon).UnixMilli(), 10),
	}).Result()
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	recs, err := p.s.rdb.HMGet(ctx, k.Holds, ids...).Result()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, v := range recs {
		s, ok := v.(string)
		if !ok {
			continue // released meanwhile
		}
		var rec inventory.Record
		if err := json.Unmarshal([]byte(s), &rec); err != nil {
			return 0, fmt.Errorf("hold record: %w", err)
		}
		if !rec.Confirmed {
			n += rec.Quantity
		}
	}
	return n, nil
}

// errorRate is the share of server errors among the origin's answers over
// the last errorWindow, counted in one-second slots.
type errorRate struct {
	now func() time.Time

	mu    sync.Mutex
	slots [errorWindow]errorSlot
}

const errorWindow = 10

type errorSlot struct {
	sec, total, failed int64
}

func newErrorRate(now func() time.Time) *errorRate { return &errorRate{now: now} }

func (e *errorRate) note(failed bool) {
	sec := e.now().Unix()
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &e.slots[sec%errorWindow]
	if s.sec != sec {
		*s = errorSlot{sec: sec}
	}
	s.total++
	if failed {
		s.failed++
	}
}

// rate is the share of failed answers in the window; 0 without answers.
func (e *errorRate) rate() float64 {
	sec := e.now().Unix()
	e.mu.Lock()
	defer e.mu.Unlock()
	var total, failed int64
	for _, s := range e.slots {
		if sec-s.sec < errorWindow {
			total += s.total
			failed += s.failed
		}
	}
	if total == 0 {
		return 0
	}
	return float64(failed) / float64(total)
}

// count notes every answer of next: a 5xx is a failure.
func (e *errorRate) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		defer func() { e.note(sw.status >= 500) }()
		next.ServeHTTP(sw, r)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// PublishInventoryOnce publishes every served event's figures that changed
// or are due, as Run does four times a second.
func (s *Server) PublishInventoryOnce(ctx context.Context) error { return s.publisher.once(ctx) }
