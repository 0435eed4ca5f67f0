// Command origin runs the bundled origin service: seat holds in Redis, the
// Postgres ledger, the reaper and the reconciler, bookings paid through
// fakepay or Stripe, behind the HTTP API of docs/api.md §5–§13. Configuration
// comes from the environment (docs/api.md §14); flags override it (origin -h
// lists them).
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/maintenance"
	"github.com/waitroom/waitroom/origin/payment"
)

func main() {
	cfg, err := loadConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "origin: configuration: %v\n", err)
		os.Exit(2)
	}
	var handler slog.Handler = slog.NewTextHandler(os.Stderr, nil)
	if cfg.logFormat == "json" {
		handler = slog.NewJSONHandler(os.Stderr, nil)
	}
	log := slog.New(handler)
	redis.SetLogger(redisurl.Logger{Log: log})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		log.Error("origin stopped", "error", fmt.Errorf("ORIGIN_ADDR: listen on %s: %w", cfg.addr, err))
		os.Exit(1)
	}
	if err := run(ctx, ln, cfg, log); err != nil {
		log.Error("origin stopped", "error", err)
		os.Exit(1)
	}
}

// run serves the origin on ln until ctx ends. It answers at once and waits
// for its servers behind the listener: in an orchestrated start PostgreSQL
// and Redis are rarely up first, and an origin that exited would only be
// restarted into the same race.
func run(ctx context.Context, ln net.Listener, cfg config, log *slog.Logger) error {
	waiting := newWaitList("PostgreSQL", "Redis")
	front := &switchHandler{}
	front.set(origin.Starting(waiting.String))
	httpSrv := origin.NewHTTPServer(cfg.addr, front)
	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(ln) }()
	log.Info("origin listening, waiting for PostgreSQL and Redis", "addr", ln.Addr().String())

	lg, rdb, err := connect(ctx, cfg, log, waiting)
	if err != nil {
		_ = httpSrv.Close()
		if ctx.Err() != nil {
			log.Info("stopped while waiting for " + waiting.String())
			return nil
		}
		return err
	}
	defer lg.Close()
	defer rdb.Close()

	// Background work (fakepay's webhook deliveries included) stops only
	// after the HTTP server has drained, so a request in flight still finds
	// its event's admission state.
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()

	ticketKey := cfg.ticketKey
	if ticketKey == nil {
		ticketKey = make([]byte, 32)
		_, _ = rand.Read(ticketKey)
		log.Warn("TICKET_KEY is not set: tickets are signed with a random key and will not verify after a restart or on another node")
	}
	if cfg.buyerKey == nil {
		log.Warn("ORIGIN_BUYER_KEY is not set: the storefront's buyer cookies are signed with a random key and are void after a restart or on another node")
	}
	cfg.payment.Fakepay.Logger = log
	payments, err := payment.New(bg, cfg.payment)
	if err != nil {
		return fmt.Errorf("payment provider: %w", err)
	}
	defer payments.Close()

	srv, err := origin.New(origin.Config{
		Keys:              cfg.keys,
		AdminToken:        cfg.adminToken,
		MetricsApart:      cfg.metricsAddr != "",
		Logger:            log,
		Reaper:            maintenance.ReaperConfig{Interval: cfg.reaperInterval},
		DriftCorrector:    maintenance.DriftCorrectorConfig{Interval: cfg.reconcileInterval},
		HoldWriteTimeout:  cfg.holdWriteTimeout,
		ClockSkewMargin:   cfg.clockSkewMargin,
		RebuildSettle:     cfg.rebuildSettle,
		HoldMaxLife:       cfg.holdMaxLife,
		Payments:          payments,
		TicketKey:         ticketKey,
		TicketRetiredKeys: cfg.ticketRetiredKeys,
		GateToken:         cfg.gateToken,
		BuyerKey:          cfg.buyerKey,
		PaymentWindow:     cfg.paymentWindow,
		PaymentReconciler: maintenance.PaymentReconcilerConfig{
			Interval: cfg.paymentReconcileInterval, PendingAfter: cfg.paymentPendingAfter,
		},
		Events: cfg.events,
	}, lg, rdb)
	if err != nil {
		return err
	}
	// Loading an event whose keys Redis lacks (a new or flushed Redis) waits
	// for other nodes' hold writes first, seconds an event.
	waiting.next(func() string {
		const what = "the events to be loaded into Redis from the ledger"
		if loaded, total := srv.Loading(); total > 0 {
			return fmt.Sprintf("%s (%d of %d)", what, loaded, total)
		}
		return what
	})
	log.Info("loading the events into Redis from the ledger")
	if err := loadEvents(ctx, bg, srv, log); err != nil {
		if ctx.Err() != nil {
			log.Info("stopped while waiting for " + waiting.String())
			return nil
		}
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Run(bg)
	}()

	if cfg.debugAddr != "" {
		if err := serveProfiler(cfg.debugAddr, log); err != nil {
			stopBG()
			<-done
			return err
		}
	}
	if cfg.metricsAddr != "" {
		if err := serveMetrics(cfg.metricsAddr, srv.MetricsHandler(), log); err != nil {
			stopBG()
			<-done
			return err
		}
	}
	if f, ok := payments.(*payment.Fakepay); ok && cfg.payment.Fakepay.WebhookURL == "" {
		// Known only once the port is bound (ORIGIN_ADDR may ask for :0).
		f.SetWebhookURL(selfURL(ln.Addr()) + "/v1/webhooks/fakepay")
	}
	front.set(srv.Handler())
	log.Info("origin ready", "addr", ln.Addr().String(), "payment_provider", payments.Name())
	if cfg.events.URL != "" {
		u, _ := url.Parse(cfg.events.URL) // checked by loadConfig
		log.Info("booking events are sent", "url", u.Redacted())
	}
	if cfg.gateToken == "" {
		log.Info("ORIGIN_GATE_TOKEN is not set: the gate (POST /v1/scans) takes gate devices' tokens only, and answers 503 gate_disabled while none is registered")
	}

	select {
	case err := <-errc:
		stopBG()
		<-done
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancelShutdown()
	err = httpSrv.Shutdown(shutdownCtx)
	stopBG()
	<-done
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// connect waits for PostgreSQL (opened and migrated) and Redis (answering
// a PING), both at once, until each is up or ctx ends.
func connect(ctx context.Context, cfg config, log *slog.Logger, waiting *waitList) (*ledger.Ledger, redis.UniversalClient, error) {
	rdb, err := newRedisClient(cfg.redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	var (
		lg     *ledger.Ledger
		pgErr  error
		redErr error
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		lg, pgErr = awaitServer(ctx, log, "PostgreSQL", postgresAddr(cfg.databaseURL), func(ctx context.Context) (*ledger.Ledger, error) {
			return ledger.Open(ctx, cfg.databaseURL, ledger.Options{Outbox: cfg.events.URL != ""})
		})
		if pgErr == nil {
			waiting.done("PostgreSQL")
		}
	})
	wg.Go(func() {
		_, redErr = awaitServer(ctx, log, "Redis", redisAddr(cfg.redisURL), func(ctx context.Context) (struct{}, error) {
			return struct{}{}, rdb.Ping(ctx).Err()
		})
		if redErr == nil {
			waiting.done("Redis")
		}
	})
	wg.Wait()
	if err := errors.Join(pgErr, redErr); err != nil {
		if lg != nil {
			lg.Close()
		}
		_ = rdb.Close()
		return nil, nil, err
	}
	return lg, rdb, nil
}

// startServer starts srv's service of the ledger's events; a variable for
// the tests.
var startServer = (*origin.Server).Start

// loadPatience is how long a failure to load some of the events holds the
// origin back while its servers answer: longer than a server's blip, and
// short enough that one event that never loads (a row the rebuild cannot
// take, a Redis refusing that event's keys) does not keep every other
// event, its webhooks and its gates down. A variable for the tests.
var loadPatience = time.Minute

// loadEvents loads the ledger's events into Redis (srv.Start on bg, which
// it keeps), trying again with backoff while the loading fails, as the
// origin waits for its servers before it: a Redis or PostgreSQL that goes
// away during the loading would otherwise stop the origin, only for an
// orchestrator to restart it into the same loading. It returns once the
// events are loaded, once both servers answer after loadPatience of
// failures (the events that did not load are counted from the ledger until
// the drift corrector loads them, as after a Redis lost in service), or
// when ctx ends.
func loadEvents(ctx, bg context.Context, srv *origin.Server, log *slog.Logger) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = maxRetryInterval
	began := time.Now()
	for {
		err := startServer(srv, bg)
		if err == nil {
			return nil
		}
		if time.Since(began) >= loadPatience && serversAnswer(ctx, srv) {
			log.Error("serving without the events that did not load: their seats are counted from the ledger, "+
				"and the drift corrector keeps loading them", "error", err, "tried_for", time.Since(began).Round(time.Millisecond))
			return nil
		}
		next := b.NextBackOff()
		log.Warn("loading the events into Redis failed", "error", err, "retry_in", next.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(next):
		}
	}
}

