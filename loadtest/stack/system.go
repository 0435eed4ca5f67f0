package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/internal/faultproxy"
	"github.com/waitroom/waitroom/internal/freeport"
	"github.com/waitroom/waitroom/loadtest/api"
)

// SystemConfig is the whole product on loopback: the origin, and Caddy with
// the waiting room in front of it, over the given Redis and PostgreSQL.
type SystemConfig struct {
	CaddyBin, OriginBin string
	// Dir receives the generated configs and the servers' logs.
	Dir string
	// RedisURL and DatabaseURL name the servers to use. The run gets a
	// database of its own on the PostgreSQL server.
	RedisURL, DatabaseURL string
	// OwnRedis starts a redis-server of our own instead of using RedisURL,
	// so it may be restarted mid-run.
	OwnRedis bool
	// PausablePostgres puts a fault proxy between the origin and PostgreSQL.
	PausablePostgres bool
	// OriginEnv is added to the origin's environment.
	OriginEnv []string
	// Event is created on the origin (its ID is chosen when zero).
	Event api.NewEvent
	// KeepDatabase leaves the run's database in place at Down, to look into
	// what the run left behind.
	KeepDatabase bool
	// NoGateway leaves Caddy out (the origin alone).
	NoGateway bool
	// Gateways is how many Caddy processes guard the site, sharing the
	// queue store (0 or 1: one).
	Gateways int
	// Autopilot is every gateway's autopilot; nil: none (the watermark
	// moves only through the admin API).
	Autopilot *Autopilot
	// AbandonAfter is every gateway's abandon_after; 0: its default.
	AbandonAfter time.Duration
	// Upstream, when set, is what the gateway proxies to instead of the
	// origin (e.g. a counting proxy in front of it).
	Upstream func(originURL string) (string, error)
	// OriginPort is the origin's port, OriginMetricsPort its metrics'; 0:
	// a free one.
	OriginPort, OriginMetricsPort int
	// Caddyfile, when set, is the gateway's Caddyfile instead of one made
	// for the run: it reads the site's port, the admin's, the event, the
	// origin's address and the Redis URL from the environment
	// (examples/Caddyfile), on SitePort and AdminPort.
	Caddyfile           string
	SitePort, AdminPort int
}

// System is a running product.
type System struct {
	DB     *Database
	Redis  *Redis            // nil unless OwnRedis
	Proxy  *faultproxy.Proxy // nil unless PausablePostgres
	Origin *Origin
	Caddy  *Caddy // nil with NoGateway
	// More are the further gateways (SystemConfig.Gateways), each with its
	// own site.
	More []*Caddy

	RedisURL      string
	KeyID, Secret string
	AdminToken    string
	WebhookSecret string
	Event         api.Event
	// Gateway is the guarded site's URL.
	Gateway string

	sharedRedis  bool
	keepDatabase bool
}

