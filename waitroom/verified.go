package waitroom

import (
	"sync"
	"time"
)

// verifiedCacheSize bounds how many verified tokens a KeySet remembers: a
// waiting visitor polls every few seconds and an admitted one makes a burst of
// requests, so the same token is checked again and again; tens of thousands
// of entries hold the active part of a large queue in a few MiB.
const verifiedCacheSize = 1 << 16

// verifiedCache remembers tokens that passed verification (or were issued
// here and Remembered), so a repeat costs a map lookup instead of an HMAC
// and a JSON decode.
// Only exact token strings are kept, signature included, so nothing unsigned
// can be looked up into acceptance; expiry is still checked on every hit.
//
// It keeps two generations: when the current one is full it becomes the
// previous one and the old previous one is dropped. Tokens still in use are
// copied forward on their next hit.
type verifiedCache struct {
	mu        sync.RWMutex
	cur, prev map[string]Ticket
	limit     int
}

func newVerifiedCache(limit int) *verifiedCache {
	return &verifiedCache{cur: make(map[string]Ticket), limit: limit}
}

func (c *verifiedCache) get(raw string) (Ticket, bool) {
	c.mu.RLock()
	t, ok := c.cur[raw]
	if ok {
		c.mu.RUnlock()
		return t, true
	}
	t, ok = c.prev[raw]
	c.mu.RUnlock()
	if ok {
		c.put(raw, t)
	}
	return t, ok
}

func (c *verifiedCache) put(raw string, t Ticket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cur) >= c.limit/2 {
		c.prev, c.cur = c.cur, make(map[string]Ticket, c.limit/2)
	}
	c.cur[raw] = t
}

// fresh reports whether a cached ticket is still within its lifetime, with
// the same leeway the parser allows.
func (t Ticket) fresh(now time.Time) bool {
	return now.Before(t.ExpiresAt.Add(DefaultLeeway)) && !now.Add(DefaultLeeway).Before(t.IssuedAt)
}
