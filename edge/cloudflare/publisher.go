package cloudflare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cloudflare/cloudflare-go/v6/kv"
	"github.com/cloudflare/cloudflare-go/v6/option"
	"github.com/cloudflare/cloudflare-go/v6/shared"

	"github.com/waitroom/waitroom/internal/confcheck"
)

// Defaults of Config.
const (
	DefaultAPIURL = "https://api.cloudflare.com/client/v4/"
	// DefaultDebounce is also Workers KV's own pace: one write per second
	// to a key.
	DefaultDebounce = time.Second
	// DefaultMaxBackoff bounds the wait between two tries of a failed
	// write.
	DefaultMaxBackoff = time.Minute
	// requestTimeout bounds one write.
	requestTimeout = 10 * time.Second
	// firstBackoff is the wait after a first failure; it doubles with
	// every further one.
	firstBackoff = time.Second
)

// Config says where the state goes: a Workers KV namespace of an account,
// written with an API token allowed "Workers KV Storage: Edit".
type Config struct {
	// AccountID is the Cloudflare account id. Required.
	AccountID string
	// NamespaceID is the id of the KV namespace the Worker binds. Required.
	NamespaceID string
	// APIToken is the API token. Required.
	APIToken string
	// APIURL is the API's base URL; DefaultAPIURL when empty.
	APIURL string
	// Debounce is how long a change waits for the changes that follow it,
	// which are written with it: an event's key is written at most once
	// per debounce. DefaultDebounce when zero.
	Debounce time.Duration
}

// Validate checks that the required settings are there.
func (c Config) Validate() error {
	switch {
	case c.AccountID == "":
		return errors.New("account_id is required")
	case c.NamespaceID == "":
		return errors.New("namespace_id is required")
	case c.APIToken == "":
		return errors.New("api_token is required")
	case c.Debounce < 0:
		return fmt.Errorf("debounce must not be negative (got %s)", c.Debounce)
	}
	return validateAPIURL(c.APIURL)
}

// validateAPIURL refuses a base URL no request can be sent to. Such a URL
// loads, and then every write fails and is retried for good, with nothing
// published; "host:port" even parses, as a URL of scheme "host".
func validateAPIURL(s string) error {
	if s == "" {
		return nil
	}
	if confcheck.HTTPURL(s) != nil {
		return fmt.Errorf("api_url: want an http or https URL, got %q", s)
	}
	return nil
}

// Publisher writes events' states to Workers KV in the background: Publish
// only records the latest state, and Run writes it after the debounce,
// trying again with a growing backoff for as long as the API fails. A newer
// state replaces one still waiting or being retried, so what is written is
// always the latest.
type Publisher struct {
	cfg    Config
	values *kv.NamespaceValueService
	logger *slog.Logger
	// now and backoff are the clock and the wait after the n-th failure
	// in a row (n from 1); tests replace them.
	now     func() time.Time
	backoff func(n int) time.Duration

	mu      sync.Mutex
	pending map[int64]*pending
	// wake tells Run that something was published.
	wake chan struct{}
}

// pending is what is to be written of one event.
type pending struct {
	body []byte
	// written is the last body written; nil before the first write.
	written []byte
	// since is when body first differed from written.
	since time.Time
	// failures counts failed writes in a row; retryAt is when the next
	// try is due after one.
	failures int
	retryAt  time.Time
}

// apiOptions are the Cloudflare API client's settings for every caller
// here: one bounded try per call, since each caller retries on its own
// schedule with the newest state.
func apiOptions(url, token string) []option.RequestOption {
	return []option.RequestOption{
		option.WithBaseURL(url),
		option.WithAPIToken(token),
		option.WithRequestTimeout(requestTimeout),
		option.WithMaxRetries(0),
	}
}

// New returns a publisher for cfg. It does no I/O.
func New(cfg Config, logger *slog.Logger) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = DefaultDebounce
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Publisher{
		cfg:     cfg,
		values:  kv.NewNamespaceValueService(apiOptions(cfg.APIURL, cfg.APIToken)...),
		logger:  logger,
		now:     time.Now,
		backoff: jitteredBackoff,
		pending: map[int64]*pending{},
		wake:    make(chan struct{}, 1),
	}, nil
}

