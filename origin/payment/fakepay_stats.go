package payment

import (
	"fmt"
	"strconv"
	"sync/atomic"
)

// FakepayStats are fakepay's counters.
type FakepayStats struct {
	// Charges counts payments that took money, Declines those refused.
	Charges, Declines int64
	// Refunds counts refunds that succeeded (at once, or later through
	// SettleRefund), RefundFailures those that failed.
	Refunds, RefundFailures int64
	// InjectedFailures counts calls failed before reaching the provider,
	// InjectedTimeouts calls that did their work and then failed.
	InjectedFailures, InjectedTimeouts int64
	// WebhooksSent counts deliveries answered 2xx, WebhookAttempts every
	// POST, WebhookFailures those answered otherwise or not at all.
	WebhooksSent, WebhookAttempts, WebhookFailures int64
}

// SetFaults changes the injected failure and timeout rates (see
// FakepayConfig), for chaos runs and for tests that need a fault once.
func (f *Fakepay) SetFaults(failureRate, timeoutRate float64) error {
	if failureRate < 0 || failureRate > 1 || timeoutRate < 0 || timeoutRate > 1 {
		return fmt.Errorf("fakepay: failure rate %v and timeout rate %v must be within [0, 1]", failureRate, timeoutRate)
	}
	f.mu.Lock()
	f.failureRate, f.timeoutRate = failureRate, timeoutRate
	f.mu.Unlock()
	return nil
}

// fakeCounters count what fakepay did.
type fakeCounters struct {
	charges, declines, refunds, refundFailures, failures, timeouts, sent, attempts, failed atomic.Int64
}

// Stats returns the counters.
func (c *fakeCounters) Stats() FakepayStats {
	return FakepayStats{
		Charges: c.charges.Load(), Declines: c.declines.Load(), Refunds: c.refunds.Load(), RefundFailures: c.refundFailures.Load(),
		InjectedFailures: c.failures.Load(), InjectedTimeouts: c.timeouts.Load(),
		WebhooksSent: c.sent.Load(), WebhookAttempts: c.attempts.Load(), WebhookFailures: c.failed.Load(),
	}
}

// Charges is the number of payments that took money.
func (c *fakeCounters) Charges() int64 { return c.charges.Load() }

// Refunds is the number of refunds that succeeded.
func (c *fakeCounters) Refunds() int64 { return c.refunds.Load() }

// RefundFailures is the number of refunds that failed.
func (c *fakeCounters) RefundFailures() int64 { return c.refundFailures.Load() }

// WebhooksSent is the number of webhook deliveries answered 2xx.
func (c *fakeCounters) WebhooksSent() int64 { return c.sent.Load() }

// FakepayMoney is what fakepay really moved, to hold a ledger's account
// against.
type FakepayMoney struct {
	// Charges counts the payments that took money, Charged their amount.
	Charges, Charged int64
	// Refunded is the amount returned by succeeded refunds, RefundPending
	// the amount of refunds not over yet.
	Refunded, RefundPending int64
	// FailedRefunds counts the refunds that failed.
	FailedRefunds int64
}

// Money sums the payments of one event (by the event_id of their
// metadata), or of every event when eventID is 0.
func (f *Fakepay) Money(eventID int64) FakepayMoney {
	want := strconv.FormatInt(eventID, 10)
	f.mu.Lock()
	defer f.mu.Unlock()
	var m FakepayMoney
	for _, p := range f.payments {
		if p.Status != StatusSucceeded || (eventID != 0 && p.metadata["event_id"] != want) {
			continue
		}
		m.Charges++
		m.Charged += p.Amount
		for _, id := range p.refundIDs {
			switch r := f.refunds[id]; r.Status {
			case RefundSucceeded:
				m.Refunded += r.Amount
			case RefundPending:
				m.RefundPending += r.Amount
			default:
				m.FailedRefunds++
			}
		}
	}
	return m
}
