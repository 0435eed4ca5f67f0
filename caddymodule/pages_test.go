package caddymodule

import (
	"bytes"
	"compress/gzip"
	"context"
	"html/template"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/encode"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
)

// htmlGet is a browser's request for the page: no JSON in Accept.
func htmlGet(h *Handler, target string, headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://tickets.test"+target, nil)
	r.Header.Set("Accept", "text/html,application/xhtml+xml")
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	return r
}

func TestPageLanguage(t *testing.T) {
	h := provision(t, &Handler{})
	for _, c := range []struct {
		name   string
		target string
		accept string
		cookie string
		lang   string
		title  string
	}{
		{"no header", "/", "", "", "en", "You’re in the queue"},
		{"German", "/", "de-DE,de;q=0.9,en;q=0.5", "", "de", "Sie sind in der Warteschlange"},
		{"q-values", "/", "en;q=0.3, ja;q=0.9", "", "ja", "順番待ちの列に並んでいます"},
		{"region falls back to its language", "/", "es-MX", "", "es", "Estás en la cola"},
		{"unknown language", "/", "fr-FR, fr;q=0.9", "", "en", "You’re in the queue"},
		{"the parameter beats the header", "/buy?lang=es", "de", "", "es", "Estás en la cola"},
		{"the cookie beats the header", "/", "de", "ja", "ja", "順番待ちの列に並んでいます"},
		{"the parameter beats the cookie", "/?lang=de", "en", "ja", "de", "Sie sind in der Warteschlange"},
		{"an unknown parameter is passed over", "/?lang=xx", "es", "", "es", "Estás en la cola"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := htmlGet(h, c.target, "Accept-Language", c.accept)
			if c.cookie != "" {
				r.AddCookie(&http.Cookie{Name: langCookie, Value: c.cookie})
			}
			res := serve(t, h, r)
			require.Equal(t, http.StatusOK, res.rec.Code)
			assert.Equal(t, c.lang, res.rec.Header().Get("Content-Language"))
			assert.Contains(t, res.rec.Header().Values("Vary"), "Accept-Language")
			doc := parse(t, res.rec.Body.String(), true)
			assert.Equal(t, c.lang, attr(find(doc, tag("html")), "lang"))
			assert.Equal(t, c.title, text(find(doc, tag("h1"))))
		})
	}

	// The JSON answer is the same in every language, and says none.
	tok, _ := join(t, h)
	var bodies []string
	for _, accept := range []string{"", "de", "ja"} {
		r := get(h, tok)
		r.Header.Set("Accept-Language", accept)
		res := serve(t, h, r)
		assert.Empty(t, res.rec.Header().Get("Content-Language"))
		assert.NotContains(t, res.rec.Header().Values("Vary"), "Accept-Language")
		bodies = append(bodies, res.rec.Body.String())
	}
	assert.Equal(t, bodies[0], bodies[1])
	assert.Equal(t, bodies[0], bodies[2])
}

// TestLanguageLinks: every page links to itself in the other languages,
// keeping its path and query: a link of the query alone, so the path, which
// the visitor chose, is never written into the page.
func TestLanguageLinks(t *testing.T) {
	h := provision(t, &Handler{})
	res := serve(t, h, htmlGet(h, "/buy?item=7&lang=de"))
	nav := find(parse(t, res.rec.Body.String(), true), tag("nav"))
	require.NotNil(t, nav)
	assert.Equal(t, "Sprache", attr(nav, "aria-label"))
	var got []string
	for _, a := range findAll(nav, tag("a")) {
		assert.Equal(t, attr(a, "hreflang"), attr(a, "lang"))
		current := ""
		if attr(a, "aria-current") == "page" {
			current = "*"
		}
		got = append(got, current+text(a)+" "+attr(a, "href"))
	}
	assert.Equal(t, []string{
		"English ?item=7&lang=en", "*Deutsch ?item=7&lang=de", "Español ?item=7&lang=es", "日本語 ?item=7&lang=ja",
	}, got)
}