// jitteredBackoff doubles from firstBackoff up to DefaultMaxBackoff, each
// wait drawn from its upper half so that gateways failing together (the
// API's rate limit) do not try again together.
func jitteredBackoff(n int) time.Duration {
	d := min(firstBackoff<<min(n-1, 16), DefaultMaxBackoff)
	return d/2 + rand.N(d/2+1)
}

// Publish records s as its event's state to write. It never blocks on the
// network: the request path and the room's updates may call it.
func (p *Publisher) Publish(s State) {
	body, err := json.Marshal(s)
	if err != nil {
		// A State is plain data; this cannot fail.
		panic(fmt.Sprintf("cloudflare: marshal state: %v", err))
	}
	p.mu.Lock()
	e := p.pending[s.Event]
	if e == nil {
		e = &pending{}
		p.pending[s.Event] = e
	}
	changed := !bytes.Equal(body, e.body)
	if changed {
		if e.body == nil || bytes.Equal(e.body, e.written) {
			e.since = p.now()
		}
		e.body = body
	}
	p.mu.Unlock()
	if changed {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// RunOnce writes every state that is due: a debounce after it changed and,
// after a failure, once its backoff has passed. It returns when the next
// write will be due (zero when nothing waits) and the first error met.
func (p *Publisher) RunOnce(ctx context.Context) (next time.Time, err error) {
	type job struct {
		event int64
		body  []byte
	}
	var jobs []job
	now := p.now()
	p.mu.Lock()
	for event, e := range p.pending {
		if bytes.Equal(e.body, e.written) {
			continue
		}
		due := e.since.Add(p.cfg.Debounce)
		if e.retryAt.After(due) {
			due = e.retryAt
		}
		if due.After(now) {
			next = earliest(next, due)
			continue
		}
		jobs = append(jobs, job{event, e.body})
	}
	p.mu.Unlock()

	for _, j := range jobs {
		werr := p.write(ctx, j.event, j.body)
		if ctx.Err() != nil {
			// Stopped: the write is abandoned, not failed.
			return next, ctx.Err()
		}
		p.mu.Lock()
		e := p.pending[j.event]
		if werr == nil {
			e.written, e.failures, e.retryAt = j.body, 0, time.Time{}
			if !bytes.Equal(e.body, e.written) {
				// Changed while being written: its own debounce.
				e.since = p.now()
				next = earliest(next, e.since.Add(p.cfg.Debounce))
			}
			p.mu.Unlock()
			continue
		}
		e.failures++
		wait := p.backoff(e.failures)
		e.retryAt = p.now().Add(wait)
		next = earliest(next, e.retryAt)
		failures := e.failures
		p.mu.Unlock()
		p.logger.Warn("writing an event's state to Workers KV failed; trying again",
			"event", j.event, "failures", failures, "retry_in", wait, "error", werr)
		if err == nil {
			err = werr
		}
	}
	return next, err
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// write puts body under event's key.
func (p *Publisher) write(ctx context.Context, event int64, body []byte) error {
	// The fields are set as the library's root package F would set them;
	// importing that package would build every Cloudflare API in.
	var params kv.NamespaceValueUpdateParams
	params.AccountID.Value, params.AccountID.Present = p.cfg.AccountID, true
	params.Value.Value, params.Value.Present = shared.UnionString(body), true
	if _, err := p.values.Update(ctx, p.cfg.NamespaceID, Key(event), params); err != nil {
		return fmt.Errorf("write %s to workers kv: %w", Key(event), err)
	}
	return nil
}

// Run writes what is published until ctx ends.
func (p *Publisher) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		next, _ := p.RunOnce(ctx)
		if !next.IsZero() {
			timer.Reset(max(next.Sub(p.now()), 0))
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
			timer.Stop()
		case <-timer.C:
		}
	}
}
