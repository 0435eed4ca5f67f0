package caddymodule

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/encode"
	"go.uber.org/zap"

	"github.com/waitroom/waitroom/locale"
	"github.com/waitroom/waitroom/waitroom"
)

// The handler's answers of its own, rendered: the HTML pages and their JSON
// forms (docs/api.md §3, docs/opening.md). The handler decides which answer
// a request gets; what each looks like is here.

// The default pages. They inline their styles and script: every other asset
// of the site sits behind the waiting room itself. layout.html holds what
// they share.
//
//go:embed templates/*.html
var templateFiles embed.FS

var (
	defaultWaitingPage     = defaultPage("waiting.html")
	defaultSoldOutPage     = defaultPage("sold_out.html")
	defaultUnavailablePage = defaultPage("unavailable.html")
	defaultPreQueuePage    = defaultPage("pre_queue.html")
	defaultChallengePage   = defaultPage("challenge.html")
	defaultRateLimitedPage = defaultPage("rate_limited.html")
	defaultCompletedPage   = defaultPage("completed.html")
)

func defaultPage(name string) *template.Template {
	return template.Must(template.ParseFS(templateFiles, "templates/layout.html", "templates/"+name)).Lookup(name)
}

// The visitor's own choice of language, ahead of Accept-Language: the
// query parameter (the pages' language links set it), then the cookie (a
// site's own language switcher may set it; the gateway never does).
const (
	langParam  = "lang"
	langCookie = "waitroom_lang"
)

// page chooses the language of an HTML answer to r, and says so in its
// headers.
func (h *Handler) page(w http.ResponseWriter, r *http.Request) (Page, error) {
	p, err := h.catalogPage(h.language(w, r), r.URL)
	if err != nil {
		return Page{}, caddyhttp.Error(http.StatusInternalServerError, err)
	}
	return p, nil
}

// language chooses the language of an HTML answer to r, and says so in its
// headers.
func (h *Handler) language(w http.ResponseWriter, r *http.Request) locale.Text {
	// Most requests name no language of their own: neither the query nor
	// the cookies are parsed for one then.
	var param, cookie string
	if r.URL.RawQuery != "" {
		param = r.URL.Query().Get(langParam)
	}
	if mentions(r.Header["Cookie"], langCookie) {
		if c, err := r.Cookie(langCookie); err == nil {
			cookie = c.Value
		}
	}
	text := h.catalog.Choose(r.Header.Get("Accept-Language"), param, cookie)
	hdr := w.Header()
	hdr.Set("Content-Language", text.Lang())
	hdr.Add("Vary", "Accept-Language")
	return text
}

// mentions tells whether any of values contains s.
func mentions(values []string, s string) bool {
	for _, v := range values {
		if strings.Contains(v, s) {
			return true
		}
	}
	return false
}

// catalogPage is the page in text's language, linking to itself in the
// others.
func (h *Handler) catalogPage(text locale.Text, u *url.URL) (Page, error) {
	return h.languagePage(text, keptQuery(u))
}

// languagePage is the page in text's language, its language links keeping
// query (encoded, without lang). A link is the query alone ("?…&lang=de"):
// it keeps the page's path without writing it, so a path the visitor chose
// (one starting with "//" would make a link to another host) never
// reaches the page.
func (h *Handler) languagePage(text locale.Text, query string) (Page, error) {
	p := Page{Text: text}
	prefix := "?"
	if query != "" {
		prefix = "?" + query + "&"
	}
	for _, l := range h.catalog.Languages() {
		name, err := l.T("lang_name")
		if err != nil {
			return Page{}, err
		}
		p.Languages = append(p.Languages, LanguageLink{
			Lang: l.Lang(), Name: name, Href: prefix + langParam + "=" + url.QueryEscape(l.Lang()), Current: l.Lang() == text.Lang(),
		})
	}
	return p, nil
}

// keptQuery is the query of u the language links keep: all of it but lang.
func keptQuery(u *url.URL) string {
	if u.RawQuery == "" {
		return ""
	}
	q := u.Query()
	q.Del(langParam)
	return q.Encode()
}

// linkHref writes a link's href as the pages' templates do.
var linkHref = template.Must(template.New("href").Parse(`<a href="{{.}}">`))

// linkQuery is what a shell's links get where shellQuery stood: the kept
// query of u and its "&", escaped as the template escapes a link.
func linkQuery(u *url.URL) (string, error) {
	q := keptQuery(u)
	if q == "" {
		return "", nil
	}
	return escapeLinkQuery(q)
}

