package caddymodule

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"html/template"
	mbits "math/bits"
	"strings"
	"sync"
	"sync/atomic"
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
	parts [][]byte
	holes []hole
	// zparts are the parts deflated once each, for browsers, which all
	// accept gzip: the page is several times the size of a JSON answer,
	// and compressing it per poll would cost more than sending it (see
	// fillGzip).
	zparts [][]byte
	// crcs carry a CRC-32 over each part without reading it (fillGzip).
	crcs []crcOver
}

// crcOver is what a part does to a CRC-32 (IEEE) running over it:
// crc32.Update(c, p) is shift(c) xor sum, with sum the part's own checksum
// and shift linear in c, kept as a table for each of c's four bytes. Every
// answer used to checksum the page's fixed parts again, some kilobytes.
type crcOver struct {
	sum   uint32
	shift [4][256]uint32
}

func newCRCOver(p []byte) crcOver {
	o := crcOver{sum: crc32.ChecksumIEEE(p)}
	var bit [32]uint32 // the shift of each bit of c
	for i := range bit {
		bit[i] = crc32.Update(1<<i, crc32.IEEETable, p) ^ o.sum
	}
	for k := range o.shift {
		for b := 1; b < 256; b++ {
			low := b & -b // a byte's shift is the xor of its bits'
			o.shift[k][b] = o.shift[k][b^low] ^ bit[8*k+mbits.TrailingZeros8(uint8(low))]
		}
	}
	return o
}

// update is crc32.Update(c, crc32.IEEETable, p) for the part p.
func (o *crcOver) update(c uint32) uint32 {
	return o.shift[0][byte(c)] ^ o.shift[1][byte(c>>8)] ^ o.shift[2][byte(c>>16)] ^ o.shift[3][c>>24] ^ o.sum
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
			sh.parts = append(sh.parts, []byte(page))
			sh.zparts = deflateParts(sh.parts)
			sh.crcs = make([]crcOver, len(sh.parts))
			for i, p := range sh.parts {
				sh.crcs[i] = newCRCOver(p)
			}
			return sh, true
		}
		sh.parts = append(sh.parts, []byte(page[:at]))
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

// deflateParts compresses each part on its own, byte-aligned after it
// (a sync flush; the last part ends the stream), so that the holes can go
// between them as stored blocks. A part may not refer back to the one
// before: the hole between them differs from one visitor to the next, and
// so would the distance.
func deflateParts(parts [][]byte) [][]byte {
	z := make([][]byte, len(parts))
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression) // the level is valid
	for i, p := range parts {
		buf.Reset()
		w.Reset(&buf)
		w.Write(p) // a bytes.Buffer does not fail
		if i < len(parts)-1 {
			w.Flush()
		} else {
			w.Close()
		}
		z[i] = bytes.Clone(buf.Bytes())
	}
	return z
}

// gzipHeader is a gzip member's header without a name, time or flags.
var gzipHeader = [10]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255}

// fillGzip appends the page for one visitor to b as gzip does, from the
// parts deflated once: the holes go in stored (uncompressed) blocks, and
// only the checksum runs over the whole page. The arguments are fill's.
func (s shell) fillGzip(b []byte, pos, ahead, query string) []byte {
	b = append(b, gzipHeader[:]...)
	var crc uint32
	size := 0
	for i, h := range s.holes {
		b = append(b, s.zparts[i]...)
		crc = s.crcs[i].update(crc)
		var v string
		switch h {
		case holePosition:
			v = template.HTMLEscapeString(pos)
		case holeAhead:
			v = template.HTMLEscapeString(ahead)
		case holeQuery:
			v = query
		}
		b, crc = appendStored(b, crc, v)
		size += len(s.parts[i]) + len(v)
	}
	last := s.parts[len(s.parts)-1]
	b = append(b, s.zparts[len(s.zparts)-1]...)
	crc = s.crcs[len(s.crcs)-1].update(crc)
	size += len(last)
	b = binary.LittleEndian.AppendUint32(b, crc)
	return binary.LittleEndian.AppendUint32(b, uint32(size))
}

// appendStored appends v as non-final stored deflate blocks of at most
// 0xffff bytes, which start byte-aligned, as every deflated part ends
// (RFC 1951, 3.2.4), and returns crc updated with v, read from where it
// was copied to.
func appendStored(b []byte, crc uint32, v string) ([]byte, uint32) {
	for len(v) > 0 {
		n := min(len(v), 0xffff)
		b = append(b, 0)
		b = binary.LittleEndian.AppendUint16(b, uint16(n))
		b = binary.LittleEndian.AppendUint16(b, ^uint16(n))
		b = append(b, v[:n]...)
		crc = crc32.Update(crc, crc32.IEEETable, b[len(b)-n:])
		v = v[n:]
	}
	return b, crc
}

// size is about how many bytes s holds.
func (s shell) size() int {
	n := len(s.holes)
	for _, p := range s.parts {
		n += len(p)
	}
	for _, z := range s.zparts {
		n += len(z)
	}
	return n + len(s.crcs)*binary.Size(crcOver{})
}

// maxShellBytes bounds the cache by what it holds: a page is some tens of
// KiB, and an operator's catalogs may make many keys. Past the bound the
// cache starts over.
const maxShellBytes = 4 << 20

// shells holds the rendered shells of one handler. Every poll of the page
// reads it and few write it, so a read takes no lock: the map is replaced
// whole by each put (the read lock's shared counter was a hundredth of the
// page's time in Caddy on two cores).
type shells struct {
	m     atomic.Pointer[map[shellKey]shell]
	mu    sync.Mutex // puts
	bytes int
}

func (c *shells) get(k shellKey) (shell, bool) {
	m := c.m.Load()
	if m == nil {
		return shell{}, false
	}
	s, ok := (*m)[k]
	return s, ok
}

func (c *shells) put(k shellKey, s shell) {
	size := s.size()
	if size > maxShellBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := map[shellKey]shell{}
	if old := c.m.Load(); old != nil {
		if prev, ok := (*old)[k]; ok {
			c.bytes -= prev.size()
		}
		if c.bytes+size <= maxShellBytes {
			for key, sh := range *old {
				if key != k {
					next[key] = sh
				}
			}
		} else {
			c.bytes = 0
		}
	}
	next[k] = s
	c.bytes += size
	c.m.Store(&next)
}
