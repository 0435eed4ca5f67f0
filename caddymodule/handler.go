package caddymodule

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/waitroom/waitroom/locale"
	"github.com/waitroom/waitroom/waitroom"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Header names of the gateway. The identity headers (user, position, token)
// are set on admitted requests for the next handler; copies sent by a client,
// under any spelling a backend may take for them, are always removed first.
const (
	HeaderStatus   = "X-Waitroom-Status"
	HeaderUser     = "X-Waitroom-User"
	HeaderPosition = "X-Waitroom-Position"
	HeaderToken    = waitroom.TokenHeader
)

// Values of X-Waitroom-Status and of the {http.waitroom.status} placeholder.
const (
	StatusAdmitted    = "admitted"
	StatusWaiting     = "waiting"
	StatusSoldOut     = "sold_out"
	StatusUnavailable = "unavailable"
	StatusPreQueue    = "pre_queue"
	StatusChallenge   = "challenge"
	StatusRateLimited = "rate_limited"
	StatusCompleted   = "completed"
)

// HeaderCommand is a response header of the site to the gateway, never
// passed on to the client. CommandRevoke ends the admission of the
// request's token at every gateway sharing the store.
const (
	HeaderCommand = "X-Waitroom-Command"
	CommandRevoke = "revoke"
)

// HeaderSolution carries a solved challenge, "<nonce>:<counter>".
const HeaderSolution = waitroom.HeaderSolution

// Defaults of the optional settings.
const (
	DefaultTokenTTL      = 30 * time.Minute
	DefaultWaitingStatus = http.StatusOK
	DefaultSoldOutMaxAge = 10 * time.Second
	// DefaultAbandonAfter is five of the longest polling intervals a
	// waiting page is told (Retry-After).
	DefaultAbandonAfter = 5 * maxRetryAfter * time.Second
	// DefaultAdmissionWindow is how long an admission lasts unless the
	// origin extends it.
	DefaultAdmissionWindow = 15 * time.Minute
)

// Values of cookie_secure.
const (
	CookieSecureAuto   = "auto"
	CookieSecureAlways = "always"
)

const (
	// joinTimeout bounds the one store call a new arrival makes; the Redis
	// client's own timeouts normally answer well before it.
	joinTimeout = 3 * time.Second
	// readyWait bounds how long the first requests after a start or a
	// config change wait for the room's first read of the store, so they
	// are not judged by the configured defaults alone.
	readyWait = 3 * time.Second
	// unavailableRetry is the Retry-After of a 503 while the store is down.
	unavailableRetry = 5
	// restoringRetry is the Retry-After of a 503 while the store's lost
	// state is put back, which takes about waitroom.DefaultRestoreWindow.
	restoringRetry = 2
	// drawingRetry is the Retry-After of a 503 while the opening's draw is
	// being made, which takes well under a second.
	drawingRetry = 1
	// soldOutVary lists what the sold-out answer depends on: its form
	// (Accept) and whether the request carried a queue token.
	soldOutVary = "Accept, Cookie, " + HeaderToken
)

