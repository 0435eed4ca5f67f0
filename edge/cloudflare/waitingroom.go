package cloudflare

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/cloudflare/cloudflare-go/v6/waiting_rooms"

	"github.com/waitroom/waitroom/waitroom"
)

// Steering a Waiting Room that Cloudflare runs (docs/edge.md, "Steering
// Cloudflare's Waiting Room"): for operators whose edge queue is
// Cloudflare's own, the gateway keeps one configured room in step with
// what its room decides. Cloudflare then queues and admits; the gateway
// only moves the room's three dials (queue_all, new_users_per_minute,
// total_active_users) and keeps a Waiting Room event for the scheduled
// opening. Like the KV publisher it works in the background, debounced and
// retried, never on the request path.

// Bounds Cloudflare puts on a room's new_users_per_minute and
// total_active_users.
const (
	MinWaitingRoomUsers int64 = 200
	MaxWaitingRoomUsers int64 = math.MaxInt32
)

// Defaults of WaitingRoomConfig.
const (
	// DefaultWaitingRoomDebounce keeps the room's settings from being
	// written more than every few seconds while the closed loop moves.
	DefaultWaitingRoomDebounce = 5 * time.Second
	// DefaultPreQueue is how long before the opening Cloudflare starts
	// queueing everyone for the shuffle.
	DefaultPreQueue = time.Hour
	// MinPreQueue is Cloudflare's least: a pre-queue starts at least five
	// minutes before its event.
	MinPreQueue = 5 * time.Minute
	// OpeningEventLength is how long the Waiting Room event lasts after the
	// opening. The event only carries the pre-queue and the shuffle; it
	// inherits the room's rates, so its end changes nothing but leaves the
	// room free for other events.
	OpeningEventLength = time.Hour
)

// RateWindow is how far back the admissions per minute are measured: long
// enough to smooth out the closed loop's bursts, short enough to follow a
// change of pace within a couple of minutes.
const RateWindow = 2 * time.Minute

// WaitingRoomConfig says which room is steered and how.
type WaitingRoomConfig struct {
	// ZoneID is the zone of the room. Required.
	ZoneID string
	// WaitingRoomID is the id of the room. Required.
	WaitingRoomID string
	// APIToken is an API token allowed "Waiting Rooms: Edit". Required.
	APIToken string
	// APIURL is the API's base URL; DefaultAPIURL when empty.
	APIURL string
	// Debounce is how long a change waits for the ones that follow it; the
	// room is written at most once per debounce. DefaultWaitingRoomDebounce
	// when zero.
	Debounce time.Duration
	// Event is the gateway's event id; it names the Waiting Room event.
	Event int64
	// OpensAt, when set, is the scheduled opening kept as a Waiting Room
	// event: a pre-queue from PreQueue before it, shuffled at it.
	OpensAt time.Time
	// PreQueue is DefaultPreQueue when zero; at least MinPreQueue.
	PreQueue time.Duration
}

// Validate checks that the required settings are there.
func (c WaitingRoomConfig) Validate() error {
	switch {
	case c.ZoneID == "":
		return errors.New("zone_id is required")
	case c.WaitingRoomID == "":
		return errors.New("waiting_room_id is required")
	case c.APIToken == "":
		return errors.New("api_token is required")
	case c.Debounce < 0:
		return fmt.Errorf("debounce must not be negative (got %s)", c.Debounce)
	case c.PreQueue != 0 && c.PreQueue < MinPreQueue:
		return fmt.Errorf("prequeue must be at least %s (got %s)", MinPreQueue, c.PreQueue)
	}
	return validateAPIURL(c.APIURL)
}

// Figures is what the steering is computed from: the room's state and what
// its closed loop decided lately.
type Figures struct {
	SoldOut, Paused bool
	// AdmittedPerMinute is the positions admitted per minute over the last
	// RateWindow: the pace the closed loop (or the fixed autopilot, or an
	// operator) chose.
	AdmittedPerMinute float64
	// Undecided is the positions admitted within the decision time: users
	// still choosing seats.
	Undecided int64
	// Holding is the seats in pending holds, by the origin's inventory:
	// users about to pay (a holder holds one seat or more, so this bounds
	// them from above).
	Holding int64
}

