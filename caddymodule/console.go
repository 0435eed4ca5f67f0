package caddymodule

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/waitroom/waitroom/waitroom"
)

// The staff console: one page on the admin endpoint (GET /waitroom/console)
// that shows every event from GET /waitroom/live and changes them through
// the admin routes. Caddy checks every request a browser makes to its admin
// endpoint against the admin's origins before the module sees it, the
// page's own included; the page only ever asks its own origin.

var (
	//go:embed console.html
	consoleHTML string
	//go:embed console.css
	consoleCSS string
	//go:embed console.js
	consoleJS string
)

// consolePage is the page, its style and script inline (a script of its
// own address would be a no-cors request, which Caddy's admin endpoint
// refuses), and consoleCSP the policy that allows exactly those two.
var consolePage, consoleCSP = buildConsole()

func buildConsole() ([]byte, string) {
	script := compactScript(consoleJS)
	page := strings.NewReplacer("{{style}}", consoleCSS, "{{script}}", script).Replace(consoleHTML)
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	csp := "default-src 'none'; connect-src 'self'; img-src 'self'; " +
		"style-src " + hash(consoleCSS) + "; script-src " + hash(script) + "; " +
		"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
	return []byte(page), csp
}

// compactScript drops the script's indentation, blank lines and comment
// lines, which the browser has no use for, and the line breaks after ";",
// "{" and ",", where none changes what the script says. The script has no
// multi-line string, so no line's leading space or "//" is part of one; a
// line with "//" anywhere keeps its break, lest a comment at its end take
// in the next line.
func compactScript(js string) string {
	var b strings.Builder
	for line := range strings.Lines(js) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "//") {
			continue
		}
		b.WriteString(line)
		if !strings.ContainsAny(line[len(line)-1:], ";{,") || strings.Contains(line, "//") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (a *Admin) console(w http.ResponseWriter, _ *http.Request) error {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", consoleCSP)
	// Never framed (its buttons sell out an event), never cached, and its
	// requests tell Caddy where they come from.
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Content-Type-Options", "nosniff")
	_, err := w.Write(consolePage)
	return err
}

// liveEvent is one event in GET /waitroom/live: its state, what it means
// for the queue, how fast it moves, and the origin's seats.
type liveEvent struct {
	waitroom.State
	// Waiting is the positions handed out above the watermark, within the
	// hard cap, whose holders still poll (every one without
	// abandon_after); none once the event is sold out.
	Waiting int64 `json:"waiting"`
	// Admitted is the positions handed out at or below the watermark,
	// within the hard cap.
	Admitted int64 `json:"admitted"`
	// The rates are per second over the last liveWindow of calls; null
	// until two calls a second apart were seen.
	ArrivalsPerSecond *float64 `json:"arrivals_per_second"`
	AdmittedPerSecond *float64 `json:"admitted_per_second"`
	// Inventory is the origin's last figures, null until it published
	// any.
	Inventory *liveInventory `json:"inventory"`
}

// liveInventory is the origin's figures and whether they are fresh
// (waitroom.InventoryFresh): stale ones mean the origin stopped publishing.
type liveInventory struct {
	waitroom.Inventory
	Fresh bool `json:"fresh"`
}

// availability is what the room's positions not yet admitted are
// answered, as its sites answer them (Handler.availability).
func (e *roomEntry) availability(s waitroom.State) waitroom.Availability {
	inv, fresh := e.room.Inventory()
	a := waitroom.Judge(s, inv, fresh)
	if e.soldOutAtZero.Load() {
		a.SoldOut = s.SoldOut
	}
	return a
}

// queueCounts is how many of the positions handed out are admitted and how
// many wait (liveEvent's fields, and the gauges).
func queueCounts(e *roomEntry) (admitted, waiting int64) {
	r := e.room
	s := r.State()
	last := s.LastPosition
	if s.HardCap > 0 {
		last = min(last, s.HardCap)
	}
	admitted = min(s.Watermark, last)
	// Sold out, nobody waits; all held, they still do (docs/api.md §3).
	if !(s.SoldOut && e.availability(s).SoldOut) && last > s.Watermark {
		waiting = r.Ahead(last + 1)
	}
	return max(admitted, 0), waiting
}

func (a *Admin) live(w http.ResponseWriter, _ *http.Request) error {
	entries := eventRooms()
	out := make([]liveEvent, 0, len(entries))
	now := a.now()
	seen := make(map[int64]bool, len(entries))
	for _, e := range entries {
		ev := liveEvent{State: e.room.State()}
		ev.Admitted, ev.Waiting = queueCounts(e)
		ev.ArrivalsPerSecond, ev.AdmittedPerSecond = a.rates.observe(ev.Event, now, ev.LastPosition, ev.Admitted)
		if inv, fresh := e.room.Inventory(); !inv.At.IsZero() {
			ev.Inventory = &liveInventory{Inventory: inv, Fresh: fresh}
		}
		seen[ev.Event] = true
		out = append(out, ev)
	}
	a.rates.keep(seen)
	return writeJSON(w, http.StatusOK, out)
}

// liveWindow is how far back the live rates look; liveStep is the least
// time between two samples, so that many consoles polling at once keep
// the same few.
const (
	liveWindow = 10 * time.Second
	liveStep   = 250 * time.Millisecond
)

type liveSample struct {
	at                time.Time
	arrived, admitted int64
}

// consoleRates are the rates of every Admin: a reload keeps them.
var consoleRates liveRates

// liveRates measures, per event, how fast positions are handed out and
// admitted, from the calls of GET /waitroom/live. It keeps a few samples
// per loaded event and nothing per caller.
type liveRates struct {
	mu      sync.Mutex
	samples map[int64][]liveSample
}

// observe adds a sample of event and returns the rates since the oldest
// within liveWindow; nil while they span less than a second.
func (l *liveRates) observe(event int64, now time.Time, arrived, admitted int64) (arrivals, admissions *float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.samples == nil {
		l.samples = map[int64][]liveSample{}
	}
	ss := l.samples[event]
	if n := len(ss); n > 0 && (arrived < ss[n-1].arrived || admitted < ss[n-1].admitted) {
		// Lowered (a lost state put back, a watermark set lower): the old
		// samples say nothing of the pace now.
		ss = ss[:0]
	}
	if n := len(ss); n == 0 || now.Sub(ss[n-1].at) >= liveStep {
		ss = append(ss, liveSample{at: now, arrived: arrived, admitted: admitted})
	}
	cut := 0
	for cut < len(ss)-1 && now.Sub(ss[cut].at) > liveWindow {
		cut++
	}
	ss = append(ss[:0], ss[cut:]...)
	l.samples[event] = ss
	first := ss[0]
	elapsed := now.Sub(first.at).Seconds()
	if elapsed < 1 {
		return nil, nil
	}
	perSecond := func(from, to int64) *float64 {
		r := float64(to-from) / elapsed
		return &r
	}
	return perSecond(first.arrived, arrived), perSecond(first.admitted, admitted)
}

// keep forgets the events no loaded config guards any more.
func (l *liveRates) keep(events map[int64]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ev := range l.samples {
		if !events[ev] {
			delete(l.samples, ev)
		}
	}
}
