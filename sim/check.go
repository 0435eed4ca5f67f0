package sim

import (
	"context"
	"errors"
	"time"

	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// The checks read the ledger on their own (queries.go) rather than through
// the origin code they judge, and Redis's count without reloading or
// reclaiming anything, so checking never changes the run.

// check tests what must hold after every step, faults or not.
func (w *world) check() *violation {
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	c, err := readCounts(ctx, w.oracle, w.event, w.clock.Now().UTC().Truncate(time.Millisecond), w.holdLife)
	if err != nil {
		return violated("oracle", "read the ledger: %v", err)
	}
	capacity := int64(w.setup.Capacity)
	found := []struct {
		broken bool
		v      func() *violation
	}{
		{c.confirmedSeats > capacity, func() *violation {
			return violated("capacity", "%d seats confirmed for %d", c.confirmedSeats, capacity)
		}},
		{c.validTickets != c.distinctSeats, func() *violation {
			return violated("seat-once", "%d valid tickets for %d seat numbers", c.validTickets, c.distinctSeats)
		}},
		{c.maxSeat > capacity, func() *violation { return violated("capacity", "a ticket for seat %d of %d", c.maxSeat, capacity) }},
		{c.validTickets != c.confirmedSeats, func() *violation {
			return violated("tickets", "%d valid tickets for %d confirmed seats", c.validTickets, c.confirmedSeats)
		}},
		{c.heldSeats > w.sellable, func() *violation {
			return violated("oversell", "%d seats held or sold from the pool of %d", c.heldSeats, w.sellable)
		}},
		{c.overflowUsed > w.reserve, func() *violation {
			return violated("capacity", "%d overflow seats used of %d", c.overflowUsed, w.reserve)
		}},
		{c.maxUserSeats > int64(w.setup.MaxPerUser), func() *violation {
			return violated("per-user", "user %s holds or bought %d seats, max %d", c.maxUser, c.maxUserSeats, w.setup.MaxPerUser)
		}},
		{c.overLife > 0, func() *violation {
			return violated("hold-life", "%d pending hold(s) live past %s from their creation (e.g. %s)", c.overLife, w.holdLife, c.overLifeHold)
		}},
	}
	for _, f := range found {
		if f.broken {
			if v := f.v(); !w.skipChecks[v.check] {
				return v
			}
		}
	}
	if !w.redisDown {
		if r, loaded, err := w.remaining(); err == nil && loaded && r < 0 {
			return violated("oversell", "redis remaining %d", r)
		}
	}
	return nil
}

// settle heals every fault and runs the passes on every node until nothing
// moves (a bounded number of rounds), then checks what must hold once the
// sale is quiet: no drift, and every captured payment accounted for.
// final settles everything: the clock goes past every hold and payment
// deadline first.
func (w *world) settle(final bool) *violation {
	w.stats.settles++
	w.heal()
	// Writes given up on during a fault are final a write timeout later
	// (wall clock), then the uncertain-write check settles them.
	if wait := time.Until(w.trouble.Add(holdWriteTimeout + clockSkewMargin + 20*time.Millisecond)); wait > 0 {
		time.Sleep(wait)
	}
	if final {
		w.clock.Advance(2*w.setup.HoldTTL + paymentPendingAfter + time.Second)
	}
	var inv origin.Invariant
	var err error
	rounds := 6
	if final {
		rounds = 10
	}
	for round := range rounds {
		moved := 0
		for _, n := range w.nodes {
			ctx, cancel := w.passCtx()
			a, _ := n.srv.ResolveUncertain(ctx)
			b, _ := n.srv.ReapOnce(ctx)
			c, _ := n.srv.ReconcilePaymentsOnce(ctx)
			_ = n.srv.ReconcileOnce(ctx)
			cancel()
			moved += a + b + c
		}
		w.drainHooks()
		ctx, cancel := w.passCtx()
		inv, err = w.nodes[0].srv.CheckInvariant(ctx, w.event)
		cancel()
		if err == nil && inv.Drift == 0 && moved == 0 && round > 0 {
			break
		}
		if final && round == rounds/2 {
			// Refunds and payments retried: their lease is a pending
			// interval of the clock.
			w.clock.Advance(paymentPendingAfter + time.Second)
		}
	}
	if err != nil {
		return violated("drift", "invariant unreadable after settling: %v", err)
	}
	if inv.Drift != 0 {
		return violated("drift", "drift %d after settling: %+v", inv.Drift, inv)
	}
	if v := w.money(final); v != nil {
		return v
	}
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	r, err := w.oracle.MoneyReport(ctx, w.event)
	if err != nil {
		return violated("oracle", "money report: %v", err)
	}
	if err := r.Err(); err != nil {
		return violated("money", "the ledger's money report: %v (%+v)", err, r)
	}
	return nil
}

// money checks every payment the provider captured: it ended as a
// confirmed booking with its tickets, or a refund the provider made, or a
// refund visibly still owed; never kept silently. Bookings still waiting
// for their payment's outcome within the reconciliation's interval are in
// flight, not settled (unless final).
func (w *world) money(final bool) *violation {
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	now := w.clock.Now()
	for _, id := range w.fp.all() {
		b, err := w.oracle.Booking(ctx, id)
		if errors.Is(err, ledger.ErrNotFound) {
			b = ledger.Booking{ID: id}
		} else if err != nil {
			return violated("oracle", "read booking %s: %v", id, err)
		}
		tickets, err := w.oracle.TicketsOf(ctx, id)
		if err != nil {
			return violated("oracle", "read tickets of %s: %v", id, err)
		}
		inFlight := !final && b.Status == ledger.BookingPaymentPending && !b.CheckedAt.Add(paymentPendingAfter).Before(now)
		for _, p := range w.fp.PaymentsForBooking(id) {
			if p.Status != payment.StatusSucceeded {
				continue
			}
			refunded := p.AmountRefunded >= p.Amount
			switch {
			case refunded && b.Status == ledger.BookingConfirmed && len(tickets) > 0:
				return violated("money", "payment %s of booking %s refunded at the provider, the booking confirmed with %d valid tickets", p.ID, id, len(tickets))
			case refunded:
			case b.Status == ledger.BookingConfirmed && b.PaymentID == p.ID && int64(len(tickets)) == b.Quantity:
			case b.RefundStatus == "pending" || b.RefundStatus == "failed":
			case inFlight:
			default:
				return violated("money", "payment %s of %d for booking %s captured and kept: booking %s (%s), payment id %q, method %s, refund %q, %d tickets; created %s, checked %s, now %s",
					p.ID, p.Amount, id, b.Status, b.StatusReason, b.PaymentID, b.PaymentMethod, b.RefundStatus, len(tickets),
					b.CreatedAt.Format(time.TimeOnly), b.CheckedAt.Format(time.TimeOnly), now.Format(time.TimeOnly))
			}
		}
		if b.Status == ledger.BookingRefunded {
			for _, p := range w.fp.PaymentsForBooking(id) {
				if p.Status == payment.StatusSucceeded && p.AmountRefunded < p.Amount {
					return violated("money", "booking %s says refunded, the provider refunded %d of %d", id, p.AmountRefunded, p.Amount)
				}
			}
		}
	}
	return nil
}
