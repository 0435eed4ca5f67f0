package sale

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/loadtest/api"
)

// sim is one run of the sale.
type sim struct {
	cfg       Config
	target    Target
	eventPath string
	// gateways are the sites the crowd's requests go to, in turn.
	gateways []string
	turn     atomic.Uint64

	// queueClient carries queued users' requests, shopClient admitted
	// users' (see gw).
	queueClient, shopClient api.Client
	gwAdmin                 api.GatewayAdmin
	admin                   api.OriginAdmin
	webhooks                api.Webhooks

	c *counters
	// closed is set once no seat can come back: everything sold and
	// settled, so the persistent stop waiting.
	closed atomic.Bool
	start  time.Time
	// holders counts the buyers who have held a seat, in the order of
	// their first hold: the n-th one's plan is drawn by planOf.
	holders atomic.Uint64

	// followFor bounds how long a buyer follows a booking; lateBy is how
	// long after a hold's expiry a late webhook is sent.
	followFor time.Duration
	lateBy    time.Duration

	event api.Event
	// users is the crowd, sorted by arrival; sched says when each is next
	// due at the gateway.
	users     []user
	sched     *schedule
	positions positionSet
	coherence coherence
	// allDone is closed when the last visit ends.
	allDone chan struct{}

	mu       sync.Mutex
	timeline []Sample
	faults   []FaultRecord
}

// Progress is told how the sale is going a few times a second.
type Progress func(done, users int64, s Sample)

// Run sends the crowd at target and reports what happened. faults are
// injected at their times.
//
// The queued crowd is driven by a bounded pool of workers (one per
// connection, Config.Conns) from a time-ordered schedule; only the
// admitted get a goroutine each, to shop.
func Run(ctx context.Context, cfg Config, target Target, faults []Fault, progress Progress) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	// Long timeouts: a request given up on is still work for the server,
	// and its retry doubles it.
	direct := api.NewHTTPClient(0, 30*time.Second)
	s := &sim{
		cfg: cfg, target: target,
		eventPath:   "/v1/events/" + strconv.FormatInt(target.Event, 10),
		gateways:    target.sites(),
		queueClient: api.Client{HTTP: api.NewHTTPClient(cfg.Conns, time.Minute)},
		shopClient:  api.Client{HTTP: api.NewHTTPClient(max(cfg.Conns/2, 1), time.Minute)},
		gwAdmin:     api.GatewayAdmin{Client: api.Client{HTTP: direct, Base: target.GatewayAdmin}},
		admin:       api.OriginAdmin{Client: api.Client{HTTP: direct, Base: target.Origin}, Token: target.AdminToken},
		webhooks:    api.Webhooks{Client: api.Client{HTTP: direct, Base: target.Origin}, Provider: "fakepay", Secret: target.WebhookSecret},
		c:           newCounters(),
		lateBy:      2 * time.Second,
		allDone:     make(chan struct{}),
	}
	ev, err := s.admin.Event(ctx, target.Event)
	if err != nil {
		return nil, err
	}
	s.event = ev
	s.followFor = time.Duration(ev.HoldTTLSeconds)*time.Second*3 + time.Minute

	before, err := s.counters(ctx)
	if err != nil {
		return nil, err
	}

	saleCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	s.users = s.crowd()
	bg, stopBG := context.WithCancel(saleCtx)
	var bgWG sync.WaitGroup
	bgWG.Add(3)
	s.start = time.Now()
	s.sched = newSchedule(s.start, s.users)
	go func() { defer bgWG.Done(); s.monitor(bg, progress) }()
	go func() { defer bgWG.Done(); s.inject(bg, faults) }()
	go func() { defer bgWG.Done(); s.watchCoherence(bg) }()

	work := make(chan int, cfg.Conns)
	var workers, shoppers sync.WaitGroup
	for w := range cfg.Conns {
		workers.Add(1)
		go func() {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
			for i := range work {
				s.queueTurn(saleCtx, i, rng, &shoppers)
			}
		}()
	}
	s.sched.dispatch(saleCtx, s.allDone, work)
	close(work)
	workers.Wait()
	shoppers.Wait()
	end := time.Now()
	stopBG()
	bgWG.Wait()
	timedOut := saleCtx.Err() != nil && ctx.Err() == nil
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// Whoever had not arrived, or waited for a turn, when the sale was cut
	// off.
	for i := range s.users {
		if !s.users[i].finished {
			s.finish(&s.users[i], TimedOut)
		}
	}

	res := s.result(ctx, end, before, timedOut)
	return res, nil
}

