package caddymodule

import (
	"html/template"
	"strings"
	"sync"
)

// The default waiting page is answered to every poll of every waiting
// visitor, and executing its template per request cost five JSON answers
// (docs/scale.md). What the page says depends on little: the language, the
// pause, the estimate in words and Retry-After. Only the place, the people
// ahead and the query the language links keep differ from one visitor to
// the next. So the page is executed once per such key with stand-ins where
// those go, and each answer fills them in. A configured
// waiting_template may use any field anywhere and is always executed.

// shellKey is what the default waiting page depends on besides the two
// numbers and the query its language links carry. Nothing of the URL is in
// it: the visitor chooses the URL, and the cache must not grow with it.
type shellKey struct {
	// held is the all-held sentence, empty when not all is held.
	lang, words, held string
	paused            bool
	retry             int
}

// shell is the waiting page cut where the place, the people ahead and the
// query of each language link go: parts[i] is followed by holes[i], the
// last part by nothing.
type shell struct {
	parts []string
	holes []hole
}

type hole uint8

const (
	holePosition hole = iota
	holeAhead
	holeQuery
)

// Stand-ins for the place and the people ahead while a shell is rendered.
// Their written form (with the language's digit grouping) must occur
// exactly once each, or the shell is not used.
const (
	shellPosition int64 = 918_273_645_546_372
	shellAhead    int64 = 192_837_465_564_738
)

// shellQuery stands in for the query the language links keep (the page's
// own, without lang); nothing in it is escaped in a URL attribute.
const shellQuery = "zqWaitroomQuery918273zq"

// cut makes a shell of page, rendered with the stand-ins written as pos
// and ahead and with query where each link's kept query and its "&" go;
// false when pos and ahead do not each occur once, place first.
func cut(page, pos, ahead, query string) (shell, bool) {
	if strings.Count(page, pos) != 1 || strings.Count(page, ahead) != 1 || strings.Index(page, pos) > strings.Index(page, ahead) {
		return shell{}, false
	}
	var sh shell
	marks := [...]struct {
		s string
		h hole
	}{{pos, holePosition}, {ahead, holeAhead}, {query, holeQuery}}
	for {
		at, which := -1, 0
		for i, m := range marks {
			if j := strings.Index(page, m.s); j >= 0 && (at < 0 || j < at) {
				at, which = j, i
			}
		}
		if at < 0 {
			sh.parts = append(sh.parts, page)
			return sh, true
		}
		sh.parts = append(sh.parts, page[:at])
		sh.holes = append(sh.holes, marks[which].h)
		page = page[at+len(marks[which].s):]
	}
}

// fill appends the page for one visitor to b; pos and ahead are the
// numbers in the page's language, escaped here as the template would;
// query is what the links keep, escaped already (linkQuery).
func (s shell) fill(b []byte, pos, ahead, query string) []byte {
	for i, h := range s.holes {
		b = append(b, s.parts[i]...)
		switch h {
		case holePosition:
			b = append(b, template.HTMLEscapeString(pos)...)
		case holeAhead:
			b = append(b, template.HTMLEscapeString(ahead)...)
		case holeQuery:
			b = append(b, query...)
		}
	}
	return append(b, s.parts[len(s.parts)-1]...)
}

// size is about how many bytes s holds.
func (s shell) size() int {
	n := len(s.holes)
	for _, p := range s.parts {
		n += len(p)
	}
	return n
}

// maxShellBytes bounds the cache by what it holds: a page is some tens of
// KiB, and an operator's catalogs may make many keys. Past the bound the
// cache starts over.
const maxShellBytes = 4 << 20

// shells holds the rendered shells of one handler.
type shells struct {
	mu    sync.RWMutex
	m     map[shellKey]shell
	bytes int
}

func (c *shells) get(k shellKey) (shell, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.m[k]
	return s, ok
}

func (c *shells) put(k shellKey, s shell) {
	size := s.size()
	if size > maxShellBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[k]; ok {
		c.bytes -= old.size()
		delete(c.m, k)
	}
	if c.m == nil || c.bytes+size > maxShellBytes {
		c.m, c.bytes = make(map[shellKey]shell), 0
	}
	c.m[k] = s
	c.bytes += size
}