// TestLanguageLinksStayOnTheSite: a path that starts with // (or /\) would
// make a link written with it point to another host.
func TestLanguageLinksStayOnTheSite(t *testing.T) {
	h := provision(t, &Handler{})
	for _, target := range []string{"//evil.example/x", "//evil.example/x?lang=de", "/%2F%2Fevil.example/x", "/\\evil.example/x"} {
		for _, res := range []result{serve(t, h, htmlGet(h, target)), serve(t, h, htmlGet(h, target, "Accept-Language", "de"))} {
			nav := find(parse(t, res.rec.Body.String(), true), tag("nav"))
			require.NotNil(t, nav, target)
			for _, a := range findAll(nav, tag("a")) {
				base, err := url.Parse("http://tickets.test" + target)
				require.NoError(t, err)
				ref, err := url.Parse(attr(a, "href"))
				require.NoError(t, err, target)
				assert.Equal(t, "tickets.test", base.ResolveReference(ref).Host, "%s: %s", target, attr(a, "href"))
			}
		}
	}
}

// TestOperatorLocales: a catalog file in the locales directory adds a
// language, with no code; what it leaves out is English.
func TestOperatorLocales(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fr.toml"), []byte(`
lang_name = "Français"
lang_nav = "Langue"
waiting_title = "Vous êtes dans la file"
waiting_ahead = "Devant vous"
`), 0o600))
	h := provision(t, &Handler{Locales: dir, HardCap: 1})
	res := serve(t, h, htmlGet(h, "/", "Accept-Language", "fr-CA,fr;q=0.9"))
	assert.Equal(t, "fr", res.rec.Header().Get("Content-Language"))
	doc := parse(t, res.rec.Body.String(), true)
	assert.Equal(t, "fr", attr(find(doc, tag("html")), "lang"))
	assert.Equal(t, "Vous êtes dans la file", text(find(doc, tag("h1"))))
	assert.Contains(t, text(find(doc, id("live"))), "Devant vous")
	assert.Contains(t, text(find(doc, id("live"))), "Your place in the queue", "the file leaves it out: English")
	assert.Contains(t, text(find(doc, tag("nav"))), "Français")

	// Sold out (beyond the hard cap), in French too.
	res = serve(t, h, htmlGet(h, "/?lang=fr"))
	assert.Equal(t, http.StatusGone, res.rec.Code)
	assert.Equal(t, "fr", res.rec.Header().Get("Content-Language"))
}

func TestLocalesSubdirective(t *testing.T) {
	var h Handler
	require.NoError(t, h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("waitroom {\n locales /etc/caddy/locales\n}")))
	assert.Equal(t, "/etc/caddy/locales", h.Locales)
	err := new(Handler).UnmarshalCaddyfile(caddyfile.NewTestDispenser("waitroom {\n locales\n}"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "locales")

	// A directory that is not there, or holds no catalog, fails the load.
	for _, dir := range []string{filepath.Join(t.TempDir(), "missing"), t.TempDir()} {
		h := &Handler{Event: 1, Keys: []Key{{ID: "k1", Secret: testSecret}}, Locales: dir}
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		err := h.Provision(ctx)
		cancel()
		if err == nil {
			_ = h.Cleanup()
		}
		assert.ErrorContains(t, err, "locales "+dir)
	}
}

// pageCases are every default page, executed with data of its own.
func pageCases(p Page) map[string]struct {
	t    *template.Template
	data any
} {
	return map[string]struct {
		t    *template.Template
		data any
	}{
		"waiting": {defaultWaitingPage, WaitingPage{Page: p, Event: 1, Position: 12400, AdmittedThrough: 5000, Ahead: 7399,
			EstimatedWaitSeconds: 240, EstimatedWait: "about 4 minutes", RetryAfterSeconds: 12}},
		"waiting, paused": {defaultWaitingPage, WaitingPage{Page: p, Event: 1, Position: 3, Paused: true, RetryAfterSeconds: 10}},
		"sold out":        {defaultSoldOutPage, SoldOutPage{Page: p, Event: 1}},
		"completed":       {defaultCompletedPage, SoldOutPage{Page: p, Event: 1}},
		"unavailable":     {defaultUnavailablePage, UnavailablePage{Page: p, Event: 1, RetryAfterSeconds: 5}},
		"rate limited":    {defaultRateLimitedPage, UnavailablePage{Page: p, Event: 1, RetryAfterSeconds: 1}},
		"pre-queue":       {defaultPreQueuePage, PreQueuePage{Page: p, Event: 1, OpensAt: "2026-12-02T18:00:00Z", OpensInSeconds: 42, LotteryCommitment: strings.Repeat("ab", 32)}},
		"challenge":       {defaultChallengePage, ChallengePage{Page: p, Event: 1, Challenge: strings.Repeat("c", 72), Difficulty: 8}},
	}
}

// TestPagesAccessible checks, on every page in every language, what a
// screen reader and a keyboard rely on: the document's language, a title
// and one heading, no tab order of its own (tabindex above 0), named
// regions, and, on the waiting page, the aria-live region that holds the
// place and the people ahead. Without JavaScript the waiting page still
// refreshes at the poll interval.
func TestPagesAccessible(t *testing.T) {
	h := provision(t, &Handler{})
	for _, l := range h.catalog.Languages() {
		p, err := h.catalogPage(l, &url.URL{Path: "/"})
		require.NoError(t, err)
		for name, c := range pageCases(p) {
			t.Run(l.Lang()+"/"+name, func(t *testing.T) {
				var b strings.Builder
				require.NoError(t, c.t.Execute(&b, c.data))
				doc := parse(t, b.String(), true)
				assert.Equal(t, l.Lang(), attr(find(doc, tag("html")), "lang"))
				assert.NotEmpty(t, text(find(doc, tag("title"))))
				var visible []*html.Node
				for _, h1 := range findAll(doc, tag("h1")) {
					if attr(h1.Parent, "hidden") == "" && !hasAttr(h1.Parent, "hidden") {
						visible = append(visible, h1)
					}
				}
				assert.Len(t, visible, 1, "one heading shown")
				for _, n := range findAll(doc, func(n *html.Node) bool { return hasAttr(n, "tabindex") }) {
					i, err := strconv.Atoi(attr(n, "tabindex"))
					require.NoError(t, err)
					assert.LessOrEqual(t, i, 0, "no tab order of its own")
				}
				nav := find(doc, tag("nav"))
				require.NotNil(t, nav)
				assert.NotEmpty(t, attr(nav, "aria-label"))
				assert.Len(t, findAll(nav, tag("a")), 4)
				assert.NotContains(t, b.String(), "MessageNotFound")

				noJS := parse(t, b.String(), false)
				refresh := find(noJS, func(n *html.Node) bool { return n.Data == "meta" && attr(n, "http-equiv") == "refresh" })
				switch name {
				case "waiting", "waiting, paused":
					live := find(doc, id("live"))
					require.NotNil(t, live)
					assert.Equal(t, "polite", attr(live, "aria-live"))
					assert.Equal(t, "true", attr(live, "aria-atomic"))
					data := c.data.(WaitingPage)
					assert.Equal(t, l.Number(data.Position), text(find(live, id("position"))))
					assert.Equal(t, l.Number(data.Ahead), text(find(live, id("ahead"))))
					assert.NotEmpty(t, text(find(live, id("wait"))))
					require.NotNil(t, refresh, "a page without JavaScript refreshes itself")
					assert.Equal(t, strconv.Itoa(data.RetryAfterSeconds), attr(refresh, "content"))
					assert.Equal(t, "noscript", refresh.Parent.Data, "with JavaScript the script polls instead")
					assert.Nil(t, find(doc, func(n *html.Node) bool { return n.Data == "meta" && attr(n, "http-equiv") == "refresh" }))
				case "unavailable", "rate limited":
					require.NotNil(t, refresh)
					assert.Equal(t, strconv.Itoa(c.data.(UnavailablePage).RetryAfterSeconds), attr(refresh, "content"))
				case "challenge":
					bar := find(doc, func(n *html.Node) bool { return attr(n, "role") == "progressbar" })
					require.NotNil(t, bar)
					assert.NotEmpty(t, attr(bar, "aria-label"))
					assert.Equal(t, "0", attr(bar, "aria-valuenow"))
				case "pre-queue":
					require.NotNil(t, refresh)
					assert.Equal(t, "42", attr(refresh, "content"))
					assert.Equal(t, "timer", attr(find(doc, id("count")), "role"), "the countdown is not read out every second")
				}
			})
		}
	}
}

func TestWaitingPageWords(t *testing.T) {
	h := provision(t, &Handler{})
	de, err := h.catalogPage(h.catalog.Choose("de"), &url.URL{Path: "/"})
	require.NoError(t, err)
	var b strings.Builder
	require.NoError(t, defaultWaitingPage.Execute(&b, WaitingPage{Page: de, Position: 12400, Ahead: 7399, EstimatedWait: "etwa 4 Minuten", RetryAfterSeconds: 10}))
	live := text(find(parse(t, b.String(), true), id("live")))
	for _, want := range []string{"Ihr Platz in der Warteschlange", "12.400", "Vor Ihnen", "7.399", "Ihre geschätzte Wartezeit beträgt etwa 4 Minuten."} {
		assert.Contains(t, live, want)
	}
	// The script's words, for what it writes later, are German too.
	assert.Contains(t, b.String(), `estimate: "Ihre geschätzte Wartezeit beträgt {w}."`)
	assert.Contains(t, b.String(), `about: "etwa {d}"`)
}

// TestPageContrast: the text colours of the pages against the card they
// sit on pass WCAG AA (4.5:1) in the light and the dark scheme, and the
// focus outline is visible against it (3:1).
func TestPageContrast(t *testing.T) {
	var b strings.Builder
	h := provision(t, &Handler{})
	require.NoError(t, defaultSoldOutPage.Execute(&b, SoldOutPage{Page: Page{Text: h.catalog.Choose("")}}))
	blocks := regexp.MustCompile(`:root\{([^}]*)\}`).FindAllStringSubmatch(b.String(), -1)
	require.Len(t, blocks, 2, "light and dark")
	for i, block := range blocks {
		vars := map[string]string{}
		for _, m := range regexp.MustCompile(`--(\w+):(#[0-9a-f]{3,6})`).FindAllStringSubmatch(block[1], -1) {
			vars[m[1]] = m[2]
		}
		scheme := []string{"light", "dark"}[i]
		for _, fg := range []string{"fg", "muted"} {
			assert.GreaterOrEqual(t, contrast(t, vars[fg], vars["card"]), 4.5, "%s: --%s on --card", scheme, fg)
		}
		assert.GreaterOrEqual(t, contrast(t, vars["fg"], vars["bg"]), 4.5, "%s: --fg on --bg", scheme)
		assert.GreaterOrEqual(t, contrast(t, vars["accent"], vars["card"]), 3.0, "%s: the focus outline", scheme)
	}
}