// Handler is a virtual waiting room in front of the handlers that follow it.
//
// Every arrival gets a signed queue token (a cookie for browsers, also
// returned in the JSON body and the X-Waitroom-Token response header for API
// clients) that carries its place in the queue. A token whose position is at
// or below the event's admission watermark is passed on to the next handler
// with the identity headers X-Waitroom-User, X-Waitroom-Position and
// X-Waitroom-Token; anyone else gets the waiting page (or its JSON form when
// the request accepts application/json), which polls until its turn comes.
// Once the event is sold out, everyone not admitted gets 410 from memory.
//
// The watermark, sold-out and paused flags live in the store (memory for one
// node, Redis for many) and are changed through the admin API
// (admin.api.waitroom) or the autopilot; the request path only reads them
// from memory. A new arrival costs one store call (its position); if the
// store is down, new arrivals get 503 with Retry-After while token holders
// are still judged by the last known state. If the store loses the event's
// state (Redis restarted empty, flushed, failed over), new arrivals get 503
// with Retry-After until every gateway has put back what it remembers, and
// the queue then carries on after the highest position any of them knew of.
//
// Placeholders set: {http.waitroom.status} (admitted, waiting, sold_out or
// unavailable), {http.waitroom.position} and {http.waitroom.event}.
type Handler struct {
	// The event this handler guards: a positive integer, the evt claim of
	// its tokens. Required.
	Event int64 `json:"event,omitempty"`

	// The keys that sign and verify queue tokens (HS256). The first signs;
	// all verify, so a new key can be put in front while tokens signed with
	// the old one stay valid. Secrets are at least 32 bytes; global
	// placeholders such as {env.WAITROOM_SECRET} or {file./etc/caddy/key}
	// are replaced when the config is loaded. Required.
	Keys []Key `json:"keys,omitempty"`

	// Where positions and admission state are kept: "memory" (the default;
	// one node) or a redis:// (rediss://, unix://) URL shared by every
	// gateway node and the origin. Global placeholders are replaced.
	Store string `json:"store,omitempty"`

	// How many positions a node takes from Redis at once. Default: 1
	// (strict first come, first served across nodes). Ignored by the
	// memory store.
	Lease int64 `json:"lease,omitempty"`

	// The watermark the event starts with when its store has none yet.
	// Default: 0 (nobody admitted until it is raised).
	Watermark int64 `json:"watermark,omitempty"`

	// The last position that can ever be admitted; arrivals past it get the
	// sold-out answer at once. Default: 0 (no cap).
	HardCap int64 `json:"hard_cap,omitempty"`

	// Derives the hard cap from the origin's published inventory: the
	// watermark plus this many positions per seat remaining, kept so as
	// the seats go (docs/gateway.md, autopilot). Replaces hard_cap.
	// Default: 0 (off).
	HardCapPerRemaining float64 `json:"hard_cap_per_remaining,omitempty"`

	// How long a token is valid. A waiting visitor's token is renewed (same
	// user and position) whenever less than half of it is left, so a
	// visitor who keeps the page open never loses the place. Default: 30m.
	TokenTTL caddy.Duration `json:"token_ttl,omitempty"`

	// Where the user id (the token's sub) comes from, as a placeholder, e.g.
	// {http.request.header.X-User-ID} set by the site's authentication.
	// Default (or when it yields nothing): an anonymous visitor id.
	UserID string `json:"user_id,omitempty"`

	// The HTTP status of waiting answers: 200, 202, 429 or 503.
	// Default: 200.
	WaitingStatus int `json:"waiting_status,omitempty"`

	// Answer sold out as soon as the origin finds no seat left to hold,
	// even while seats in live holds may still come back. Default: off:
	// until nothing can come back, visitors not yet admitted keep waiting
	// and are told every seat is held (docs/api.md §3). An operator's
	// sold-out flag and the hard cap are answered sold out either way.
	SoldOutAtZero bool `json:"sold_out_at_zero,omitempty"`

	// How long the sold-out answer may be cached: by shared caches
	// (Cache-Control: public, max-age) when the request carried no queue
	// token, only by the client's own cache (private, max-age) when it did.
	// Default: 10s.
	SoldOutMaxAge caddy.Duration `json:"sold_out_max_age,omitempty"`

	// A file with an html/template for the waiting page, executed with a
	// WaitingPage. Default: the embedded page.
	WaitingTemplate string `json:"waiting_template,omitempty"`

	// A file with an html/template for the sold-out page, executed with a
	// SoldOutPage. Default: the embedded page.
	SoldOutTemplate string `json:"sold_out_template,omitempty"`

	// A directory of message catalogs (go-i18n TOML or JSON files named
	// after their language, as fr.toml) that add languages to the default
	// pages or replace messages of the embedded ones (docs/gateway.md).
	Locales string `json:"locales,omitempty"`

	// How long after its last poll a waiting position stops counting in
	// "ahead" and in the estimated wait: its holder gave up. Default: 2m30s
	// (five of the longest polling intervals the waiting page is told).
	AbandonAfter caddy.Duration `json:"abandon_after,omitempty"`

	// How long an admitted position stays admitted after the watermark
	// reached it, unless the origin extended its holder's admission (the
	// holder holds seats); past it the token is a new arrival. Default: 15m.
	AdmissionWindow caddy.Duration `json:"admission_window,omitempty"`

	// Raises the watermark by itself while visitors wait. Default: off.
	Autopilot *Autopilot `json:"autopilot,omitempty"`

	// When the queue cookie is marked Secure: "auto" (the default) when
	// the connection Caddy terminated is TLS, or when the request came
	// through one of the server's trusted_proxies and that proxy said
	// X-Forwarded-Proto: https (a load balancer that terminates TLS);
	// "always" on every answer, for sites only ever reached over HTTPS.
	CookieSecure string `json:"cookie_secure,omitempty"`

	// The paths of the buyer's pages after the purchase (a booking, the
	// tickets, their QR codes), as patterns of Caddy's path matcher. A
	// visitor whose token the site revoked, or whose account's position
	// is completed, is passed on to these with X-Waitroom-Status:
	// completed and its user id, its cookie kept, and to nothing else.
	// Default: none (a revoked visitor reaches nothing).
	AfterPurchase []string `json:"after_purchase,omitempty"`

	// When the queue opens, RFC 3339. Before it, arrivals enter a
	// pre-queue: they get a token without a position and a page that counts
	// down; at the opening every entrant is given a position by a draw
	// (docs/opening.md), and later arrivals queue after them. Default: open
	// at once.
	OpensAt string `json:"opens_at,omitempty"`

	// The seed of the opening's draw, hex (at least 16 bytes), for a draw
	// that can be replayed; its SHA-256 is published before the opening and
	// the seed itself after the draw. Default: 32 random bytes, made when
	// the event is first configured and kept in the store, where the first
	// node's seed is the one every node uses.
	LotterySeed string `json:"lottery_seed,omitempty"`

	// Proof of work at join: the number of leading zero bits of
	// SHA-256("<nonce>:<counter>") a new arrival must find before it gets
	// a place (1 to 28). Default: 0 (no challenge); the Caddyfile's
	// `challenge` without a number means 19 (about a second on a phone).
	Challenge int `json:"challenge,omitempty"`

	// The most new arrivals a client address may make in a period, above
	// which it gets 429 with Retry-After. The address is the one Caddy
	// determined, so behind the server's trusted_proxies it is the one the
	// proxy names. Default: no limit.
	JoinRate *JoinRate `json:"join_rate,omitempty"`

	// Publishes the event's state to a Cloudflare Workers KV namespace
	// for the edge Worker (docs/edge.md). Default: not published.
	CloudflareKV *CloudflareKV `json:"cloudflare_kv,omitempty"`

	// Keeps a Cloudflare Waiting Room in step with the room (docs/edge.md).
	// Default: none.
	CloudflareWaitingRoom *CloudflareWaitingRoom `json:"cloudflare_waiting_room,omitempty"`

	keys *waitroom.KeySet
	// keyChecks is waitroom.KeyCheck of each key's secret, by kid, for
	// the edge and the fleet (fleetkeys.go).
	keyChecks  map[string]string
	room       *roomEntry
	roomKey    roomKey
	eventID    string
	cookieName string
	// cookieSuffix follows the token in its cookie, without and with
	// Secure.
	cookieSuffix [2]string
	ttl          time.Duration
	// Cache-Control of the sold-out answer to strangers and to token
	// holders.
	publicMaxAge  string
	privateMaxAge string
	catalog       *locale.Catalog
	waitingPage   *template.Template
	shells        *shells // the default waiting page, rendered once per key (shell.go)
	soldOutPage   *template.Template
	unavailPage   *template.Template
	m             eventMetrics
	logger        *zap.Logger
	// now is the clock of token issue and verification; tests replace it.
	now func() time.Time

	opensAt      time.Time
	seed         []byte
	challenger   *waitroom.Challenger
	nonces       waitroom.NonceStore
	limiter      *joinLimiter
	limiterKey   string // its key in limiters, "" for none
	preQueuePage *template.Template
	challengePg  *template.Template
	limitedPage  *template.Template
	edge         *edgePublisher
	cfRoom       *waitingRoomSteerer
	fleetKeys    *fleetKeys

	// afterPurchase matches the buyer's pages after the purchase; nil
	// without after_purchase.
	afterPurchase caddyhttp.MatchPath
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.waitroom",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision sets up the handler. It does no network I/O: the room reads the
// store in the background.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if h.now == nil {
		h.now = poolClock
	}
	if h.TokenTTL == 0 {
		h.TokenTTL = caddy.Duration(DefaultTokenTTL)
	}
	if h.WaitingStatus == 0 {
		h.WaitingStatus = DefaultWaitingStatus
	}
	if h.SoldOutMaxAge == 0 {
		h.SoldOutMaxAge = caddy.Duration(DefaultSoldOutMaxAge)
	}
	if h.AdmissionWindow == 0 {
		h.AdmissionWindow = caddy.Duration(DefaultAdmissionWindow)
	}
	if h.AbandonAfter == 0 {
		h.AbandonAfter = caddy.Duration(DefaultAbandonAfter)
	}
	// Check first, so a bad config takes no reference to a store or room.
	if err := h.Validate(); err != nil {
		return err
	}

	repl := caddy.NewReplacer()
	keys := make([]waitroom.Key, len(h.Keys))
	for i, k := range h.Keys {
		secret := repl.ReplaceKnown(k.Secret, "")
		if secret == "" {
			// Usually an unset environment variable: name it rather than
			// report a 0-byte secret.
			return fmt.Errorf("keys: key %q: secret %q is empty once its placeholders are replaced", k.ID, k.Secret)
		}
		keys[i] = waitroom.Key{ID: k.ID, Secret: []byte(secret)}
	}
	ks, err := waitroom.NewKeySet(h.now, keys...)
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	h.keys, h.keyChecks = ks, ks.Checks()

	store := repl.ReplaceKnown(h.Store, "")
	if h.Store != "" && store == "" {
		return fmt.Errorf("store: %q is empty once its placeholders are replaced", h.Store)
	}
	spec, err := parseStoreSpec(store, h.Lease)
	if err != nil {
		return err
	}
	if spec.redisURL == "" && (h.HardCapPerRemaining > 0 || (h.Autopilot != nil && h.Autopilot.ClosedLoop)) {
		// The origin publishes its seats only into a shared Redis: with the
		// memory store these wait for figures that never come.
		h.logger.Warn("the closed-loop autopilot and hard_cap_per_remaining act on the seats the origin publishes "+
			"in the shared store; with store memory nothing is published, so they never move: set store to the origin's redis:// URL",
			zap.Int64("event", h.Event))
	}

	if err := h.loadPages(); err != nil {
		return err
	}
	if h.afterPurchase, err = afterPurchaseMatcher(ctx, h.AfterPurchase); err != nil {
		return err
	}
	if h.Challenge > 0 {
		if h.challenger, err = waitroom.NewChallenger(ks, h.Event, h.Challenge, 0, h.now); err != nil {
			return fmt.Errorf("challenge: %w", err)
		}
	}
	if h.JoinRate != nil {
		if h.limiter, h.limiterKey, err = loadJoinLimiter(h.Event, h.JoinRate.Joins, time.Duration(h.JoinRate.Per)); err != nil {
			return fmt.Errorf("join_rate: %w", err)
		}
		h.warnSpoofableClients(ctx)
	}

	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	h.eventID = strconv.FormatInt(h.Event, 10)
	h.m = metricsFor(h.eventID)
	h.cookieName = waitroom.CookieName(h.Event)
	h.ttl = time.Duration(h.TokenTTL)
	h.cookieSuffix = [2]string{cookieSuffix(h.ttl, false), cookieSuffix(h.ttl, true)}
	maxAge := strconv.FormatInt(int64(math.Ceil(time.Duration(h.SoldOutMaxAge).Seconds())), 10)
	h.publicMaxAge = "public, max-age=" + maxAge
	h.privateMaxAge = "private, max-age=" + maxAge

	h.roomKey = roomKey{Store: spec.key(), Event: h.Event, Watermark: h.Watermark, HardCap: h.HardCap, HardCapPerRemaining: h.HardCapPerRemaining, Seed: h.LotterySeed,
		AbandonAfter: time.Duration(h.AbandonAfter), AdmissionWindow: time.Duration(h.AdmissionWindow)}
	if !h.opensAt.IsZero() {
		h.roomKey.OpensAt = h.opensAt.UnixNano()
	}
	if c := h.Autopilot.closedLoop(); c != nil {
		h.roomKey.ClosedLoop = *c
	} else if h.Autopilot != nil {
		h.roomKey.PilotStep, h.roomKey.PilotInterval = h.Autopilot.Step, time.Duration(h.Autopilot.Interval)
	}
	if err := claimEvent(ctx, eventSettings{room: h.roomKey, soldOutAtZero: h.SoldOutAtZero}); err != nil {
		return err
	}
	if h.CloudflareKV != nil {
		if h.edge, err = h.newEdgePublisher(); err != nil {
			return err
		}
	}
	if h.CloudflareWaitingRoom != nil {
		if h.cfRoom, err = h.newWaitingRoomSteerer(); err != nil {
			return err
		}
	}
	room, err := acquireRoom(h.roomKey, spec, h.seed)
	if err != nil {
		return err
	}
	h.room = room
	room.soldOutAtZero.Store(h.SoldOutAtZero)
	if h.challenger != nil {
		ns, ok := room.store.store.(waitroom.NonceStore)
		if !ok {
			_, _ = rooms.Delete(h.roomKey)
			h.room = nil
			return fmt.Errorf("challenge: store %T keeps no used nonces", room.store.store)
		}
		h.nonces = ns
	}
	if h.edge != nil {
		h.edge.start(ctx, room.room, h.availability)
	}
	if h.cfRoom != nil {
		h.cfRoom.start(ctx, room.room)
	}
	h.fleetKeys = h.startFleetKeys(ctx, room.store.store)
	return nil
}

