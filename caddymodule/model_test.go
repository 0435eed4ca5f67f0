package caddymodule

// A model of the admission rules (docs/gateway.md "What a visitor gets",
// docs/api.md §2–3): a state-machine property test that drives the real
// handler, with the memory store, with Redis, and as two gateways sharing
// Redis, through random sequences of arrivals, polls, replayed tokens,
// pre-queue tokens, watermark moves, pause, sold out (an operator's, or
// the origin's while the seats it published as held may come back, with or
// without sold_out_at_zero), hard-cap changes, revocations, the buyer's
// pages after the purchase (after_purchase), clock moves, an opening and
// its draw, a reload that removes the opening, and Redis losing the event's
// state; and checks every answer against a small model of what the rules
// say it must be.
//
// The model states the rules, not the code: where the rules leave a choice
// (when exactly a drawn position counts as handed out, an account's
// position whose key may have expired) it accepts every answer the rules
// allow, and nothing else.
//
// -rapid.checks sets the number of runs (each test has a modest default);
// -rapid.seed replays one; make model-long runs many more.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/waitroom/waitroom/hashtag"
	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

const (
	modelTTL     = 30 * time.Minute
	modelWindow  = 15 * time.Minute
	modelAbandon = 2*time.Minute + 30*time.Second
	modelRevoked = modelTTL + revokeLeeway // how long a revocation lasts
	modelLeeway  = waitroom.DefaultLeeway
	// The site's authentication, as a placeholder the test sets.
	modelUserID   = "{model.user}"
	modelConfirm  = "/confirm" // the site answers it with the revoke command
	modelAccounts = "alice bob carol"
)

// modelBooking is one of the buyer's pages after the purchase
// (after_purchase); the site answers it with the revoke command too, as a
// confirmed booking's page does.
const (
	modelBooking       = "/bookings/1"
	modelAfterPurchase = "/bookings/*"
)

var (
	rapidFlagsOnce sync.Once
	rapidFlagsSet  map[string]bool
)

// modelChecks sets -rapid.checks to n, and keeps rapid from writing fail
// files into testdata (a failure prints its seed), unless the command line
// set them.
func modelChecks(n int) {
	rapidFlagsOnce.Do(func() {
		rapidFlagsSet = map[string]bool{}
		flag.Visit(func(f *flag.Flag) { rapidFlagsSet[f.Name] = true })
	})
	for name, v := range map[string]string{"rapid.checks": strconv.Itoa(n), "rapid.nofailfile": "true"} {
		if rapidFlagsSet[name] {
			continue
		}
		if err := flag.Set(name, v); err != nil {
			panic(err)
		}
	}
}

// The runs of each form in make test; make model-long runs many more.
func TestAdmissionModelMemory(t *testing.T) {
	modelChecks(150)
	admissionModel(t, memoryStore, 1)
}

func TestAdmissionModelRedis(t *testing.T) {
	modelChecks(75)
	admissionModel(t, testenv.RedisURL(t), 1)
}

func TestAdmissionModelTwoGateways(t *testing.T) {
	modelChecks(40)
	admissionModel(t, testenv.RedisURL(t), 2)
}

