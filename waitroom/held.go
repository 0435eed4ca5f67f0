package waitroom

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
)

// Conversion: the origin tells the store which admitted positions went on
// to hold seats, and when, so the closed-loop autopilot can measure the
// share of admitted users who hold and the time they take. One bit per
// position (bounded like the positions handed out) and a short list of the
// latest first holds.
//
// The origin also tells which positions were refused a hold for want of
// seats. A refused buyer who keeps trying and holds a seat that came back
// took the time the seat took to come back, not the time to decide: late
// in a sale most first holds are such, and counted they raise the decision
// time to about a hold's lifetime, during which the loop takes everyone it
// admitted for a returned seat for undecided. So a first hold that follows
// a refusal is counted as a hold but not listed among the recent ones.

// recentHolds is how many of the latest first holds the store keeps: the
// sample the time from admission to hold is measured on.
const recentHolds = 256

// Held is a position's first hold.
type Held struct {
	Position int64
	At       time.Time
}

// Holds is what the store knows of the positions that held.
type Holds struct {
	// UpTo counts the positions at or below the one asked for that held;
	// Total all of them.
	UpTo, Total int64
	// TriedUpTo and TriedTotal count likewise the positions whose holders
	// came to hold seats, whether they got them or were refused for want
	// of seats: how many of the admitted want to buy, which the seats left
	// do not bound.
	TriedUpTo, TriedTotal int64
	// Recent are the latest first holds, newest first.
	Recent []Held
}

// HeldStore records the positions that held seats.
type HeldStore interface {
	// MarkHeld records position's hold made at at; first is false when the
	// position had held before.
	MarkHeld(ctx context.Context, event, position int64, at time.Time) (first bool, err error)
	// Holds counts the positions that held, at or below upTo and in all.
	Holds(ctx context.Context, event, upTo int64) (Holds, error)
	// MarkRefused records that position was refused a hold for want of
	// seats: it came to hold, and its first hold, if one comes, is not
	// listed among the recent.
	MarkRefused(ctx context.Context, event, position int64) error
}

// Holder is the two notes of a new hold: its holder's admission kept until
// Until, and the hold of Position (below 1: none) made at At.
type Holder struct {
	Subject  string
	Until    time.Time
	Position int64
	At       time.Time
}

// HolderStore makes the two notes of new holds at once: what
// ExtensionStore.ExtendAdmission and HeldStore.MarkHeld do, for many
// holds in one call.
type HolderStore interface {
	NoteHolders(ctx context.Context, event int64, hs []Holder) error
}

// Holder is the note of a hold of position made now by subject, whose
// admission is to be kept for d, by the room's clock.
func (r *Room) Holder(subject string, d time.Duration, position int64) Holder {
	now := r.opts.Now()
	return Holder{Subject: subject, Until: now.Add(d), Position: position, At: now}
}

// NoteHolders is what the origin calls for the holds it makes: each
// holder's admission is kept (ExtendAdmission) and the autopilot counts
// each hold (NoteHold), in one round trip where the store can.
func (r *Room) NoteHolders(ctx context.Context, hs []Holder) error {
	if s, ok := r.store.(HolderStore); ok {
		return s.NoteHolders(ctx, r.event, hs)
	}
	var errs []error
	for _, h := range hs {
		errs = append(errs, r.ExtendAdmission(ctx, h.Subject, h.Until.Sub(r.opts.Now())), r.NoteHold(ctx, h.Position))
	}
	return errors.Join(errs...)
}

// NoteHold tells every gateway sharing the store that the holder of
// position holds seats. It does nothing with a store that keeps no such
// record.
func (r *Room) NoteHold(ctx context.Context, position int64) error {
	hs, ok := r.store.(HeldStore)
	if !ok || position < 1 {
		return nil
	}
	_, err := hs.MarkHeld(ctx, r.event, position, r.opts.Now())
	return err
}

// NoteRefused tells every gateway sharing the store that the holder of
// position was refused a hold because no seat was left: the origin calls
// it for each such refusal. It does nothing with a store that keeps no
// record of holds.
func (r *Room) NoteRefused(ctx context.Context, position int64) error {
	hs, ok := r.store.(HeldStore)
	if !ok || position < 1 {
		return nil
	}
	return hs.MarkRefused(ctx, r.event, position)
}

func heldKey(event int64) string       { return "waitroom:" + hashtag.Event(event) + ":held" }
func recentHeldKey(event int64) string { return "waitroom:" + hashtag.Event(event) + ":held:recent" }
func refusedKey(event int64) string    { return "waitroom:" + hashtag.Event(event) + ":refused" }
func triedKey(event int64) string      { return "waitroom:" + hashtag.Event(event) + ":tried" }

//go:embed held.lua
var heldLua string

var heldScript = redis.NewScript(heldLua)

// MarkHeld implements HeldStore.
func (r *RedisStore) MarkHeld(ctx context.Context, event, position int64, at time.Time) (bool, error) {
	n, err := heldScript.Run(ctx, r.rdb, []string{heldKey(event), recentHeldKey(event), refusedKey(event), triedKey(event)},
		recentHolds, position, at.UnixMilli(), 0, 0).Int()
	if err != nil {
		return false, unavailable("mark held", err)
	}
	return n == 1, nil
}