// FiguresOf reads the figures at now from a room's state, the watermarks
// it applied (oldest first, as Room.AppliedWatermarks gives them), the
// origin's inventory, and the decision time the closed loop assumes.
func FiguresOf(s waitroom.State, marks []waitroom.AppliedWatermark, inv waitroom.Inventory, now time.Time, decision time.Duration) Figures {
	// rise is how far the watermark rose since t: from the last watermark
	// applied at or before t (or the first one remembered) to now's.
	rise := func(t time.Time) int64 {
		if len(marks) == 0 {
			return 0
		}
		base := marks[0].Watermark
		for _, m := range marks {
			if m.At.After(t) {
				break
			}
			base = m.Watermark
		}
		return max(0, s.Watermark-base)
	}
	return Figures{
		SoldOut:           s.SoldOut,
		Paused:            s.Paused,
		AdmittedPerMinute: float64(rise(now.Add(-RateWindow))) / RateWindow.Minutes(),
		Undecided:         rise(now.Add(-decision)),
		Holding:           max(0, inv.Held),
	}
}

// Steering is what the room is set to.
type Steering struct {
	// QueueAll queues every visitor and admits none: the event is sold out
	// or paused.
	QueueAll bool
	// NewUsersPerMinute is the pace Cloudflare admits at.
	NewUsersPerMinute int64
	// TotalActiveUsers is how many users Cloudflare lets be on the site at
	// once.
	TotalActiveUsers int64
}

// SteeringOf is the room's settings for f. Cloudflare admits up to
// new_users_per_minute a minute while fewer than total_active_users are
// active, so:
//   - new_users_per_minute is the pace the room admitted at lately;
//   - total_active_users is the users the room sees active (undecided and
//     holding) plus one more minute at that pace: enough headroom for
//     Cloudflare to keep the pace, none to run ahead of the closed loop
//     should the site stop converting;
//
// both rounded up to two significant figures, so that gateways whose views
// differ by a poll compute the same numbers (and a room already so is not
// written), and within Cloudflare's bounds, so a quiet room still shows
// 200.
func SteeringOf(f Figures) Steering {
	perMinute := clampUsers(int64(math.Ceil(f.AdmittedPerMinute)))
	return Steering{
		QueueAll:          f.SoldOut || f.Paused,
		NewUsersPerMinute: perMinute,
		TotalActiveUsers:  clampUsers(satAdd(satAdd(f.Undecided, f.Holding), perMinute)),
	}
}

func clampUsers(n int64) int64 {
	return min(max(roundUp2(n), MinWaitingRoomUsers), MaxWaitingRoomUsers)
}

// roundUp2 rounds n up to two significant figures.
func roundUp2(n int64) int64 {
	unit := int64(1)
	for v := n; v >= 100; v /= 10 {
		unit *= 10
	}
	if r := n % unit; r != 0 {
		return satAdd(n-r, unit)
	}
	return n
}

// satAdd adds without overflowing.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// EventName is the name of the Waiting Room event kept for event's
// opening: the event is found again by it, so a reload edits it rather
// than adding another.
func EventName(event int64) string { return "waitroom_event_" + strconv.FormatInt(event, 10) }

// retry is the schedule of one kind of write after failures.
type retry struct {
	failures int
	retryAt  time.Time
}

// WaitingRoom steers a Cloudflare Waiting Room in the background: Steer
// records the latest settings and Run writes them after the debounce, and
// keeps the opening's event, trying again with a growing backoff for as
// long as the API fails.
type WaitingRoom struct {
	cfg    WaitingRoomConfig
	rooms  *waiting_rooms.WaitingRoomService
	logger *slog.Logger
	// now and backoff as in Publisher; tests replace them.
	now     func() time.Time
	backoff func(n int) time.Duration

	mu      sync.Mutex
	want    *Steering
	written *Steering
	// since is when want first differed from written.
	since     time.Time
	roomRetry retry
	// eventDone is set once the opening's event is as configured.
	eventDone  bool
	eventRetry retry
	wake       chan struct{}
}

// NewWaitingRoom returns a driver for cfg. It does no I/O.
func NewWaitingRoom(cfg WaitingRoomConfig, logger *slog.Logger) (*WaitingRoom, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = DefaultWaitingRoomDebounce
	}
	if cfg.PreQueue == 0 {
		cfg.PreQueue = DefaultPreQueue
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &WaitingRoom{
		cfg:     cfg,
		rooms:   waiting_rooms.NewWaitingRoomService(apiOptions(cfg.APIURL, cfg.APIToken)...),
		logger:  logger,
		now:     time.Now,
		backoff: jitteredBackoff,
		// Without an opening there is no event to keep.
		eventDone: cfg.OpensAt.IsZero(),
		wake:      make(chan struct{}, 1),
	}, nil
}

