// Package sale simulates a flash sale end to end: virtual users arrive in a
// burst, wait in the gateway's queue, hold a seat at the origin when
// admitted, and pay with the simulated provider, while the gateway's
// autopilot admits more of the queue as long as seats remain. It reports what each layer did
// and whether the inventory stayed true (never oversold, no drift).
package sale

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Config is how the crowd behaves.
type Config struct {
	// Users arrive uniformly over Window.
	Users  int
	Window time.Duration
	// Refresh is the requests a user sends while arriving, counting the
	// first: browsers refresh and retry, 1.5–2x. The part above 1 is the
	// chance of one extra refresh while queued.
	Refresh float64
	// Quantity is the seats each buyer asks for.
	Quantity int64

	// Abandon is the fraction of holders who never pay (their hold expires
	// and the seat is sold again).
	Abandon float64
	// Decline is the fraction of payments made with a declined card; such a
	// buyer retries once with a good one.
	Decline float64
	// Late is the fraction of payments that succeed at the provider but
	// whose webhook arrives only after the hold expired (pm_fakepay_silent,
	// then delivered by the simulation).
	Late float64
	// ChangeMind is the fraction of payments the provider reports failed
	// and then, a few seconds later, succeeded
	// (pm_fakepay_fail_then_succeed): the buyer pays again with a good
	// card meanwhile, and the origin must refund one of the two payments.
	ChangeMind float64
	// LateCopies is how many times each late webhook is delivered.
	LateCopies int
	// DoubleClick is the fraction of bookings sent twice at once with the
	// same Idempotency-Key.
	DoubleClick float64
	// Persist is the fraction of admitted users told "sold out" who keep
	// trying for Patience, to buy seats that come back.
	Persist  float64
	Patience time.Duration
	// Think is the longest pause a buyer takes between two steps.
	Think time.Duration

	// Timeout bounds the whole sale; Settle bounds the wait for the
	// invariant to settle afterwards.
	Timeout time.Duration
	Settle  time.Duration
	// Conns is the most connections the crowd opens to the gateway.
	Conns int
	// Seed makes the crowd's choices repeatable; 0 picks one.
	Seed uint64
}

// Defaults is the default crowd: 50,000 users over 5 s.
func Defaults() Config {
	return Config{
		Users: 50_000, Window: 5 * time.Second, Refresh: 1.75, Quantity: 1,
		Abandon: 0.10, Decline: 0.05, Late: 0.03, LateCopies: 1, DoubleClick: 0.05,
		Persist: 0.2, Patience: 30 * time.Second, Think: 500 * time.Millisecond,
		Timeout: 3 * time.Minute, Settle: 45 * time.Second, Conns: 512,
	}
}

// Validate names the first value out of range.
func (c Config) Validate() error {
	var errs []error
	pos := func(name string, ok bool) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	frac := func(name string, v float64) {
		if v < 0 || v > 1 {
			errs = append(errs, fmt.Errorf("%s must be between 0 and 1 (got %v)", name, v))
		}
	}
	pos("users", c.Users > 0)
	pos("window", c.Window > 0)
	pos("quantity", c.Quantity > 0)
	pos("timeout", c.Timeout > 0)
	pos("conns", c.Conns > 0)
	pos("late-copies", c.LateCopies > 0)
	if c.Refresh < 1 || c.Refresh > 2 {
		errs = append(errs, fmt.Errorf("refresh must be between 1 and 2 (got %v)", c.Refresh))
	}
	frac("abandon", c.Abandon)
	frac("decline", c.Decline)
	frac("late", c.Late)
	frac("change-mind", c.ChangeMind)
	frac("double-click", c.DoubleClick)
	frac("persist", c.Persist)
	if c.Abandon+c.Decline+c.Late > 1 {
		errs = append(errs, errors.New("abandon + decline + late must not exceed 1"))
	}
	if c.Patience < 0 || c.Think < 0 || c.Settle < 0 {
		errs = append(errs, errors.New("patience, think and settle must not be negative"))
	}
	return errors.Join(errs...)
}

// Target is the running system the crowd is sent to.
type Target struct {
	// Gateway is the site guarded by the waiting room (in front of the
	// origin); GatewayAdmin is Caddy's admin endpoint.
	Gateway, GatewayAdmin string
	// MoreGateways share the queue store with the first: the crowd's
	// requests go round-robin over all of them, and the report checks that
	// they agree (positions unique, watermark coherent).
	MoreGateways []Gateway
	// Origin is reached directly only by the provider's webhooks and the
	// operator (admin API), never by the crowd.
	Origin        string
	AdminToken    string
	WebhookSecret string
	Event         int64
	// Writes reads the Postgres write counters of the origin's database;
	// Commands reads Redis's command counter. Either may be nil.
	Writes   func(ctx context.Context) (Writes, error)
	Commands func(ctx context.Context) (int64, error)
	// Money reads where the money of the event's bookings stands, from the
	// ledger; nil: the report has no money line.
	Money func(ctx context.Context) (Money, error)
}

// MoneyCount is a number of bookings and the sum of their amounts, in the
// currency's smallest unit.
type MoneyCount struct {
	Count  int64 `json:"count"`
	Amount int64 `json:"amount"`
}

// Money is where the money of the sale stands: every payment captured is a
// confirmed booking with its tickets, a refund the provider made, or a
// refund pending or failed; Kept is any other, money taken silently.
type Money struct {
	Captured      MoneyCount `json:"captured"`
	Confirmed     MoneyCount `json:"confirmed"`
	Refunded      MoneyCount `json:"refunded"`
	RefundPending MoneyCount `json:"refund_pending"`
	RefundFailed  MoneyCount `json:"refund_failed"`
	Kept          MoneyCount `json:"kept"`
	// PaymentPending is the bookings still waiting for their payment's
	// outcome (not captured, as far as the ledger knows).
	PaymentPending MoneyCount `json:"payment_pending"`
}

// Balanced reports whether the captured payments are exactly the sum of the
// four honest ends and none was kept.
func (m Money) Balanced() bool {
	sum := MoneyCount{
		Count:  m.Confirmed.Count + m.Refunded.Count + m.RefundPending.Count + m.RefundFailed.Count,
		Amount: m.Confirmed.Amount + m.Refunded.Amount + m.RefundPending.Amount + m.RefundFailed.Amount,
	}
	return m.Kept.Count == 0 && sum == m.Captured
}

// settled: no payment and no refund waits for the provider.
func (m Money) settled() bool { return m.PaymentPending.Count == 0 && m.RefundPending.Count == 0 }

// Writes is what PostgreSQL counted for the origin's database.
type Writes struct {
	Rows    int64            `json:"rows"`
	Commits int64            `json:"commits"`
	Tables  map[string]int64 `json:"tables"`
}

// Fault is something done to the system mid-sale.
type Fault struct {
	Name string
	// At is when, from the first arrival.
	At time.Duration
	// Do injects the fault (and waits out its length); the note says what
	// happened.
	Do func(ctx context.Context) (note string, err error)
}
