package waitroom

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The admission window (docs/api.md §3): an admitted position is admitted
// for the window from the later of its handout and the watermark's reaching
// it, unless the origin extended its holder's admission (the holder holds
// seats). A watermark set ahead of the arrivals admits each later arrival
// from its own handout, never from before it held the position; the
// positions an opening reserves for its entrants are handed out when the
// entries close. The handout is the one a token's hat claim (or an
// account's record) tells, the same at every node whichever handed the
// position out or leased it; without one, both moments are read from what
// the room saw rise: the watermark, and the last position handed out (its
// own joins at once, other nodes' at the next read of the state);
// positions admitted before the room first read the state count from then,
// unless it took over a room of the event from an earlier config.
// The window runs only while entry is open: the time the room saw the
// event paused does not count, so a buyer whose turn came during a pause,
// and who could not come in, keeps the place until entry resumes and the
// window has run.

// maxWindowSteps bounds the watermark rises a room remembers; the oldest
// are merged into their successors, which makes admissions look later
// (longer windows), never earlier.
const maxWindowSteps = 1 << 14

// ExtensionStore keeps the origin's extensions of admission windows, by
// subject, each with its own end.
type ExtensionStore interface {
	// ExtendAdmission keeps subject's admission in event beyond the
	// window until until.
	ExtendAdmission(ctx context.Context, event int64, subject string, until time.Time) error
	// AdmissionExtended reports whether subject's admission is extended
	// at now.
	AdmissionExtended(ctx context.Context, event int64, subject string) (bool, error)
}

// maxPauses bounds the pauses a room remembers; the oldest two are merged
// into one that spans the time between them, which makes windows longer,
// never shorter.
const maxPauses = 64

// windowGrain is the finest time a window tells admissions apart by: the
// rises within one grain are kept as one, at the latest of them, so a crowd
// joining while the watermark is ahead adds a step a second, not one per
// arrival. Admissions then look later by less than a grain, never earlier.
const windowGrain = time.Second

// window remembers when the admitted handed-out positions grew: the rises
// of the lower of the watermark and the last position handed out.
type window struct {
	length time.Duration // 0: no window
	mu     sync.Mutex
	steps  []step
	// marks are the rises of the watermark alone, for a position whose
	// token says when it was handed out.
	marks []step
	// pauses are the times the room saw the event paused, oldest first;
	// the last has a zero end while the pause lasts.
	pauses []pause
}

type pause struct{ start, end time.Time }

type step struct {
	at time.Time
	// through is the highest position both handed out and reached by the
	// watermark at at.
	through int64
}

// observe records what s says at now: every position up to the lower of
// its watermark and its last position handed out is admitted from now on,
// if it was not already.
func (w *window) observe(now time.Time, s State) {
	if w.length <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notePause(now, s.Paused)
	w.steps = w.rise(w.steps, now, min(s.Watermark, s.LastPosition))
	w.marks = w.rise(w.marks, now, s.Watermark)
}

// takeOver starts w from what o saw: its rises and its pauses. o keeps
// its own; what it sees from now on is w's to see at its own reads.
func (w *window) takeOver(o *window) {
	o.mu.Lock()
	steps, marks, pauses := slices.Clone(o.steps), slices.Clone(o.marks), slices.Clone(o.pauses)
	o.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.steps, w.marks, w.pauses = steps, marks, pauses
}

// notePause records a pause that begins or ends at now.
func (w *window) notePause(now time.Time, paused bool) {
	n := len(w.pauses)
	pausing := n > 0 && w.pauses[n-1].end.IsZero()
	switch {
	case paused && !pausing:
		w.pauses = append(w.pauses, pause{start: now})
		if len(w.pauses) > maxPauses {
			w.pauses[1].start = w.pauses[0].start
			w.pauses = append(w.pauses[:0], w.pauses[1:]...)
		}
	case !paused && pausing:
		w.pauses[n-1].end = now
	}
}

// open is the time entry was open from since to now: the time between
// them less the pauses within it.
func (w *window) open(since, now time.Time) time.Duration {
	d := now.Sub(since)
	for _, p := range w.pauses {
		end := p.end
		if end.IsZero() || end.After(now) {
			end = now
		}
		start := p.start
		if since.After(start) {
			start = since
		}
		if end.After(start) {
			d -= end.Sub(start)
		}
	}
	return d
}

// within tells whether an admission at since is inside the window at now.
func (w *window) within(since, now time.Time) bool {
	return w.open(since, now) < w.length
}

// rise adds to steps that everything through through counts from now, if
// it did not already.
func (w *window) rise(steps []step, now time.Time, through int64) []step {
	n := len(steps)
	switch {
	case n > 0 && through <= steps[n-1].through:
		return steps
	case n > 0 && now.Truncate(windowGrain).Equal(steps[n-1].at.Truncate(windowGrain)):
		steps[n-1] = step{at: now, through: through}
		return steps
	}
	steps = append(steps, step{at: now, through: through})
	// Rises older than the window say nothing the newest of them does not.
	cut := 0
	for cut+1 < len(steps) && w.open(steps[cut+1].at, now) > w.length {
		cut++
	}
	if len(steps)-cut > maxWindowSteps {
		cut = len(steps) - maxWindowSteps
	}
	if cut > 0 {
		steps = append(steps[:0], steps[cut:]...)
	}
	return steps
}

