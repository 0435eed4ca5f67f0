package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// The checks read the ledger on their own (queries.go) rather than through
// the origin code they judge, and Redis's count without reloading or
// reclaiming anything, so checking never changes the run.

// check tests what must hold after every step, faults or not.
func (w *world) check() *violation {
	for _, sl := range w.sales {
		if v := w.checkSale(sl); v != nil {
			return v
		}
	}
	return w.checkGate()
}

func (w *world) checkSale(sl *sale) *violation {
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	c, err := readCounts(ctx, w.oracle, sl.id, w.clock.Now().UTC().Truncate(time.Millisecond), w.holdLife)
	if err != nil {
		return violated("oracle", "read the ledger: %v", err)
	}
	capacity := sl.capacity
	ev := ""
	if len(w.sales) > 1 {
		ev = fmt.Sprintf("event %d: ", sl.idx)
	}
	found := []struct {
		broken bool
		v      func() *violation
	}{
		{c.confirmedSeats > capacity, func() *violation {
			return violated("capacity", "%s%d seats confirmed for %d", ev, c.confirmedSeats, capacity)
		}},
		{c.validTickets != c.distinctSeats, func() *violation {
			return violated("seat-once", "%s%d valid tickets for %d seat numbers", ev, c.validTickets, c.distinctSeats)
		}},
		{c.maxSeat > capacity, func() *violation {
			return violated("capacity", "%sa ticket for seat %d of %d", ev, c.maxSeat, capacity)
		}},
		{c.validTickets != c.confirmedSeats, func() *violation {
			return violated("tickets", "%s%d valid tickets for %d confirmed seats", ev, c.validTickets, c.confirmedSeats)
		}},
		{c.heldSeats > sl.sellable, func() *violation {
			return violated("oversell", "%s%d seats held or sold from the pool of %d", ev, c.heldSeats, sl.sellable)
		}},
		{c.overflowUsed > sl.reserve, func() *violation {
			return violated("capacity", "%s%d overflow seats used of %d", ev, c.overflowUsed, sl.reserve)
		}},
		{c.maxUserSeats > int64(w.setup.MaxPerUser), func() *violation {
			return violated("per-user", "%suser %s holds or bought %d seats, max %d", ev, c.maxUser, c.maxUserSeats, w.setup.MaxPerUser)
		}},
		{c.overLife > 0, func() *violation {
			return violated("hold-life", "%s%d pending hold(s) live past %s from their creation (e.g. %s)", ev, c.overLife, w.holdLife, c.overLifeHold)
		}},
	}
	caps := map[string]int{}
	for _, sec := range sl.gaSections {
		caps[sec.ID] = sec.Capacity
	}
	sc, err := readSeatChecks(ctx, w.oracle, sl.id, caps)
	if err != nil {
		return violated("oracle", "read the seat map: %v", err)
	}
	found = append(found, []struct {
		broken bool
		v      func() *violation
	}{
		{sc.sections > 0, func() *violation { return violated("section-count", "%sin the ledger, %s", ev, sc.sectionEx) }},
		{sc.misplaced > 0, func() *violation {
			return violated("seat-owner", "%s%d valid ticket(s) whose seat or place is not their hold's: %s", ev, sc.misplaced, sc.misplacedEx)
		}},
		{sc.stray > 0, func() *violation {
			return violated("place-numbers", "%s%d place(s) numbered for ended holds: %s", ev, sc.stray, sc.strayEx)
		}},
		{sc.released > 0, func() *violation {
			return violated("release-race", "%s%d booking(s) paying or paid on a released hold: %s", ev, sc.released, sc.releasedEx)
		}},
		{sc.inside > 0, func() *violation {
			return violated("let-in-voided", "%s%d ticket(s) voided after a gate let their holder in, the seat back on sale: %s", ev, sc.inside, sc.insideEx)
		}},
	}...)
	for _, f := range found {
		if f.broken {
			if v := f.v(); !w.skipChecks[v.check] {
				return v
			}
		}
	}
	if !w.redisDown {
		if r, loaded, err := w.remaining(sl.id); err == nil && loaded && r < 0 {
			return violated("oversell", "%sredis remaining %d", ev, r)
		}
		if v := w.redisSections(ctx, sl, ev); v != nil && !w.skipChecks[v.check] {
			return v
		}
	}
	return nil
}