// escapeLinkQuery is q and its "&" as they are written in a link.
func escapeLinkQuery(q string) (string, error) {
	var b strings.Builder
	if err := linkHref.Execute(&b, "?"+q+"&"); err != nil {
		return "", err
	}
	s := strings.TrimSuffix(strings.TrimPrefix(b.String(), `<a href="?`), `">`)
	return s, nil
}

// loadPages sets up the handler's pages: the catalogs, and the configured
// templates, checked now, or the embedded ones.
func (h *Handler) loadPages() error {
	var err error
	if h.catalog, err = locale.Load(h.Locales); err != nil {
		return err
	}
	h.shells = new(shells)
	sample, err := h.catalogPage(h.catalog.Choose(""), &url.URL{Path: "/"})
	if err != nil {
		return err
	}
	waiting := sampleWaitingPage
	waiting.Page = sample
	if h.waitingPage, err = loadTemplate("waiting_template", h.WaitingTemplate, defaultWaitingPage, waiting); err != nil {
		return err
	}
	if h.soldOutPage, err = loadTemplate("sold_out_template", h.SoldOutTemplate, defaultSoldOutPage, SoldOutPage{Page: sample, Event: h.Event}); err != nil {
		return err
	}
	h.unavailPage = defaultUnavailablePage
	h.preQueuePage, h.challengePg, h.limitedPage = defaultPreQueuePage, defaultChallengePage, defaultRateLimitedPage
	return nil
}

