package locale

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

func load(t *testing.T, dir string) *Catalog {
	t.Helper()
	c, err := Load(dir)
	require.NoError(t, err)
	return c
}

func TestChoose(t *testing.T) {
	c := load(t, "")
	for _, tc := range []struct {
		accept   string
		explicit []string
		want     string
	}{
		{"", nil, "en"},
		{"de", nil, "de"},
		{"es-MX", nil, "es"},
		{"es-419,es;q=0.9", nil, "es"},
		{"de-AT, de;q=0.9, en;q=0.8", nil, "de"},
		{"ja-JP", nil, "ja"},
		{"en-GB", nil, "en"},
		{"fr", nil, "en"},
		{"fr-FR, fr;q=0.9", nil, "en"},
		{"fr, de;q=0.5", nil, "de"},
		{"en;q=0.2, ja;q=0.8", nil, "ja"},
		{"de;q=0.1, es;q=0.9, en;q=0.5", nil, "es"},
		{"*", nil, "en"},
		{"not a header;;q=x", nil, "en"},
		// An explicit choice beats the header; one the catalog lacks, or
		// not a tag at all, is passed over.
		{"de", []string{"ja"}, "ja"},
		{"de", []string{"es-MX"}, "es"},
		{"de", []string{"fr"}, "de"},
		{"de", []string{"<script>"}, "de"},
		{"de", []string{"", "es"}, "es"},
		{"en", []string{"zz", "ja"}, "ja"},
	} {
		// The second time from what the catalog remembers.
		for range 2 {
			got := c.Choose(tc.accept, tc.explicit...).Lang()
			assert.Equal(t, tc.want, got, "Accept-Language %q, explicit %q", tc.accept, tc.explicit)
		}
	}
}

// TestChooseRemembersFewAcceptLanguages: a catalog remembers the matches of
// the first maxAccepted Accept-Language values, then stops growing, and
// every value is still matched.
func TestChooseRemembersFewAcceptLanguages(t *testing.T) {
	c := load(t, "")
	for i := range 2 * maxAccepted {
		assert.Equal(t, "en", c.Choose(fmt.Sprintf("x-%d", i)).Lang())
	}
	assert.Len(t, *c.accepted.Load(), maxAccepted)
	assert.Equal(t, "de", c.Choose("de-CH, de;q=0.9").Lang(), "matched past the bound")
	assert.NotContains(t, *c.accepted.Load(), "de-CH, de;q=0.9")
}

// TestEveryLanguageHasEveryMessage: the embedded catalogs are complete, so
// no visitor reads a page in two languages.
func TestEveryLanguageHasEveryMessage(t *testing.T) {
	c := load(t, "")
	en := c.Choose("en")
	ids := messageIDs(t, "catalogs/en.toml")
	require.NotEmpty(t, ids)
	for _, x := range c.Languages() {
		if x.Lang() == "en" {
			continue
		}
		assert.ElementsMatch(t, ids, messageIDs(t, "catalogs/"+x.Lang()+".toml"), x.Lang())
		assert.ElementsMatch(t, messageIDs(t, "catalogs/shop.en.toml"), messageIDs(t, "catalogs/shop."+x.Lang()+".toml"), "the storefront's, "+x.Lang())
		name, err := x.T("lang_name")
		require.NoError(t, err)
		english, _ := en.T("lang_name")
		assert.NotEqual(t, english, name, x.Lang())
	}
	assert.Equal(t, []string{"en", "de", "es", "ja"}, langs(c.Languages()))
}

func messageIDs(t *testing.T, file string) []string {
	t.Helper()
	b, err := builtin.ReadFile(file)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, toml.Unmarshal(b, &m))
	var ids []string
	for id := range m {
		ids = append(ids, id)
	}
	return ids
}

func langs(ts []Text) []string {
	var out []string
	for _, x := range ts {
		out = append(out, x.Lang())
	}
	return out
}

func TestWait(t *testing.T) {
	c := load(t, "")
	for _, tc := range []struct {
		lang  string
		d     time.Duration
		known bool
		want  string
	}{
		{"en", 0, false, ""},
		{"en", 0, true, "less than a minute"},
		{"en", 59 * time.Second, true, "less than a minute"},
		{"en", 80 * time.Second, true, "about 1 minute"},
		{"en", 4 * time.Minute, true, "about 4 minutes"},
		{"en", 89 * time.Minute, true, "about 89 minutes"},
		{"en", 100 * time.Minute, true, "about 2 hours"},
		{"en", 3 * time.Hour, true, "about 3 hours"},
		{"de", 0, false, ""},
		{"de", 30 * time.Second, true, "weniger als eine Minute"},
		{"de", time.Minute, true, "etwa 1 Minute"},
		{"de", 25 * time.Minute, true, "etwa 25 Minuten"},
		{"es", time.Minute, true, "aproximadamente 1 minuto"},
		{"es", 2 * time.Hour, true, "aproximadamente 2 horas"},
		{"ja", 4 * time.Minute, true, "約4 分"},
		{"ja", time.Minute, true, "約1 分"},
	} {
		got, err := c.Choose(tc.lang).Wait(tc.d, tc.known)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%s %v", tc.lang, tc.d)
	}
}

