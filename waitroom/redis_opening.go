package waitroom

import (
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
)

func lotteryKey(event int64) string  { return "waitroom:" + hashtag.Event(event) + ":lottery" }
func entrantsKey(event int64) string { return "waitroom:" + hashtag.Event(event) + ":entrants" }
func drawnKey(event int64) string    { return "waitroom:" + hashtag.Event(event) + ":drawn" }
func nonceStoreKey(event int64, id string) string {
	return "waitroom:" + hashtag.Event(event) + ":nonce:" + id
}

//go:embed enter.lua
var enterLua string

var enterScript = redis.NewScript(enterLua)

//go:embed close.lua
var closeLua string

var closeScript = redis.NewScript(closeLua)

// drawBatch bounds the fields of one HSET of the drawn positions and the
// members of one SSCAN page, so a large draw never blocks Redis for long.
const drawBatch = 5000

// EnsureSeed implements LotteryStore.
func (r *RedisStore) EnsureSeed(ctx context.Context, event int64, seed []byte, until time.Time) ([]byte, error) {
	key := lotteryKey(event)
	var get *redis.StringCmd
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSetNX(ctx, key, "seed", hex.EncodeToString(seed))
		p.PExpireAt(ctx, key, until)
		get = p.HGet(ctx, key, "seed")
		return nil
	})
	if err != nil {
		return nil, unavailable("lottery seed", err)
	}
	kept, err := hex.DecodeString(get.Val())
	if err != nil {
		return nil, fmt.Errorf("lottery seed: stored seed is not hex: %w", err)
	}
	return kept, nil
}

// Enter implements LotteryStore.
func (r *RedisStore) Enter(ctx context.Context, event int64, subject string, until time.Time) error {
	n, err := enterScript.Run(ctx, r.rdb, []string{lotteryKey(event), entrantsKey(event)}, subject, until.UnixMilli()).Int64()
	if err != nil {
		return unavailable("enter pre-queue", err)
	}
	if n == 0 {
		return ErrEntriesClosed
	}
	return nil
}

// CloseEntries implements LotteryStore.
func (r *RedisStore) CloseEntries(ctx context.Context, event int64, until time.Time) (Closed, error) {
	res, err := closeScript.Run(ctx, r.rdb,
		[]string{lotteryKey(event), entrantsKey(event), stateKey(event), positionsKey(event)},
		r.now().UnixMilli(), until.UnixMilli()).Result()
	if err != nil {
		return Closed{}, unavailable("close pre-queue", err)
	}
	switch v := res.(type) {
	case int64:
		if v == nextRestoring {
			return Closed{}, fmt.Errorf("close pre-queue: %w", ErrRestoring)
		}
		return Closed{}, fmt.Errorf("close pre-queue: %w", ErrNoState)
	case []any:
		if len(v) == 2 {
			base, ok1 := v[0].(int64)
			count, ok2 := v[1].(int64)
			if ok1 && ok2 {
				c := Closed{Base: base, Count: count}
				r.mu.Lock()
				e := r.event(event)
				e.high = max(e.high, base+count)
				r.mu.Unlock()
				return c, nil
			}
		}
	}
	return Closed{}, fmt.Errorf("close pre-queue: unexpected answer %v", res)
}

// Entrants implements LotteryStore.
func (r *RedisStore) Entrants(ctx context.Context, event int64) ([]string, error) {
	var out []string
	var cursor uint64
	for {
		page, next, err := r.rdb.SScan(ctx, entrantsKey(event), cursor, "", drawBatch).Result()
		if err != nil {
			return nil, unavailable("read entrants", err)
		}
		out = append(out, page...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	// SSCAN may return a member twice.
	seen := make(map[string]struct{}, len(out))
	uniq := out[:0]
	for _, id := range out {
		if _, dup := seen[id]; !dup {
			seen[id] = struct{}{}
			uniq = append(uniq, id)
		}
	}
	return uniq, nil
}

// SaveDraw implements LotteryStore.
func (r *RedisStore) SaveDraw(ctx context.Context, event int64, positions map[string]int64, until time.Time) error {
	key := drawnKey(event)
	batch := make([]any, 0, 2*drawBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, key, batch...)
			p.PExpireAt(ctx, key, until)
			return nil
		})
		batch = batch[:0]
		return err
	}
	for id, pos := range positions {
		batch = append(batch, id, pos)
		if len(batch) >= 2*drawBatch {
			if err := flush(); err != nil {
				return unavailable("save draw", err)
			}
		}
	}
	if err := flush(); err != nil {
		return unavailable("save draw", err)
	}
	if err := r.rdb.HSet(ctx, lotteryKey(event), "drawn", r.now().UnixMilli()).Err(); err != nil {
		return unavailable("save draw", err)
	}
	return nil
}

// Lottery implements LotteryStore.
func (r *RedisStore) Lottery(ctx context.Context, event int64) (LotteryRecord, error) {
	vals, err := r.rdb.HMGet(ctx, lotteryKey(event), "seed", "closed", "base", "count", "drawn").Result()
	if err != nil {
		return LotteryRecord{}, unavailable("read lottery", err)
	}
	str := func(i int) string { s, _ := vals[i].(string); return s }
	var rec LotteryRecord
	if s := str(0); s != "" {
		if rec.Seed, err = hex.DecodeString(s); err != nil {
			return LotteryRecord{}, fmt.Errorf("read lottery: stored seed is not hex: %w", err)
		}
	}
	rec.EntriesClosed = str(1) == "1"
	rec.Reserved.Base, _ = strconv.ParseInt(str(2), 10, 64)
	rec.Reserved.Count, _ = strconv.ParseInt(str(3), 10, 64)
	rec.Drawn = str(4) != ""
	return rec, nil
}

// DrawnPosition implements LotteryStore.
func (r *RedisStore) DrawnPosition(ctx context.Context, event int64, subject string) (int64, bool, error) {
	pos, err := r.rdb.HGet(ctx, drawnKey(event), subject).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, false, nil
	case err != nil:
		return 0, false, unavailable("drawn position", err)
	}
	return pos, true, nil
}

// UseNonce implements NonceStore with SET NX PXAT: the first use sets the
// key, every later one finds it.
func (r *RedisStore) UseNonce(ctx context.Context, event int64, id string, until time.Time) (bool, error) {
	err := r.rdb.SetArgs(ctx, nonceStoreKey(event, id), 1, redis.SetArgs{Mode: "NX", ExpireAt: until}).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, unavailable("use nonce", err)
	}
	return true, nil
}

var (
	_ LotteryStore = (*RedisStore)(nil)
	_ NonceStore   = (*RedisStore)(nil)
)
