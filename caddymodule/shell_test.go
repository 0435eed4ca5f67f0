package caddymodule

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A waiting page filled into its shell is, byte for byte, the page the
// template writes for that visitor, in every language, paused or not, with
// or without an estimate, whatever the URL its links carry.
func TestWaitingShellIsTheTemplatesPage(t *testing.T) {
	h := provision(t, &Handler{})
	urls := []*url.URL{
		{Path: "/"},
		{Path: "/events/42", RawQuery: "lang=de&x=%3Cb%3E"},
		{Path: "/a b/\"q\"", RawQuery: "utm=1&utm=2"},
	}
	for _, text := range h.catalog.Languages() {
		words, err := text.Wait(240e9, true)
		require.NoError(t, err)
		for _, u := range urls {
			for _, c := range []struct {
				paused bool
				words  string
				retry  int
			}{{false, words, 12}, {false, "", 2}, {true, "", 30}} {
				page := WaitingPage{Event: h.Event, AdmittedThrough: 5000, EstimatedWaitSeconds: 240,
					EstimatedWait: c.words, Paused: c.paused, RetryAfterSeconds: c.retry}
				sh, ok, err := h.waitingShell(text, page)
				require.NoError(t, err)
				require.True(t, ok, "the stand-ins occur once each")
				for _, n := range []struct{ pos, ahead int64 }{{1, 0}, {12400, 7399}, {1_234_567, 999}, {9_000_000_000, 8_999_994_999}} {
					name := fmt.Sprintf("%s %s paused=%v words=%q %d/%d", text.Lang(), u, c.paused, c.words, n.pos, n.ahead)
					want := page
					want.Page, err = h.catalogPage(text, u)
					require.NoError(t, err)
					want.Position, want.Ahead = n.pos, n.ahead
					var b strings.Builder
					require.NoError(t, defaultWaitingPage.Execute(&b, want), name)
					query, err := linkQuery(u)
					require.NoError(t, err)
					assert.Equal(t, b.String(), string(sh.fill(nil, text.Number(n.pos), text.Number(n.ahead), query)), name)
					assert.Equal(t, b.String(), gunzip(t, sh.fillGzip(nil, text.Number(n.pos), text.Number(n.ahead), query)), name)
				}
			}
		}
	}
}

// A page where a stand-in does not occur exactly once, place first, makes
// no shell.
func TestCutRefusesAmbiguousPages(t *testing.T) {
	for _, page := range []string{"no numbers", "7 and 7 and 8", "8 then 7", "7 and 8 and 8"} {
		_, ok := cut(page, "7", "8", "Q")
		assert.False(t, ok, page)
	}
	sh, ok := cut("a 7 b 8 c", "7", "8", "Q")
	require.True(t, ok)
	assert.Equal(t, "x a &lt;1&gt; b 2 c", string(sh.fill([]byte("x "), "<1>", "2", "q")))
	sh, ok = cut("Q a 7 Q b 8 cQ", "7", "8", "Q")
	require.True(t, ok)
	assert.Equal(t, "q&amp; a 1 q&amp; b 2 cq&amp;", string(sh.fill(nil, "1", "2", "q&amp;")))
}

// The gzip form of a shell is the page itself, whatever is in the holes:
// empty parts, escaped numbers, and a query longer than a stored block.
func TestGzipShellIsThePage(t *testing.T) {
	long := strings.Repeat("q=%3C1%3E&amp;", 0xffff/7)
	for _, c := range []struct{ page, pos, ahead, query string }{
		{"a 7 b 8 c", "1", "2", "q"},
		{"7Q8", "<1>", "", ""},
		{"Q a 7 Q b 8 cQ", "1,234", "56", long},
		{strings.Repeat("<p>same words</p>", 300) + "7 Q 8" + strings.Repeat("<i>x</i>", 500), "9", "10", "a=b&amp;"},
	} {
		sh, ok := cut(c.page, "7", "8", "Q")
		require.True(t, ok, c.page)
		want := string(sh.fill(nil, c.pos, c.ahead, c.query))
		got := sh.fillGzip([]byte("kept"), c.pos, c.ahead, c.query)
		require.Equal(t, "kept", string(got[:4]))
		assert.Equal(t, want, gunzip(t, got[4:]), c.page[:min(len(c.page), 40)])
	}
}

// gunzip decompresses one gzip member, checking its checksum and size.
func gunzip(t *testing.T, b []byte) string {
	t.Helper()
	in := bytes.NewReader(b)
	r, err := gzip.NewReader(in)
	require.NoError(t, err)
	r.Multistream(false)
	out, err := io.ReadAll(r)
	require.NoError(t, err, "a valid gzip member")
	assert.Zero(t, in.Len(), "nothing after the member")
	return string(out)
}

// The cache starts over past its bound in bytes rather than growing with
// what visitors choose.
func TestShellsAreBoundedByBytes(t *testing.T) {
	var c shells
	big := strings.Repeat("x", 64<<10)
	for i := range 2 * maxShellBytes / len(big) {
		c.put(shellKey{lang: fmt.Sprint(i)}, shell{parts: [][]byte{[]byte(big)}})
	}
	assert.LessOrEqual(t, c.bytes, maxShellBytes)
	total := 0
	for _, sh := range *c.m.Load() {
		total += sh.size()
	}
	assert.Equal(t, total, c.bytes)
	_, ok := c.get(shellKey{lang: fmt.Sprint(2*maxShellBytes/len(big) - 1)})
	assert.True(t, ok, "the newest is kept")
}

// The waiting page's shell is keyed by what the page says, not by the URL
// the visitor chose: any path and query share one shell.
func TestShellsAreNotKeyedByTheURL(t *testing.T) {
	h := provision(t, &Handler{})
	for i := range 3 {
		join(t, h)
		tok, _ := tokenAt(t, h, 1)
		for _, target := range []string{"/buy", "/buy?x=" + fmt.Sprint(i), "/other/" + fmt.Sprint(i) + "?utm=" + strings.Repeat("y", 1000)} {
			r := htmlGet(h, target)
			r.Header.Set(HeaderToken, tok)
			res := serve(t, h, r)
			require.Equal(t, StatusWaiting, res.status(), target)
		}
	}
	assert.Len(t, *h.shells.m.Load(), 1)
}

// TestCRCOverIsUpdate: carrying a CRC-32 over a part by its tables is
// crc32.Update over the part's bytes, whatever the CRC before it.
func TestCRCOverIsUpdate(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 7, 64, 1000, 5000} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rnd.Uint32())
		}
		o := newCRCOver(p)
		for _, c := range []uint32{0, 1, 0x80000000, 0xffffffff, rnd.Uint32(), rnd.Uint32()} {
			assert.Equal(t, crc32.Update(c, crc32.IEEETable, p), o.update(c), "%d bytes, crc %#x", n, c)
		}
	}
}