// loadTemplate parses the configured template file of the named setting, or
// returns the default. A configured template is executed once with sample
// data, so a reference to a field that does not exist fails the config load
// rather than a visitor's request.
func loadTemplate(setting, file string, def *template.Template, sample any) (*template.Template, error) {
	if file == "" {
		return def, nil
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	t, err := template.New(filepath.Base(file)).Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	if err := t.Execute(io.Discard, sample); err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	return t, nil
}

// wait answers with the waiting page or its JSON form.
func (h *Handler) wait(w http.ResponseWriter, r *http.Request, repl *placeholders, s waitroom.State, t waitroom.Ticket) error {
	d, known := h.room.room.EstimateWait(t.Position)
	var seconds int64
	var estimate *int64
	if known {
		seconds = int64(math.Ceil(d.Seconds()))
		estimate = &seconds
	}
	ahead := h.room.room.Ahead(t.Position)
	retry := min(retryAfter(s, d, known, ahead, frontOf(h.room.room.Inventory())), pollWithin(time.Duration(h.AbandonAfter)))
	f := newFields(w.Header(), 4)
	f.set(HeaderStatus, StatusWaiting)
	f.set("Cache-Control", "no-store")
	f.set("Retry-After", strconv.Itoa(retry))
	f.add("Vary", "Accept")
	setPlaceholders(repl, StatusWaiting, t.Position)
	h.m.waiting.Inc()

	held := h.availability(s)
	var within int64
	if held.AllHeld {
		within = int64(math.Ceil(held.Within.Seconds()))
	} else {
		held.MayReturn = 0
	}
	if wantsJSON(r) {
		return writeWaiting(w, h.WaitingStatus, waitingBody{
			Status:                 StatusWaiting,
			Event:                  h.Event,
			Position:               t.Position,
			AdmittedThrough:        s.Watermark,
			Ahead:                  ahead,
			EstimatedWaitSeconds:   estimate,
			Token:                  t.Raw,
			Paused:                 s.Paused,
			AllHeld:                held.AllHeld,
			MayReturn:              held.MayReturn,
			MayReturnWithinSeconds: within,
		})
	}
	text := h.language(w, r)
	words, err := text.Wait(d, known)
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	var heldWords string
	if held.AllHeld {
		if heldWords, err = text.AllHeld(held.MayReturn, held.Within); err != nil {
			return caddyhttp.Error(http.StatusInternalServerError, err)
		}
	}
	page := WaitingPage{
		Event:                  h.Event,
		Position:               t.Position,
		AdmittedThrough:        s.Watermark,
		Ahead:                  ahead,
		EstimatedWaitSeconds:   seconds,
		EstimatedWait:          words,
		Paused:                 s.Paused,
		AllHeld:                held.AllHeld,
		MayReturn:              held.MayReturn,
		MayReturnWithinSeconds: within,
		AllHeldWords:           heldWords,
		RetryAfterSeconds:      retry,
	}
	if h.waitingPage != defaultWaitingPage {
		if page.Page, err = h.catalogPage(text, r.URL); err != nil {
			return caddyhttp.Error(http.StatusInternalServerError, err)
		}
		return h.render(w, h.WaitingStatus, h.waitingPage, page)
	}
	key := shellKey{lang: text.Lang(), words: words, held: heldWords, paused: s.Paused, retry: retry}
	query, err := linkQuery(r.URL)
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	sh, ok := h.shells.get(key)
	if !ok {
		if sh, ok, err = h.waitingShell(text, page); err != nil {
			return caddyhttp.Error(http.StatusInternalServerError, err)
		}
		if !ok {
			// The stand-ins did not come out once each: no shell, the
			// template answers.
			if page.Page, err = h.catalogPage(text, r.URL); err != nil {
				return caddyhttp.Error(http.StatusInternalServerError, err)
			}
			return h.render(w, h.WaitingStatus, h.waitingPage, page)
		}
		h.shells.put(key, sh)
	}
	b := getBody()
	defer putBody(b)
	// The page differs by Accept-Encoding from here on, for any cache.
	w.Header().Add("Vary", "Accept-Encoding")
	if acceptsGzip(r) {
		*b = sh.fillGzip(*b, text.Number(t.Position), text.Number(ahead), query)
		w.Header().Set("Content-Encoding", "gzip")
	} else {
		*b = sh.fill(*b, text.Number(t.Position), text.Number(ahead), query)
	}
	return writeHTML(w, h.WaitingStatus, *b)
}

// acceptsGzip tells whether the request accepts a gzip answer, by Caddy's
// own reading of Accept-Encoding (q=0 refuses). A browser's value is a
// plain list ("gzip, deflate, br, zstd"), read here as Caddy would read it
// without its parser, which allocates and sorts the list: 1% of the page's
// time. Anything with a parameter or a quote goes to the parser.
func acceptsGzip(r *http.Request) bool {
	values := r.Header["Accept-Encoding"]
	if len(values) != 1 || strings.ContainsAny(values[0], `;"`) || len(r.Header["Sec-Websocket-Key"]) > 0 {
		return slices.Contains(encode.AcceptedEncodings(r, nil), "gzip")
	}
	for item := range strings.SplitSeq(values[0], ",") {
		if strings.EqualFold(strings.TrimSpace(item), "gzip") {
			return true
		}
	}
	return false
}

// waitingShell renders the default waiting page of page's key with the
// stand-ins, and cuts it where they are.
func (h *Handler) waitingShell(text locale.Text, page WaitingPage) (shell, bool, error) {
	var err error
	if page.Page, err = h.languagePage(text, shellQuery); err != nil {
		return shell{}, false, err
	}
	page.Position, page.Ahead = shellPosition, shellAhead
	var b strings.Builder
	if err := defaultWaitingPage.Execute(&b, page); err != nil {
		return shell{}, false, fmt.Errorf("waitroom page %s: %w", defaultWaitingPage.Name(), err)
	}
	query, err := escapeLinkQuery(shellQuery)
	if err != nil {
		return shell{}, false, err
	}
	sh, ok := cut(b.String(), template.HTMLEscapeString(text.Number(shellPosition)), template.HTMLEscapeString(text.Number(shellAhead)), query)
	return sh, ok, nil
}

// completed answers an account whose admission the site revoked: it is done
// (its booking confirmed), so it gets neither the site nor a new place.
func (h *Handler) completed(w http.ResponseWriter, r *http.Request, repl *placeholders, pos int64) error {
	hdr := w.Header()
	hdr.Set(HeaderStatus, StatusCompleted)
	hdr.Set("Cache-Control", "no-store")
	hdr.Add("Vary", "Accept")
	setPlaceholders(repl, StatusCompleted, pos)
	h.m.completed.Inc()
	if wantsJSON(r) {
		return writeJSON(w, http.StatusOK, struct {
			Status string `json:"status"`
			Event  int64  `json:"event"`
		}{StatusCompleted, h.Event})
	}
	p, err := h.page(w, r)
	if err != nil {
		return err
	}
	return h.render(w, http.StatusOK, defaultCompletedPage, SoldOutPage{Page: p, Event: h.Event})
}

// soldOut answers 410. It never sets a cookie, so the answer to a stranger
// can be shared: a CDN may serve one copy to every newcomer. tokenHolder
// says the request carried a queue token (valid or not): its answer is
// about that token, so it is kept out of shared caches. Vary names every
// header the answer depends on, so a cache never gives a token holder the
// copy made for a stranger.
func (h *Handler) soldOut(w http.ResponseWriter, r *http.Request, repl *placeholders, pos int64, tokenHolder bool) error {
	hdr := w.Header()
	hdr.Del("Set-Cookie")
	hdr.Del(HeaderToken)
	hdr.Set(HeaderStatus, StatusSoldOut)
	if tokenHolder {
		hdr.Set("Cache-Control", h.privateMaxAge)
	} else {
		hdr.Set("Cache-Control", h.publicMaxAge)
	}
	hdr.Add("Vary", soldOutVary)
	setPlaceholders(repl, StatusSoldOut, pos)
	h.m.soldOut.Inc()
	if wantsJSON(r) {
		return writeJSON(w, http.StatusGone, struct {
			Status string `json:"status"`
			Event  int64  `json:"event"`
		}{StatusSoldOut, h.Event})
	}
	p, err := h.page(w, r)
	if err != nil {
		return err
	}
	return h.render(w, http.StatusGone, h.soldOutPage, SoldOutPage{Page: p, Event: h.Event})
}

// unavailableRetryFor is the Retry-After of a 503 the store's err caused:
// how soon what it waits for is likely over.
func unavailableRetryFor(err error) int {
	switch {
	case errors.Is(err, waitroom.ErrRestoring) || errors.Is(err, waitroom.ErrNoState):
		return restoringRetry
	case errors.Is(err, waitroom.ErrDrawing) || errors.Is(err, waitroom.ErrNotOpen):
		return drawingRetry
	}
	return unavailableRetry
}

// unavailable answers a new arrival whose position could not be taken
// because the store is down, or lost the event's state and is having it
// restored: try again shortly, never a hang or a 500.
func (h *Handler) unavailable(w http.ResponseWriter, r *http.Request, repl *placeholders, err error) error {
	h.logger.Debug("queue store unavailable for a new arrival", zap.Int64("event", h.Event), zap.Error(err))
	retry := unavailableRetryFor(err)
	hdr := w.Header()
	hdr.Set(HeaderStatus, StatusUnavailable)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Retry-After", strconv.Itoa(retry))
	hdr.Add("Vary", "Accept")
	setPlaceholders(repl, StatusUnavailable, 0)
	if wantsJSON(r) {
		return writeJSON(w, http.StatusServiceUnavailable, struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}{"queue_unavailable", "The queue cannot take new arrivals right now; try again in a few seconds."})
	}
	p, err := h.page(w, r)
	if err != nil {
		return err
	}
	return h.render(w, http.StatusServiceUnavailable, h.unavailPage, UnavailablePage{Page: p, Event: h.Event, RetryAfterSeconds: retry})
}

