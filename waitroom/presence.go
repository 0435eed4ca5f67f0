package waitroom

import (
	"context"
	_ "embed"
	mbits "math/bits"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
)

// Presence: a waiting position whose holder has not polled within the
// abandon time stops counting in ahead and in estimates (docs/api.md §3,
// abandoners). The store keeps, per time slot, one bit per position polled
// in it: memory and Redis are bounded by the positions handed out (an
// eighth of a byte each per slot) times the few slots the abandon time
// spans, never a key per visitor or per poll. Gateways batch the bits they
// set and read the counts per block of positions once per poll of the
// room.

// presenceSlots is how many time slots are read: the abandon time is cut
// into presenceSlots-1 of them, so a position counts as present for between
// the abandon time and a quarter more after its last poll.
const presenceSlots = 5

// maxPresenceBytes bounds one read of the bitmap (4 million positions above
// the watermark, 512 KiB); positions beyond it count as present.
const maxPresenceBytes = 512 << 10

// PresenceStore records polls and counts the positions polled lately.
type PresenceStore interface {
	// MarkPolled records that positions were polled in slot (a number of
	// slot lengths since the epoch); the slot's record lives for keep.
	MarkPolled(ctx context.Context, event, slot int64, positions []int64, keep time.Duration) error
	// PolledBits returns the bytes firstByte to lastByte of the bitmap of
	// positions polled in any of slots, Redis's bit order (position p is
	// bit 7-p%8 of byte p/8); shorter where no position was marked.
	PolledBits(ctx context.Context, event int64, slots []int64, firstByte, lastByte int64) ([]byte, error)
}

// presence is a room's view of who is still there.
type presence struct {
	after time.Duration // 0: off
	slot  time.Duration

	mu sync.Mutex
	// pending is the positions polled since the last flush, repeats
	// included: an append costs every poll and arrival less than a set's
	// insert did. Repeats go at the flush, or when it fills up.
	pending []int64
	full    bool      // past maxPendingPolls positions: polls are dropped
	since   time.Time // when tracking started: before since+after, nothing is known
	table   atomic.Pointer[presenceTable]
}

// presenceTable is the bitmap of present positions from byte first on, and
// the count of present positions before each of its bytes.
type presenceTable struct {
	first  int64
	bits   []byte
	before []int32
}

func newPresenceTable(first int64, bits []byte) *presenceTable {
	t := &presenceTable{first: first, bits: bits, before: make([]int32, len(bits)+1)}
	for i, b := range bits {
		t.before[i+1] = t.before[i] + int32(mbits.OnesCount8(b))
	}
	return t
}

// upTo counts the present positions of the table below position p.
func (t *presenceTable) upTo(p int64) int64 {
	i := p/8 - t.first
	switch {
	case i < 0:
		return 0
	case i >= int64(len(t.bits)):
		return int64(t.before[len(t.bits)])
	}
	// The bits of byte i before p: the high ones.
	partial := t.bits[i] >> (8 - p%8)
	if p%8 == 0 {
		partial = 0
	}
	return int64(t.before[i]) + int64(mbits.OnesCount8(partial))
}

// maxPendingPolls bounds the positions a room buffers between two flushes;
// past it, polls are dropped until the next flush (their positions were
// most likely marked by an earlier poll).
const maxPendingPolls = 1 << 17

// Polled records that the holder of position polled: it is present for the
// abandon time from now. Buffered in memory, written by Run.
func (r *Room) Polled(position int64) {
	p := &r.presence
	if p.after <= 0 || position < 1 {
		return
	}
	p.mu.Lock()
	if !p.full {
		if len(p.pending) == 2*maxPendingPolls {
			slices.Sort(p.pending)
			p.pending = slices.Compact(p.pending)
			p.full = len(p.pending) > maxPendingPolls
		}
		p.pending = append(p.pending, position)
	}
	p.mu.Unlock()
}

// Ahead is how many positions between the watermark and position are still
// waiting: handed out, not admitted, and (with an abandon time) polled
// within it.
func (r *Room) Ahead(position int64) int64 {
	s := r.State()
	all := max(0, position-s.Watermark-1)
	if all == 0 {
		return 0
	}
	return min(all, r.presentBetween(s.Watermark+1, position-1, all))
}

// presentBetween counts the present positions in [lo, hi], or returns
// fallback when presence is unknown.
func (r *Room) presentBetween(lo, hi, fallback int64) int64 {
	p := &r.presence
	t := p.table.Load()
	known := p.after > 0 && t != nil && !r.opts.Now().Before(p.since.Add(p.after))
	if !known || hi < lo {
		return fallback
	}
	end := (t.first + int64(len(t.bits))) * 8
	if hi >= end {
		// Past the bitmap read: counted as present.
		return t.upTo(hi+1) - t.upTo(lo) + hi - max(lo, end) + 1
	}
	return t.upTo(hi+1) - t.upTo(lo)
}

