package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/sale"
	"github.com/waitroom/waitroom/loadtest/stack"
)

// upFlags are the flags of `loadtest up`.
type upFlags struct {
	srv                 servers
	caddyBin, originBin string
	caddyfile           string
	port, adminPort     int
	originPort, metrics int
	crowd               int
	keep                bool
}

// runUp brings the whole product up on this machine for a person to try:
// the origin, Caddy with the local Caddyfile in front of it, and a demo
// event; it prints where to go and runs until interrupted.
func runUp(ctx context.Context, args []string, out, errOut io.Writer) error {
	var f upFlags
	fs := newFlags("up", "The product on this machine, for a person to try: the origin and Caddy with\nexamples/Caddyfile in front of it, a demo event with reserved sections and a\ngeneral-admission section, and the URLs to open. Runs until Ctrl-C, then stops\neverything it started.", errOut)
	f.srv.register(fs, true)
	fs.StringVar(&f.caddyBin, "caddy", "bin/caddy", "Caddy with the waitroom module (make build)")
	fs.StringVar(&f.originBin, "origin", "bin/origin", "the origin (make build)")
	fs.StringVar(&f.caddyfile, "caddyfile", "examples/Caddyfile", "the Caddyfile Caddy runs")
	fs.IntVar(&f.port, "port", 8080, "the site's port: the storefront through the waiting room")
	fs.IntVar(&f.adminPort, "admin-port", 2019, "Caddy's admin endpoint, with the staff console")
	fs.IntVar(&f.originPort, "origin-port", 8081, "the origin's port (its API, straight)")
	fs.IntVar(&f.metrics, "metrics-port", 9091, "the origin's metrics (ORIGIN_METRICS_ADDR), apart from its API")
	fs.IntVar(&f.crowd, "crowd", 0, "a background crowd of this many users from the load generator, arriving over 2 minutes, so the queue moves")
	fs.BoolVar(&f.keep, "keep", false, "keep the run folder (logs, configs) and the database")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := f.srv.check(true, true); err != nil {
		return err
	}
	if err := needBinary(f.caddyBin, "make build"); err != nil {
		return err
	}
	if err := needBinary(f.originBin, "make build"); err != nil {
		return err
	}
	caddyfile, err := filepath.Abs(f.caddyfile)
	if err != nil {
		return err
	}
	if err := portsFree(map[string]int{"--port": f.port, "--admin-port": f.adminPort,
		"--origin-port": f.originPort, "--metrics-port": f.metrics}); err != nil {
		return err
	}

	dir, cleanup, err := workDir("up", f.keep, errOut)
	if err != nil {
		return err
	}
	defer cleanup()
	started := time.Now()
	fmt.Fprintln(errOut, "starting the origin and Caddy…")
	sys, err := stack.Up(ctx, stack.SystemConfig{
		CaddyBin: f.caddyBin, OriginBin: f.originBin, Dir: dir,
		RedisURL: f.srv.redisURL, DatabaseURL: f.srv.databaseURL, KeepDatabase: f.keep,
		OriginPort: f.originPort, OriginMetricsPort: f.metrics,
		Event:     demoEvent(),
		Caddyfile: caddyfile, SitePort: f.port, AdminPort: f.adminPort,
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(errOut, "stopping…")
		for _, e := range sys.Down(context.WithoutCancel(ctx)) {
			fmt.Fprintf(errOut, "stopping: %v\n", e)
		}
	}()
	site := fmt.Sprintf("http://localhost:%d/", f.port)
	fmt.Fprintf(out, `
Waitroom is up (in %s).

  the storefront, through the waiting room   %s
  the staff console (raise the watermark)    http://localhost:%d/waitroom/console
  the origin's API, straight                 %s
  the origin's metrics                       %s/metrics
  Caddy's metrics                            http://localhost:%d/metrics

Event %d, %q: %d seats (sections A and B, reserved; GA-Floor, general admission).
Nobody is admitted until the watermark is raised in the console.
Test cards: pm_card_visa pays, pm_card_chargeDeclined is declined.
Logs: %s
Ctrl-C stops everything.
`, time.Since(started).Round(100*time.Millisecond), site, f.adminPort, sys.Origin.URL, sys.Origin.MetricsURL, f.adminPort,
		sys.Event.ID, sys.Event.Name, sys.Event.Capacity, dir)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchSystem(ctx, sys, cancel)
	if f.crowd > 0 {
		go runCrowd(ctx, sys, f.crowd, errOut)
	}
	<-ctx.Done()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// demoEvent is the event `up` sells: two reserved sections and a
// general-admission one, small enough to see on one screen.
func demoEvent() api.NewEvent {
	seating := api.Seating{Sections: []api.Section{
		{ID: "A", Price: 12000, Rows: rows(8, 16)},
		{ID: "B", Price: 8000, Rows: rows(10, 20)},
		{ID: "GA-Floor", Price: 5000, Capacity: 200},
	}}
	zero := int64(0)
	return api.NewEvent{ID: 42, Name: "Demo night", Capacity: seating.Seats(), Price: 8000, Currency: "eur",
		HoldTTLSeconds: 600, MaxPerUser: 6, OverflowPct: &zero, Seating: &seating}
}

func rows(n, seats int) []api.Row {
	out := make([]api.Row, n)
	for i := range out {
		out[i] = api.Row{ID: strconv.Itoa(i + 1), Seats: seats}
	}
	return out
}

// portsFree says clearly which port is taken, and by which flag to move it.
func portsFree(ports map[string]int) error {
	for flag, port := range ports {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return usagef("port %d is taken (something else listens on it): choose another with %s, e.g. make up ARGS='%s %d'",
				port, flag, flag, port+10)
		}
		_ = ln.Close()
	}
	return nil
}

// runCrowd sends n users through the waiting room over two minutes, as the
// flash sale does, and raises the watermark steadily as staff would, so a
// person watching the console or waiting in a browser sees the queue move.
func runCrowd(ctx context.Context, sys *stack.System, n int, errOut io.Writer) {
	cfg := sale.Defaults()
	cfg.Users, cfg.Window, cfg.Timeout = n, 2*time.Minute, 10*time.Minute
	cfg.Conns = 128
	go func() {
		admin := api.GatewayAdmin{Client: api.Client{HTTP: api.NewHTTPClient(0, 5*time.Second), Base: sys.Caddy.AdminURL}}
		step := max(1, int64(n)/120)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := admin.Raise(ctx, sys.Event.ID, step); err != nil && ctx.Err() == nil {
					fmt.Fprintf(errOut, "crowd: raising the watermark: %v\n", err)
				}
			}
		}
	}()
	target := sale.Target{Gateway: sys.Gateway, GatewayAdmin: sys.Caddy.AdminURL, Origin: sys.Origin.URL,
		AdminToken: sys.AdminToken, WebhookSecret: sys.WebhookSecret, Event: sys.Event.ID}
	fmt.Fprintf(errOut, "crowd: %d users arriving over %s\n", n, cfg.Window)
	res, err := sale.Run(ctx, cfg, target, nil, nil)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		fmt.Fprintf(errOut, "crowd: %v\n", err)
	default:
		fmt.Fprintf(errOut, "crowd: done, %d seats sold to it\n", res.SeatsSold)
	}
}
