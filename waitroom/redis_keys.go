package waitroom

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
)

// The fleet's keys. Every gateway of an event, and the origin, must hold
// the same secret under each key id: a gateway whose secret differs takes
// the fleet's tokens for forgeries, so a visitor whose request lands on it
// queues again at the back; an origin whose secret differs refuses every
// buyer; and neither can tell that from a forgery. Each holder therefore
// notes, per key id, a check of its secret (KeyCheck) in the store, and
// reads the checks the others noted.

// KeyNoteEvery is how often a key holder notes its checks; KeyNoteWindow
// how long a check counts after it was last noted, so a secret corrected,
// or a holder gone, stops counting after it.
const (
	KeyNoteEvery  = 30 * time.Second
	KeyNoteWindow = 3 * KeyNoteEvery
)

// KeyNoter is a store shared by a fleet, where the holders of the keys (the
// gateways, the origin) compare their checks.
type KeyNoter interface {
	NoteKeys(ctx context.Context, event int64, checks map[string]string, window time.Duration) ([]KeyDisagreement, error)
}

var _ KeyNoter = (*RedisStore)(nil)

// keysKey is the sorted set of the checks noted for event's key id: the
// member is a check, its score when a node last noted it (Unix ms).
func keysKey(event int64, kid string) string {
	return "waitroom:" + hashtag.Event(event) + ":keys:" + kid
}

// KeyDisagreement is a key id the fleet's nodes hold different secrets
// under: Checks are the checks noted within the window, the caller's
// among them, sorted.
type KeyDisagreement struct {
	KeyID  string
	Checks []string
}

// NoteKeys notes checks (key id → check of its secret) as this node's for
// event, forgets the checks no node noted within window, and answers the
// key ids whose checks differ across the fleet (none when they agree). A
// node calls it again well within window, or its checks are forgotten.
func (r *RedisStore) NoteKeys(ctx context.Context, event int64, checks map[string]string, window time.Duration) ([]KeyDisagreement, error) {
	kids := make([]string, 0, len(checks))
	for kid := range checks {
		kids = append(kids, kid)
	}
	sort.Strings(kids)
	now := r.now().UnixMilli()
	stale := "(" + strconv.FormatInt(now-window.Milliseconds(), 10)
	// One round trip for every key id; each sorted set expires with its
	// window, so the key ids of a retired config go.
	pipe := r.ctl.TxPipeline()
	ranges := make([]*redis.StringSliceCmd, len(kids))
	for i, kid := range kids {
		k := keysKey(event, kid)
		pipe.ZAdd(ctx, k, redis.Z{Score: float64(now), Member: checks[kid]})
		pipe.ZRemRangeByScore(ctx, k, "-inf", stale)
		pipe.PExpire(ctx, k, window)
		ranges[i] = pipe.ZRange(ctx, k, 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, unavailable("note keys", err)
	}
	var out []KeyDisagreement
	for i, kid := range kids {
		if seen := ranges[i].Val(); len(seen) > 1 {
			sort.Strings(seen)
			out = append(out, KeyDisagreement{KeyID: kid, Checks: seen})
		}
	}
	return out, nil
}