func admissionModel(t *testing.T, store string, gateways int) {
	clk := useClock(t)
	var rdb redis.UniversalClient
	if store != memoryStore {
		c, err := waitroom.NewRedisClient(store)
		if err != nil {
			t.Fatalf("redis client: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		rdb = c
	}
	rapid.Check(t, func(rt *rapid.T) {
		s := newModelSystem(rt, clk, store, rdb, gateways)
		defer s.stop()
		rt.Repeat(s.actions())
	})
}

// modelClient is one visitor: an account or anonymous, carrying its token
// in the cookie or the header, and remembering every token it was given.
type modelClient struct {
	account string
	header  bool
	token   string
	history []string
	// receipt is the receipt cookie a revoking answer gave a browser.
	receipt string
}

func (c *modelClient) String() string {
	who := "anonymous"
	if c.account != "" {
		who = c.account
	}
	how := "cookie"
	if c.header {
		how = "header"
	}
	return who + " by " + how
}

// modelSystem is the gateways under test and the model they are held to.
type modelSystem struct {
	t        *rapid.T
	clk      *clock
	store    string
	rdb      redis.UniversalClient
	event    int64
	gws      []*Handler
	cancels  []func()
	opensAt  time.Time
	clients  []*modelClient
	m        *model
	accounts []string
	// published dates the origin's last figures: each publication is
	// dated after the one before, as the origin's moving clock dates them.
	published time.Time
}

func newModelSystem(t *rapid.T, clk *clock, store string, rdb redis.UniversalClient, gateways int) *modelSystem {
	s := &modelSystem{t: t, clk: clk, store: store, rdb: rdb, event: testenv.EventID(), accounts: strings.Fields(modelAccounts)}
	if rdb != nil {
		// The event set up as a gateway that ran before would have left
		// it, so nothing waits out a restore window at the start.
		_, err := waitroom.NewRedisStore(rdb, waitroom.RedisOptions{}).Ensure(context.Background(), s.event, waitroom.Defaults{})
		if err != nil {
			t.Fatalf("setting up the event: %v", err)
		}
	}
	if opening := rapid.SampledFrom([]time.Duration{0, 0, 10 * time.Minute, 20 * time.Minute}).Draw(t, "opens_in"); opening > 0 {
		s.opensAt = clk.Now().Add(opening)
	}
	s.m = newModel(clk.Now(), s.opensAt)
	s.m.atZero = rapid.Bool().Draw(t, "sold_out_at_zero")
	s.gws, s.cancels = s.provision(gateways, s.opensAt)
	return s
}

// provision starts n gateways of the event; a second gateway takes another
// lease, which makes it another store client and room sharing the store.
func (s *modelSystem) provision(n int, opensAt time.Time) ([]*Handler, []func()) {
	var hs []*Handler
	var cancels []func()
	for i := range n {
		h := &Handler{
			Event: s.event, Keys: []Key{{ID: "k1", Secret: testSecret}}, Store: s.store, Lease: int64(i + 1),
			UserID: modelUserID, TokenTTL: caddy.Duration(modelTTL), AdmissionWindow: caddy.Duration(modelWindow),
			AbandonAfter: caddy.Duration(modelAbandon), AfterPurchase: []string{modelAfterPurchase},
			SoldOutAtZero: s.m.atZero,
		}
		if !opensAt.IsZero() {
			h.OpensAt, h.LotterySeed = opensAt.UTC().Format(time.RFC3339), testSeed
		}
		h.now = s.clk.Now
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		if err := h.Provision(ctx); err != nil {
			cancel()
			s.t.Fatalf("provision gateway %d: %v", i, err)
		}
		<-h.room.ready
		hs = append(hs, h)
		cancels = append(cancels, func() {
			if err := h.Cleanup(); err != nil {
				s.t.Errorf("cleanup: %v", err)
			}
			cancel()
		})
	}
	return hs, cancels
}

func (s *modelSystem) stop() {
	for _, c := range s.cancels {
		c()
	}
	s.cancels = nil
}

// sync brings every gateway's view of the store up to date now, as its
// change notice or its next poll would.
func (s *modelSystem) sync() {
	for i, h := range s.gws {
		if _, err := h.room.room.Refresh(context.Background()); err != nil {
			s.t.Fatalf("refresh gateway %d: %v", i, err)
		}
	}
}

func (s *modelSystem) update(c waitroom.Change) {
	g := 0
	if len(s.gws) > 1 {
		g = rapid.IntRange(0, len(s.gws)-1).Draw(s.t, "admin_gateway")
	}
	st, err := s.gws[g].room.room.Update(context.Background(), c)
	if err != nil {
		s.t.Fatalf("update: %v", err)
	}
	s.sync()
	s.m.setState(s.clk.Now(), st.Watermark, st.Paused, st.SoldOut, st.HardCap)
	s.m.soldOutBy = st.SoldOutBy
}

func (s *modelSystem) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"arrive": func(t *rapid.T) {
			c := &modelClient{header: rapid.Bool().Draw(t, "by_header")}
			if rapid.Bool().Draw(t, "account") {
				c.account = rapid.SampledFrom(s.accounts).Draw(t, "name")
			}
			s.clients = append(s.clients, c)
			s.request(t, c, "", "/")
		},
		"sign_in": func(t *rapid.T) {
			// An anonymous visitor signs in and comes back with the token
			// it has: one position per account whatever token it presents.
			var anon []*modelClient
			for _, c := range s.clients {
				if c.account == "" && c.token != "" {
					anon = append(anon, c)
				}
			}
			if len(anon) == 0 {
				t.Skip("no anonymous visitor with a token")
			}
			c := rapid.SampledFrom(anon).Draw(t, "visitor")
			c.account = rapid.SampledFrom(s.accounts).Draw(t, "signs_in_as")
			s.request(t, c, c.token, "/")
		},
		"poll": func(t *rapid.T) {
			c := s.pick(t)
			if c == nil {
				t.Skip("nobody arrived yet")
			}
			s.request(t, c, c.token, "/")
		},
		"replay": func(t *rapid.T) {
			c := s.pick(t)
			if c == nil || len(c.history) == 0 {
				t.Skip("no token to replay")
			}
			tok := rapid.SampledFrom(c.history).Draw(t, "old_token")
			s.request(t, c, tok, "/")
		},
		"confirm": func(t *rapid.T) {
			c := s.pick(t)
			if c == nil {
				t.Skip("nobody arrived yet")
			}
			s.request(t, c, c.token, modelConfirm)
		},
		"booking_page": func(t *rapid.T) {
			c := s.pick(t)
			if c == nil {
				t.Skip("nobody arrived yet")
			}
			tok := c.token
			switch rapid.IntRange(0, 3).Draw(t, "which_token") {
			case 0:
				tok = "" // another device
			case 1:
				if len(c.history) > 0 {
					tok = rapid.SampledFrom(c.history).Draw(t, "old_token")
				}
			}
			s.request(t, c, tok, modelBooking)
		},
		"set_watermark": func(t *rapid.T) {
			wm := s.m.wm + rapid.Int64Range(0, max(0, s.m.lastPos()-s.m.wm)+4).Draw(t, "ahead")
			s.update(waitroom.Change{SetWatermark: &wm})
		},
		"raise_watermark": func(t *rapid.T) {
			s.update(waitroom.Change{RaiseBy: rapid.Int64Range(1, 3).Draw(t, "by")})
		},
		"pause": func(t *rapid.T) {
			p := rapid.Bool().Draw(t, "paused")
			s.update(waitroom.Change{Paused: &p})
		},
		"sold_out": func(t *rapid.T) {
			so := rapid.Bool().Draw(t, "sold_out")
			s.update(waitroom.Change{SoldOut: &so, Actor: ActorAdmin})
		},
		"origin_sold_out": func(t *rapid.T) {
			so := rapid.Bool().Draw(t, "sold_out")
			s.update(waitroom.Change{SoldOut: &so, Actor: waitroom.ActorOrigin})
		},
		"publish_inventory": func(t *rapid.T) {
			// No seat left to hold; held ones may come back.
			held := rapid.Int64Range(0, 3).Draw(t, "held")
			g := rapid.IntRange(0, len(s.gws)-1).Draw(t, "publishing_gateway")
			// Two publications at one instant of the frozen clock would
			// leave a room that read the first just before the second
			// unable to tell them apart.
			s.published = later(s.clk.Now(), s.published.Add(time.Nanosecond))
			inv := waitroom.Inventory{Sellable: 10, Held: held, Confirmed: 10 - held, Healthy: true, At: s.published}
			if err := s.gws[g].room.room.PublishInventory(context.Background(), inv); err != nil {
				t.Fatalf("publish inventory: %v", err)
			}
			s.sync()
			s.m.held, s.m.heldAt, s.m.figuresLost = held, s.published, false
		},
		"hard_cap": func(t *rapid.T) {
			hc := rapid.Int64Range(0, s.m.lastPos()+3).Draw(t, "hard_cap")
			s.update(waitroom.Change{HardCap: &hc})
		},
		"advance_clock": func(t *rapid.T) {
			d := rapid.SampledFrom([]time.Duration{
				30 * time.Second, 3 * time.Minute, 8 * time.Minute, 14 * time.Minute, 16 * time.Minute, 31 * time.Minute,
			}).Draw(t, "by")
			// What the requests since the last sync changed (a draw, a
			// join at the other gateway) reaches every gateway before the
			// time passes, as its poll would within 500 ms: a gateway
			// counts a position whose handout nothing tells from when it
			// saw the position handed out, not from after the jump.
			s.sync()
			s.clk.Advance(d)
			s.sync()
		},
		"remove_opening": func(t *rapid.T) {
			if s.opensAt.IsZero() || s.m.openingRemoved {
				t.Skip("no opening configured")
			}
			// A reload: the new config's handlers are provisioned before
			// the old ones are cleaned up.
			gws, cancels := s.provision(len(s.gws), time.Time{})
			s.stop()
			s.gws, s.cancels = gws, cancels
			s.sync()
			s.m.reload()
			if s.m.figuresLost {
				// New rooms know only what the store still has.
				s.m.heldAt = time.Time{}
			}
		},
		"lose_redis_state": func(t *rapid.T) {
			if s.rdb == nil {
				t.Skip("the memory store")
			}
			s.loseState()
		},
	}
}

func (s *modelSystem) pick(t *rapid.T) *modelClient {
	if len(s.clients) == 0 {
		return nil
	}
	return s.clients[rapid.IntRange(0, len(s.clients)-1).Draw(t, "client")]
}

// loseState deletes the event's keys, as a Redis restarted empty would
// have lost them, and lets the gateways put back what they remember.
func (s *modelSystem) loseState() {
	ctx := context.Background()
	match := "waitroom:" + hashtag.Event(s.event) + "*"
	// All in one DEL (the keys share the event's hash slot), as a
	// restarted or flushed Redis loses them: deleted one by one, a
	// gateway's own refresh could put the state back between two of them
	// and the rest of the deletion take part of what it put back, a loss
	// of part of the state no such event makes.
	del := func(ctx context.Context, c *redis.Client) error {
		var keys []string
		iter := c.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil || len(keys) == 0 {
			return err
		}
		return c.Del(ctx, keys...).Err()
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, del)
	case *redis.Client:
		err = del(ctx, c)
	default:
		err = fmt.Errorf("redis client %T", c)
	}
	if err != nil {
		s.t.Fatalf("losing the state: %v", err)
	}
	// The gateways find it lost and put it back; new positions wait out
	// the restore window, which the clock then passes.
	s.sync()
	s.clk.Advance(2 * waitroom.DefaultRestoreWindow)
	s.sync()
	st := s.gws[0].room.room.State()
	if st.Watermark != s.m.wm || st.Paused != s.m.paused || st.SoldOut != s.m.soldOut {
		s.t.Fatalf("restored state %+v, want watermark %d paused %v sold out %v", st, s.m.wm, s.m.paused, s.m.soldOut)
	}
	if st.LastPosition < s.m.lastPos() {
		s.t.Fatalf("restored position counter %d below the highest position handed out, %d", st.LastPosition, s.m.lastPos())
	}
	s.m.lose(s.clk.Now(), st.HardCap)
	// Restored from a gateway's memory, the flag no longer says whose; the
	// origin's figures are gone from the store (the rooms keep theirs).
	s.m.soldOutBy, s.m.figuresLost = st.SoldOutBy, true
}

