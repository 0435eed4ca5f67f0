// Package outbox sends the booking events the ledger's outbox holds to the
// site (docs/api.md, booking events out): at least once, in order per
// booking, signed, retried with backoff and jitter, and given up on after a
// bounded number of tries or age. Any number of origin nodes run it at once:
// each leases the events it sends (SKIP LOCKED), and an event whose sender
// died is taken again when its lease ends.
package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/confcheck"
	"github.com/waitroom/waitroom/origin/ledger"
)

// Config configures a Deliverer. Zero values take the defaults named.
type Config struct {
	// URL receives the events (ORIGIN_EVENTS_URL). Required.
	URL string
	// Secret signs them (ORIGIN_EVENTS_SECRET). Required.
	Secret []byte
	// Timeout bounds one try, the answer's headers included; default 10 s.
	Timeout time.Duration
	// Interval is how often the outbox is looked at while it has nothing
	// due; default 1 s.
	Interval time.Duration
	// Batch is how many events one pass leases; default 64.
	Batch int
	// Concurrency is how many requests are in flight at once; default 8.
	Concurrency int
	// Lease is how long an event taken by a node is left to it before
	// another node may take it (its sender may have died): longer than
	// Timeout; default 2 × Timeout.
	Lease time.Duration
	// MinBackoff and MaxBackoff bound the wait before a try again: it
	// doubles from MinBackoff with each failure, up to MaxBackoff, and a
	// random part of it (jitter) is taken off; defaults 1 s and 10 min.
	MinBackoff, MaxBackoff time.Duration
	// MaxAttempts and MaxAge bound the tries: an event that failed that
	// many times, or was written (or sent again by an operator) that long
	// ago, is given up on (dead); defaults 20 and 72 h.
	MaxAttempts int
	MaxAge      time.Duration
	// Client sends the requests; default a client without redirects.
	Client *http.Client
	// Clock is the time tries, backoff and signatures are judged by;
	// default time.Now.
	Clock func() time.Time
	// Rand is the jitter's source in [0,1); default math/rand/v2.
	Rand func() float64
	// Logger; default discards.
	Logger *slog.Logger
	// Metrics, when set, counts what happens.
	Metrics *Metrics
}

// Deliverer sends the outbox's events.
type Deliverer struct {
	cfg    Config
	ledger *ledger.Ledger

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// ErrConfig: the configuration is incomplete.
var ErrConfig = errors.New("outbox config")

// New returns a deliverer of l's outbox.
func New(cfg Config, l *ledger.Ledger) (*Deliverer, error) {
	if cfg.URL == "" || len(cfg.Secret) == 0 {
		return nil, fmt.Errorf("%w: a URL and a secret are required", ErrConfig)
	}
	if err := confcheck.HTTPURL(cfg.URL); err != nil {
		return nil, fmt.Errorf("%w: URL: %w", ErrConfig, err)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Timeout, 10*time.Second)
	def(&cfg.Interval, time.Second)
	def(&cfg.Lease, 2*cfg.Timeout)
	def(&cfg.MinBackoff, time.Second)
	def(&cfg.MaxBackoff, 10*time.Minute)
	def(&cfg.MaxAge, 72*time.Hour)
	if cfg.Lease <= cfg.Timeout {
		return nil, fmt.Errorf("%w: the lease (%v) must outlast a try (%v)", ErrConfig, cfg.Lease, cfg.Timeout)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 64
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 20
	}
	if cfg.Client == nil {
		// A redirect would resend the body unsigned for another URL: the
		// site configures the URL it means.
		cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Deliverer{cfg: cfg, ledger: l}, nil
}

// Pass is what one pass did.
type Pass struct {
	// Taken is how many events it leased; Delivered, Retried and Dead
	// split them by outcome. Left are those whose turn came too late for a
	// try to end within their lease: untried, taken again once it ends.
	Taken, Delivered, Retried, Dead, Left int
}

// Start sends events until ctx ends or Stop is called.
func (d *Deliverer) Start(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel != nil {
		return
	}
	ctx, d.cancel = context.WithCancel(ctx)
	d.done = make(chan struct{})
	go d.run(ctx, d.done)
}

// Stop stops the deliverer and waits for the pass under way. An event it
// was sending, its answer not yet in, stays leased to it, and is sent again
// once the lease ends.
func (d *Deliverer) Stop() {
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.cancel = nil
	d.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (d *Deliverer) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, err := d.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			d.cfg.Logger.Warn("outbox pass failed", "error", err)
		}
		wait := d.cfg.Interval
		if err == nil && p.Taken == d.cfg.Batch {
			wait = 0 // more is due
		}
		t.Reset(wait)
	}
}