// wantsJSON follows docs/api.md §3: JSON when Accept mentions application/json.
func wantsJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if containsFold(v, "application/json") {
			return true
		}
	}
	return false
}

// containsFold reports whether v contains lower, a lower-case ASCII string,
// in any case: media types are case-insensitive (RFC 9110 §8.3.1). It
// allocates nothing, as the waiting answers ask it of every poll.
func containsFold(v, lower string) bool {
	for i := 0; i+len(lower) <= len(v); i++ {
		if v[i]|0x20 == lower[0] && strings.EqualFold(v[i:i+len(lower)], lower) {
			return true
		}
	}
	return false
}

// maxRetryAfter and minRetryAfter bound what a waiting client is told to
// wait before polling again.
const (
	maxRetryAfter = 30
	minRetryAfter = 3
)

// nearFront is how few present waiters ahead put a position near the
// front at least: more than the closed loop admits at one raise by
// default (max_undecided) and a fixed rate's usual step. Polls every 3 s
// from that many cost the gateway a few hundred answers a second.
const nearFront = 500

// maxNearFront bounds the front however many seats are left: polls every
// 3 s from that many cost a fleet under two thousand answers a second.
const maxNearFront = 5000

// frontOf is how many present waiters ahead still put a position near the
// front: nearFront, or, while the origin's figures are fresh, twice the
// seats not yet sold (free or held), about as far as the admissions for
// them reach when one admitted user in two buys. A waiter told to come
// back in 30 s while the next raises reach it learns of its admission up
// to half a minute late: the seats wait for it and the sale's last seat
// sells that much later.
func frontOf(inv waitroom.Inventory, fresh bool) int64 {
	if !fresh {
		return nearFront
	}
	return min(max(nearFront, 2*(inv.Remaining+inv.Held)), maxNearFront)
}

// retryAfter is how many seconds a waiting client should wait before asking
// again: sooner as its turn nears, never so often that the queue itself
// becomes the stampede. Near the front (fewer than front waiting ahead,
// frontOf) it is the shortest, whatever the estimate: once admitted the
// holder learns it within seconds. The estimate is long exactly when
// admissions are few, as when the closed loop admits a few buyers for the
// seats of holds that lapsed; told to come back in 30 s, those buyers
// would hold late and keep the loop waiting on them before it admits more.
func retryAfter(s waitroom.State, d time.Duration, known bool, ahead, front int64) int {
	switch {
	case s.Paused:
		return 10
	case ahead < front:
		return minRetryAfter
	case !known:
		return 10
	}
	return min(max(int(d.Seconds()/4), minRetryAfter), maxRetryAfter)
}

