package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waitroom/waitroom/internal/confcheck"
	"github.com/waitroom/waitroom/internal/redisurl"
	"github.com/waitroom/waitroom/origin/outbox"
	"github.com/waitroom/waitroom/origin/payment"
	"github.com/waitroom/waitroom/origin/storefront"
	"github.com/waitroom/waitroom/origin/ticketcode"
	"github.com/waitroom/waitroom/waitroom"
)

// config is the origin's configuration: environment variables (docs/api.md
// §14), each overridable by a flag.
type config struct {
	addr              string
	debugAddr         string
	metricsAddr       string
	databaseURL       string
	redisURL          string
	keys              *waitroom.KeySet
	adminToken        string
	reaperInterval    time.Duration
	reconcileInterval time.Duration
	holdWriteTimeout  time.Duration
	clockSkewMargin   time.Duration
	rebuildSettle     time.Duration
	holdMaxLife       time.Duration
	logFormat         string

	payment payment.Config
	// ticketKey is nil when none is configured (fakepay only): a random
	// one is made at start.
	ticketKey         []byte
	ticketRetiredKeys []ticketcode.PublicKey
	// buyerKey signs the storefront's buyer cookie; nil: a random one at
	// start.
	buyerKey []byte
	// gateToken is empty when the gate is off (POST /v1/scans answers 503).
	gateToken                string
	paymentWindow            time.Duration
	paymentReconcileInterval time.Duration
	paymentPendingAfter      time.Duration

	// events sends booking events to the site; its URL is empty when off.
	events outbox.Config
}