// NoteHolders implements HolderStore: held.lua with the extensions, whose
// keys are on the event's slot as the others are.
func (r *RedisStore) NoteHolders(ctx context.Context, event int64, hs []Holder) error {
	keys := make([]string, 4, 4+len(hs))
	keys[0], keys[1], keys[2], keys[3] = heldKey(event), recentHeldKey(event), refusedKey(event), triedKey(event)
	args := make([]any, 1, 1+4*len(hs))
	args[0] = recentHolds
	now := r.now()
	for _, h := range hs {
		ttl := max(h.Until.Sub(now).Milliseconds(), 0)
		if ttl > 0 {
			keys = append(keys, extendedKey(event, h.Subject))
		}
		args = append(args, h.Position, h.At.UnixMilli(), h.Until.UnixMilli(), ttl)
	}
	if err := heldScript.Run(ctx, r.rdb, keys, args...).Err(); err != nil {
		return unavailable("note holders", err)
	}
	return nil
}

// MarkRefused implements HeldStore.
func (r *RedisStore) MarkRefused(ctx context.Context, event, position int64) error {
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SetBit(ctx, refusedKey(event), position, 1)
		p.SetBit(ctx, triedKey(event), position, 1)
		return nil
	})
	if err != nil {
		return unavailable("mark refused", err)
	}
	return nil
}

// Holds implements HeldStore.
func (r *RedisStore) Holds(ctx context.Context, event, upTo int64) (Holds, error) {
	p := r.rdb.Pipeline()
	var below, triedBelow *redis.IntCmd
	if upTo >= 1 {
		below = p.BitCount(ctx, heldKey(event), &redis.BitCount{Start: 0, End: upTo, Unit: redis.BitCountIndexBit})
		triedBelow = p.BitCount(ctx, triedKey(event), &redis.BitCount{Start: 0, End: upTo, Unit: redis.BitCountIndexBit})
	}
	total := p.BitCount(ctx, heldKey(event), nil)
	tried := p.BitCount(ctx, triedKey(event), nil)
	recent := p.LRange(ctx, recentHeldKey(event), 0, -1)
	if _, err := p.Exec(ctx); err != nil {
		return Holds{}, unavailable("holds", err)
	}
	h := Holds{Total: total.Val(), TriedTotal: tried.Val()}
	if below != nil {
		h.UpTo, h.TriedUpTo = below.Val(), triedBelow.Val()
	}
	for _, s := range recent.Val() {
		pos, ms, ok := strings.Cut(s, ":")
		p, perr := strconv.ParseInt(pos, 10, 64)
		t, terr := strconv.ParseInt(ms, 10, 64)
		if !ok || perr != nil || terr != nil {
			return Holds{}, fmt.Errorf("holds: recent hold %q", s)
		}
		h.Recent = append(h.Recent, Held{Position: p, At: time.UnixMilli(t)})
	}
	return h, nil
}

// memHeld is an event's positions that held, and those refused, in
// memory.
type memHeld struct {
	bits, refused, tried positionBits
	recent               []Held // newest last
}

// positionBits is one bit per queue position, as the store's bitmaps.
type positionBits []uint64

// set sets position's bit and reports whether it was set already.
func (b *positionBits) set(position int64) (was bool) {
	i, bit := position/64, uint64(1)<<(position%64)
	if i >= int64(len(*b)) {
		*b = append(*b, make([]uint64, i-int64(len(*b))+1)...)
	}
	was = (*b)[i]&bit != 0
	(*b)[i] |= bit
	return was
}

// count counts the bits set at or below upTo, and in all.
func (b positionBits) count(upTo int64) (below, total int64) {
	for i, w := range b {
		n := int64(bits.OnesCount64(w))
		total += n
		switch first := int64(i) * 64; {
		case first+63 <= upTo:
			below += n
		case first <= upTo:
			below += int64(bits.OnesCount64(w & (1<<(upTo-first+1) - 1)))
		}
	}
	return below, total
}

func (b positionBits) has(position int64) bool {
	i := position / 64
	return i < int64(len(b)) && b[i]&(1<<(position%64)) != 0
}

// MarkHeld implements HeldStore.
func (m *MemoryStore) MarkHeld(_ context.Context, event, position int64, at time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := &m.event(event).held
	h.tried.set(position)
	if h.bits.set(position) {
		return false, nil
	}
	if h.refused.has(position) {
		return true, nil
	}
	h.recent = append(h.recent, Held{Position: position, At: at})
	if n := len(h.recent) - recentHolds; n > 0 {
		h.recent = append(h.recent[:0], h.recent[n:]...)
	}
	return true, nil
}

// MarkRefused implements HeldStore.
func (m *MemoryStore) MarkRefused(_ context.Context, event, position int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := &m.event(event).held
	h.refused.set(position)
	h.tried.set(position)
	return nil
}

// Holds implements HeldStore.
func (m *MemoryStore) Holds(_ context.Context, event, upTo int64) (Holds, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := &m.event(event).held
	var out Holds
	out.UpTo, out.Total = h.bits.count(upTo)
	out.TriedUpTo, out.TriedTotal = h.tried.count(upTo)
	for i := len(h.recent) - 1; i >= 0; i-- {
		out.Recent = append(out.Recent, h.recent[i])
	}
	return out, nil
}

var (
	_ HeldStore   = (*MemoryStore)(nil)
	_ HeldStore   = (*RedisStore)(nil)
	_ HolderStore = (*RedisStore)(nil)
)
