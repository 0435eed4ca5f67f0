package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/waitroom/waitroom/waitroom"
)

// The sale's report (GET /waitroom/events/{id}/report): what the queue and
// the seats did, second by second, and what became of the people in it.
// Each gateway keeps its own in memory, sampled once a second from the
// room; the figures a room reads from the store (positions, watermark, the
// origin's inventory, presence) are the fleet's, so every gateway sharing
// a store draws the same curves, while the refusals are this gateway's
// own.

// maxReportPoints bounds an event's timeline: an hour at one point a
// second. When it fills, every other point is dropped and the spacing
// doubles, so the whole sale stays covered, ever more coarsely.
const maxReportPoints = 3600

// reportPoint is one second of the sale. Arrivals and admitted are
// running totals (positions handed out, positions admitted), so a thinned
// timeline loses resolution, never counts.
type reportPoint struct {
	T         time.Time `json:"t"`
	Arrivals  int64     `json:"arrivals"`
	Waiting   int64     `json:"waiting"`
	Watermark int64     `json:"watermark"`
	Admitted  int64     `json:"admitted"`
	// Remaining and Held are the origin's figures; null until it
	// published any.
	Remaining *int64 `json:"remaining"`
	Held      *int64 `json:"held"`
	AllHeld   bool   `json:"all_held"`
	SoldOut   bool   `json:"sold_out"`
}

// reportSample is what the recorder takes from a room each second.
type reportSample struct {
	state             waitroom.State
	admitted, waiting int64
	inv               waitroom.Inventory
	// haveInv is set once the origin published figures; fresh while they
	// are recent (Room.Inventory).
	haveInv, fresh bool
	// avail is what waiting visitors are told of the seats: sold out, or
	// all held while held seats may come back.
	avail waitroom.Availability
}

// sampleRoom reads a room's figures for the report, from memory.
func sampleRoom(e *roomEntry) reportSample {
	s := reportSample{state: e.room.State()}
	s.admitted, s.waiting = queueCounts(e)
	inv, fresh := e.room.Inventory()
	s.inv, s.haveInv, s.fresh = inv, !inv.At.IsZero(), fresh
	s.avail = e.availability(s.state)
	return s
}

// allHeld tells the sale's "all held" moments as waiting visitors were
// told them (waitroom.Judge): no seat left to take while holds that may
// still end keep some, and the answer not sold out.
func allHeld(s reportSample) bool {
	return s.avail.AllHeld && !s.avail.SoldOut
}

// waitBounds are the lower bounds, in seconds, of the wait histogram's
// buckets: to the second under a minute, to 5 s under ten minutes, to 30 s
// under an hour, to 5 minutes under a day; one bucket beyond.
var waitBounds = func() []int64 {
	var b []int64
	for _, r := range []struct{ to, step int64 }{{60, 1}, {600, 5}, {3600, 30}, {86400, 300}} {
		from := int64(0)
		if n := len(b); n > 0 {
			from = b[n-1] + b[n-1] - b[n-2]
		}
		for s := from; s < r.to; s += r.step {
			b = append(b, s)
		}
	}
	return append(b, 86400)
}()

// waitHistogram counts waits in waitBounds' buckets: a fixed size however
// many are admitted.
type waitHistogram struct {
	counts []int64
	total  int64
}

func (h *waitHistogram) add(seconds, n int64) {
	if n <= 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]int64, len(waitBounds))
	}
	i := sort.Search(len(waitBounds), func(i int) bool { return waitBounds[i] > seconds }) - 1
	h.counts[max(i, 0)] += n
	h.total += n
}

// quantile is the lower bound of the bucket holding the q-th wait; nil
// before any admission.
func (h *waitHistogram) quantile(q float64) *int64 {
	if h.total == 0 {
		return nil
	}
	rank := int64(q*float64(h.total) + 0.999999)
	rank = min(max(rank, 1), h.total)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := waitBounds[i]
			return &v
		}
	}
	v := waitBounds[len(waitBounds)-1]
	return &v
}

// recorder keeps one event's report.
type recorder struct {
	mu     sync.Mutex
	points []reportPoint
	// step is the spacing of the points kept, doubled at each thinning.
	step time.Duration
	// counted is the highest admitted position whose wait was counted;
	// looked is set at the first sample, which sets counted.
	counted int64
	looked  bool
	waits   waitHistogram
	// abandoned is the most positions at once that were handed out, not
	// admitted, and whose holders had stopped polling.
	abandoned int64
	// drawn is the lottery once drawn: it never changes after, and
	// reading it again would read every entrant.
	drawn *reportLottery
}