// TestPageSize reports the waiting page's weight in every language and
// keeps it small: it is what every waiting visitor loads, often many at
// once, over whatever network they have.
func TestPageSize(t *testing.T) {
	h := provision(t, &Handler{})
	for _, l := range h.catalog.Languages() {
		p, err := h.catalogPage(l, &url.URL{Path: "/"})
		require.NoError(t, err)
		var b bytes.Buffer
		require.NoError(t, defaultWaitingPage.Execute(&b, pageCases(p)["waiting"].data))
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(b.Bytes())
		require.NoError(t, zw.Close())
		t.Logf("waiting page, %s: %d bytes, %d gzipped", l.Lang(), b.Len(), z.Len())
		assert.Less(t, b.Len(), 6*1024, l.Lang())
		assert.Less(t, z.Len(), 3*1024, l.Lang())
	}
}

// A browser gets the waiting page gzipped, as the same page; a client that
// does not accept gzip, or refuses it with q=0, gets it as it is.
func TestWaitingPageGzipped(t *testing.T) {
	h := provision(t, &Handler{})
	tok, _ := join(t, h)
	page := func(accept string) result {
		r := htmlGet(h, "/buy?item=7", "Accept-Encoding", accept)
		r.AddCookie(&http.Cookie{Name: h.cookieName, Value: tok})
		res := serve(t, h, r)
		require.Equal(t, http.StatusOK, res.rec.Code)
		assert.Equal(t, "text/html; charset=utf-8", res.rec.Header().Get("Content-Type"))
		assert.Contains(t, res.rec.Header().Values("Vary"), "Accept-Encoding")
		assert.Equal(t, strconv.Itoa(res.rec.Body.Len()), res.rec.Header().Get("Content-Length"))
		return res
	}
	plain := page("")
	assert.Empty(t, plain.rec.Header().Get("Content-Encoding"))
	require.Contains(t, plain.rec.Body.String(), "?item=7&amp;lang=de")
	for _, accept := range []string{"gzip, deflate, br", "br;q=1.0, GZIP;q=0.5"} {
		res := page(accept)
		assert.Equal(t, "gzip", res.rec.Header().Get("Content-Encoding"), accept)
		assert.Equal(t, plain.rec.Body.String(), gunzip(t, res.rec.Body.Bytes()), accept)
		assert.Less(t, 10*res.rec.Body.Len(), 6*plain.rec.Body.Len(), "%s: the page is sent compressed", accept)
	}
	for _, accept := range []string{"br", "gzip;q=0", "identity"} {
		res := page(accept)
		assert.Empty(t, res.rec.Header().Get("Content-Encoding"), accept)
		assert.Equal(t, plain.rec.Body.String(), res.rec.Body.String(), accept)
	}
}

