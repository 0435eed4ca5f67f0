package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seats"
)

// ReaperConfig configures the Reaper.
type ReaperConfig struct {
	// Interval is how often the reaper runs; default 10 s.
	Interval time.Duration
	// Batch is how many holds one statement expires; default 100.
	Batch int
	// Clock is the time expiries are judged by; default time.Now.
	Clock func() time.Time
	// Logger; default discards.
	Logger *slog.Logger
	// Holds and Seats count the holds expired and the seats returned
	// (optional).
	Holds, Seats prometheus.Counter
}

// Reaper expires lapsed holds and returns their seats. The ledger goes
// first: a row moves pending → expired in exactly one reaper (SKIP LOCKED,
// status checked again under the lock), and only that reaper runs the
// release script, which itself returns seats once. A confirmed hold is
// never touched in the ledger. Safe to run on every origin node at once.
type Reaper struct {
	cfg    ReaperConfig
	ledger *ledger.Ledger
	seats  *seats.Protocol
	loop   loop

	// mu keeps passes one at a time. from is where the next pass's walk
	// of the pending holds starts (ledger.ReapFrom; zero: the beginning),
	// and passes counts the passes since one walked them all.
	mu     sync.Mutex
	from   time.Time
	passes int
}

// Now and then a pass looks for where to start from the beginning, in
// case a hold's row went in behind where the walks start (written late, by
// a clock behind this one's): such a hold is free already everywhere else,
// so only its row's end waits for it. Each walk starts a little before the
// point the pass before found, for the same reason.
const (
	lookFromStartEvery = 60
	walkMargin         = time.Minute
)

// NewReaper returns a reaper over l and p.
func NewReaper(cfg ReaperConfig, l *ledger.Ledger, p *seats.Protocol) *Reaper {
	cfg.Interval = orDefault(cfg.Interval, 10*time.Second)
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	cfg.Logger = logger(cfg.Logger)
	r := &Reaper{cfg: cfg, ledger: l, seats: p}
	r.loop = loop{name: "reaper", interval: cfg.Interval, log: cfg.Logger, pass: func(ctx context.Context) error {
		_, err := r.RunOnce(ctx)
		return err
	}}
	return r
}

// Start runs the reaper until ctx ends or Stop is called.
func (r *Reaper) Start(ctx context.Context) { r.loop.start(ctx) }

// Stop stops the reaper and waits for its pass under way.
func (r *Reaper) Stop() { r.loop.stop() }

// RunOnce retries the seat releases Redis refused, then expires every
// pending hold past its expiry, a batch at a time, and returns their seats;
// it returns how many holds it expired.
func (r *Reaper) RunOnce(ctx context.Context) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	if err := r.seats.Releases().RetryReleases(ctx); err != nil {
		errs = append(errs, err)
	}
	if r.passes++; r.passes >= lookFromStartEvery {
		r.from, r.passes = time.Time{}, 0
	}
	if r.from.IsZero() {
		// Found by one read of the holds' expiries, not a walk that asks
		// after every sold hold's bookings on its way.
		from, err := r.ledger.ReapFrom(ctx, r.cfg.Clock().UTC().Truncate(time.Millisecond), time.Time{})
		if err != nil {
			errs = append(errs, err)
		}
		r.from = from
	}
	total := 0
	var now time.Time
	for {
		now = r.cfg.Clock().UTC().Truncate(time.Millisecond)
		rows, err := r.ledger.ExpireDue(ctx, now, r.from, r.cfg.Batch)
		if err != nil {
			return total, errors.Join(append(errs, err)...)
		}
		for _, h := range rows {
			ev, err := r.seats.Registry().Event(ctx, h.EventID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			// Usually 0 seats: a hold call reclaims lapsed holds in Redis
			// before the reaper gets to them. Whatever Redis holds for it
			// goes back, confirmed or not: the ledger has it expired, so a
			// confirmation whose ledger step failed can never complete, and
			// its webhook's retry is served as a late payment.
			res := r.seats.Releases().ReleaseSeats(ctx, ev, h.ID, inventory.AnyHold)
			if r.cfg.Holds != nil {
				r.cfg.Holds.Inc()
				r.cfg.Seats.Add(float64(res.Seats))
			}
		}
		total += len(rows)
		if len(rows) < r.cfg.Batch {
			break
		}
	}
	if from, err := r.ledger.ReapFrom(ctx, now, r.from); err != nil {
		errs = append(errs, err)
	} else {
		r.from = from.Add(-walkMargin)
	}
	if total > 0 {
		r.cfg.Logger.Info("reaper expired holds", "holds", total)
	}
	return total, errors.Join(errs...)
}