// redisSections checks Redis's own count of each general-admission
// section: its places left plus the places of its hold records is the
// section's capacity (the scripts change both at once). Not while a
// rebuild loads the keys, nor when the event is not loaded.
func (w *world) redisSections(ctx context.Context, sl *sale, ev string) *violation {
	if len(sl.gaSections) == 0 {
		return nil
	}
	k := inventory.KeysFor(sl.id)
	if n, err := w.direct.Exists(ctx, k.Frozen).Result(); err != nil || n > 0 {
		return nil
	}
	left, err := w.direct.HGetAll(ctx, k.Sections).Result()
	if err != nil || len(left) == 0 {
		return nil
	}
	recs, err := w.direct.HGetAll(ctx, k.Holds).Result()
	if err != nil {
		return nil
	}
	taken := map[string]int64{}
	for _, raw := range recs {
		var r inventory.Record
		if json.Unmarshal([]byte(raw), &r) == nil && r.Section != "" {
			taken[r.Section] += r.Quantity
		}
	}
	for _, sec := range sl.gaSections {
		v, ok := left[sec.ID]
		if !ok {
			continue
		}
		var n int64
		if _, err := fmt.Sscan(v, &n); err != nil {
			continue
		}
		if n+taken[sec.ID] != int64(sec.Capacity) {
			return violated("section-count", "%sin redis, section %s: %d left + %d in hold records, capacity %d", ev, sec.ID, n, taken[sec.ID], sec.Capacity)
		}
	}
	return nil
}