// contrast is the WCAG contrast ratio of two #rgb or #rrggbb colours.
func contrast(t *testing.T, a, b string) float64 {
	t.Helper()
	la, lb := luminance(t, a), luminance(t, b)
	return (math.Max(la, lb) + 0.05) / (math.Min(la, lb) + 0.05)
}

func luminance(t *testing.T, hex string) float64 {
	t.Helper()
	hex = strings.TrimPrefix(hex, "#")
	if len(hex) == 3 {
		hex = string([]byte{hex[0], hex[0], hex[1], hex[1], hex[2], hex[2]})
	}
	require.Len(t, hex, 6, "colour %q", hex)
	var rgb [3]float64
	for i := range rgb {
		v, err := strconv.ParseUint(hex[2*i:2*i+2], 16, 8)
		require.NoError(t, err)
		c := float64(v) / 255
		if c <= 0.03928 {
			rgb[i] = c / 12.92
		} else {
			rgb[i] = math.Pow((c+0.055)/1.055, 2.4)
		}
	}
	return 0.2126*rgb[0] + 0.7152*rgb[1] + 0.0722*rgb[2]
}

// parse reads a page as a browser with scripting on (noscript's content is
// text) or off (it is markup).
func parse(t *testing.T, s string, scripting bool) *html.Node {
	t.Helper()
	doc, err := html.ParseWithOptions(strings.NewReader(s), html.ParseOptionEnableScripting(scripting))
	require.NoError(t, err)
	return doc
}

