// Package locale translates the gateway's pages and the origin's
// storefront, from one set of catalogs. Its catalogs are go-i18n
// message files, one per language, named after the language (de.toml,
// pt-BR.json): the embedded ones (catalogs/: English, Spanish, German,
// Japanese; the origin's storefront keeps its messages in files of their
// own, shop.de.toml) and those of an operator's directory, which add languages or
// replace messages of the embedded ones. A message a catalog lacks is
// taken from English.
//
// Choose picks a language for a request: an explicit choice first (the
// page's ?lang= parameter, the waitroom_lang cookie), then Accept-Language
// with its q-values, a region falling back to its language (es-MX reads
// Spanish); English when nothing matches.
package locale

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/nicksnyder/go-i18n/v2/i18n"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

//go:embed catalogs/*.toml
var builtin embed.FS

// Default is the language of a request that names none the catalogs have,
// and the one every other catalog falls back to.
var Default = language.English

// Catalog is the set of languages the pages are served in.
type Catalog struct {
	bundle  *i18n.Bundle
	matcher language.Matcher
	texts   []Text // in the order of bundle.LanguageTags(): Default first
	// accepted remembers the match of the first Accept-Language values
	// seen (browsers send few): parsing and matching one was a fiftieth
	// of the waiting page's time in the gateway. Read without a lock and
	// replaced whole by each addition, it stops growing at maxAccepted, so
	// a client sending new values every time costs only its own match.
	accepted   atomic.Pointer[map[string]int]
	acceptedMu sync.Mutex
}

// maxAccepted bounds the Accept-Language values a catalog remembers.
const maxAccepted = 64

// Load reads the embedded catalogs, then every .toml and .json file of dir
// (none when dir is empty).
func Load(dir string) (*Catalog, error) {
	b := i18n.NewBundle(Default)
	b.RegisterUnmarshalFunc("toml", toml.Unmarshal)
	if err := loadFS(b, builtin, "catalogs"); err != nil {
		return nil, err
	}
	if dir != "" {
		if err := loadDir(b, dir); err != nil {
			return nil, fmt.Errorf("locales %s: %w", dir, err)
		}
	}
	c := &Catalog{bundle: b}
	tags := b.LanguageTags()
	c.matcher = language.NewMatcher(tags)
	for _, tag := range tags {
		num := message.NewPrinter(tag)
		c.texts = append(c.texts, Text{
			lang:  tag.String(),
			loc:   i18n.NewLocalizer(b, tag.String()),
			num:   num,
			group: groupingOf(num),
		})
	}
	return c, nil
}

// loadDir loads the operator's catalogs. Its errors leave the directory's
// name to the caller: read through os.DirFS, the directory is ".", which
// would only puzzle the operator who wrote its real name.
func loadDir(b *i18n.Bundle, dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errors.New("no such directory")
	case err != nil:
		return pathless(err)
	case !fi.IsDir():
		return errors.New("not a directory")
	}
	return pathless(loadFS(b, os.DirFS(dir), "."))
}

// pathless drops the path an fs.PathError repeats.
func pathless(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

func loadFS(b *i18n.Bundle, fsys fs.FS, dir string) error {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return err
	}
	loaded := 0
	for _, e := range entries {
		ext := path.Ext(e.Name())
		if e.IsDir() || (ext != ".toml" && ext != ".json") {
			continue
		}
		f, err := b.LoadMessageFileFS(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("%s: %w", e.Name(), err)
		}
		if f.Tag == language.Und {
			return fmt.Errorf("%s: name the file after its language, as in de.toml or pt-BR.json", e.Name())
		}
		loaded++
	}
	if loaded == 0 {
		return errors.New("no .toml or .json catalogs in it")
	}
	return nil
}

// Languages lists the catalog's languages, Default first, then by tag.
func (c *Catalog) Languages() []Text {
	out := slices.Clone(c.texts)
	slices.SortStableFunc(out[1:], func(a, b Text) int { return strings.Compare(a.lang, b.lang) })
	return out
}

// Choose picks the language of a request: the first of explicit (language
// tags the visitor chose, most binding first; empty ones are skipped) that
// the catalog has, else the best match of acceptLanguage, else Default.
func (c *Catalog) Choose(acceptLanguage string, explicit ...string) Text {
	for _, e := range explicit {
		if e == "" {
			continue
		}
		if tag, err := language.Parse(e); err == nil {
			if _, i, conf := c.matcher.Match(tag); conf != language.No {
				return c.texts[i]
			}
		}
	}
	if m := c.accepted.Load(); m != nil {
		if i, ok := (*m)[acceptLanguage]; ok {
			return c.texts[i]
		}
	}
	i := c.matchAccepted(acceptLanguage)
	c.remember(acceptLanguage, i)
	return c.texts[i]
}