// Up starts the system. On failure it stops whatever it had started.
func Up(ctx context.Context, cfg SystemConfig) (s *System, err error) {
	s = &System{KeyID: "k1", Secret: randomHex(32), AdminToken: randomHex(16), WebhookSecret: "whsec_" + randomHex(16),
		keepDatabase: cfg.KeepDatabase}
	defer func() {
		if err != nil {
			s.Down(context.WithoutCancel(ctx))
			s = nil
		}
	}()
	if s.DB, err = CreateDatabase(ctx, cfg.DatabaseURL, "waitroom_loadtest"); err != nil {
		return s, err
	}
	originDB := s.DB.URL
	if cfg.PausablePostgres {
		if s.Proxy, err = faultproxy.Start(s.DB.Host()); err != nil {
			return s, err
		}
		originDB = s.DB.WithHost(s.Proxy.Addr())
	}
	s.RedisURL = cfg.RedisURL
	if cfg.OwnRedis {
		if s.Redis, err = StartRedis(ctx, cfg.Dir); err != nil {
			return s, err
		}
		s.RedisURL = s.Redis.URL()
	} else {
		if s.RedisURL == "" {
			return s, errors.New("REDIS_URL is not set (scripts/services.sh starts a private Redis and sets it)")
		}
		s.sharedRedis = true
	}
	if s.Origin, err = StartOrigin(ctx, OriginConfig{
		Bin: cfg.OriginBin, Dir: cfg.Dir, DatabaseURL: originDB, RedisURL: s.RedisURL,
		Keys: s.KeyID + ":" + s.Secret, AdminToken: s.AdminToken, WebhookSecret: s.WebhookSecret,
		TicketKey: randomHex(32), Env: cfg.OriginEnv, Port: cfg.OriginPort, MetricsPort: cfg.OriginMetricsPort,
	}); err != nil {
		return s, err
	}
	ne := cfg.Event
	if ne.ID == 0 {
		n, _ := rand.Int(rand.Reader, big.NewInt(1_000_000_000))
		ne.ID = 7_000_000_000 + n.Int64()
	}
	admin := api.OriginAdmin{Client: api.Client{HTTP: api.NewHTTPClient(0, 30*time.Second), Base: s.Origin.URL}, Token: s.AdminToken}
	if s.Event, err = admin.CreateEvent(ctx, ne); err != nil {
		return s, err
	}
	if cfg.NoGateway {
		return s, nil
	}
	upstream := s.Origin.URL
	if cfg.Upstream != nil {
		if upstream, err = cfg.Upstream(s.Origin.URL); err != nil {
			return s, err
		}
	}
	if cfg.Caddyfile != "" {
		site := Site{Port: cfg.SitePort}
		if s.Caddy, err = StartCaddy(ctx, CaddyConfig{Bin: cfg.CaddyBin, Dir: cfg.Dir, Secret: s.Secret, Sites: []Site{site},
			Caddyfile: cfg.Caddyfile, AdminPort: cfg.AdminPort, Env: []string{
				"WAITROOM_PORT=" + strconv.Itoa(cfg.SitePort),
				"WAITROOM_ADMIN_PORT=" + strconv.Itoa(cfg.AdminPort),
				"WAITROOM_EVENT=" + strconv.FormatInt(s.Event.ID, 10),
				"ORIGIN_ADDR=" + strings.TrimPrefix(upstream, "http://"),
				"REDIS_URL=" + s.RedisURL,
			}}); err != nil {
			return s, err
		}
		s.Gateway = site.URL()
		return s, nil
	}
	port, err := freeport.Take()
	if err != nil {
		return s, err
	}
	site := Site{Port: port, Upstream: upstream,
		Waitroom: &Waitroom{Event: s.Event.ID, Store: s.RedisURL, Watermark: 0, Autopilot: cfg.Autopilot, AbandonAfter: cfg.AbandonAfter}}
	if s.Caddy, err = StartCaddy(ctx, CaddyConfig{Bin: cfg.CaddyBin, Dir: cfg.Dir, KeyID: s.KeyID, Secret: s.Secret, Sites: []Site{site}}); err != nil {
		return s, err
	}
	s.Gateway = site.URL()
	for i := 2; i <= cfg.Gateways; i++ {
		// Each in a folder of its own (Caddyfile, log, state), on a port of
		// its own, over the same store and key.
		dir := filepath.Join(cfg.Dir, fmt.Sprintf("gateway-%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return s, err
		}
		if site.Port, err = freeport.Take(); err != nil {
			return s, err
		}
		c, err := StartCaddy(ctx, CaddyConfig{Bin: cfg.CaddyBin, Dir: dir, KeyID: s.KeyID, Secret: s.Secret, Sites: []Site{site}})
		if err != nil {
			return s, err
		}
		s.More = append(s.More, c)
	}
	return s, nil
}

// Down stops everything Up started, in reverse order, and drops the run's
// database. It is safe on a partly started system.
func (s *System) Down(ctx context.Context) []error {
	var errs []error
	for _, c := range s.More {
		errs = append(errs, c.Stop(10*time.Second))
	}
	if s.Caddy != nil {
		errs = append(errs, s.Caddy.Stop(10*time.Second))
	}
	if s.Origin != nil {
		errs = append(errs, s.Origin.Stop(15*time.Second))
	}
	if s.Proxy != nil {
		errs = append(errs, s.Proxy.Close())
	}
	if s.Redis != nil {
		errs = append(errs, s.Redis.Stop())
	}
	if s.sharedRedis && s.Event.ID != 0 {
		errs = append(errs, RemoveEventKeys(ctx, s.RedisURL, s.Event.ID))
	}
	if s.DB != nil && !s.keepDatabase {
		errs = append(errs, s.DB.Drop(ctx))
	}
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// Caddies are the system's gateways (none with NoGateway).
func (s *System) Caddies() []*Caddy {
	if s.Caddy == nil {
		return nil
	}
	return append([]*Caddy{s.Caddy}, s.More...)
}

// Failed reports a server that exited by itself.
func (s *System) Failed() error {
	if s.Origin != nil {
		if err := s.Origin.failed(); err != nil {
			return err
		}
	}
	for _, c := range s.Caddies() {
		if err := c.failed(); err != nil {
			return err
		}
	}
	return nil
}

// RemoveEventKeys deletes every key of an event (queue state, inventory)
// from a Redis that outlives the run. On a cluster every master is
// scanned. UNLINK, not DEL, a thousand keys at a time: a big key (an
// event's 200,000 hold records) is then freed off the thread that serves
// the next run, and the small ones (a claim per hold) never hold Redis for
// long: 600,000 of them in one call took it 0.8 s.
func RemoveEventKeys(ctx context.Context, url string, events ...int64) error {
	return eachRedisServer(ctx, url, func(ctx context.Context, rdb *redis.Client) error {
		for _, e := range events {
			iter := rdb.Scan(ctx, 0, "*"+hashtag.Event(e)+"*", 1000).Iterator()
			var keys []string
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
			}
			if err := iter.Err(); err != nil {
				return fmt.Errorf("remove keys of event %d: %w", e, err)
			}
			for chunk := range slices.Chunk(keys, 1000) {
				if err := rdb.Unlink(ctx, chunk...).Err(); err != nil {
					return fmt.Errorf("remove keys of event %d: %w", e, err)
				}
			}
		}
		return nil
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