// modelAnswer is what one request got.
type modelAnswer struct {
	code   int
	status string
	// pos is the position the answer names ({http.waitroom.position}).
	pos int64
	// user is X-Waitroom-User of an admitted request.
	user string
	// passed: the site got the request; siteStatus is the
	// X-Waitroom-Status it was told.
	passed     bool
	siteStatus string
	// cookie: the answer set the queue cookie.
	cookie bool
	issued *waitroom.Ticket // a token handed out with a position
	pre    *waitroom.Ticket // a pre-queue token handed out
	body   waitingBody
	raw    string
	revoke bool // the site answered the admitted request with the revoke command
}

func (a modelAnswer) String() string {
	s := fmt.Sprintf("%d %s pos=%d", a.code, a.status, a.pos)
	if a.issued != nil {
		s += fmt.Sprintf(" token(%s,%d)", a.issued.Subject, a.issued.Position)
	}
	if a.pre != nil {
		s += fmt.Sprintf(" pre-queue token(%s)", a.pre.Subject)
	}
	if a.status == StatusWaiting {
		s += fmt.Sprintf(" admitted_through=%d ahead=%d paused=%v", a.body.AdmittedThrough, a.body.Ahead, a.body.Paused)
	}
	return s
}

// request sends c's request with tok (none when empty) to a gateway and
// holds the answer to the model.
func (s *modelSystem) request(t *rapid.T, c *modelClient, tok, path string) {
	g := 0
	if len(s.gws) > 1 {
		g = rapid.IntRange(0, len(s.gws)-1).Draw(t, "gateway")
	}
	h := s.gws[g]
	r := httptest.NewRequest(http.MethodGet, "http://tickets.test"+path, nil)
	r.Header.Set("Accept", "application/json")
	if tok != "" {
		if c.header {
			r.Header.Set(HeaderToken, tok)
		} else {
			r.AddCookie(&http.Cookie{Name: h.cookieName, Value: tok})
		}
	}
	if c.receipt != "" && !c.header {
		r.AddCookie(&http.Cookie{Name: h.cookieName + receiptSuffix, Value: c.receipt})
	}
	repl := caddy.NewReplacer()
	if c.account != "" {
		repl.Set("model.user", c.account)
	}
	r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
	rec := httptest.NewRecorder()
	var a modelAnswer
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		a.user = r.Header.Get(HeaderUser)
		a.passed, a.siteStatus = true, r.Header.Get(HeaderStatus)
		if r.URL.Path == modelConfirm || r.URL.Path == modelBooking {
			w.Header().Set(HeaderCommand, CommandRevoke)
			a.revoke = true
		}
		_, err := w.Write([]byte("site"))
		return err
	})
	if err := h.ServeHTTP(rec, r, next); err != nil {
		t.Fatalf("ServeHTTP: %v", err)
	}
	a.code, a.status, a.raw = rec.Code, rec.Header().Get(HeaderStatus), rec.Body.String()
	var receipt *waitroom.Ticket
	if c.receipt != "" && !c.header {
		if tk, err := h.keys.Verify(c.receipt, s.event); err == nil {
			receipt = &tk
		}
	}
	for _, ck := range rec.Result().Cookies() {
		a.cookie = a.cookie || ck.Name == h.cookieName
		if ck.Name == h.cookieName+receiptSuffix {
			c.receipt = ck.Value
		}
	}
	if a.revoke && a.status != StatusAdmitted {
		// The command of a completed visitor's page is taken off and not
		// carried out: nothing to record.
		a.revoke = false
	}
	a.pos, _ = strconv.ParseInt(repl.ReplaceAll("{http.waitroom.position}", ""), 10, 64)
	if raw := rec.Header().Get(HeaderToken); raw != "" {
		tk, err := h.keys.VerifyAny(raw, s.event)
		if err != nil {
			t.Fatalf("the modelAnswer's token does not verify: %v", err)
		}
		if tk.PreQueue {
			a.pre = &tk
		} else {
			a.issued = &tk
		}
		c.token = raw
		c.history = append(c.history, raw)
	}
	if a.status == StatusWaiting {
		if err := json.Unmarshal(rec.Body.Bytes(), &a.body); err != nil {
			t.Fatalf("waiting body %q: %v", a.raw, err)
		}
	}
	if a.revoke {
		// Every gateway learns of it within a poll; the model's next
		// request comes after that poll.
		s.sync()
	}
	var presented *waitroom.Ticket
	if tok != "" {
		if tk, err := h.keys.VerifyAny(tok, s.event); err == nil {
			presented = &tk
		}
	}
	if presented != nil && c.account != "" && presented.Subject != c.account && a.issued != nil && a.issued.Subject == c.account {
		// A take-over, which every gateway learns of within a poll, as
		// a revocation.
		s.sync()
	}
	t.Logf("%s %s %s → %s", c, path, describeToken(presented, tok), a)
	if err := s.m.judge(s.clk.Now(), path, c.account, presented, receipt, a); err != nil {
		t.Fatalf("%s\nmodel: %s", err, s.m)
	}
}

func describeToken(tk *waitroom.Ticket, raw string) string {
	switch {
	case raw == "":
		return "without a token"
	case tk == nil:
		return "with an invalid (expired) token"
	case tk.PreQueue:
		return fmt.Sprintf("with pre-queue token(%s)", tk.Subject)
	}
	return fmt.Sprintf("with token(%s,%d exp %s)", tk.Subject, tk.Position, tk.ExpiresAt.Format("15:04:05"))
}

// The model.

type modelStep struct {
	at time.Time
	wm int64
}

// modelPause is a time the event was paused; end is zero while it lasts.
type modelPause struct{ start, end time.Time }

type modelPos struct {
	subject string
	// The position was handed out between handLo and handHi: a drawn
	// position counts from the draw or from when its entrant took it.
	handLo, handHi time.Time
	// before is true for a position handed out before the store lost
	// the event's state.
	before bool
}

type subPos struct {
	sub string
	pos int64
}

type modelAccount struct {
	pos       int64
	lastClaim time.Time
}

type model struct {
	start           time.Time
	wm              int64
	paused, soldOut bool
	// soldOutBy is the flag's actor; held the seats in live holds the
	// origin published at heldAt; atZero the gateways' sold_out_at_zero;
	// now the time of the request being judged.
	soldOutBy            string
	held                 int64
	heldAt, now          time.Time
	atZero, figuresLost  bool
	hardCap              int64
	steps                []modelStep
	pauses               []modelPause
	positions            map[int64]*modelPos // handed out, with a token
	used                 map[int64]bool      // taken from the counter, with or without a token
	bySubject            map[string][]int64
	tokenExp             map[subPos]time.Time
	givenUp              map[subPos]bool // positions a subject left for a newer one
	revoked              map[subPos]time.Time
	takenOver            map[subPos]string // revoked because this account took the place over
	accountRevoked       map[string]time.Time
	accountRevokedAt     map[string]int64 // the position of an account's latest revocation
	accounts             map[string]*modelAccount
	opensAt              time.Time
	openingRemoved       bool
	entrants             map[string]bool
	entrantsBefore       int // entrants before the opening, when nothing was lost
	drawn                map[string]int64
	preYield             map[string]map[int64]bool // positions each pre-queue token yielded
	preBeyond            map[string]map[int64]bool // positions beyond the cap a pre-queue token was answered with
	drawnRecorded        map[string]bool           // presented after the draw: the store keeps its drawn position for the token
	lost                 bool
	lostBeforeOpening    bool
	removedBeforeOpening bool
	// closed: a request after the opening closed the entries (a room's
	// poll may have done it earlier).
	closed bool
	notes  []string
}

func newModel(now, opensAt time.Time) *model {
	return &model{
		start: now, steps: []modelStep{{now, 0}}, positions: map[int64]*modelPos{}, used: map[int64]bool{},
		bySubject: map[string][]int64{}, tokenExp: map[subPos]time.Time{}, givenUp: map[subPos]bool{}, revoked: map[subPos]time.Time{}, takenOver: map[subPos]string{},
		accountRevoked: map[string]time.Time{}, accountRevokedAt: map[string]int64{}, accounts: map[string]*modelAccount{}, opensAt: opensAt,
		entrants: map[string]bool{}, drawn: map[string]int64{}, preYield: map[string]map[int64]bool{}, preBeyond: map[string]map[int64]bool{},
		drawnRecorded: map[string]bool{},
	}
}