func tag(name string) func(*html.Node) bool {
	return func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == name }
}

func id(v string) func(*html.Node) bool {
	return func(n *html.Node) bool { return n.Type == html.ElementNode && attr(n, "id") == v }
}

func findAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for d := range n.Descendants() {
		if d.Type == html.ElementNode && match(d) {
			out = append(out, d)
		}
	}
	return out
}

func find(n *html.Node, match func(*html.Node) bool) *html.Node {
	if all := findAll(n, match); len(all) > 0 {
		return all[0]
	}
	return nil
}

func hasAttr(n *html.Node, key string) bool {
	if n == nil {
		return false
	}
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

func attr(n *html.Node, key string) string {
	if n == nil {
		return ""
	}
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func text(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// TestAcceptsGzipIsCaddys: the plain lists read without Caddy's parser are
// read as it reads them, and everything else goes to it.
func TestAcceptsGzipIsCaddys(t *testing.T) {
	for _, values := range [][]string{
		nil, {""}, {"gzip"}, {"GZIP"}, {" gzip ,br"}, {"gzip, deflate, br"}, {"gzip, deflate, br, zstd"},
		{"br, zstd"}, {"gzipx, xgzip"}, {",, gzip,"}, {"*"}, {"identity"}, {"deflate", "gzip"},
		{"gzip;q=0"}, {"gzip;q=0.5, br"}, {"br;q=1, gzip;q=0"}, {`gzip, "br"`}, {"x-gzip"},
	} {
		for _, websocket := range []bool{false, true} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if values != nil {
				r.Header["Accept-Encoding"] = values
			}
			if websocket {
				r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			}
			want := slices.Contains(encode.AcceptedEncodings(r, nil), "gzip")
			assert.Equal(t, want, acceptsGzip(r), "%q, websocket %v", values, websocket)
		}
	}
}

// TestWantsJSONInAnyCase: a media type's case means nothing (RFC 9110), so
// an API client that spells it in capitals gets JSON, not the page.
func TestWantsJSONInAnyCase(t *testing.T) {
	for accept, want := range map[string]bool{
		"application/json":                    true,
		"APPLICATION/JSON":                    true,
		"text/html, Application/Json;q=0.9":   true,
		"application/problem+json":            false,
		"text/html,application/xhtml+xml,*/*": false,
		"":                                    false,
		"application/jso":                     false,
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		assert.Equal(t, want, wantsJSON(r), "Accept: %q", accept)
	}
}