// queueTurn sends queued user i's next request and acts on the answer:
// another turn later, shopping in a goroutine of its own, or the end.
func (s *sim) queueTurn(ctx context.Context, i int, rng *rand.Rand, shoppers *sync.WaitGroup) {
	u := &s.users[i]
	t := s.queueStep(ctx, u, rng)
	switch {
	case t.ended:
		s.finish(u, t.outcome)
	case t.admitted:
		shoppers.Add(1)
		go func() {
			defer shoppers.Done()
			s.visitShop(ctx, i)
		}()
	default:
		s.sched.after(i, t.again)
	}
}

// finish counts a visit's outcome; the last one ends the sale.
func (s *sim) finish(u *user, o Outcome) {
	u.finished = true
	u.token = ""
	s.c.outcomes[o].Add(1)
	if s.c.finished.Add(1) == int64(len(s.users)) {
		close(s.allDone)
	}
}

// gateway is the site for the next request: the crowd goes round-robin
// over every gateway, as a load balancer in front of them would send it.
func (s *sim) gateway() string {
	if len(s.gateways) == 1 {
		return s.gateways[0]
	}
	return s.gateways[s.turn.Add(1)%uint64(len(s.gateways))]
}

// crowd draws every user's arrival and behaviour before holding (what a
// holder does next is drawn by planOf). The arrivals are drawn first and
// handed out in order, so the crowd is sorted by arrival without moving the
// records (the behaviours are drawn independently of it).
func (s *sim) crowd() []user {
	cfg := s.cfg
	seed := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	arrivals := make([]time.Duration, cfg.Users)
	for i := range arrivals {
		arrivals[i] = time.Duration(seed.Int64N(int64(cfg.Window)))
	}
	slices.Sort(arrivals)
	users := make([]user, cfg.Users)
	for i := range users {
		u := &users[i]
		u.arrival = arrivals[i]
		u.seed = seed.Uint64()
		rng := rand.New(rand.NewPCG(u.seed, seed.Uint64()))
		u.refresh = rng.Float64() < cfg.Refresh-1
		u.persist = rng.Float64() < cfg.Persist
		u.double = rng.Float64() < cfg.DoubleClick
	}
	return users
}

// planOf draws what the n-th buyer to hold a seat (from 1) will do with it.
// The plan goes with the order of first holds, not with the person: which
// person takes a seat that came back depends on what admitted them, so a
// plan drawn per person would give each autopilot its own chains of
// abandoned holds, and the last seat, which those chains set, would measure
// the draw rather than the admission. Drawn this way, every mode of the
// same seed meets the same sequence of buyers who pay, abandon or are
// declined; the fractions are the configured ones either way.
func planOf(cfg Config, n uint64) plan {
	rng := rand.New(rand.NewPCG(cfg.Seed^0x6a09e667f3bcc908, n))
	switch p := rng.Float64(); {
	case p < cfg.Abandon:
		return abandon
	case p < cfg.Abandon+cfg.Decline:
		return payDeclined
	case p < cfg.Abandon+cfg.Decline+cfg.Late:
		return payLate
	case p < cfg.Abandon+cfg.Decline+cfg.Late+cfg.ChangeMind:
		return payChangeMind
	}
	return payNow
}

// snapshot of the counters that move outside the crowd.
type outside struct {
	writes            Writes
	commands          int64
	haveDB, haveRedis bool
}

func (s *sim) counters(ctx context.Context) (outside, error) {
	var o outside
	if s.target.Writes != nil {
		w, err := s.target.Writes(ctx)
		if err != nil {
			return o, err
		}
		o.writes, o.haveDB = w, true
	}
	if s.target.Commands != nil {
		if n, err := s.target.Commands(ctx); err == nil {
			o.commands, o.haveRedis = n, true
		}
	}
	return o, nil
}

// inject runs each fault at its time.
func (s *sim) inject(ctx context.Context, faults []Fault) {
	var wg sync.WaitGroup
	for _, f := range faults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sleep(ctx, time.Until(s.start.Add(f.At))) {
				return
			}
			rec := FaultRecord{Name: f.Name, At: time.Since(s.start)}
			note, err := f.Do(ctx)
			rec.Took = time.Since(s.start) - rec.At
			rec.Note = note
			if err != nil {
				rec.Error = err.Error()
			}
			s.mu.Lock()
			s.faults = append(s.faults, rec)
			s.mu.Unlock()
		}()
	}
	wg.Wait()
}

// FaultRecord is a fault as it happened.
type FaultRecord struct {
	Name  string        `json:"name"`
	At    time.Duration `json:"at_ns"`
	Took  time.Duration `json:"took_ns"`
	Note  string        `json:"note,omitempty"`
	Error string        `json:"error,omitempty"`
}

func (s *sim) invariant(ctx context.Context) (api.Invariant, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.admin.Invariant(ctx, s.target.Event)
}

func (s *sim) gatewayState(ctx context.Context) (api.GatewayState, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.gwAdmin.State(ctx, s.target.Event)
}