// loadConfig reads the environment through getenv, then the flags in args.
// Every error names the variable (and flag) at fault.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	envDuration := func(name string, def time.Duration) (time.Duration, error) {
		v := getenv(name)
		if v == "" {
			return def, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("%s: %q is not a positive duration (e.g. 10s)", name, v)
		}
		return d, nil
	}

	var c config
	var keys string
	fs := flag.NewFlagSet("origin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", env("ORIGIN_ADDR", ":8081"), "listen address (ORIGIN_ADDR)")
	fs.StringVar(&c.databaseURL, "database-url", env("DATABASE_URL", ""), "PostgreSQL URL of the ledger (DATABASE_URL, required)")
	fs.StringVar(&c.redisURL, "redis-url", env("REDIS_URL", ""), "Redis URL shared with the gateways (REDIS_URL, required)")
	fs.StringVar(&keys, "keys", env("WAITROOM_KEYS", ""), "queue token keys kid:secret[,kid:secret…], the gateway's (WAITROOM_KEYS, required)")
	fs.StringVar(&c.adminToken, "admin-token", env("ORIGIN_ADMIN_TOKEN", ""), "bearer token of the admin routes, printable ASCII without spaces (ORIGIN_ADMIN_TOKEN, required)")
	fs.StringVar(&c.gateToken, "gate-token", env("ORIGIN_GATE_TOKEN", ""),
		"bearer token shared by the gate devices, at least 16 printable characters, beside the devices' own tokens; unset: devices' tokens only (ORIGIN_GATE_TOKEN)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", env("ORIGIN_METRICS_ADDR", ""),
		"listen address of the metrics (GET /metrics) apart from the API, which then does not serve them; unset: served by the API (ORIGIN_METRICS_ADDR)")
	fs.StringVar(&c.debugAddr, "debug-addr", env("ORIGIN_DEBUG_ADDR", ""),
		"listen address of the Go profiler (net/http/pprof at /debug/pprof/); unset: none. Keep it off public networks (ORIGIN_DEBUG_ADDR)")
	fs.StringVar(&c.events.URL, "events-url", env("ORIGIN_EVENTS_URL", ""),
		"URL the booking events are POSTed to; unset: none sent, and no outbox row written (ORIGIN_EVENTS_URL)")
	var eventsMaxAttempts string
	fs.StringVar(&eventsMaxAttempts, "events-max-attempts", env("ORIGIN_EVENTS_MAX_ATTEMPTS", "20"),
		"tries of a booking event before it is given up on (ORIGIN_EVENTS_MAX_ATTEMPTS)")
	fs.StringVar(&c.logFormat, "log-format", env("ORIGIN_LOG_FORMAT", "text"), "log format: text or json (ORIGIN_LOG_FORMAT)")
	var provider string
	fs.StringVar(&provider, "payment-provider", env("PAYMENT_PROVIDER", payment.NameFakepay),
		"payment provider: fakepay or stripe (PAYMENT_PROVIDER); its secrets come from the environment only")
	var errs []error
	durations := []struct {
		p     *time.Duration
		flag  string
		env   string
		def   time.Duration
		usage string
	}{
		{&c.reaperInterval, "reaper-interval", "ORIGIN_REAPER_INTERVAL", 10 * time.Second, "how often the reaper expires lapsed holds"},
		{&c.reconcileInterval, "reconcile-interval", "ORIGIN_RECONCILE_INTERVAL", 30 * time.Second, "how often the invariant is checked"},
		{&c.holdWriteTimeout, "hold-write-timeout", "ORIGIN_HOLD_WRITE_TIMEOUT", 2 * time.Second, "deadline of a hold's ledger write, checked by PostgreSQL too"},
		{&c.clockSkewMargin, "clock-skew-margin", "ORIGIN_CLOCK_SKEW_MARGIN", time.Second, "most the wall clocks of the origin nodes and the database host differ by"},
		{&c.rebuildSettle, "rebuild-settle", "ORIGIN_REBUILD_SETTLE", 0, "wait for other nodes' hold writes during a rebuild: at least their hold write timeout, which it is when unset (the clock-skew margin is added)"},
		{&c.holdMaxLife, "hold-max-life", "ORIGIN_HOLD_MAX_LIFE", 0, "longest a hold may live from its creation, extensions included (default 2 × the event's hold lifetime)"},
		{&c.paymentWindow, "payment-window", "ORIGIN_PAYMENT_WINDOW", 2 * time.Minute, "least time a booking keeps its hold for the payment (at most the hold lifetime)"},
		{&c.paymentReconcileInterval, "payment-reconcile-interval", "ORIGIN_PAYMENT_RECONCILE_INTERVAL", 15 * time.Second, "how often the payment reconciliation runs"},
		{&c.events.Timeout, "events-timeout", "ORIGIN_EVENTS_TIMEOUT", 10 * time.Second, "bound of one try to send a booking event; its lease to a node is twice as long"},
		{&c.events.MaxAge, "events-max-age", "ORIGIN_EVENTS_MAX_AGE", 72 * time.Hour, "age after which a booking event not acknowledged is given up on"},
		{&c.paymentPendingAfter, "payment-pending-after", "ORIGIN_PAYMENT_PENDING_AFTER", time.Minute, "how long a booking waits for its payment's webhook before the provider is asked"},
	}
	for _, d := range durations {
		def, err := envDuration(d.env, d.def)
		errs = append(errs, err)
		fs.DurationVar(d.p, d.flag, def, d.usage+" ("+d.env+")")
	}
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// A flag overrides its variable, so it is held to the same rule: the
	// loops would otherwise take a zero or negative interval for their
	// default without a word.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, d := range durations {
		if set[d.flag] && *d.p <= 0 {
			errs = append(errs, fmt.Errorf("%s (-%s): %q is not a positive duration (e.g. 10s)", d.env, d.flag, d.p.String()))
		}
	}

	required := func(name, flagName, v string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is required (or -%s)", name, flagName))
		}
	}
	required("DATABASE_URL", "database-url", c.databaseURL)
	required("REDIS_URL", "redis-url", c.redisURL)
	required("WAITROOM_KEYS", "keys", keys)
	required("ORIGIN_ADMIN_TOKEN", "admin-token", c.adminToken)
	if c.databaseURL != "" {
		if _, err := pgxpool.ParseConfig(c.databaseURL); err != nil {
			errs = append(errs, fmt.Errorf("DATABASE_URL is malformed: %w", err))
		}
	}
	if c.redisURL != "" {
		if err := redisurl.Check(c.redisURL); err != nil {
			errs = append(errs, fmt.Errorf("REDIS_URL is malformed: %w", err))
		}
	}
	if keys != "" {
		parsed, err := waitroom.ParseKeys(keys)
		if err == nil {
			c.keys, err = waitroom.NewKeySet(nil, parsed...)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("WAITROOM_KEYS is malformed: %w", err))
		}
	}
	payEnv := func(name string) string {
		if name == "PAYMENT_PROVIDER" {
			return provider
		}
		return getenv(name)
	}
	var err error
	if c.payment, err = payment.ConfigFromEnv(payEnv); err != nil {
		errs = append(errs, err)
	}
	// Tickets must verify across restarts and on every node: a real sale
	// needs the key set; a fakepay demo may run with a random one.
	switch key := getenv("TICKET_KEY"); {
	case len(key) >= ticketcode.MinSecretLen:
		c.ticketKey = []byte(key)
	case key != "":
		errs = append(errs, fmt.Errorf("TICKET_KEY is malformed: at least %d bytes are required", ticketcode.MinSecretLen))
	case c.payment.Provider == payment.NameStripe:
		errs = append(errs, fmt.Errorf("TICKET_KEY is required with PAYMENT_PROVIDER=stripe"))
	}
	switch key := getenv("ORIGIN_BUYER_KEY"); {
	case len(key) >= storefront.MinBuyerKeyLen:
		c.buyerKey = []byte(key)
	case key != "":
		errs = append(errs, fmt.Errorf("ORIGIN_BUYER_KEY is malformed: at least %d bytes are required", storefront.MinBuyerKeyLen))
	}
	if c.ticketRetiredKeys, err = ticketcode.ParsePublicKeys(getenv("TICKET_RETIRED_KEYS")); err != nil {
		errs = append(errs, fmt.Errorf("TICKET_RETIRED_KEYS is malformed: %w", err))
	}
	// The admin routes compare the bearer token, trimmed, exactly with this
	// one: a token with a space in it or a secret file's trailing newline
	// would lock every admin route for good.
	if c.adminToken != "" && !printableToken(c.adminToken) {
		errs = append(errs, fmt.Errorf("ORIGIN_ADMIN_TOKEN is malformed: printable ASCII without spaces is required "+
			"(no whitespace around it either, such as a secret file's trailing newline)"))
	}
	if c.gateToken != "" && !validGateToken(c.gateToken) {
		errs = append(errs, fmt.Errorf("ORIGIN_GATE_TOKEN is malformed: at least %d characters, printable ASCII without spaces, are required", minGateTokenLen))
	}
	if c.rebuildSettle > 0 && c.rebuildSettle < c.holdWriteTimeout {
		errs = append(errs, fmt.Errorf("ORIGIN_REBUILD_SETTLE (%v) must be at least ORIGIN_HOLD_WRITE_TIMEOUT (%v): "+
			"a rebuild that reads the ledger sooner can miss hold rows still being written and sell their seats twice; "+
			"leave it unset to follow the timeout", c.rebuildSettle, c.holdWriteTimeout))
	}
	if c.events.URL != "" {
		if err := confcheck.HTTPURL(c.events.URL); err != nil {
			errs = append(errs, fmt.Errorf("ORIGIN_EVENTS_URL is malformed: %w", err))
		}
		// The site verifies with the secret it was given: a secret file's
		// trailing newline here would fail every signature.
		switch secret := getenv("ORIGIN_EVENTS_SECRET"); {
		case confcheck.Secret(secret) != nil:
			errs = append(errs, fmt.Errorf("ORIGIN_EVENTS_SECRET is malformed: %w", confcheck.Secret(secret)))
		case len(secret) >= minEventsSecretLen:
			c.events.Secret = []byte(secret)
		case secret == "":
			errs = append(errs, fmt.Errorf("ORIGIN_EVENTS_SECRET is required with ORIGIN_EVENTS_URL"))
		default:
			errs = append(errs, fmt.Errorf("ORIGIN_EVENTS_SECRET is malformed: at least %d bytes are required", minEventsSecretLen))
		}
		if n, err := strconv.Atoi(eventsMaxAttempts); err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("ORIGIN_EVENTS_MAX_ATTEMPTS must be a positive integer, not %q", eventsMaxAttempts))
		} else {
			c.events.MaxAttempts = n
		}
	}
	for _, a := range []struct{ name, addr string }{
		{"ORIGIN_ADDR", c.addr}, {"ORIGIN_METRICS_ADDR", c.metricsAddr}, {"ORIGIN_DEBUG_ADDR", c.debugAddr},
	} {
		if err := checkListenAddr(a.addr); a.addr != "" && err != nil {
			errs = append(errs, fmt.Errorf("%s is malformed: %w", a.name, err))
		}
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		errs = append(errs, fmt.Errorf("ORIGIN_LOG_FORMAT must be text or json, not %q", c.logFormat))
	}
	return c, errors.Join(errs...)
}

// minEventsSecretLen is the shortest secret booking events are signed with.
const minEventsSecretLen = 16

// minGateTokenLen is the shortest gate token accepted: it is a password,
// typed into many devices, and guessing it lets anyone mark tickets used.
const minGateTokenLen = 16

// validGateToken: minGateTokenLen or more printable ASCII characters, none
// a space, so the token travels in an Authorization header as it is.
func validGateToken(tok string) bool {
	return len(tok) >= minGateTokenLen && printableToken(tok)
}

// printableToken: printable ASCII characters, none a space, as a bearer
// token is read back from an Authorization header (trimmed); the admin
// token and the gate token alike.
func printableToken(tok string) bool {
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' {
			return false
		}
	}
	return true
}

// checkListenAddr checks a listen address as net.Listen will read it,
// [host]:port, so a typo stops the start with the variable's name rather
// than at the listen.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("[host]:port is required: %w", err)
	}
	if port == "" {
		return nil // any free port, as :0
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q is not a port (0 to 65535, or a service name)", port)
	}
	return nil
}