func (m *model) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "watermark %d paused %v sold_out %v (by %q, %d held at %s, at zero %v) hard_cap %d", m.wm, m.paused, m.soldOut,
		m.soldOutBy, m.held, m.heldAt.Format("15:04:05"), m.atZero, m.hardCap)
	if !m.opensAt.IsZero() {
		fmt.Fprintf(&b, " opens_at %s removed %v entrants %d", m.opensAt.Format("15:04:05"), m.openingRemoved, len(m.entrants))
	}
	fmt.Fprintf(&b, "\n  watermark rises:")
	for _, s := range m.steps {
		fmt.Fprintf(&b, " %d@%s", s.wm, s.at.Format("15:04:05"))
	}
	var ps []int64
	for p := range m.positions {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	fmt.Fprintf(&b, "\n  positions:")
	for _, p := range ps {
		mp := m.positions[p]
		fmt.Fprintf(&b, " %d=%s@%s", p, mp.subject, mp.handHi.Format("15:04:05"))
	}
	for k, until := range m.revoked {
		fmt.Fprintf(&b, "\n  revoked (%s,%d) until %s", k.sub, k.pos, until.Format("15:04:05"))
	}
	return b.String()
}

func (m *model) lastPos() int64 {
	var n int64
	for p := range m.used {
		n = max(n, p)
	}
	return n
}

func (m *model) setState(now time.Time, wm int64, paused, soldOut bool, hardCap int64) {
	switch {
	case paused && !m.paused:
		m.pauses = append(m.pauses, modelPause{start: now})
	case !paused && m.paused:
		m.pauses[len(m.pauses)-1].end = now
	}
	m.wm, m.paused, m.soldOut, m.hardCap = wm, paused, soldOut, hardCap
	if wm > m.steps[len(m.steps)-1].wm {
		m.steps = append(m.steps, modelStep{now, wm})
	}
}

// reload: the config without the opening makes new rooms, which take over
// what the old ones saw of the windows, so the watermark's rises stand.
func (m *model) reload() {
	if !m.openingRemoved && !m.closed {
		// Unless a request closed the entries, nobody knows whether the
		// old rooms reserved the entrants' positions.
		m.removedBeforeOpening = true
	}
	m.openingRemoved = true
}

// lose: the store lost the event's state. Its accounts and its draw go
// with it; the rooms keep the watermark, flags, revocations and windows.
func (m *model) lose(now time.Time, hardCap int64) {
	if m.hardCap != hardCap {
		m.notes = append(m.notes, fmt.Sprintf("hard cap %d restored as %d", m.hardCap, hardCap))
	}
	m.hardCap = hardCap
	m.lost = true
	if !m.opensAt.IsZero() && !m.closed {
		// The entries went before any request closed them (a room's
		// poll may have): the draw's size is not known.
		m.lostBeforeOpening = true
	}
	for _, mp := range m.positions {
		mp.before = true
	}
	m.accounts = map[string]*modelAccount{}
	m.drawnRecorded = map[string]bool{}
	// The positions pre-queue tokens yielded were recorded with the
	// draw: a token is placed once more, unless a gateway remembers.
	for sub, ps := range m.preYield {
		for p := range ps {
			m.answeredBeyond(sub, p)
		}
	}
	m.preYield = map[string]map[int64]bool{}
}

// canDraw tells whether sub's place comes from the draw: an entrant of
// an opening still configured, whose record the store still has.
func (m *model) canDraw(sub string) bool {
	return !m.opensAt.IsZero() && !m.openingRemoved && !m.lost && m.entrants[sub]
}

// mayHaveDrawn tells whether sub, an entrant, may have been placed by the
// draw although the store lost the event's state before the opening: it
// may have entered after the loss.
func (m *model) mayHaveDrawn(sub string) bool {
	return !m.opensAt.IsZero() && !m.openingRemoved && m.lostBeforeOpening && m.entrants[sub]
}

// preQueue tells whether new arrivals enter the pre-queue.
func (m *model) preQueue(now time.Time) bool {
	return !m.opensAt.IsZero() && !m.openingRemoved && now.Before(m.opensAt)
}

func (m *model) admits(p int64) bool {
	return m.upTo(p) && !m.paused
}

// upTo tells whether the watermark has reached p within the cap: p is
// admitted unless paused, and its window counts either way.
func (m *model) upTo(p int64) bool {
	return p >= 1 && p <= m.wm && !m.beyondCap(p)
}

func (m *model) beyondCap(p int64) bool { return m.hardCap > 0 && p > m.hardCap }

