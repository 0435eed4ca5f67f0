package caddymodule

import (
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// joinLimiterSize bounds how many client addresses the join rate tracks:
// two generations of half as many each (a few MiB at most). A client
// dropped from the older generation starts again with a full allowance,
// which takes an address that has been quiet for a whole generation.
const joinLimiterSize = 1 << 17

// joinLimiter holds one token bucket (golang.org/x/time/rate) per client
// address, in a bounded two-generation map: the current generation takes
// new addresses; when it is full it becomes the previous one and the old
// previous one is dropped; an address found in the previous generation is
// moved forward.
type joinLimiter struct {
	limit rate.Limit
	burst int

	mu        sync.Mutex
	cur, prev map[string]*rate.Limiter
	size      int
}

// newJoinLimiter allows n joins per per for each client, all of them at
// once at most.
func newJoinLimiter(n int, per time.Duration) *joinLimiter {
	return &joinLimiter{
		limit: rate.Every(per / time.Duration(n)),
		burst: n,
		cur:   make(map[string]*rate.Limiter),
		size:  joinLimiterSize,
	}
}

// joinLimiterKey names the pooled limiter of event's join rate, n per per.
func joinLimiterKey(event int64, n int, per time.Duration) string {
	return strconv.FormatInt(event, 10) + " " + strconv.Itoa(n) + "/" + per.String()
}

// loadJoinLimiter is the limiter of event's join rate, n per per: the one
// a handler of the config before had, or that another site guarding the
// event has, else a new one. Release it with limiters.Delete(key).
func loadJoinLimiter(event int64, n int, per time.Duration) (l *joinLimiter, key string, err error) {
	key = joinLimiterKey(event, n, per)
	v, _, err := limiters.LoadOrNew(key, func() (caddy.Destructor, error) { return newJoinLimiter(n, per), nil })
	if err != nil {
		return nil, "", err
	}
	return v.(*joinLimiter), key, nil
}

// Destruct implements caddy.Destructor: a limiter holds nothing to close.
func (l *joinLimiter) Destruct() error { return nil }

func (l *joinLimiter) bucket(client string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.cur[client]; ok {
		return b
	}
	b, ok := l.prev[client]
	if !ok {
		b = rate.NewLimiter(l.limit, l.burst)
	}
	if len(l.cur) >= l.size/2 {
		l.prev, l.cur = l.cur, make(map[string]*rate.Limiter, l.size/2)
	}
	l.cur[client] = b
	return b
}

// ready reports whether client may join at now without taking its turn, and
// otherwise how long until it may: a client already over the rate is told
// so before it spends work on a challenge.
func (l *joinLimiter) ready(client string, now time.Time) (bool, time.Duration) {
	b := l.bucket(client)
	tokens := b.TokensAt(now)
	if tokens >= 1 {
		return true, 0
	}
	return false, time.Duration((1 - tokens) / float64(l.limit) * float64(time.Second))
}

// take spends one of client's joins at now, or says how long until it has
// one.
func (l *joinLimiter) take(client string, now time.Time) (bool, time.Duration) {
	r := l.bucket(client).ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// clientKey is the address a request's joins are counted under: the
// client's address as the server determined it (behind a trusted proxy,
// the one the proxy names; otherwise the peer), with an IPv6 address cut to
// its /64, since one subscriber usually holds a whole /64.
func clientKey(r *http.Request) string {
	ip, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	if ip == "" {
		ip = r.RemoteAddr
		if host, _, err := net.SplitHostPort(ip); err == nil {
			ip = host
		}
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

// warnSpoofableClients warns, when a join rate is set, of every HTTP server
// that trusts proxies without trusted_proxies_strict: there Caddy takes the
// leftmost X-Forwarded-For address, which the client writes itself, so a
// client gets a fresh allowance with every address it makes up. A handler
// cannot tell which server holds it, so every such server is named.
func (h *Handler) warnSpoofableClients(ctx caddy.Context) {
	if h.JoinRate == nil {
		return
	}
	app, err := ctx.AppIfConfigured("http")
	if err != nil {
		return
	}
	httpApp, ok := app.(*caddyhttp.App)
	if !ok {
		return
	}
	names := make([]string, 0, len(httpApp.Servers))
	for name := range httpApp.Servers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if spoofableClientIP(httpApp.Servers[name]) {
			h.logger.Warn("join_rate counts the leftmost X-Forwarded-For address, which the client can write: set trusted_proxies_strict",
				zap.Int64("event", h.Event), zap.String("server", name))
		}
	}
}

// spoofableClientIP reports whether srv takes a client's address from a
// header the client may have written: it trusts some proxies, and not
// strictly. A server already provisioned has loaded its trusted_proxies
// into a field of its own (and cleared the raw one); one not yet
// provisioned still holds the raw config.
func spoofableClientIP(srv *caddyhttp.Server) bool {
	if srv == nil || srv.TrustedProxiesStrict > 0 {
		return false
	}
	if srv.TrustedProxiesRaw != nil || srv.TrustedProxiesUnix {
		return true
	}
	f := reflect.ValueOf(srv).Elem().FieldByName("trustedProxies")
	return f.IsValid() && f.Kind() == reflect.Interface && !f.IsNil()
}