// syncPresence writes the buffered polls and reads the table anew.
func (r *Room) syncPresence(ctx context.Context) error {
	p := &r.presence
	ps, ok := r.store.(PresenceStore)
	if p.after <= 0 || !ok {
		return nil
	}
	now := r.opts.Now()
	slot := now.UnixNano() / int64(p.slot)
	p.mu.Lock()
	pending := p.pending
	p.pending, p.full = make([]int64, 0, min(cap(pending), 2*maxPendingPolls)), false
	p.mu.Unlock()
	if len(pending) > 0 {
		if err := ps.MarkPolled(ctx, r.event, slot, pending, p.after+2*p.slot); err != nil {
			return err
		}
	}
	s := r.State()
	if s.LastPosition <= s.Watermark {
		return nil
	}
	first := (s.Watermark + 1) / 8
	last := min(s.LastPosition/8, first+maxPresenceBytes-1)
	slots := make([]int64, presenceSlots)
	for i := range slots {
		slots[i] = slot - int64(i)
	}
	got, err := ps.PolledBits(ctx, r.event, slots, first, last)
	if err != nil {
		return err
	}
	bits := make([]byte, last-first+1)
	copy(bits, got)
	t := newPresenceTable(first, bits)
	p.table.Store(t)
	return nil
}

func polledKey(event, slot int64) string {
	return "waitroom:" + hashtag.Event(event) + ":polled:" + strconv.FormatInt(slot, 10)
}

//go:embed presence.lua
var presenceLua string

var presenceScript = redis.NewScript(presenceLua)

// MarkPolled implements PresenceStore. The positions go as one BITFIELD,
// each run of consecutive ones (new arrivals come in runs) set as one
// field of up to 63 bits: a SETBIT per position was a command, its reply
// and its allocations each, for every arrival.
func (r *RedisStore) MarkPolled(ctx context.Context, event, slot int64, positions []int64, keep time.Duration) error {
	if len(positions) == 0 {
		return nil
	}
	key := polledKey(event, slot)
	p := r.rdb.Pipeline()
	p.BitField(ctx, key, bitRuns(positions)...)
	p.PExpire(ctx, key, keep)
	if _, err := p.Exec(ctx); err != nil {
		return unavailable("mark polled", err)
	}
	return nil
}

// maxBitRun is the widest unsigned field BITFIELD sets.
const maxBitRun = 63

// bitRuns is the BITFIELD arguments that set the bits of positions to 1:
// "SET u<n> <offset> <n ones>" per run of at most maxBitRun consecutive
// positions. positions is sorted in place.
func bitRuns(positions []int64) []any {
	slices.Sort(positions)
	var args []any
	for i := 0; i < len(positions); {
		start, n := positions[i], 1
		i++
		for i < len(positions) && n < maxBitRun && positions[i] <= start+int64(n) {
			if positions[i] == start+int64(n) {
				n++
			}
			i++ // a repeat of the run's last position adds nothing
		}
		args = append(args, "SET", bitFieldTypes[n], start, uint64(1)<<n-1)
	}
	return args
}

// bitFieldTypes names BITFIELD's unsigned types by width: u1 to u63.
var bitFieldTypes = func() [maxBitRun + 1]string {
	var t [maxBitRun + 1]string
	for n := 1; n <= maxBitRun; n++ {
		t[n] = "u" + strconv.Itoa(n)
	}
	return t
}()

// PolledBits implements PresenceStore.
func (r *RedisStore) PolledBits(ctx context.Context, event int64, slots []int64, firstByte, lastByte int64) ([]byte, error) {
	keys := []string{"waitroom:" + hashtag.Event(event) + ":polled:or:" + r.node}
	for _, s := range slots {
		keys = append(keys, polledKey(event, s))
	}
	got, err := presenceScript.Run(ctx, r.rdb, keys, firstByte, lastByte).Text()
	if err != nil {
		return nil, unavailable("polled positions", err)
	}
	return []byte(got), nil
}

// memPresence is an event's presence bitmaps in memory, by slot, in
// Redis's bit order.
type memPresence map[int64][]byte

// MarkPolled implements PresenceStore.
func (m *MemoryStore) MarkPolled(_ context.Context, event, slot int64, positions []int64, _ time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.event(event)
	if e.presence == nil {
		e.presence = make(memPresence)
	}
	// Slots older than any reader asks for go.
	for s := range e.presence {
		if s <= slot-presenceSlots {
			delete(e.presence, s)
		}
	}
	bm := e.presence[slot]
	for _, pos := range positions {
		i := int(pos / 8)
		if i >= len(bm) {
			bm = append(bm, make([]byte, i-len(bm)+1)...)
		}
		bm[i] |= 0x80 >> (pos % 8)
	}
	e.presence[slot] = bm
	return nil
}

// PolledBits implements PresenceStore.
func (m *MemoryStore) PolledBits(_ context.Context, event int64, slots []int64, firstByte, lastByte int64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.event(event)
	out := make([]byte, lastByte-firstByte+1)
	for _, s := range slots {
		bm := e.presence[s]
		for i := firstByte; i <= lastByte && i < int64(len(bm)); i++ {
			out[i-firstByte] |= bm[i]
		}
	}
	return out, nil
}

var (
	_ PresenceStore = (*MemoryStore)(nil)
	_ PresenceStore = (*RedisStore)(nil)
)
