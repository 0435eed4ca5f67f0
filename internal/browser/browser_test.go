//go:build browser

package browser_test

import (
	"bytes"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/waitroom/waitroom/internal/browser"
)

// TestBrowser starts Chromium with the package's flags, loads a page from a
// local server, runs its script, and checks that a second tab shares the
// first's cookies, an isolated one does not, and that a screenshot is a PNG of the viewport's size.
func TestBrowser(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><html lang="en"><title>t</title><p id="p">ok</p><script>document.getElementById("p").textContent = "script ran"</script>`))
	}))
	defer srv.Close()
	t.Setenv("BROWSER_OUT", t.TempDir())

	ctx := browser.New(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL)); err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("p")))
	if err != nil {
		t.Fatal(err)
	}
	if text != "script ran" {
		t.Errorf("text = %q, want the script's", text)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie = "seen=1; path=/"`)); err != nil {
		t.Fatal(err)
	}

	tab := browser.Tab(t, ctx)
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL)); err != nil {
		t.Fatal(err)
	}
	cookie, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.cookie`))
	if err != nil {
		t.Fatal(err)
	}
	if cookie != "seen=1" {
		t.Errorf("second tab's cookies = %q, want the first's", cookie)
	}
	other := browser.Isolated(t, ctx)
	if err := chromedp.Do(other, chromedp.Navigate(srv.URL)); err != nil {
		t.Fatal(err)
	}
	if cookie, err := chromedp.Run(other, chromedp.Evaluate[string](`document.cookie`)); err != nil || cookie != "" {
		t.Errorf("isolated tab's cookies = %q, %v; want none", cookie, err)
	}

	file := browser.Screenshot(t, tab, "smoke")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if img.Width != browser.Width || img.Height != browser.Height {
		t.Errorf("screenshot is %dx%d, want %dx%d", img.Width, img.Height, browser.Width, browser.Height)
	}
}