// checkGate tests the gate's invariants over every event.
func (w *world) checkGate() *violation {
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	var events []int64
	gates := map[string]int64{}
	for _, sl := range w.sales {
		events = append(events, sl.id)
		for _, d := range sl.devices {
			gates[d.gate] = sl.id
		}
	}
	g, err := readGateChecks(ctx, w.oracle, events, gates)
	if err != nil {
		return violated("oracle", "read the scans: %v", err)
	}
	for _, f := range []struct {
		broken bool
		v      *violation
	}{
		{g.elsewhere > 0, violated("gate-event", "%d ticket(s) admitted at another event's gate: %s", g.elsewhere, g.elsewhereEx)},
		{g.twice > 0, violated("admitted-once", "%d ticket(s) admitted twice online: %s", g.twice, g.twiceEx)},
		{g.early > 0, violated("admitted-once", "%d ticket(s) admitted by a scan dated before their issue: %s", g.early, g.earlyEx)},
	} {
		if f.broken && !w.skipChecks[f.v.check] {
			return f.v
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
	w.mu.Lock()
	trouble := w.trouble
	w.mu.Unlock()
	if wait := time.Until(trouble.Add(holdWriteTimeout + clockSkewMargin + 20*time.Millisecond)); wait > 0 {
		time.Sleep(wait)
	}
	if final {
		// Past every hold's end and the reconciliation's next ask of every
		// booking (at most an hour after the one before).
		w.clock.Advance(2*w.setup.HoldTTL + askedAtLeastEvery + time.Second)
	}
	invs := make([]origin.Invariant, len(w.sales))
	drifts := make([]int64, len(w.sales))
	var err error
	rounds := 6
	if final {
		rounds = 10
	}
	// First the passes that end what is under way (uncertain writes,
	// lapsed holds and the releases owed, payments), without the drift
	// corrector: what drift is left once they are quiet is a count the
	// protocol lost (a place that vanished), which the corrector would
	// only paper over.
	for round := range rounds {
		moved := 0
		for _, n := range w.nodes {
			ctx, cancel := w.passCtx()
			a, _ := n.srv.ResolveUncertain(ctx)
			b, _ := n.srv.ReapOnce(ctx)
			c, _ := n.srv.ReconcilePaymentsOnce(ctx)
			cancel()
			moved += a + b + c
		}
		w.drainHooks()
		if moved == 0 && round > 0 {
			break
		}
	}
	if !w.redisDown && !w.stateLost {
		for i, sl := range w.sales {
			ctx, cancel := w.passCtx()
			inv, e := w.nodes[0].srv.CheckInvariant(ctx, sl.id)
			var d int64
			if e == nil {
				d, e = w.settledDrift(ctx, sl.id, inv, final)
			}
			cancel()
			if e == nil && d != 0 {
				return violated("drift-lost", "event %d: drift %d once the passes were quiet, before the drift corrector: %+v", i, d, inv)
			}
		}
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
		if final {
			// Some events are the origin's only way to learn what
			// happened, and the provider retries them until they land:
			// the queued ones (a payment's success after its failure
			// comes once the clock moved past its time) arrive now.
			if v := w.deliverMustArrive(); v != nil {
				return v
			}
		}
		quiet := err == nil
		err = nil
		for i, sl := range w.sales {
			ctx, cancel := w.passCtx()
			var e error
			invs[i], e = w.nodes[0].srv.CheckInvariant(ctx, sl.id)
			if e == nil {
				drifts[i], e = w.settledDrift(ctx, sl.id, invs[i], final)
			}
			cancel()
			if e != nil {
				err = e
			}
			quiet = quiet && e == nil && drifts[i] == 0
		}
		if quiet && err == nil && moved == 0 && round > 0 {
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
	w.stateLost = false
	for i, inv := range invs {
		if d := drifts[i]; d != 0 {
			return violated("drift", "event %d: drift %d after settling: %+v", i, d, inv)
		}
	}
	if v := w.money(final); v != nil {
		return v
	}
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	for _, sl := range w.sales {
		r, err := w.oracle.MoneyReport(ctx, sl.id)
		if err != nil {
			return violated("oracle", "money report: %v", err)
		}
		if err := r.Err(); err != nil {
			return violated("money", "the ledger's money report: %v (%+v)", err, r)
		}
	}
	return nil
}

// mustArrive says whether an event is one the origin has no other way to
// learn (a refund the provider made on its own, a payment's success after
// its failure), so that the provider retries it until it lands: never lost
// for good. A refund made at the provider is news the origin asks for once
// it marked the booking with one pending there: the payment reconciliation
// asks about such a booking until none is, and each ask reads every refund
// the payment has, so an event about the booking may then be lost.
func (w *world) mustArrive(h hook) bool {
	switch {
	case h.typ == "payment_intent.succeeded":
		return h.method == payment.MethodFailThenSucceed
	case h.typ != "charge.refunded" || !w.providerRefunds[h.booking]:
		return false
	}
	return !w.asksAboutRefunds(h.booking)
}

// asksAboutRefunds tells whether the origin marked booking id confirmed
// with a refund pending at the provider, which its payment reconciliation
// asks about. An unread booking counts as unmarked.
func (w *world) asksAboutRefunds(id string) bool {
	ctx, cancel := w.passCtx()
	defer cancel()
	b, err := w.oracle.Booking(ctx, id)
	return err == nil && b.Status == ledger.BookingConfirmed && b.ProviderRefundPending
}

// deliverMustArrive delivers the queued events that must arrive, until
// each is answered 200 (a few tries).
func (w *world) deliverMustArrive() *violation {
	for try := 0; try < 5; try++ {
		var left []hook
		for _, h := range w.queue {
			if !w.mustArrive(h) {
				left = append(left, h)
				continue
			}
			a := w.deliver(w.nodes[try%len(w.nodes)], h)
			if v := answered("webhook", a); v != nil {
				return v
			}
			if a.status != 200 {
				left = append(left, h)
			}
		}
		w.queue = left
	}
	return nil
}

// drift is how far an event's inventory is from the ledger's: the count,
// the reserved seats' states and the sections' places.
func drift(inv origin.Invariant) int64 {
	d := inv.Drift
	if d < 0 {
		d = -d
	}
	if inv.SeatDrift != nil {
		d += *inv.SeatDrift
	}
	return d
}

// settledDrift is drift(inv) less, short of the final settle point, the
// seats of confirmations still under way (confirming).
func (w *world) settledDrift(ctx context.Context, event int64, inv origin.Invariant, final bool) (int64, error) {
	d := drift(inv)
	if d == 0 || final || inv.SeatDrift == nil || *inv.SeatDrift == 0 {
		return d, nil
	}
	n, err := w.confirming(ctx, event)
	if err != nil {
		return 0, err
	}
	return d - n, nil
}

// confirming counts an event's reserved seats whose confirmation is under
// way: sold in Redis and held in the ledger, by the same hold, live and
// pending there, whose booking waits for its payment and is not yet due to
// the payment reconciliation. The confirmation's Redis step ran and its
// ledger step failed (PostgreSQL cut under it), and the payment's success
// event was answered 503. Production ends it without anything the
// simulation must do: the provider's redelivery of the event, or the
// reconciliation asking about the booking once PendingAfter has passed,
// completes the confirmation; should the hold lapse first, the reaper
// expires it and releases its seats in Redis too, and the payment is a late
// one. Neither store gives the seats to another hold meanwhile (Redis has
// them sold, the ledger held), so Postgres winning at the end sells nothing
// twice. A settle point short of the final one moves no clock: the
// booking is in flight there, as the money check counts it; the final
// settle point, past every deadline, counts it as drift if it is still so.
func (w *world) confirming(ctx context.Context, event int64) (int64, error) {
	now := w.clock.Now().UTC().Truncate(time.Millisecond)
	held, err := readConfirming(ctx, w.oracle, event, now, now.Add(-paymentPendingAfter))
	if err != nil || len(held) == 0 {
		return 0, err
	}
	k := inventory.KeysFor(event)
	owners, err := w.direct.HGetAll(ctx, k.Seats).Result()
	if err != nil {
		return 0, err
	}
	recs, err := w.direct.HGetAll(ctx, k.Holds).Result()
	if err != nil {
		return 0, err
	}
	var n int64
	for seat, hold := range held {
		var r inventory.Record
		if owners[seat] != hold || json.Unmarshal([]byte(recs[hold]), &r) != nil || !r.Confirmed {
			continue
		}
		n++
	}
	return n, nil
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
		inFlight := !final && b.Status == ledger.BookingPaymentPending && !nextCheck(b, now).Before(now)
		// An event about the booking still on its way (queued: the provider
		// retries it) may still settle it.
		for _, h := range w.queue {
			inFlight = inFlight || (!final && h.booking == id)
		}
		for _, p := range w.fp.PaymentsForBooking(id) {
			if p.Status != payment.StatusSucceeded || w.foreignPays[p.ID] {
				continue
			}
			// Back for good: a refund still pending may yet fail.
			refunded := p.Returned() >= p.Amount
			switch {
			case w.amended[p.ID] && b.Status == ledger.BookingConfirmed && b.PaymentID == p.ID:
				return violated("money", "booking %s confirmed on payment %s, changed at the provider to %d %s before: the booking's price is %d %s",
					id, p.ID, p.Amount, p.Currency, b.Amount, b.Currency)
			case refunded && b.Status == ledger.BookingConfirmed && b.PaymentID == p.ID && len(tickets) > 0 && !final && w.providerRefunds[id]:
				// The provider's charge.refunded is on its way.
			case refunded && b.Status == ledger.BookingConfirmed && b.PaymentID == p.ID && b.AmountRefunded >= b.Amount && letIn(ctx, w.oracle, id):
				// Returned at the provider after a gate let a ticket in:
				// the sale stands, its seats in use, the money recorded
				// as returned.
			case refunded && b.Status == ledger.BookingConfirmed && b.PaymentID == p.ID && len(tickets) > 0:
				return violated("money", "payment %s of booking %s refunded at the provider, the booking confirmed with %d valid tickets", p.ID, id, len(tickets))
			case refunded:
			case final && b.Status == ledger.BookingConfirmed && b.PaymentID == p.ID && p.RefundPending == 0 && b.AmountRefunded < p.Returned():
				// Part returned at the provider, none of it pending: the
				// sale stands and must say how much it kept.
				return violated("money", "payment %s of booking %s: %d of %d returned at the provider, the confirmed booking records %d returned%s",
					p.ID, id, p.Returned(), p.Amount, b.AmountRefunded, refundsTold(w.fp.RefundsForPayment(p.ID), b.RefundID))
			case b.Status == ledger.BookingConfirmed && b.PaymentID == p.ID && int64(len(tickets)) == b.Quantity:
			case b.RefundStatus == "pending" || b.RefundStatus == "failed":
			case inFlight:
			default:
				why := ""
				if others, recorded, err := readKeptContext(ctx, w.oracle, id, p.ID); err == nil {
					if others != "" {
						why += "; other bookings of its hold: " + others
					}
					if recorded {
						why += "; its success event was recorded as handled"
					}
				}
				why += refundsTold(w.fp.RefundsForPayment(p.ID), b.RefundID)
				return violated("money", "payment %s of %d for booking %s captured and kept: booking %s (%s), payment id %q, method %s, refund %q, %d tickets; created %s, checked %s, now %s%s",
					p.ID, p.Amount, id, b.Status, b.StatusReason, b.PaymentID, b.PaymentMethod, b.RefundStatus, len(tickets),
					b.CreatedAt.Format(time.TimeOnly), b.CheckedAt.Format(time.TimeOnly), now.Format(time.TimeOnly), why)
			}
		}
		if b.Status == ledger.BookingRefunded {
			for _, p := range w.fp.PaymentsForBooking(id) {
				if p.Status == payment.StatusSucceeded && p.AmountRefunded < p.Amount && !w.foreignPays[p.ID] {
					return violated("money", "booking %s says refunded, the provider refunded %d of %d", id, p.AmountRefunded, p.Amount)
				}
			}
		}
	}
	return nil
}

// refundsTold lists a payment's refunds at the provider for a violation's
// message, marking the one the booking names as its own.
func refundsTold(refunds []payment.Refund, own string) string {
	if len(refunds) == 0 {
		return "; no refunds at the provider"
	}
	var b strings.Builder
	b.WriteString("; refunds at the provider:")
	for _, r := range refunds {
		fmt.Fprintf(&b, " %s %d %s", r.ID, r.Amount, r.Status)
		if r.ID == own {
			b.WriteString(" (the booking's)")
		}
	}
	return b.String()
}

// nextCheck is when the payment reconciliation asks about a booking
// waiting for its payment next: PendingAfter after it last did while the
// booking keeps its hold; after that, as long again as the booking had
// waited since the hold's end (its making, without one) when it was last
// asked, at least PendingAfter and at most an hour.
func nextCheck(b ledger.Booking, now time.Time) time.Time {
	if b.HoldUntil != nil && !b.HoldUntil.Before(now) {
		return b.CheckedAt.Add(paymentPendingAfter)
	}
	since := b.CreatedAt
	if b.HoldUntil != nil {
		since = *b.HoldUntil
	}
	return b.CheckedAt.Add(min(askedAtLeastEvery, max(paymentPendingAfter, b.CheckedAt.Sub(since))))
}

// askedAtLeastEvery is the longest the payment reconciliation leaves a
// booking waiting for its payment unasked.
const askedAtLeastEvery = time.Hour

// letIn tells whether a gate let in a ticket of booking id.
func letIn(ctx context.Context, oracle *ledger.Ledger, id string) bool {
	in, err := oracle.Bookings().LetIn(ctx, id)
	return err == nil && in
}