// serversAnswer reports whether Redis and PostgreSQL both answer, as
// /readyz asks them.
func serversAnswer(ctx context.Context, srv *origin.Server) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return srv.Ready(ctx) == nil
}

// postgresAddr is where DATABASE_URL points, without its credentials.
func postgresAddr(databaseURL string) string {
	c, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return "?"
	}
	return net.JoinHostPort(c.ConnConfig.Host, strconv.Itoa(int(c.ConnConfig.Port)))
}

// redisAddr is where REDIS_URL points, without its credentials (the first
// node of a cluster URL).
func redisAddr(redisURL string) string {
	u, err := url.Parse(redisURL)
	if err != nil {
		return "?"
	}
	return u.Host
}

// serveProfiler serves the Go profiler on addr, apart from the API: what
// the holds benchmark profiles the origin with.
func serveProfiler(addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("profiler: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	log.Info("profiler listening", "addr", ln.Addr().String())
	go func() { _ = http.Serve(ln, mux) }()
	return nil
}

// serveMetrics serves the origin's metrics on addr, a scraper's address
// apart from the API's.
func serveMetrics(addr string, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("ORIGIN_METRICS_ADDR: listen on %s: %w", addr, err)
	}
	log.Info("metrics listening", "addr", ln.Addr().String())
	go func() { _ = http.Serve(ln, h) }()
	return nil
}

// selfURL is how this process reaches its own listener: loopback when it
// listens on every address.
func selfURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	host := tcp.IP
	if host == nil || host.IsUnspecified() {
		host = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(host.String(), strconv.Itoa(tcp.Port))
}

// newRedisClient is the gateway's client (short timeouts: a dead Redis costs
// a request about a second, never a hang) with a pool sized for the
// origin, where every admitted buyer's hold is a Redis round trip; settings
// the URL names win. A cluster URL (addr=…) gives a Redis Cluster client.
func newRedisClient(url string) (redis.UniversalClient, error) {
	return redisurl.New(url, redisurl.Defaults{
		PoolSize:     256,
		DialTimeout:  time.Second,
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
		PoolTimeout:  2 * time.Second,
	})
}
