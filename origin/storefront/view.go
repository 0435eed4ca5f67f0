package storefront

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"golang.org/x/text/currency"

	"github.com/waitroom/waitroom/locale"
)

// langCookie is the gateway's language cookie: the storefront reads and
// writes the same choice, so the waiting page and the shop speak alike.
const langCookie = "waitroom_lang"

type pageTemplate struct{ t *template.Template }

// pageNames are the pages, each templates/<name>.html with the layout.
var pageNames = []string{"events", "event", "hold", "booking", "tickets", "message", "confirm"}

func parsePages() (map[string]*pageTemplate, error) {
	base, err := template.New("layout.html").ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	out := make(map[string]*pageTemplate, len(pageNames))
	for _, name := range pageNames {
		t, err := template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		out[name] = &pageTemplate{t: t}
	}
	return out, nil
}

// view is what every page's template gets: the language's messages, the
// page's own data, and a message for the buyer.
type view struct {
	locale.Text
	Title string
	// Refresh, in seconds, reloads the page (0: never), or loads
	// RefreshTo when set (a form's answer is not the page to reload).
	Refresh   int
	RefreshTo string
	// Error is a refusal to show at the top of the page, Notice news.
	Error, Notice string
	Langs         []langLink
	Data          any
	now           time.Time
}

type langLink struct {
	Tag, Name, Href string
	Current         bool
}

// Money writes an amount in the currency's smallest unit with the
// currency's own number of decimals (ISO 4217): 5000 JPY is 5,000 JPY,
// 5000 INR 50.00 INR, 12500 KWD 12.500 KWD, as the provider charges them.
func (v view) Money(amount int64, code string) string {
	sign := ""
	if amount < 0 {
		sign, amount = "-", -amount
	}
	code = strings.ToUpper(code)
	scale := 2
	if cur, err := currency.ParseISO(code); err == nil {
		scale, _ = currency.Standard.Rounding(cur)
	}
	if scale == 0 {
		return fmt.Sprintf("%s%s %s", sign, v.Number(amount), code)
	}
	unit := int64(1)
	for range scale {
		unit *= 10
	}
	// The decimal mark is the one the grouping does not use: 2,400.00 in
	// English, 2.400,00 in German.
	mark := "."
	if strings.Contains(v.Number(1_000_000), ".") {
		mark = ","
	}
	return fmt.Sprintf("%s%s%s%0*d %s", sign, v.Number(amount/unit), mark, scale, amount%unit, code)
}

// Clock writes a time of day in UTC, as the hold's expiry.
func (v view) Clock(t time.Time) string { return t.UTC().Format("15:04:05") + " UTC" }

// At is message id with its time, data name, as a <time> element: the UTC
// text for a page without the script, the instant in datetime for the
// script to write in the buyer's own time zone.
func (v view) At(id, name string, t time.Time) (template.HTML, error) {
	// A mark no catalog writes, where the time goes: the message is
	// escaped around the element, never the element itself.
	const mark = "\ue000"
	m, err := v.T(id, name, mark)
	if err != nil {
		return "", err
	}
	before, after, ok := strings.Cut(m, mark)
	if !ok {
		// An operator's catalog may leave the time out.
		return template.HTML(template.HTMLEscapeString(m)), nil
	}
	return template.HTML(template.HTMLEscapeString(before) +
		`<time datetime="` + t.UTC().Format(time.RFC3339) + `">` + template.HTMLEscapeString(v.Clock(t)) + `</time>` +
		template.HTMLEscapeString(after)), nil
}

// Seconds is how long until t, at least 0.
func (v view) Seconds(t time.Time) int64 { return max(int64(t.Sub(v.now)/time.Second), 0) }

// Left is how long until t, as m:ss.
func (v view) Left(t time.Time) string {
	n := v.Seconds(t)
	return fmt.Sprintf("%d:%02d", n/60, n%60)
}

// text chooses the request's language: ?lang= (remembered in the
// gateway's cookie), the cookie, then Accept-Language.
func (s *Store) text(w http.ResponseWriter, r *http.Request) locale.Text {
	param := r.URL.Query().Get("lang")
	cookie := ""
	if c, err := r.Cookie(langCookie); err == nil {
		cookie = c.Value
	}
	t := s.catalog.Choose(r.Header.Get("Accept-Language"), param, cookie)
	if param != "" && t.Lang() != cookie {
		http.SetCookie(w, &http.Cookie{Name: langCookie, Value: t.Lang(), Path: "/", MaxAge: 365 * 24 * 3600,
			SameSite: http.SameSiteLaxMode, Secure: isHTTPS(r)})
	}
	return t
}

// render writes page name with status. A template that fails writes a
// plain 500: nothing half-rendered reaches the buyer.
func (s *Store) render(w http.ResponseWriter, r *http.Request, status int, name string, v view) {
	if v.Text == (locale.Text{}) {
		v.Text = s.text(w, r)
	}
	v.now = s.now()
	page := r.URL.Path
	if r.Method == http.MethodPost {
		// A form answered again: its language links lead to the page the
		// form is on (/events/1/holds → /events/1).
		page = path.Dir(page)
	}
	for _, l := range s.catalog.Languages() {
		q := r.URL.Query()
		q.Set("lang", l.Lang())
		name, _ := l.T("lang_name")
		v.Langs = append(v.Langs, langLink{Tag: l.Lang(), Name: name, Current: l.Lang() == v.Lang(),
			Href: (&url.URL{Path: page, RawQuery: q.Encode()}).String()})
	}
	var buf bytes.Buffer
	if err := s.pages[name].t.Execute(&buf, v); err != nil {
		s.log.Error("storefront page", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Language", v.Lang())
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	// connect-src: the hold page's script looks at a declined payment's
	// booking page.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Add("Vary", "Accept-Encoding")
	body := buf.Bytes()
	if len(body) > gzipAbove && acceptsGzip(r) {
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
		_, _ = zw.Write(body)
		if zw.Close() == nil {
			h.Set("Content-Encoding", "gzip")
			body = gz.Bytes()
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// gzipAbove is the size of a page worth compressing: a seat map's markup
// repeats itself and shrinks tenfold.
const gzipAbove = 1400

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// fail shows a page of its own with one message.
func (s *Store) fail(w http.ResponseWriter, r *http.Request, status int, msgID string, data ...any) {
	t := s.text(w, r)
	msg, err := t.T(msgID, data...)
	if err != nil {
		msg = msgID
	}
	// No title of its own: the layout names the page by its message (the
	// site's name twice said nothing).
	s.render(w, r, status, "message", view{Text: t, Error: msg})
}

// msg is a message of the request's language; an unknown id is itself.
func msg(t locale.Text, id string, data ...any) string {
	m, err := t.T(id, data...)
	if err != nil {
		return id
	}
	return m
}

// seeOther ends a form's POST: the page to GET next.
func seeOther(w http.ResponseWriter, r *http.Request, path string) {
	http.Redirect(w, r, path, http.StatusSeeOther)
}