// ServeHTTP admits, queues or turns away the request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	cr, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if cr == nil {
		cr = caddy.NewReplacer()
	}
	d := h.m.startDecision(cr, h.eventID, next)
	defer d.Done()
	next = d
	repl := &d.repl

	headerToken := r.Header.Get(HeaderToken)
	solution := r.Header.Get(HeaderSolution)
	stripGatewayHeaders(r.Header)
	// The solution is the gateway's business; the site never needs it.
	r.Header.Del(HeaderSolution)

	h.awaitRoom(r.Context())
	state := h.room.room.State()

	ticket, presented, ok := h.verify(r, headerToken)
	if done, pass := h.byReceipt(r, repl, state, ticket, ok); pass {
		return h.passCompleted(w, r, next, repl, done.Subject, done.Position, done.Raw)
	}
	if ok {
		if user := h.requestUser(repl); user != "" && user != ticket.Subject {
			return h.serveOthersToken(w, r, next, repl, state, ticket, user, solution)
		}
	}
	switch {
	case ok && ticket.PreQueue:
		return h.servePreQueueTicket(w, r, next, repl, ticket, solution)
	case ok:
		switch hold := h.holds(r, state, ticket); hold {
		case ticketCompleted, ticketRevoked:
			if h.isAfterPurchase(r, repl) {
				return h.passCompleted(w, r, next, repl, ticket.Subject, ticket.Position, ticket.Raw)
			}
			if hold == ticketCompleted {
				return h.completed(w, r, repl, ticket.Position)
			}
			return h.serveArrival(w, r, next, repl, state, true, solution)
		case ticketSpent:
			return h.serveArrival(w, r, next, repl, state, true, solution)
		}
		return h.serveTicket(w, r, next, repl, state, ticket)
	}
	if presented {
		h.m.invalidTokens.Inc()
	}
	return h.serveArrival(w, r, next, repl, state, presented, solution)
}