func newRecorder() *recorder { return &recorder{step: time.Second} }

// record adds the sample taken at now: one point per step, the last of a
// step standing for it.
func (rc *recorder) record(now time.Time, s reportSample) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	t := now.UTC().Truncate(time.Second)
	if !rc.looked {
		// Positions admitted before this gateway first looked at the
		// event (it started, or was given the event, mid-sale) were never
		// seen waiting: counted from here they would all have waited 0 s.
		rc.looked = true
		rc.counted = s.admitted
	}
	if len(rc.points) == 0 && s.state.LastPosition == 0 && !s.haveInv && !s.state.SoldOut {
		// Nothing has happened yet: the sale starts at its first arrival
		// or the origin's first figures.
		return
	}
	p := reportPoint{T: t, Arrivals: s.state.LastPosition, Waiting: s.waiting, Watermark: s.state.Watermark,
		Admitted: s.admitted, AllHeld: allHeld(s), SoldOut: s.avail.SoldOut}
	if s.haveInv {
		remaining, held := s.inv.Remaining, s.inv.Held
		p.Remaining, p.Held = &remaining, &held
	}
	n := len(rc.points)
	if n > 0 && t.Before(rc.points[n-1].T.Add(rc.step)) {
		// Within the last point's step (or a clock stepped back): it
		// stands for the step, so it takes the newest figures.
		p.T = rc.points[n-1].T
		rc.points = rc.points[:n-1]
	}
	rc.points = append(rc.points, p)
	rc.countWaits(t, p.Admitted)
	if !s.avail.SoldOut {
		queued := s.state.LastPosition
		if s.state.HardCap > 0 {
			queued = min(queued, s.state.HardCap)
		}
		rc.abandoned = max(rc.abandoned, queued-s.admitted-s.waiting)
	}
	if len(rc.points) > maxReportPoints {
		rc.thin()
	}
}

// look records room's sample at now, once the room has read its event's
// state: the zeros it shows before would be taken for the first look at
// the sale.
func (rc *recorder) look(now time.Time, e *roomEntry) {
	if e.room.Known() {
		rc.record(now, sampleRoom(e))
	}
}

// countWaits adds the waits of the positions admitted since the last
// count: each joined at the first point whose arrivals reached it, and
// waited until now. Positions handed out before the timeline began count
// from its first point.
func (rc *recorder) countWaits(now time.Time, admitted int64) {
	if admitted <= rc.counted {
		return
	}
	from := rc.counted
	i := sort.Search(len(rc.points), func(i int) bool { return rc.points[i].Arrivals > from })
	for ; i < len(rc.points) && from < admitted; i++ {
		upTo := min(rc.points[i].Arrivals, admitted)
		if i == len(rc.points)-1 {
			upTo = admitted
		}
		if upTo > from {
			rc.waits.add(int64(now.Sub(rc.points[i].T)/time.Second), upTo-from)
			from = upTo
		}
	}
	rc.counted = admitted
}

// thin drops every other point (the newest stays) and doubles the step.
func (rc *recorder) thin() {
	n := len(rc.points)
	kept := rc.points[:0]
	for i := (n - 1) % 2; i < n; i += 2 {
		kept = append(kept, rc.points[i])
	}
	clear(rc.points[len(kept):])
	rc.points = kept
	rc.step *= 2
}

// reportBody is the report route's answer (docs/api.md, the sale's
// report).
type reportBody struct {
	Event     int64         `json:"event"`
	Timeline  []reportPoint `json:"timeline"`
	Waits     waitQuantiles `json:"wait_seconds"`
	Abandoned int64         `json:"abandoned"`
	Refused   struct {
		JoinRate  int64 `json:"join_rate"`
		Challenge int64 `json:"challenge"`
	} `json:"refused"`
	Lottery *reportLottery      `json:"lottery"`
	Changes []waitroom.LogEntry `json:"changes"`
}

type waitQuantiles struct {
	P50 *int64 `json:"p50"`
	P90 *int64 `json:"p90"`
	P99 *int64 `json:"p99"`
}