func (m *model) reached(p int64) (time.Time, bool) {
	for _, s := range m.steps {
		if s.wm >= p {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// windowOver says whether p's admission window may have ended (possibly)
// and whether it surely has: it runs from the later of the position's
// handout and the watermark reaching it, while the event is not paused.
func (m *model) windowOver(now time.Time, p int64) (possibly, surely bool) {
	reach, ok := m.reached(p)
	mp := m.positions[p]
	if !ok || mp == nil {
		return false, false
	}
	lo, hi := later(mp.handLo, reach), later(mp.handHi, reach)
	return m.spent(lo, now), m.spent(hi, now)
}

// spent tells whether a window that began at since has run by now: entry
// was open for modelWindow since, pauses left out.
func (m *model) spent(since, now time.Time) bool {
	open := now.Sub(since)
	for _, p := range m.pauses {
		end := p.end
		if end.IsZero() || end.After(now) {
			end = now
		}
		if start := later(p.start, since); end.After(start) {
			open -= end.Sub(start)
		}
	}
	return open >= modelWindow
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (m *model) isRevoked(now time.Time, sub string, p int64) bool {
	if until, ok := m.revoked[subPos{sub, p}]; ok && now.Before(until) {
		return true
	}
	return m.accountIsRevoked(now, sub)
}

func (m *model) accountIsRevoked(now time.Time, sub string) bool {
	until, ok := m.accountRevoked[sub]
	return ok && now.Before(until)
}

// live tells whether sub's position p may still admit or wait: not
// revoked, its window not possibly over, a token for it still valid.
func (m *model) live(now time.Time, sub string, p int64) bool {
	if m.givenUp[subPos{sub, p}] {
		return false
	}
	if m.isRevoked(now, sub, p) {
		return false
	}
	if possibly, _ := m.windowOver(now, p); possibly {
		return false
	}
	exp, ok := m.tokenExp[subPos{sub, p}]
	return ok && !now.After(exp.Add(modelLeeway))
}

// fresh tells whether p may be a position handed out now: never taken
// before, and after the entrants of a draw.
func (m *model) fresh(p int64) error {
	if p < 1 {
		return fmt.Errorf("no position")
	}
	if m.used[p] {
		return fmt.Errorf("position %d was handed out before", p)
	}
	if !m.opensAt.IsZero() && !m.lostBeforeOpening && !m.removedBeforeOpening && p <= int64(m.entrantsBefore) {
		return fmt.Errorf("position %d is among the draw's %d", p, m.entrantsBefore)
	}
	return nil
}

// allHeld: the origin's last figures, still fresh, count seats in live
// holds, and no seat left to hold.
func (m *model) allHeld() bool {
	return m.held > 0 && !m.heldAt.IsZero() && m.now.Sub(m.heldAt) <= waitroom.InventoryFresh
}

// gone: positions not yet admitted are answered sold out (docs/api.md
// §12): the flag, unless it is the origin's while held seats may come back
// and the gateways were not told to answer sold out at zero.
func (m *model) gone() bool {
	return m.soldOut && (m.atZero || m.soldOutBy != waitroom.ActorOrigin || !m.allHeld())
}

// answeredBeyond records that sub's pre-queue token was answered at p,
// beyond the cap, without a token of p.
func (m *model) answeredBeyond(sub string, p int64) {
	if m.preBeyond[sub] == nil {
		m.preBeyond[sub] = map[int64]bool{}
	}
	m.preBeyond[sub][p] = true
}

// verdict is the status the rules give a valid, unrevoked token at p whose
// window has not ended.
func (m *model) verdict(p int64) string {
	switch {
	case m.admits(p):
		return StatusAdmitted
	case m.beyondCap(p) || (m.gone() && p > m.wm):
		return StatusSoldOut
	}
	return StatusWaiting
}

// judge checks answer a to a request for path of account (empty:
// anonymous) that presented tok (nil: none or invalid) at now, then
// records what it did.
func (m *model) judge(now time.Time, path, account string, tok, receipt *waitroom.Ticket, a modelAnswer) error {
	m.now = now
	if !m.opensAt.IsZero() && !m.openingRemoved && !now.Before(m.opensAt) && a.pos > 0 {
		m.closed = true
	}
	other := account != "" && tok != nil && tok.Subject != account
	if other && m.takesOver(now, account, tok, a) && m.positions[a.pos] != nil {
		// Taken over, if the rules let it (signedIn judges): the place
		// is the account's from now.
		m.positions[a.pos].subject = account
	}
	if err := m.safety(now, a); err != nil {
		return err
	}
	if a.passed && a.status != StatusAdmitted && (a.status != StatusCompleted || path != modelBooking) {
		return fmt.Errorf("rule: only the admitted, and the completed on the buyer's pages, reach the site: %s passed %s", path, a)
	}
	var err error
	completed, user, pos := m.completedVisitor(now, account, tok)
	if viaReceipt := m.byReceipt(now, path, tok, receipt); viaReceipt != nil && viaReceipt.surely {
		// The receipt's buyer, whatever the request's own token.
		completed, user, pos, other = true, receipt.Subject, receipt.Position, false
	} else if viaReceipt != nil {
		// Its token's window may have ended: passed by the receipt, or
		// as the token says.
		if m.passedCompleted(a, receipt.Subject, receipt.Position) == nil {
			m.record(now, account, tok, a)
			return nil
		}
	}
	switch {
	case other:
		err = m.signedIn(now, path, account, *tok, a)
	case path == modelBooking && completed:
		err = m.passedCompleted(a, user, pos)
	case path == modelBooking && a.passed && a.status == StatusCompleted:
		err = fmt.Errorf("rule: only a revoked token or a completed account is passed on as completed (%s)", a)
	case tok == nil:
		err = m.arrival(now, account, a)
	case tok.PreQueue:
		err = m.preQueueToken(now, account, *tok, a)
	default:
		err = m.token(now, account, *tok, a)
	}
	if err != nil {
		return fmt.Errorf("verdict: %w", err)
	}
	if err := m.holdings(now, a); err != nil {
		return err
	}
	m.record(now, account, tok, a)
	return nil
}

// signedIn: account, signed in, presented tk, a token of another subject
// (docs/api.md §7, one position per account). An anonymous token's place
// that still holds becomes the account's when the account holds none;
// anything else is the account's own arrival; an anonymous token a
// purchase revoked still reaches the buyer's pages as itself.
func (m *model) signedIn(now time.Time, path, account string, tk waitroom.Ticket, a modelAnswer) error {
	asArrival := func() error {
		if path == modelBooking && m.accountIsRevoked(now, account) {
			return m.passedCompleted(a, account, m.accountRevokedAt[account])
		}
		return m.arrival(now, account, a)
	}
	if tk.PreQueue || tk.IsAccount() {
		return asArrival()
	}
	k := subPos{tk.Subject, tk.Position}
	if until, ok := m.revoked[k]; ok && now.Before(until) {
		if path == modelBooking && m.takenOver[k] == "" {
			return m.passedCompleted(a, tk.Subject, tk.Position)
		}
		return asArrival()
	}
	if m.accountIsRevoked(now, account) {
		return asArrival()
	}
	p := tk.Position
	possibly, surely := false, false
	if m.upTo(p) {
		possibly, surely = m.windowOver(now, p)
	}
	if surely {
		return asArrival()
	}
	takeOver := func() error {
		v := m.verdict(p)
		if !m.tookOver(account, &tk, a) || (a.issued == nil) != (v == StatusSoldOut) {
			return fmt.Errorf("rule: %s, holding no place, signed in with (%s,%d) takes that place over: got %s", account, tk.Subject, p, a)
		}
		return expectStatus(a, v, fmt.Sprintf("%s at the place it took over, %d", account, p))
	}
	if m.preQueue(now) || m.canDraw(account) {
		// An entrant holds the draw's place.
		return asArrival()
	}
	options := []func() error{asArrival}
	held := m.accounts[account]
	switch {
	case held == nil && !possibly && !m.mayHaveDrawn(account):
		return takeOver()
	case held == nil || !now.Before(held.lastClaim.Add(modelTTL)):
		options = append(options, takeOver)
	}
	return anyOf(options)
}

// receiptPass says that a request for the buyer's pages is passed on by
// its receipt (surely), or may be (its token's window may have ended).
type receiptPass struct{ surely bool }

// byReceipt: a browser's request for the buyer's pages with the receipt
// of a purchase whose revocation lasts is passed on as that buyer unless
// its queue token, tok, is admitted there.
func (m *model) byReceipt(now time.Time, path string, tok, receipt *waitroom.Ticket) *receiptPass {
	if path != modelBooking || receipt == nil {
		return nil
	}
	k := subPos{receipt.Subject, receipt.Position}
	if until, ok := m.revoked[k]; !ok || !now.Before(until) || m.takenOver[k] != "" {
		return nil
	}
	if tok == nil || tok.PreQueue || !m.admits(tok.Position) || m.isRevoked(now, tok.Subject, tok.Position) {
		return &receiptPass{surely: true}
	}
	switch possibly, surely := m.windowOver(now, tok.Position); {
	case surely:
		return &receiptPass{surely: true}
	case possibly:
		return &receiptPass{}
	}
	return nil
}

// tookOver tells whether a, the answer to account signed in with tok, is
// at the place of tok, an anonymous queue token: its token the account's,
// or none (sold out).
func (m *model) tookOver(account string, tok *waitroom.Ticket, a modelAnswer) bool {
	if tok.PreQueue || tok.IsAccount() || a.pos != tok.Position {
		return false
	}
	return a.issued == nil || a.issued.Subject == account
}

// takesOver tells whether a is the take-over of tok's place by account:
// at its place, the token not revoked (a purchase, or taken over before).
func (m *model) takesOver(now time.Time, account string, tok *waitroom.Ticket, a modelAnswer) bool {
	until, ok := m.revoked[subPos{tok.Subject, tok.Position}]
	return !(ok && now.Before(until)) && m.tookOver(account, tok, a)
}

// completedVisitor tells whether the rules make the request's bearer
// completed on the buyer's pages (after_purchase): a token with a
// position the site revoked (an account's: any of the account's), or,
// without one, an account whose revocation lasts. A pre-queue token never
// is: the token of its drawn position is.
func (m *model) completedVisitor(now time.Time, account string, tok *waitroom.Ticket) (bool, string, int64) {
	switch {
	case tok != nil && tok.PreQueue:
		return false, "", 0
	case tok != nil && m.isRevoked(now, tok.Subject, tok.Position) && m.takenOver[subPos{tok.Subject, tok.Position}] == "":
		return true, tok.Subject, tok.Position
	case tok == nil && account != "" && m.accountIsRevoked(now, account):
		return true, account, m.accountRevokedAt[account]
	}
	return false, "", 0
}

// passedCompleted: a completed visitor on the buyer's pages is passed on
// as itself, told it is completed, its cookie kept.
func (m *model) passedCompleted(a modelAnswer, user string, pos int64) error {
	switch {
	case !a.passed || a.status != StatusCompleted || a.siteStatus != StatusCompleted:
		return fmt.Errorf("rule: a completed visitor (%s,%d) reaches the buyer's pages as completed: got %s, the site told %q", user, pos, a, a.siteStatus)
	case a.user != user || a.pos != pos:
		return fmt.Errorf("rule: a completed visitor reaches the buyer's pages as itself: (%s,%d) passed as (%s,%d)", user, pos, a.user, a.pos)
	case a.cookie || a.issued != nil || a.pre != nil:
		return fmt.Errorf("rule: a completed visitor's cookie is kept on the buyer's pages: (%s,%d) given a token (%s)", user, pos, a)
	}
	return nil
}

// safety holds for every answer, whatever the request.
func (m *model) safety(now time.Time, a modelAnswer) error {
	if a.status == StatusAdmitted {
		switch {
		case a.pos > m.wm:
			return fmt.Errorf("rule: nobody is admitted above the watermark: admitted position %d, watermark %d", a.pos, m.wm)
		case m.paused:
			return fmt.Errorf("rule: a paused event admits nobody: admitted position %d", a.pos)
		case m.beyondCap(a.pos):
			return fmt.Errorf("rule: nobody beyond the hard cap is admitted: admitted position %d, hard cap %d", a.pos, m.hardCap)
		case m.isRevoked(now, a.user, a.pos):
			return fmt.Errorf("rule: a revoked visitor is never admitted again before token_ttl + 1 min: admitted (%s,%d)", a.user, a.pos)
		}
	}
	if a.issued != nil && a.pos != 0 && a.issued.Position != a.pos {
		return fmt.Errorf("the modelAnswer names position %d, its token %d", a.pos, a.issued.Position)
	}
	if a.status == StatusWaiting {
		if a.body.Position != a.pos || a.body.AdmittedThrough != m.wm || a.body.Paused != m.paused {
			return fmt.Errorf("waiting body %+v, want position %d admitted_through %d paused %v", a.body, a.pos, m.wm, m.paused)
		}
		if a.body.Ahead < 0 || a.body.Ahead > max(0, a.pos-m.wm-1) {
			return fmt.Errorf("ahead %d outside [0, %d]", a.body.Ahead, max(0, a.pos-m.wm-1))
		}
		if want := m.allHeld(); a.body.AllHeld != want || (want && a.body.MayReturn != m.held) {
			return fmt.Errorf("rule: a waiting answer says when every seat is held: all_held %v may_return %d, want %v and %d",
				a.body.AllHeld, a.body.MayReturn, want, m.held)
		}
	}
	if a.issued != nil {
		if mp := m.positions[a.issued.Position]; mp != nil && mp.subject != a.issued.Subject {
			return fmt.Errorf("rule: a position is handed out once: %d is %s's, now given to %s", a.issued.Position, mp.subject, a.issued.Subject)
		}
	}
	return nil
}

// arrival: a request without a valid token (or one the rules make a new
// arrival).
func (m *model) arrival(now time.Time, account string, a modelAnswer) error {
	if account != "" && m.accountIsRevoked(now, account) {
		// Done, sold out or not: its purchase is what sold the seats.
		return expectStatus(a, StatusCompleted, fmt.Sprintf("rule: an account the site revoked is done until token_ttl + 1 min, sold out or not (%s, until %s)",
			account, m.accountRevoked[account].Format("15:04:05")))
	}
	if m.gone() {
		return expectStatus(a, StatusSoldOut, "a new arrival in a sold-out event")
	}
	if m.preQueue(now) {
		if err := expectStatus(a, StatusPreQueue, "an arrival before the opening"); err != nil {
			return err
		}
		if a.pre == nil {
			return fmt.Errorf("an entrant of the pre-queue got no pre-queue token")
		}
		if account != "" && a.pre.Subject != account {
			return fmt.Errorf("the account %s entered as %s", account, a.pre.Subject)
		}
		return nil
	}
	if account != "" {
		return m.accountArrival(now, account, a)
	}
	if err := m.fresh(a.pos); err != nil {
		return fmt.Errorf("a new arrival gets a new position: %w (%s)", err, a)
	}
	return m.atFresh(a)
}

// atFresh: the answer to a position just handed out.
func (m *model) atFresh(a modelAnswer) error {
	want := m.verdict(a.pos)
	if want == StatusSoldOut && a.issued != nil {
		return fmt.Errorf("position %d beyond the hard cap got a token", a.pos)
	}
	if want != StatusSoldOut && a.issued == nil {
		return fmt.Errorf("a new position %d came without its token", a.pos)
	}
	return expectStatus(a, want, fmt.Sprintf("new position %d", a.pos))
}

func (m *model) accountArrival(now time.Time, account string, a modelAnswer) error {
	if m.accountIsRevoked(now, account) {
		return expectStatus(a, StatusCompleted, fmt.Sprintf("rule: an account the site revoked is done until token_ttl + 1 min (%s, until %s)",
			account, m.accountRevoked[account].Format("15:04:05")))
	}
	// The position it holds, unless its window ended (given up) or its
	// claim may have expired.
	var options []func() error
	if held := m.accounts[account]; held != nil {
		possibly, surely := m.windowOver(now, held.pos)
		expired := !now.Before(held.lastClaim.Add(modelTTL))
		if !surely {
			options = append(options, func() error {
				if a.pos != held.pos {
					return fmt.Errorf("account %s holds position %d, got %d", account, held.pos, a.pos)
				}
				return expectStatus(a, m.verdict(held.pos), fmt.Sprintf("account %s at its position %d", account, held.pos))
			})
		}
		if !(possibly || expired) {
			return options[0]()
		}
	}
	if d, ok := m.drawn[account]; ok && m.canDraw(account) {
		if possibly, _ := m.windowOver(now, d); possibly {
			// Its drawn place's window ended: given up, a place at the
			// back.
			options = append(options, func() error {
				if err := m.fresh(a.pos); err != nil {
					return fmt.Errorf("account %s past its drawn position's window gets a new one: %w (%s)", account, err, a)
				}
				return m.atFresh(a)
			})
		}
		options = append(options, func() error {
			if a.pos != d {
				return fmt.Errorf("entrant account %s was drawn %d, got %d", account, d, a.pos)
			}
			return expectStatus(a, m.verdict(d), fmt.Sprintf("entrant account %s at its drawn position %d", account, d))
		})
	} else if m.canDraw(account) {
		options = append(options, func() error { return m.drawnFirst(now, account, a) })
	} else {
		options = append(options, func() error {
			if err := m.fresh(a.pos); err != nil {
				return fmt.Errorf("account %s without a position gets a new one: %w (%s)", account, err, a)
			}
			return m.atFresh(a)
		})
	}
	if held := m.accounts[account]; held == nil || held.pos == a.pos {
		// The account took its drawn place by its pre-queue token, in an
		// answer that did not name it: the store keeps it as the
		// account's, after a reload without the opening too.
		options = append(options, func() error { return m.atRecordedDraw(now, account, account, a) })
	}
	return anyOf(options)
}

// atRecordedDraw: an answer at the draw's position the store recorded for
// sub at a presentation of its pre-queue token that did not name it (sold
// out, or a new arrival once its window ended), judged as that position's
// token is: a gateway that saw the position reached later counts its
// window from then.
func (m *model) atRecordedDraw(now time.Time, account, sub string, a modelAnswer) error {
	if !m.drawnRecorded[sub] {
		return fmt.Errorf("%s has no drawn position the store recorded unseen", sub)
	}
	if a.pos < 1 || (!m.lostBeforeOpening && a.pos > int64(m.entrantsBefore)) {
		return fmt.Errorf("%s answered at %d, not one of the draw's %d", sub, a.pos, m.entrantsBefore)
	}
	if mp := m.positions[a.pos]; mp != nil && mp.subject != sub {
		return fmt.Errorf("%s answered at %d, drawn for %s", sub, a.pos, mp.subject)
	}
	return m.token(now, account, waitroom.Ticket{Subject: sub, Position: a.pos, Account: !waitroom.IsVisitorID(sub)}, a)
}

// drawnFirst: an entrant takes its drawn position for the first time.
func (m *model) drawnFirst(now time.Time, sub string, a modelAnswer) error {
	p := a.pos
	if m.spent(m.opensAt, now) && m.fresh(p) == nil {
		// Its drawn place may have come and gone (handed out at the draw,
		// reached since): given up, a place at the back.
		return m.atFresh(a)
	}
	if p < 1 || (!m.lostBeforeOpening && p > int64(m.entrantsBefore)) {
		return fmt.Errorf("entrant %s got position %d, not one of the draw's %d", sub, p, m.entrantsBefore)
	}
	if mp := m.positions[p]; mp != nil && mp.subject != sub {
		return fmt.Errorf("entrant %s got position %d, drawn for %s", sub, p, mp.subject)
	}
	// Handed out at the draw, or when the entrant took it.
	possibly, surely := m.windowOverBetween(now, p, m.opensAt, now)
	v := m.verdict(p)
	if v == StatusAdmitted && surely {
		return fmt.Errorf("entrant %s's drawn position %d admitted after its window", sub, p)
	}
	if v == StatusAdmitted && possibly && a.status != StatusAdmitted {
		return nil
	}
	return expectStatus(a, v, fmt.Sprintf("entrant %s at its drawn position %d", sub, p))
}

func (m *model) windowOverBetween(now time.Time, p int64, lo, hi time.Time) (possibly, surely bool) {
	reach, ok := m.reached(p)
	if !ok {
		return false, false
	}
	return m.spent(later(lo, reach), now), m.spent(later(hi, reach), now)
}

// token: a valid token with a position.
func (m *model) token(now time.Time, account string, tk waitroom.Ticket, a modelAnswer) error {
	p, sub := tk.Position, tk.Subject
	isAccount := !waitroom.IsVisitorID(sub)
	if m.isRevoked(now, sub, p) {
		if isAccount {
			return expectStatus(a, StatusCompleted, fmt.Sprintf("rule: a revoked account's token (%s,%d) is done", sub, p))
		}
		return m.arrivalAgain(now, account, a, fmt.Sprintf("a revoked token (%s,%d) is a new arrival", sub, p))
	}
	possibly, surely := m.windowOver(now, p)
	atPos := func() error {
		if a.pos != p {
			return fmt.Errorf("token (%s,%d) answered at position %d (%s)", sub, p, a.pos, a)
		}
		return expectStatus(a, m.verdict(p), fmt.Sprintf("token (%s,%d)", sub, p))
	}
	switch {
	case !m.upTo(p) || !possibly:
		return atPos()
	case surely:
		// Paused or not: a pause does not keep a spent place.
		return m.arrivalAgain(now, account, a, fmt.Sprintf("rule: the window of (%s,%d) ended (reached %s): a new arrival", sub, p, m.reachedString(p)))
	}
	return anyOf([]func() error{atPos, func() error { return m.arrivalAgain(now, account, a, "") }})
}

func (m *model) reachedString(p int64) string {
	r, _ := m.reached(p)
	s := r.Format("15:04:05")
	if mp := m.positions[p]; mp != nil {
		s += ", handed out " + mp.handLo.Format("15:04:05")
		if !mp.handHi.Equal(mp.handLo) {
			s += "–" + mp.handHi.Format("15:04:05")
		}
	}
	return s
}

func (m *model) arrivalAgain(now time.Time, account string, a modelAnswer, why string) error {
	if err := m.arrival(now, account, a); err != nil {
		if why != "" {
			return fmt.Errorf("%s: %w", why, err)
		}
		return err
	}
	return nil
}

// preQueueToken: a pre-queue token (API.md §12: it never admits once the
// position drawn for it was revoked or its window ended; it yields at most
// one position, ever).
func (m *model) preQueueToken(now time.Time, account string, tk waitroom.Ticket, a modelAnswer) error {
	sub := tk.Subject
	if m.preQueue(now) {
		return expectStatus(a, StatusPreQueue, "a pre-queue token before the opening")
	}
	yielded := m.yieldedOf(sub)
	if len(yielded) > 0 {
		p := yielded[0]
		if held := m.accounts[sub]; held != nil && !waitroom.IsVisitorID(sub) && held.pos != p && a.pos == held.pos {
			// The account gave up the yielded place for one at the back
			// (the model let it only once that place's window may have
			// ended): the token is a new arrival of the account, which is
			// answered at the account's position as that position's own
			// token would be (docs/api.md §3).
			return m.token(now, account, waitroom.Ticket{Subject: sub, Position: held.pos, Account: true}, a)
		}
		// Its bearer may arrive anew, as anyone, at the back (docs/api.md
		// §3): never back at a place of its own.
		anew := func() error {
			by := account
			if !waitroom.IsVisitorID(sub) {
				by = sub
			}
			if err := m.arrival(now, by, a); err != nil {
				return fmt.Errorf("rule: a pre-queue token yields at most one position, ever: (%s) yielded %d, now %d (%s)", sub, p, a.pos, a)
			}
			return nil
		}
		possibly, surely := m.windowOver(now, p)
		if m.isRevoked(now, sub, p) || surely {
			// Never at its position; its bearer is a new arrival, which
			// may be admitted at once at a new place at the back when the
			// watermark is ahead (docs/api.md §3), unless revoked.
			if a.status == StatusAdmitted && a.user == sub && (a.pos == p || m.isRevoked(now, sub, p)) {
				return fmt.Errorf("rule: a pre-queue token never admits once its position %d was revoked or its window ended", p)
			}
			if a.pos == 0 || a.pos == p {
				return nil
			}
			return anew()
		}
		atPos := func() error {
			if a.pos == 0 && a.status == StatusSoldOut && m.verdict(p) == StatusSoldOut {
				return nil
			}
			if a.pos != p {
				return fmt.Errorf("rule: a pre-queue token yields at most one position, ever: (%s) yielded %d, answered at %d (%s)", sub, p, a.pos, a)
			}
			if possibly && m.admits(p) && a.status != StatusAdmitted {
				return nil
			}
			return expectStatus(a, m.verdict(p), fmt.Sprintf("pre-queue token (%s) at its position %d", sub, p))
		}
		if possibly && m.upTo(p) {
			// Its window may have ended, as the position's own token's
			// (token): at its place, or a new arrival.
			return anyOf([]func() error{atPos, anew})
		}
		return atPos()
	}
	if a.status == StatusUnavailable {
		// The draw under way at another gateway.
		return nil
	}
	if a.status == StatusCompleted && m.accountIsRevoked(now, sub) {
		// A revoked account is done on every device (docs/api.md §3),
		// its entry in the draw too: an entrant account that took its
		// drawn place by another device and was revoked there.
		return nil
	}
	if m.canDraw(sub) {
		// Every presentation after the draw records the drawn position
		// as the token's, whether or not the answer names it.
		m.drawnRecorded[sub] = true
		if m.gone() && a.status == StatusSoldOut {
			return nil
		}
		if held := m.accounts[sub]; held != nil && !waitroom.IsVisitorID(sub) && a.pos == held.pos && m.spent(m.opensAt, now) {
			// Its drawn place may have come and gone, and the account
			// was given one at the back from another device: the token
			// yields the account's position (docs/api.md §3).
			return m.token(now, account, waitroom.Ticket{Subject: sub, Position: held.pos, Account: true}, a)
		}
		return m.drawnFirst(now, sub, a)
	}
	// No draw to read it from: a place at the back, once (an account's:
	// the one it holds).
	if m.mayHaveDrawn(sub) {
		// Should the draw have placed it, this presentation made the store
		// record its drawn position, whatever the answer (sold out, a new
		// arrival once its window ended): a later one may be answered there.
		defer func() { m.drawnRecorded[sub] = true }()
	}
	if m.preBeyond[sub][a.pos] {
		return expectStatus(a, m.verdict(a.pos), fmt.Sprintf("pre-queue token (%s) at the position %d it was answered with", sub, a.pos))
	}
	if m.mayHaveDrawn(sub) && a.pos > 0 && a.status != StatusSoldOut {
		// The store lost the entries before the opening, but not those
		// made after the loss: the draw may have placed this entrant.
		if err := m.drawnFirst(now, sub, a); err == nil {
			return nil
		}
	}
	if held := m.accounts[sub]; held != nil && !waitroom.IsVisitorID(sub) && a.pos == held.pos {
		// An account's pre-queue token is answered as the token of the
		// position the account holds (docs/api.md §3).
		return m.token(now, account, waitroom.Ticket{Subject: sub, Position: held.pos, Account: true}, a)
	}
	if m.atRecordedDraw(now, account, sub, a) == nil {
		return nil
	}
	if m.gone() {
		return expectStatus(a, StatusSoldOut, "a pre-queue token without a draw in a sold-out event")
	}
	if !waitroom.IsVisitorID(sub) {
		return m.accountArrival(now, sub, a)
	}
	if err := m.fresh(a.pos); err != nil {
		return fmt.Errorf("a pre-queue token without a draw gets a new position: %w (%s)", err, a)
	}
	return m.atFresh(a)
}

func (m *model) yieldedOf(sub string) []int64 {
	var ps []int64
	for p := range m.preYield[sub] {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

func expectStatus(a modelAnswer, want, what string) error {
	if a.status != want {
		return fmt.Errorf("%s: want %s, got %s", what, want, a)
	}
	return nil
}

func anyOf(options []func() error) error {
	var errs []string
	for _, o := range options {
		err := o()
		if err == nil {
			return nil
		}
		errs = append(errs, err.Error())
	}
	return fmt.Errorf("%s", strings.Join(errs, "; or "))
}

// record takes in what the answer did.
func (m *model) record(now time.Time, account string, tok *waitroom.Ticket, a modelAnswer) {
	if a.pre != nil && m.preQueue(now) {
		if !m.entrants[a.pre.Subject] && !m.lostBeforeOpening {
			m.entrantsBefore++
		}
		m.entrants[a.pre.Subject] = true
	}
	arrived := tok == nil || tok.PreQueue || tok.Position != a.pos
	if a.pos > 0 && a.status == StatusSoldOut && a.issued == nil && account != "" && arrived && (m.accounts[account] == nil || m.accounts[account].pos != a.pos) {
		// An account's claim is made before the hard cap is looked at:
		// the position is the account's from now.
		m.accounts[account] = &modelAccount{pos: a.pos, lastClaim: now}
		for _, q := range m.bySubject[account] {
			m.givenUp[subPos{account, q}] = true
		}
		if m.positions[a.pos] == nil {
			m.positions[a.pos] = &modelPos{subject: account, handLo: now, handHi: now}
			if m.canDraw(account) || m.mayHaveDrawn(account) {
				// Its drawn position: handed out when the entries closed,
				// or now.
				m.positions[a.pos].handLo = m.opensAt
			}
		}
	}
	if tok != nil && tok.PreQueue && a.pos > 0 && a.issued == nil && m.positions[a.pos] == nil {
		// A pre-queue token answered at a position without its token (sold
		// out, or beyond the hard cap): the position is its bearer's from
		// the draw, handed out when the entries closed, or, without a
		// draw, from now; its window counts from then once the watermark
		// reaches it, whenever the token of it is issued.
		mp := &modelPos{subject: tok.Subject, handLo: now, handHi: now}
		if m.canDraw(tok.Subject) || m.mayHaveDrawn(tok.Subject) {
			mp.handLo = m.opensAt
		}
		m.positions[a.pos] = mp
	}
	if a.pos > 0 {
		m.used[a.pos] = true
	}
	if it := a.issued; it != nil {
		p := it.Position
		mp := m.positions[p]
		if mp == nil {
			mp = &modelPos{subject: it.Subject, handLo: now, handHi: now}
			if (m.canDraw(it.Subject) || m.mayHaveDrawn(it.Subject)) && (tok == nil || tok.PreQueue) {
				mp.handLo = m.opensAt
				m.drawn[it.Subject] = p
			}
			m.positions[p] = mp
		}
		if !m.holds(it.Subject, p) {
			for _, q := range m.bySubject[it.Subject] {
				m.givenUp[subPos{it.Subject, q}] = true
			}
			m.bySubject[it.Subject] = append(m.bySubject[it.Subject], p)
		}
		k := subPos{it.Subject, p}
		if it.ExpiresAt.After(m.tokenExp[k]) {
			m.tokenExp[k] = it.ExpiresAt
		}
		if !waitroom.IsVisitorID(it.Subject) {
			acct := m.accounts[it.Subject]
			renewed := tok != nil && !tok.PreQueue && tok.Position == p
			switch {
			case acct == nil:
				m.accounts[it.Subject] = &modelAccount{pos: p, lastClaim: now}
			case acct.pos == p:
				acct.lastClaim = now
			case !renewed:
				// A renewal keeps the position the account holds; a new
				// one is the account's from now.
				m.accounts[it.Subject] = &modelAccount{pos: p, lastClaim: now}
			}
		}
	}
	if tok != nil && tok.PreQueue && a.pos > 0 && a.issued == nil && m.preYield[tok.Subject] == nil {
		// Beyond the hard cap, without a token: the store may keep it
		// for the token, or not. Not only the first such answer: once
		// the first place's window ended, the token's bearer is a new
		// arrival and may be answered at another place beyond the cap,
		// which the store does not keep, while the token still yields
		// the first.
		m.answeredBeyond(tok.Subject, a.pos)
	}
	if tok != nil && tok.PreQueue && a.pos > 0 && (a.issued != nil || !waitroom.IsVisitorID(tok.Subject)) &&
		(a.issued == nil || a.issued.Subject == tok.Subject) && len(m.preYield[tok.Subject]) == 0 {
		// The one position the token yields, with its token or, an
		// account's claimed beyond the hard cap, without.
		m.preYield[tok.Subject] = map[int64]bool{a.pos: true}
	}
	if account != "" && tok != nil && tok.Subject != account && m.takesOver(now, account, tok, a) {
		k := subPos{tok.Subject, tok.Position}
		m.revoked[k] = now.Add(modelRevoked)
		m.takenOver[k] = account
		if a.issued == nil {
			// Sold out: the account holds the place without its token.
			m.accounts[account] = &modelAccount{pos: a.pos, lastClaim: now}
			for _, q := range m.bySubject[account] {
				m.givenUp[subPos{account, q}] = true
			}
		}
	}
	if a.revoke && a.status == StatusAdmitted {
		until := now.Add(modelRevoked)
		m.revoked[subPos{a.user, a.pos}] = until
		if !waitroom.IsVisitorID(a.user) {
			m.accountRevoked[a.user] = until
			m.accountRevokedAt[a.user] = a.pos
		}
	}
}

// holdings: a token or an account never holds two live positions. When
// an answer gives sub a position it did not hold, every other it holds
// must have ended: revoked, its window over, or its tokens expired.
func (m *model) holdings(now time.Time, a modelAnswer) error {
	it := a.issued
	if it == nil || m.holds(it.Subject, it.Position) {
		return nil
	}
	for _, q := range m.bySubject[it.Subject] {
		if !m.live(now, it.Subject, q) {
			continue
		}
		// The store's accounts went with its state: an account may be
		// given a new place, while its token for the old one lives on.
		if m.positions[q] != nil && m.positions[q].before {
			continue
		}
		return fmt.Errorf("rule: a token or an account never holds two live positions: %s holds %d, given %d (%s)", it.Subject, q, it.Position, a)
	}
	return nil
}

func (m *model) holds(sub string, p int64) bool {
	for _, q := range m.bySubject[sub] {
		if q == p {
			return true
		}
	}
	return false
}