// Number writes what the language's printer writes for %d, for numbers of
// every length and sign, in every language, an operator's as well.
func TestNumberIsSprintfD(t *testing.T) {
	dir := t.TempDir()
	for _, lang := range []string{"fr", "hi", "pt-BR", "ar", "ru"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, lang+".toml"), []byte(`lang_name = "x"`), 0o644))
	}
	c := load(t, dir)
	ns := []int64{0, -1, -1234, math.MinInt64, math.MaxInt64}
	for n := int64(1); n < math.MaxInt64/10; n *= 10 {
		ns = append(ns, n, n-1, n+1, 12*n+3)
	}
	for _, x := range c.Languages() {
		p := message.NewPrinter(language.MustParse(x.Lang()))
		for _, n := range ns {
			assert.Equal(t, p.Sprintf("%d", n), x.Number(n), "%s %d", x.Lang(), n)
		}
	}
}

func TestNumberAndMessages(t *testing.T) {
	c := load(t, "")
	assert.Equal(t, "12,400", c.Choose("en").Number(12400))
	assert.Equal(t, "12.400", c.Choose("de").Number(12400))
	assert.Equal(t, "7", c.Choose("ja").Number(7))

	de := c.Choose("de")
	s, err := de.T("pre_queue_opens_at", "Time", "12:00")
	require.NoError(t, err)
	assert.Equal(t, "Öffnung: 12:00", s)
	s, err = de.Plural("rate_limited_body", 1)
	require.NoError(t, err)
	assert.Contains(t, s, "in 1 Sekunde von")
	_, err = de.T("no_such_message")
	assert.Error(t, err, "a message English lacks fails the page")
}

// TestOperatorCatalogs: a directory of files adds a language with no code,
// a message it leaves out is English, and a file for an embedded language
// replaces that language's messages one by one.
func TestOperatorCatalogs(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "fr.toml", `
lang_name = "Français"
waiting_title = "Vous êtes dans la file"
[wait_minutes]
one = "{{.Count}} minute"
other = "{{.Count}} minutes"
`)
	write(t, dir, "pt-BR.json", `{"lang_name": "Português", "sold_out_title": "Esgotado"}`)
	write(t, dir, "de.toml", `sold_out_title = "Alles weg"`)
	write(t, dir, "README.md", "not a catalog")
	c := load(t, dir)
	assert.Equal(t, []string{"en", "de", "es", "fr", "ja", "pt-BR"}, langs(c.Languages()))

	fr := c.Choose("fr-CA, en;q=0.5")
	assert.Equal(t, "fr", fr.Lang())
	assert.Equal(t, "Vous êtes dans la file", must(fr.T("waiting_title")))
	assert.Equal(t, "Sold out", must(fr.T("sold_out_title")), "a message the file leaves out is English")
	assert.Equal(t, "about 2 minutes", must(fr.Wait(2*time.Minute, true)), "wait_about is English, the unit French")
	assert.Equal(t, "pt-BR", c.Choose("pt-BR").Lang())
	assert.Equal(t, "Esgotado", must(c.Choose("pt-BR").T("sold_out_title")))

	de := c.Choose("de")
	assert.Equal(t, "Alles weg", must(de.T("sold_out_title")))
	assert.Equal(t, "Sie sind in der Warteschlange", must(de.T("waiting_title")), "the rest of German stays")
}

func TestOperatorCatalogErrors(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"no catalogs":    {"notes.txt": "x"},
		"not a language": {"messages.toml": `waiting_title = "x"`},
		"bad toml":       {"fr.toml": `waiting_title = `},
		"bad json":       {"fr.json": `{"waiting_title": `},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for f, text := range files {
				write(t, dir, f, text)
			}
			_, err := Load(dir)
			assert.Error(t, err)
		})
	}
	// The directory is named once, as the operator wrote it: the file
	// system it is read through calls it ".", which says nothing.
	missing := filepath.Join(t.TempDir(), "missing")
	_, err := Load(missing)
	require.Error(t, err)
	assert.Equal(t, "locales "+missing+": no such directory", err.Error())
	file := filepath.Join(t.TempDir(), "fr.toml")
	write(t, filepath.Dir(file), "fr.toml", `waiting_title = "x"`)
	_, err = Load(file)
	require.Error(t, err)
	assert.Equal(t, "locales "+file+": not a directory", err.Error())
}

func write(t *testing.T, dir, name, text string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// TestNumberGrouping: languages that group ASCII digits by threes are
// written without the printer; others (lakh grouping, Arabic-Indic digits)
// keep it. TestNumberIsSprintfD checks that both write as Sprintf.
func TestNumberGrouping(t *testing.T) {
	dir := t.TempDir()
	for _, lang := range []string{"fr", "hi", "ar"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, lang+".toml"), []byte(`lang_name = "x"`), 0o644))
	}
	c := load(t, dir)
	grouped := map[string]bool{}
	for _, x := range c.Languages() {
		grouped[x.Lang()] = x.group.ok
	}
	assert.Equal(t, map[string]bool{"en": true, "de": true, "es": true, "ja": true, "fr": true, "hi": false, "ar": false}, grouped)
	assert.Equal(t, "12\u00a0400", c.Choose("fr").Number(12400), "a separator of more than one byte")
}