// pollWithin bounds the Retry-After of a waiting answer by abandon_after:
// at most a third of it, at least a second, so a holder who polls as told,
// even one whose poll was lost on the way, is never counted as gone. Told
// to come back later than abandon_after, every waiter would be: ahead would
// read 0 and a fixed-rate autopilot would stop admitting.
func pollWithin(abandonAfter time.Duration) int {
	return max(int(abandonAfter/3/time.Second), 1)
}

// maxPreQueueRetry caps the Retry-After of the pre-queue answer, so a
// client polling by it is never told to sleep through the opening by much.
const maxPreQueueRetry = 60

// preQueue answers with the pre-queue page or its JSON form.
func (h *Handler) preQueue(w http.ResponseWriter, r *http.Request, repl *placeholders, t waitroom.Ticket) error {
	ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
	commitment, err := h.room.room.Commitment(ctx)
	cancel()
	if err != nil {
		return h.unavailable(w, r, repl, err)
	}
	opensIn := int64(math.Ceil(h.opensAt.Sub(h.now()).Seconds()))
	opensIn = max(opensIn, 0)
	hdr := w.Header()
	hdr.Set(HeaderStatus, StatusPreQueue)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Retry-After", strconv.FormatInt(min(max(opensIn, 1), maxPreQueueRetry), 10))
	hdr.Add("Vary", "Accept")
	setPlaceholders(repl, StatusPreQueue, 0)
	opensAt := h.opensAt.Format(time.RFC3339Nano)
	if wantsJSON(r) {
		return writeJSON(w, http.StatusOK, preQueueBody{
			Status:            StatusPreQueue,
			Event:             h.Event,
			OpensAt:           opensAt,
			LotteryCommitment: commitment,
			OpensInSeconds:    opensIn,
			Token:             t.Raw,
		})
	}
	p, err := h.page(w, r)
	if err != nil {
		return err
	}
	return h.render(w, http.StatusOK, h.preQueuePage, PreQueuePage{
		Page:              p,
		Event:             h.Event,
		OpensAt:           opensAt,
		OpensInSeconds:    opensIn,
		LotteryCommitment: commitment,
	})
}

// challenge answers a new arrival with a fresh challenge.
func (h *Handler) challenge(w http.ResponseWriter, r *http.Request, repl *placeholders) error {
	c := h.challenger.Issue()
	hdr := w.Header()
	hdr.Set(HeaderStatus, StatusChallenge)
	hdr.Set("Cache-Control", "no-store")
	hdr.Add("Vary", "Accept")
	setPlaceholders(repl, StatusChallenge, 0)
	h.m.challenges.Inc()
	if wantsJSON(r) {
		return writeJSON(w, http.StatusOK, challengeBody{
			Status:     StatusChallenge,
			Event:      h.Event,
			Challenge:  c.Nonce,
			Difficulty: c.Difficulty,
			ExpiresAt:  c.ExpiresAt.UTC().Format(time.RFC3339),
		})
	}
	p, err := h.page(w, r)
	if err != nil {
		return err
	}
	return h.render(w, http.StatusOK, h.challengePg, ChallengePage{
		Page:       p,
		Event:      h.Event,
		Challenge:  c.Nonce,
		Difficulty: c.Difficulty,
	})
}

// rateLimited answers 429: the client made more new arrivals than the join
// rate allows.
func (h *Handler) rateLimited(w http.ResponseWriter, r *http.Request, repl *placeholders, wait time.Duration) error {
	retry := max(int(math.Ceil(wait.Seconds())), 1)
	hdr := w.Header()
	hdr.Set(HeaderStatus, StatusRateLimited)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Retry-After", strconv.Itoa(retry))
	hdr.Add("Vary", "Accept")
	setPlaceholders(repl, StatusRateLimited, 0)
	h.m.rateLimited.Inc()
	if wantsJSON(r) {
		return writeJSON(w, http.StatusTooManyRequests, struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}{"rate_limited", "Too many new arrivals from this address; try again in " + strconv.Itoa(retry) + " s."})
	}
	p, err := h.page(w, r)
	if err != nil {
		return err
	}
	return h.render(w, http.StatusTooManyRequests, h.limitedPage, UnavailablePage{Page: p, Event: h.Event, RetryAfterSeconds: retry})
}
