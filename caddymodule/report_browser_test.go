//go:build browser

package caddymodule

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/browser"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

// TestBrowserConsoleReport plays a short sale second by second on the
// room's clock (a crowd arrives, the watermark rises, the admitted hold
// and pay, every seat is held a while, then sold) and opens the console:
// it draws the sale's report as charts, the queue's, the seats' with the
// "all held" and "sold out" stretches, and the waits, and keeps them once
// the event is sold out.
func TestBrowserConsoleReport(t *testing.T) {
	clk := useClock(t)
	ticks := useReportTicks(t)
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	port := testenv.FreePort(t)
	tc := caddytest.NewTester(t)
	tc.InitServer(fmt.Sprintf(`{
	skip_install_trust
	admin localhost:%d {
		origins localhost:%d ""
		enforce_origin
	}
	http_port %d
	https_port %d
	grace_period 1ns
}

http://localhost:%d {
	waitroom {
		event %d
		key k1 %s
	}
	respond "the site"
}
`, adminPort, adminPort, port, port+1, port, ev, testSecret), "caddyfile")
	entry := findRoom(ev)
	require.NotNil(t, entry)
	room := entry.room
	ctx := t.Context()

	// The sale: 150 seats; six in ten admitted hold, a hold lasts 8 s,
	// and nine in ten holds are paid, the rest lapse and come back.
	const sellable = 150
	type hold struct {
		at    int
		seats int64
	}
	var holds []hold
	var held, confirmed, admittedSeen int64
	soldOut := false
	tick := func() {
		// The second send is taken once the first tick's sample is
		// recorded: each second's figures are the ones sampled.
		ticks <- clk.Now()
		ticks <- clk.Now()
	}
	for s := 0; s < 120 && !soldOut; s++ {
		arrivals := 5
		switch {
		case s < 5:
			arrivals = 40
		case s < 15:
			arrivals = 15
		}
		for range arrivals {
			_, err := room.Join(ctx)
			require.NoError(t, err)
		}
		for len(holds) > 0 && s-holds[0].at >= 8 {
			h := holds[0]
			holds = holds[1:]
			held -= h.seats
			confirmed += h.seats - h.seats/10
		}
		remaining := sellable - held - confirmed
		if remaining > 0 && s%2 == 0 {
			_, err := room.Update(ctx, waitroom.Change{RaiseBy: 12, Actor: waitroom.ActorAutopilot, Reason: "closed loop"})
			require.NoError(t, err)
		}
		admitted, _ := queueCounts(entry)
		if n := min((admitted-admittedSeen)*6/10, remaining); n > 0 {
			holds = append(holds, hold{s, n})
			held += n
			remaining -= n
		}
		admittedSeen = admitted
		require.NoError(t, room.PublishInventory(ctx, waitroom.Inventory{Sellable: sellable, Held: held, Confirmed: confirmed,
			Remaining: remaining, Healthy: true, At: clk.Now()}))
		if remaining == 0 && held == 0 {
			_, err := room.Update(ctx, waitroom.Change{SoldOut: ptr(true), Actor: ActorAdmin, Reason: "every seat paid"})
			require.NoError(t, err)
			soldOut = true
		}
		tick()
		clk.Advance(time.Second)
	}
	require.True(t, soldOut, "the sale sold out: held %d, confirmed %d, admitted %d, state %+v", held, confirmed, admittedSeen, room.State())
	tick()

	admin := fmt.Sprintf("http://localhost:%d", adminPort)
	bctx := browser.New(t)
	require.NoError(t, chromedp.Do(bctx, chromedp.EmulateViewport(1100, 900)))
	card := "#event-" + evs
	until := func(what, js string) {
		t.Helper()
		_, err := chromedp.Run(bctx, chromedp.Poll[bool](js, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
		require.NoError(t, err, what)
	}
	points := func(chart, series string) string {
		return fmt.Sprintf(`(document.querySelector(%q)?.getAttribute("points") || "").trim().split(" ").filter(Boolean).length`,
			card+` svg[data-chart=`+chart+`] polyline[data-series=`+series+`]`)
	}
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(admin+"/waitroom/console")))
	until("the queue chart is drawn", points("queue", "waiting")+" > 30")
	for _, s := range [][2]string{{"queue", "admitted"}, {"queue", "watermark"}, {"seats", "remaining"}, {"seats", "held"}} {
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](points(s[0], s[1])))
		require.NoError(t, err)
		assert.Greater(t, n, 30, "%s: %s drawn", s[0], s[1])
	}
	count := func(sel string) int {
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, card+" "+sel)))
		require.NoError(t, err)
		return n
	}
	assert.Positive(t, count(`svg[data-chart=seats] rect[data-band=all_held]`), "the seats were all held a while")
	assert.Positive(t, count(`svg[data-chart=seats] rect[data-band=sold_out]`), "then sold out")
	assert.Equal(t, 3, count(`svg[data-chart=waits] rect[data-bar]`), "p50, p90 and p99 drawn")
	note, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(card+" .report .note")+`).textContent`))
	require.NoError(t, err)
	assert.Contains(t, note, "The sale's record", "a sold-out event's report stands as its record")

	browser.Screenshot(t, bctx, "console-report-page")
	png, err := chromedp.Run(bctx, chromedp.ScreenshotScale(card+" .report", 1.5, chromedp.NodeVisible))
	require.NoError(t, err)
	dir, err := browser.OutDir()
	require.NoError(t, err)
	file := filepath.Join(dir, "console-report.png")
	require.NoError(t, os.WriteFile(file, png, 0o644))
	t.Logf("screenshot: %s", file)
}