// Cleanup releases the room (and, with it, the store) once no config uses it.
func (h *Handler) Cleanup() error {
	h.edge.stop()
	h.cfRoom.stop()
	h.fleetKeys.stop()
	if h.limiterKey != "" {
		_, _ = limiters.Delete(h.limiterKey)
		h.limiterKey = ""
	}
	if h.room == nil {
		return nil
	}
	h.room = nil
	_, err := rooms.Delete(h.roomKey)
	return err
}

// awaitRoom holds the first requests after a start or a config change until
// the room has read the store once (or failed to), so an admitted visitor is
// not sent back to the queue by a room that only knows its defaults.
func (h *Handler) awaitRoom(ctx context.Context) {
	select {
	case <-h.room.ready:
		return
	default:
	}
	t := time.NewTimer(readyWait)
	defer t.Stop()
	select {
	case <-h.room.ready:
	case <-t.C:
	case <-ctx.Done():
	}
}

// placeholders is the request's replacer with the waiting room's own
// placeholders ({http.waitroom.*}). One provider answers them from these
// fields when something asks (a log, a header): setting them in the
// replacer's map took its lock and grew the map on every request, a
// fortieth of a waiting answer's time in Caddy (docs/scale.md).
type placeholders struct {
	*caddy.Replacer
	event, status string
	position      int64
	// passed is set once the request is passed on, where another waitroom
	// handler may decide it again; asking while this one looks for it
	// (atomic: a lookup may come from another goroutine of the request).
	passed bool
	asking atomic.Bool
}

// value is the provider: a status and a position once the handler has
// decided (the position empty when the request has none), the event always.
// Of two waitroom handlers on one request the later one answers, as its
// values once overwrote the earlier one's: a provider is asked in the order
// added, so one that passed the request on asks the rest first.
func (p *placeholders) value(key string) (any, bool) {
	if p.passed && p.asking.CompareAndSwap(false, true) {
		v, ok := p.Get(key)
		p.asking.Store(false)
		if ok {
			return v, true
		}
	} else if p.asking.Load() {
		return nil, false
	}
	switch key {
	case "http.waitroom.event":
		return p.event, true
	case "http.waitroom.status":
		return p.status, p.status != ""
	case "http.waitroom.position":
		if p.status == "" {
			return nil, false
		}
		if p.position > 0 {
			return strconv.FormatInt(p.position, 10), true
		}
		return "", true
	}
	return nil, false
}

func setPlaceholders(repl *placeholders, status string, pos int64) {
	repl.status, repl.position = status, pos
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