// RunOnce leases the events due (the first pending one of each booking),
// sends them, a few at a time, and then reads the backlog for the gauges.
func (d *Deliverer) RunOnce(ctx context.Context) (Pass, error) {
	now := d.cfg.Clock()
	evs, err := d.ledger.ClaimOutbox(ctx, now, now.Add(d.cfg.Lease), d.cfg.Batch)
	if err != nil {
		return Pass{}, err
	}
	p := Pass{Taken: len(evs)}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, d.cfg.Concurrency)
	)
	for _, ev := range evs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			o, err := d.send(ctx, ev)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case o == delivered:
				p.Delivered++
			case o == retried:
				p.Retried++
			case o == dead:
				p.Dead++
			case o == left:
				p.Left++
			}
		})
	}
	wg.Wait()
	if err := d.observeBacklog(ctx); err != nil {
		errs = append(errs, err)
	}
	return p, errors.Join(errs...)
}

type outcome int

const (
	delivered outcome = iota
	retried
	dead
	left
)

// send makes one try of ev and records its outcome.
func (d *Deliverer) send(ctx context.Context, ev ledger.OutboxEvent) (outcome, error) {
	if d.cfg.Clock().Add(d.cfg.Timeout).After(ev.NextAt) {
		// Its turn came late (a slow site took the batch's earlier
		// tries): a try now could outlive the lease, and another node may
		// take the event once the lease ends and send it too.
		return left, nil
	}
	tryErr := d.post(ctx, ev)
	if tryErr != nil && ctx.Err() != nil {
		// Stopping: the lease brings the event back.
		return retried, nil
	}
	now := d.cfg.Clock()
	if tryErr == nil {
		// Recorded even while stopping (a deploy): the next origin would
		// send an acknowledged event again.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.Timeout)
		defer cancel()
		if err := d.ledger.OutboxDelivered(rctx, ev.Seq); err != nil {
			// Delivered and not recorded: sent again after the lease, as at
			// least once allows.
			return delivered, err
		}
		d.cfg.Metrics.delivered(now.Sub(ev.CreatedAt))
		return delivered, nil
	}
	attempts := ev.Attempts + 1
	gaveUp := attempts >= d.cfg.MaxAttempts || now.Sub(ev.Since()) >= d.cfg.MaxAge
	next := now.Add(d.Backoff(attempts))
	reason := tryErr.Error()
	if len(reason) > 500 {
		reason = reason[:500]
	}
	// The ledger's text column refuses what is not UTF-8: a character cut
	// in two above, or a URL's raw bytes the client's error repeats.
	reason = strings.ToValidUTF8(reason, "")
	if err := d.ledger.OutboxFailed(ctx, ev.Seq, attempts, reason, next, gaveUp, now); err != nil {
		return retried, err
	}
	if gaveUp {
		d.cfg.Logger.Warn("booking event given up on", "event", ev.ID, "type", ev.Type, "booking", ev.BookingID,
			"attempts", attempts, "error", reason)
		d.cfg.Metrics.dead()
		return dead, nil
	}
	d.cfg.Metrics.retried()
	return retried, nil
}

// post sends ev once; nil when the site acknowledged it (2xx).
func (d *Deliverer) post(ctx context.Context, ev ledger.OutboxEvent) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	body := []byte(ev.Body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "waitroom-origin")
	req.Header.Set(SignatureHeader, Sign(d.cfg.Secret, d.cfg.Clock(), body))
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// The answer's body says nothing the origin acts on; a little is read
	// so the connection can be used again.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %d", resp.StatusCode)
	}
	return nil
}

// Backoff is the wait after the attempts-th failed try: MinBackoff doubled
// per failure before it, capped at MaxBackoff, less a random part of up to
// half (jitter), so the events of one outage are not all sent again at
// once.
func (d *Deliverer) Backoff(attempts int) time.Duration {
	b := d.cfg.MinBackoff
	for i := 1; i < attempts && b < d.cfg.MaxBackoff; i++ {
		b *= 2
	}
	b = min(b, d.cfg.MaxBackoff)
	return b - time.Duration(d.cfg.Rand()*float64(b)/2)
}

// observeBacklog sets the backlog gauges after a pass.
func (d *Deliverer) observeBacklog(ctx context.Context) error {
	if d.cfg.Metrics == nil || ctx.Err() != nil {
		return nil
	}
	b, err := d.ledger.OutboxBacklog(ctx)
	if err != nil {
		return err
	}
	d.cfg.Metrics.backlog(b, d.cfg.Clock())
	return nil
}