// matchAccepted is the index of acceptLanguage's best match, 0 (Default)
// for none.
func (c *Catalog) matchAccepted(acceptLanguage string) int {
	if desired, _, err := language.ParseAcceptLanguage(acceptLanguage); err == nil && len(desired) > 0 {
		if _, i, conf := c.matcher.Match(desired...); conf != language.No {
			return i
		}
	}
	return 0
}

// remember adds acceptLanguage's match to accepted while there is room.
func (c *Catalog) remember(acceptLanguage string, i int) {
	if m := c.accepted.Load(); m != nil && len(*m) >= maxAccepted {
		// Full: no lock for what will not be added.
		return
	}
	c.acceptedMu.Lock()
	defer c.acceptedMu.Unlock()
	next := map[string]int{}
	if old := c.accepted.Load(); old != nil {
		if len(*old) >= maxAccepted {
			return
		}
		next = maps.Clone(*old)
	}
	next[acceptLanguage] = i
	c.accepted.Store(&next)
}

// Text is one language's messages, as the page templates use them:
// {{.Lang}}, {{.T "id"}}, {{.T "id" "Name" value}}.
type Text struct {
	lang  string
	loc   *i18n.Localizer
	num   *message.Printer
	group grouping
}

// Lang is the language's BCP 47 tag, for lang= and Content-Language.
func (x Text) Lang() string { return x.lang }

// T is the message id, filled in with data: name and value pairs. A message
// this language lacks is English; one English lacks too is an error, which
// fails the page.
func (x Text) T(id string, data ...any) (string, error) {
	return x.localize(&i18n.LocalizeConfig{MessageID: id, TemplateData: pairs(data)})
}

// Plural is the plural message id for the count n, with {{.Count}} set.
func (x Text) Plural(id string, n int) (string, error) {
	return x.localize(&i18n.LocalizeConfig{MessageID: id, PluralCount: n, TemplateData: map[string]any{"Count": n}})
}

func (x Text) localize(lc *i18n.LocalizeConfig) (string, error) {
	s, err := x.loc.Localize(lc)
	var missing *i18n.MessageNotFoundErr
	if errors.As(err, &missing) && s != "" {
		// Taken from English.
		return s, nil
	}
	return s, err
}

func pairs(data []any) map[string]any {
	if len(data) == 0 {
		return nil
	}
	m := make(map[string]any, len(data)/2)
	for i := 0; i+1 < len(data); i += 2 {
		m[fmt.Sprint(data[i])] = data[i+1]
	}
	return m
}

// Number writes n as the language groups digits (12,400; 12.400). It is
// Sprintf("%d", n) without the look-up of the format in the printer's
// catalog, and for a language that groups ASCII digits by threes without
// the printer at all (tested against Sprintf): the waiting page writes two
// numbers into every answer.
func (x Text) Number(n int64) string {
	if x.group.ok {
		var b [48]byte
		return string(x.group.append(b[:0], n))
	}
	return x.num.Sprint(n)
}

// AllHeld says that every ticket is in someone's basket and about n may
// come back within d (rounded up to whole minutes, at least one), as the
// waiting page's script writes it with Intl.NumberFormat.
func (x Text) AllHeld(n int64, d time.Duration) (string, error) {
	minutes, err := x.Plural("wait_minutes", max(int(math.Ceil(d.Minutes())), 1))
	if err != nil {
		return "", err
	}
	return x.T("waiting_all_held", "Tickets", x.Number(n), "Minutes", minutes)
}

// Wait puts an estimated wait in words: "less than a minute", "about 1
// minute", "about 25 minutes", "about 2 hours"; empty when it is unknown.
func (x Text) Wait(d time.Duration, known bool) (string, error) {
	var unit string
	var n int
	switch {
	case !known:
		return "", nil
	case d < time.Minute:
		return x.T("wait_under_minute")
	case d < 90*time.Minute:
		unit, n = "wait_minutes", max(int(math.Round(d.Minutes())), 1)
	default:
		unit, n = "wait_hours", int(math.Round(d.Hours()))
	}
	amount, err := x.Plural(unit, n)
	if err != nil {
		return "", err
	}
	return x.T("wait_about", "Duration", amount)
}