// Steer records s as the room's settings to write. It never blocks on the
// network.
func (w *WaitingRoom) Steer(s Steering) {
	w.mu.Lock()
	changed := w.want == nil || *w.want != s
	if changed {
		if w.want == nil || w.written != nil && *w.want == *w.written {
			w.since = w.now()
		}
		w.want = &s
	}
	w.mu.Unlock()
	if changed {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// RunOnce makes the writes that are due: the opening's event until it is
// in step, and the room's settings a debounce after they changed; after a
// failure, once its backoff has passed. It returns when the next write
// will be due (zero when nothing waits) and the first error met.
func (w *WaitingRoom) RunOnce(ctx context.Context) (next time.Time, err error) {
	now := w.now()
	w.mu.Lock()
	doEvent := !w.eventDone && !w.eventRetry.retryAt.After(now)
	if !w.eventDone && !doEvent {
		next = earliest(next, w.eventRetry.retryAt)
	}
	var doRoom bool
	var want Steering
	if w.want != nil && (w.written == nil || *w.want != *w.written) {
		due := w.since.Add(w.cfg.Debounce)
		if w.roomRetry.retryAt.After(due) {
			due = w.roomRetry.retryAt
		}
		if due.After(now) {
			next = earliest(next, due)
		} else {
			doRoom, want = true, *w.want
		}
	}
	w.mu.Unlock()

	if doEvent {
		eerr := w.syncEvent(ctx)
		if ctx.Err() != nil {
			return next, ctx.Err()
		}
		w.mu.Lock()
		if eerr == nil {
			w.eventDone, w.eventRetry = true, retry{}
		} else {
			next = earliest(next, w.failed(&w.eventRetry, "keeping the opening's Waiting Room event", eerr))
			err = eerr
		}
		w.mu.Unlock()
	}
	if doRoom {
		rerr := w.apply(ctx, want)
		if ctx.Err() != nil {
			return next, ctx.Err()
		}
		w.mu.Lock()
		if rerr == nil {
			w.written, w.roomRetry = &want, retry{}
			if *w.want != want {
				// Changed while being written: its own debounce.
				w.since = w.now()
				next = earliest(next, w.since.Add(w.cfg.Debounce))
			}
		} else {
			next = earliest(next, w.failed(&w.roomRetry, "steering the Waiting Room", rerr))
			if err == nil {
				err = rerr
			}
		}
		w.mu.Unlock()
	}
	return next, err
}

// failed schedules the next try after err and returns when it is due.
// Called with mu held.
func (w *WaitingRoom) failed(r *retry, what string, err error) time.Time {
	r.failures++
	wait := w.backoff(r.failures)
	r.retryAt = w.now().Add(wait)
	w.logger.Warn(what+" failed; trying again", "waiting_room", w.cfg.WaitingRoomID,
		"failures", r.failures, "retry_in", wait, "error", err)
	return r.retryAt
}

// apply sets the room to s. Cloudflare's PATCH wants the room's host and
// name with the two rates, so the room is read first and its host, name
// and path kept; a room already as s is not written.
func (w *WaitingRoom) apply(ctx context.Context, s Steering) error {
	var get waiting_rooms.WaitingRoomGetParams
	get.ZoneID.Value, get.ZoneID.Present = w.cfg.ZoneID, true
	room, err := w.rooms.Get(ctx, w.cfg.WaitingRoomID, get)
	if err != nil {
		return fmt.Errorf("read waiting room %s: %w", w.cfg.WaitingRoomID, err)
	}
	if room.QueueAll == s.QueueAll && room.NewUsersPerMinute == s.NewUsersPerMinute && room.TotalActiveUsers == s.TotalActiveUsers {
		return nil
	}
	var p waiting_rooms.WaitingRoomEditParams
	p.ZoneID.Value, p.ZoneID.Present = w.cfg.ZoneID, true
	q := &p.Query
	q.Host.Value, q.Host.Present = room.Host, true
	q.Name.Value, q.Name.Present = room.Name, true
	q.Path.Value, q.Path.Present = room.Path, true
	q.NewUsersPerMinute.Value, q.NewUsersPerMinute.Present = s.NewUsersPerMinute, true
	q.TotalActiveUsers.Value, q.TotalActiveUsers.Present = s.TotalActiveUsers, true
	q.QueueAll.Value, q.QueueAll.Present = s.QueueAll, true
	if _, err := w.rooms.Edit(ctx, w.cfg.WaitingRoomID, p); err != nil {
		return fmt.Errorf("edit waiting room %s: %w", w.cfg.WaitingRoomID, err)
	}
	w.logger.Info("steered the Waiting Room", "waiting_room", w.cfg.WaitingRoomID, "queue_all", s.QueueAll,
		"new_users_per_minute", s.NewUsersPerMinute, "total_active_users", s.TotalActiveUsers)
	return nil
}

// syncEvent makes the room's event for the opening what the config says:
// created if the room has none by its name, edited if it differs.
func (w *WaitingRoom) syncEvent(ctx context.Context) error {
	name := EventName(w.cfg.Event)
	start := w.cfg.OpensAt.UTC()
	prequeue, end := start.Add(-w.cfg.PreQueue), start.Add(OpeningEventLength)

	var list waiting_rooms.EventListParams
	list.ZoneID.Value, list.ZoneID.Present = w.cfg.ZoneID, true
	var found *waiting_rooms.Event
	pager := w.rooms.Events.ListAutoPaging(ctx, w.cfg.WaitingRoomID, list)
	for pager.Next() {
		if e := pager.Current(); e.Name == name {
			found = &e
			break
		}
	}
	if err := pager.Err(); err != nil {
		return fmt.Errorf("list the events of waiting room %s: %w", w.cfg.WaitingRoomID, err)
	}
	if found == nil && !end.After(w.now()) {
		// The opening is over: an event in the past is nothing to keep (and
		// the API refuses one).
		return nil
	}
	if found != nil && sameTime(found.PrequeueStartTime, prequeue) && sameTime(found.EventStartTime, start) &&
		sameTime(found.EventEndTime, end) && found.ShuffleAtEventStart && !found.Suspended {
		return nil
	}

	var q waiting_rooms.EventQueryParam
	q.Name.Value, q.Name.Present = name, true
	q.Description.Value, q.Description.Present = fmt.Sprintf("The opening of event %d: a pre-queue, shuffled at the start", w.cfg.Event), true
	q.PrequeueStartTime.Value, q.PrequeueStartTime.Present = prequeue.Format(time.RFC3339), true
	q.EventStartTime.Value, q.EventStartTime.Present = start.Format(time.RFC3339), true
	q.EventEndTime.Value, q.EventEndTime.Present = end.Format(time.RFC3339), true
	q.ShuffleAtEventStart.Value, q.ShuffleAtEventStart.Present = true, true
	q.Suspended.Value, q.Suspended.Present = false, true
	if found == nil {
		var p waiting_rooms.EventNewParams
		p.ZoneID.Value, p.ZoneID.Present = w.cfg.ZoneID, true
		p.EventQuery = q
		e, err := w.rooms.Events.New(ctx, w.cfg.WaitingRoomID, p)
		if err != nil {
			return fmt.Errorf("create event %s of waiting room %s: %w", name, w.cfg.WaitingRoomID, err)
		}
		w.logger.Info("created the opening's Waiting Room event", "waiting_room", w.cfg.WaitingRoomID, "id", e.ID, "starts", start)
		return nil
	}
	var p waiting_rooms.EventEditParams
	p.ZoneID.Value, p.ZoneID.Present = w.cfg.ZoneID, true
	p.EventQuery = q
	if _, err := w.rooms.Events.Edit(ctx, w.cfg.WaitingRoomID, found.ID, p); err != nil {
		return fmt.Errorf("edit event %s of waiting room %s: %w", name, w.cfg.WaitingRoomID, err)
	}
	w.logger.Info("moved the opening's Waiting Room event", "waiting_room", w.cfg.WaitingRoomID, "id", found.ID, "starts", start)
	return nil
}

// sameTime reports whether the API's ISO 8601 timestamp v is t.
func sameTime(v string, t time.Time) bool {
	got, err := time.Parse(time.RFC3339, v)
	return err == nil && got.Equal(t)
}

// Run writes what is steered until ctx ends.
func (w *WaitingRoom) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		next, _ := w.RunOnce(ctx)
		if !next.IsZero() {
			timer.Reset(max(next.Sub(w.now()), 0))
		}
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
			timer.Stop()
		case <-timer.C:
		}
	}
}
