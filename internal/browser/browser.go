// Package browser starts headless Chromium for the browser tests (build tag
// browser, `make test-browser`) and keeps their screenshots under out/.
//
// Chromium runs as root in containers and on CI machines, on a network that
// refuses its background connections: the flags turn off the sandbox, the
// GPU, QUIC and every update, sync and first-run request, and each browser
// gets a new, empty profile.
package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Width and Height are the window every test starts with: a small laptop's,
// so screenshots stay small.
const (
	Width  = 800
	Height = 600
)

// timeout bounds one browser's whole life, so a page that never gets where a
// test waits for fails the test instead of hanging the run.
const timeout = 3 * time.Minute

// names are the commands Chromium is installed as (Debian's chromium first).
var names = []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}

// ExecPath finds Chromium: $CHROMIUM when set, else the first of the usual
// commands on $PATH.
func ExecPath() (string, error) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return exec.LookPath(p)
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium on PATH (tried %v; set CHROMIUM, or run scripts/chromium.sh)", names)
}

// Flags are the options Chromium is started with, on top of chromedp's
// defaults.
func Flags(execPath, userDataDir string) []chromedp.ExecAllocatorOption {
	return append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(userDataDir),
		chromedp.WindowSize(Width, Height),
	)
}

// New starts a browser for the test and returns the context of its first
// tab, Width×Height; the browser closes when the test ends. Without Chromium
// the test fails under CI=true and is skipped elsewhere.
func New(t testing.TB) context.Context {
	t.Helper()
	path, err := ExecPath()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: the browser tests fail without Chromium)", err)
		}
		t.Skipf("%v; the browser tests need it", err)
	}
	parent, cancelTimeout := context.WithTimeout(context.Background(), timeout)
	actx, cancelAlloc := chromedp.NewExecAllocator(parent, Flags(path, t.TempDir())...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		cancelTimeout()
	})
	// The first action starts the browser; a failure here is Chromium's.
	if err := chromedp.Do(ctx, viewport()); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// Tab opens another tab of the browser of ctx (a context from New), with the
// same cookies and size; it closes when the test ends.
func Tab(t testing.TB, ctx context.Context) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(tab, viewport()); err != nil {
		t.Fatalf("new tab: %v", err)
	}
	return tab
}

// Isolated opens a tab of the browser of ctx in a browser context of its
// own, as a second visitor: no cookies or storage shared with the other
// tabs. It closes when the test ends.
func Isolated(t testing.TB, ctx context.Context) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(tab, viewport()); err != nil {
		t.Fatalf("new browser context: %v", err)
	}
	return tab
}

// viewport sets the page's size; the window's includes the browser's own
// frame.
func viewport() chromedp.Action[chromedp.Void] {
	return chromedp.EmulateViewport(Width, Height)
}

// OutDir is where screenshots go: $BROWSER_OUT, else out/browser at the
// root of the module.
func OutDir() (string, error) {
	if d := os.Getenv("BROWSER_OUT"); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "out", "browser"), nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = up
	}
}

// Screenshot writes what the tab shows now, as PNG, to OutDir()/name.png and
// returns the file's path: the whole page, so at least the viewport.
func Screenshot(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir, err := OutDir()
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	file := filepath.Join(dir, name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	t.Logf("screenshot: %s", file)
	return file
}

// Until evaluates expr in the tab until it is true, within a minute: the
// page gets there by itself (its own polls, reloads and refreshes), and an
// evaluation that meets a navigation is tried again.
func Until(t testing.TB, tab context.Context, expr string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(tab, 2*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not %s (last error: %v)", expr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