// over reports whether position was admitted (handed out and reached)
// longer than the window ago.
func (w *window) over(now time.Time, position int64) bool {
	if w.length <= 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.steps {
		if w.within(s.at, now) {
			return false
		}
		if s.through >= position {
			return true
		}
	}
	return false
}

// overSince reports whether position, handed out at handedOut, was
// admitted longer than the window ago: from the later of its handout and
// the watermark's reaching it. Unlike the room's view of the last position
// handed out, a handout time is the same at every gateway, whichever
// handed the position out and whatever it leased.
func (w *window) overSince(now time.Time, position int64, handedOut time.Time) bool {
	if w.length <= 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.within(handedOut, now) {
		return false
	}
	for _, s := range w.marks {
		if w.within(s.at, now) {
			return false
		}
		if s.through >= position {
			return true
		}
	}
	return false
}

// AdmissionOver reports whether position's admission window has passed (a
// lookup in memory); its holder's may still be extended (Extended).
func (r *Room) AdmissionOver(position int64) bool {
	return r.window.over(r.opts.Now(), position)
}

// AdmissionOverSince is AdmissionOver for a position known to have been
// handed out at handedOut (a token's hat claim); a zero handedOut is
// AdmissionOver.
func (r *Room) AdmissionOverSince(position int64, handedOut time.Time) bool {
	if handedOut.IsZero() {
		return r.AdmissionOver(position)
	}
	return r.window.overSince(r.opts.Now(), position, handedOut)
}

// ErrNotExtensible is returned by ExtendAdmission when the store keeps no
// extensions.
var ErrNotExtensible = errors.New("the store keeps no admission extensions")

// ExtendAdmission keeps subject admitted beyond the admission window for d
// from now, on every node sharing the store: the origin calls it for a
// buyer who holds seats.
func (r *Room) ExtendAdmission(ctx context.Context, subject string, d time.Duration) error {
	es, ok := r.store.(ExtensionStore)
	if !ok {
		return ErrNotExtensible
	}
	return es.ExtendAdmission(ctx, r.event, subject, r.opts.Now().Add(d))
}

// Extended reports whether subject's admission was extended beyond the
// window.
func (r *Room) Extended(ctx context.Context, subject string) (bool, error) {
	es, ok := r.store.(ExtensionStore)
	if !ok {
		return false, nil
	}
	return es.AdmissionExtended(ctx, r.event, subject)
}

func extendedKey(event int64, subject string) string {
	return accountKey(event, subject) + ":extended"
}

// ExtendAdmission implements ExtensionStore: one key per extended subject,
// expiring with the extension.
func (r *RedisStore) ExtendAdmission(ctx context.Context, event int64, subject string, until time.Time) error {
	d := until.Sub(r.now())
	if d <= 0 {
		return nil
	}
	if err := r.rdb.Set(ctx, extendedKey(event, subject), until.UnixMilli(), d).Err(); err != nil {
		return unavailable("extend admission", err)
	}
	return nil
}

// AdmissionExtended implements ExtensionStore.
func (r *RedisStore) AdmissionExtended(ctx context.Context, event int64, subject string) (bool, error) {
	v, err := r.rdb.Get(ctx, extendedKey(event, subject)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, unavailable("admission extended", err)
	}
	until, err := strconv.ParseInt(v, 10, 64)
	return err == nil && r.now().Before(time.UnixMilli(until)), nil
}

// maxMemoryExtensions bounds the extensions a memory store keeps; expired
// ones are dropped first.
const maxMemoryExtensions = 1 << 20

// ExtendAdmission implements ExtensionStore.
func (m *MemoryStore) ExtendAdmission(_ context.Context, event int64, subject string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if m.extended == nil {
		m.extended = make(map[nonceKey]time.Time)
	}
	if len(m.extended) >= maxMemoryExtensions {
		for k, u := range m.extended {
			if !now.Before(u) {
				delete(m.extended, k)
			}
		}
		if len(m.extended) >= maxMemoryExtensions {
			return ErrUnavailable
		}
	}
	m.extended[nonceKey{event, subject}] = until
	return nil
}

// AdmissionExtended implements ExtensionStore.
func (m *MemoryStore) AdmissionExtended(_ context.Context, event int64, subject string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	until, ok := m.extended[nonceKey{event, subject}]
	return ok && m.now().Before(until), nil
}

// ForgetAccount implements AccountStore.
func (m *MemoryStore) ForgetAccount(_ context.Context, event int64, subject string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.accounts, nonceKey{event, subject})
	return nil
}

// ForgetAccount implements AccountStore.
func (r *RedisStore) ForgetAccount(ctx context.Context, event int64, subject string) error {
	if err := r.rdb.Del(ctx, accountKey(event, subject)).Err(); err != nil {
		return unavailable("forget account position", err)
	}
	return nil
}

var (
	_ ExtensionStore = (*MemoryStore)(nil)
	_ ExtensionStore = (*RedisStore)(nil)
)
