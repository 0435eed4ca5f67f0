package caddymodule

import (
	"html/template"
	"strings"
	"sync"
)

// The default waiting page is answered to every poll of every waiting
// visitor, and executing its template per request cost five JSON answers
// (docs/scale.md). What the page says depends on little: the language, the
// pause, the estimate in words, Retry-After and the URL its language links
// point to. Only the place and the people ahead differ from one visitor to
// the next. So the page is executed once per such key with stand-in numbers
// where those two go, and each answer fills them in. A configured
// waiting_template may use any field anywhere and is always executed.

// shellKey is what the default waiting page depends on besides the two
// numbers.
type shellKey struct {
	// path and query are the URL's, as its links write them.
	lang, words, path, query string
	paused                   bool
	retry                    int
}

// shell is the waiting page cut where the place and the people ahead go.
type shell struct{ head, middle, tail string }

// Stand-ins for the place and the people ahead while a shell is rendered.
// Their written form (with the language's digit grouping) must occur
// exactly once each, or the shell is not used.
const (
	shellPosition int64 = 918_273_645_546_372
	shellAhead    int64 = 192_837_465_564_738
)

// cut makes a shell of page, rendered with the stand-ins written as pos
// and ahead; false when they do not each occur once, place first.
func cut(page, pos, ahead string) (shell, bool) {
	if strings.Count(page, pos) != 1 || strings.Count(page, ahead) != 1 {
		return shell{}, false
	}
	head, rest, _ := strings.Cut(page, pos)
	middle, tail, ok := strings.Cut(rest, ahead)
	if !ok {
		return shell{}, false
	}
	return shell{head, middle, tail}, true
}

// fill appends the page for one visitor to b; pos and ahead are the
// numbers in the page's language, escaped as the template would.
func (s shell) fill(b []byte, pos, ahead string) []byte {
	b = append(b, s.head...)
	b = append(b, template.HTMLEscapeString(pos)...)
	b = append(b, s.middle...)
	b = append(b, template.HTMLEscapeString(ahead)...)
	return append(b, s.tail...)
}

// maxShells bounds the cache: the URL is part of the key, and a visitor
// chooses it. Past the bound the cache starts over.
const maxShells = 1024

// shells holds the rendered shells of one handler.
type shells struct {
	mu sync.RWMutex
	m  map[shellKey]shell
}

func (c *shells) get(k shellKey) (shell, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.m[k]
	return s, ok
}

func (c *shells) put(k shellKey, s shell) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxShells {
		c.m = make(map[shellKey]shell)
	}
	c.m[k] = s
}