// reportLottery is the scheduled opening's draw: its commitment from the
// start, its seed once drawn.
type reportLottery struct {
	OpensAt    time.Time `json:"opens_at"`
	Commitment string    `json:"commitment"`
	Drawn      bool      `json:"drawn"`
	Seed       *string   `json:"seed"`
}

// snapshot copies what the recorder keeps into a report.
func (rc *recorder) snapshot(b *reportBody) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	b.Timeline = append([]reportPoint{}, rc.points...)
	b.Waits = waitQuantiles{rc.waits.quantile(.5), rc.waits.quantile(.9), rc.waits.quantile(.99)}
	b.Abandoned = rc.abandoned
}

// reportBook is every event's recorder; the process keeps them across
// reloads, as it keeps the rooms.
type reportBook struct {
	mu   sync.Mutex
	recs map[int64]*recorder
}

var reports reportBook

// of returns event's recorder, made on first use.
func (b *reportBook) of(event int64) *recorder {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.recs == nil {
		b.recs = map[int64]*recorder{}
	}
	rc := b.recs[event]
	if rc == nil {
		rc = newRecorder()
		b.recs[event] = rc
	}
	return rc
}

// keep forgets the reports of events no loaded config guards any more.
func (b *reportBook) keep(events map[int64]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ev := range b.recs {
		if !events[ev] {
			delete(b.recs, ev)
		}
	}
}

// reportEvery is how often a room is sampled for its report.
const reportEvery = time.Second

// reportTicks gives the sampling ticks and their stop; tests replace it.
var reportTicks = func() (<-chan time.Time, func()) {
	t := time.NewTicker(reportEvery)
	return t.C, t.Stop
}

// recordReport samples room into its event's report at every tick until
// ctx ends. Two rooms of one event (a reload swapping configs) both sample
// it; a second keeps one point.
func recordReport(ctx context.Context, e *roomEntry, now func() time.Time, ticks <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			reports.of(e.key.Event).look(now(), e)
			seen := map[int64]bool{}
			rooms.Range(func(_, v any) bool {
				seen[v.(*roomEntry).key.Event] = true
				return true
			})
			reports.keep(seen)
		}
	}
}

// counterValue reads a counter of the process's metrics.
func counterValue(c prometheus.Counter) int64 {
	var m dto.Metric
	if c.Write(&m) != nil || m.Counter == nil {
		return 0
	}
	return int64(m.Counter.GetValue())
}

func (a *Admin) report(w http.ResponseWriter, r *http.Request, entry *roomEntry) error {
	id := entry.key.Event
	body := reportBody{Event: id, Changes: []waitroom.LogEntry{}}
	reports.of(id).snapshot(&body)
	ev := strconv.FormatInt(id, 10)
	body.Refused.JoinRate = counterValue(metrics.rateLimited.WithLabelValues(ev))
	// Every arrival is handed a challenge before its place: only the
	// solutions turned down are refusals.
	body.Refused.Challenge = counterValue(metrics.challengesFailed.WithLabelValues(ev))
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	lot, err := reportedLottery(ctx, entry.room, reports.of(id))
	if err != nil {
		return apiError(http.StatusServiceUnavailable, "the queue store is unavailable: %v", err)
	}
	body.Lottery = lot
	log, err := entry.room.ChangeLog(ctx, 0)
	switch {
	case errors.Is(err, waitroom.ErrNotLogged):
	case err != nil:
		return apiError(http.StatusServiceUnavailable, "the queue store is unavailable: %v", err)
	default:
		slices.Reverse(log)
		body.Changes = log
	}
	return writeJSON(w, http.StatusOK, body)
}

// reportedLottery is the room's lottery for its report: nil without a
// scheduled opening, read from the store until drawn, then kept by rc.
func reportedLottery(ctx context.Context, room *waitroom.Room, rc *recorder) (*reportLottery, error) {
	rc.mu.Lock()
	drawn := rc.drawn
	rc.mu.Unlock()
	if drawn != nil {
		return drawn, nil
	}
	v, err := room.Lottery(ctx)
	switch {
	case errors.Is(err, waitroom.ErrNoOpening):
		return nil, nil
	case err != nil:
		return nil, err
	}
	lot := &reportLottery{OpensAt: v.OpensAt.UTC(), Commitment: v.Commitment, Drawn: v.Drawn}
	if v.Drawn {
		seed := v.Published.Seed
		lot.Seed = &seed
		rc.mu.Lock()
		rc.drawn = lot
		rc.mu.Unlock()
	}
	return lot, nil
}
