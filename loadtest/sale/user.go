package sale

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/loadtest/api"
)

// plan is what a buyer will do once holding a seat.
type plan uint8

const (
	payNow plan = iota
	abandon
	payDeclined
	payLate
	payChangeMind
)

// Queue steps, for the latency report.
const (
	stepJoin uint8 = iota
	stepPoll
	stepEventPage
)

var queueSteps = [...]string{stepJoin: "join", stepPoll: "poll", stepEventPage: "event page"}

// user is one virtual visitor, kept small: most of a big crowd only ever
// waits and is told "sold out", and costs this record, not a goroutine.
type user struct {
	arrival time.Duration
	token   string
	// seed seeds the user's own random choices once admitted.
	seed uint64

	// position is the user's queue position, once told.
	position atomic.Int64

	// failures counts the queue's answers that were neither waiting,
	// admitted nor sold out.
	failures uint8
	step     uint8
	// plan is drawn at the user's first hold (planOf).
	plan    plan
	planned bool
	// refresh is an extra page load pending while queued.
	refresh  bool
	persist  bool
	double   bool
	admitted bool
	// finished is set once the visit's outcome is counted.
	finished bool
}

// buyer is an admitted user: from here on a goroutine of its own, with its
// own random choices. Only the admitted (a few times the seats) get one.
type buyer struct {
	*user
	rng *rand.Rand
}

// errRequeue sends a user back to the queue (the token is no longer
// admitted, e.g. after the queue state was lost and restored).
var errRequeue = errors.New("back to the queue")

// gw sends a request through the gateway with the user's token and records
// what layer answered it. Queued users and admitted ones use connections of
// their own, as different browsers would: an admitted buyer's hold never
// waits in this process behind the crowd's polls.
func (s *sim) gw(ctx context.Context, u *user, step string, req api.Request) (api.Response, error) {
	req.Token = u.token
	s.c.gateway.Add(1)
	t0 := time.Now()
	client := s.queueClient
	if u.admitted {
		client = s.shopClient
	}
	client.Base = s.gateway()
	resp, err := client.Do(ctx, req)
	if err != nil {
		s.c.transport.Add(1)
		return resp, err
	}
	s.c.lat[step].Since(t0)
	if tok := resp.Header.Get(api.HeaderToken); tok != "" {
		u.token = tok
	}
	switch {
	case resp.Waitroom() == api.StatusAdmitted:
		s.c.reached.Add(1)
	case resp.Status == http.StatusServiceUnavailable:
		s.c.unavailable.Add(1)
	}
	return resp, nil
}

// turn is what follows one request of a queued user.
type turn struct {
	// again: ask again after this long.
	again time.Duration
	// admitted: the user goes shopping.
	admitted bool
	// ended: the visit is over, with outcome.
	ended   bool
	outcome Outcome
}

// maxQueueFailures bounds the answers a queued user takes that are neither
// waiting, admitted nor sold out: a gateway or origin that keeps failing
// ends the visit.
const maxQueueFailures = 20

// queueStep sends a queued user's next request (join, or a poll with the
// token, honouring Retry-After) and says what comes next. rng is the
// worker's.
func (s *sim) queueStep(ctx context.Context, u *user, rng *rand.Rand) turn {
	if ctx.Err() != nil {
		return turn{ended: true, outcome: TimedOut}
	}
	if u.failures > maxQueueFailures {
		return turn{ended: true, outcome: Errored}
	}
	resp, err := s.gw(ctx, u, queueSteps[u.step], api.Request{Method: http.MethodGet, Path: s.eventPath})
	if err != nil {
		if ctx.Err() != nil {
			return turn{ended: true, outcome: TimedOut}
		}
		u.failures++
		return turn{again: backoff(rng, int(u.failures)-1)}
	}
	switch resp.Waitroom() {
	case api.StatusAdmitted:
		if resp.Status == http.StatusOK {
			if !u.admitted {
				u.admitted = true
				s.c.admitted.Add(1)
				s.c.lat["queue wait"].Since(s.start.Add(u.arrival))
			}
			return turn{admitted: true}
		}
		// Admitted, but the origin could not answer: try the page again.
		u.failures++
		if resp.Status < 500 {
			s.c.note(resp.Unexpected("event page"))
		}
		u.step = stepEventPage
		return turn{again: resp.RetryAfter(time.Second)}
	case api.StatusWaiting:
		if u.token == "" || u.position.Load() == 0 {
			var w api.Waiting
			if err := resp.Decode(&w); err == nil {
				if u.token == "" {
					u.token = w.Token
				}
				u.position.Store(w.Position)
				s.positions.seen(w.Position)
			}
		}
		wait := jitter(rng, resp.RetryAfter(3*time.Second))
		if u.refresh {
			// An impatient reload, well before Retry-After.
			u.refresh = false
			wait = time.Duration(300+rng.IntN(1200)) * time.Millisecond
		}
		u.step = stepPoll
		return turn{again: wait}
	case api.StatusSoldOut:
		return turn{ended: true, outcome: SoldOutAtEdge}
	default:
		if resp.Status != http.StatusServiceUnavailable {
			u.failures++
			s.c.note(resp.Unexpected("queue"))
		}
		return turn{again: jitter(rng, resp.RetryAfter(time.Second))}
	}
}

// visitShop is an admitted user's goroutine: it shops, then either ends the
// visit or sends the user back to the queue.
func (s *sim) visitShop(ctx context.Context, i int) {
	u := &s.users[i]
	b := &buyer{user: u, rng: rand.New(rand.NewPCG(u.seed, uint64(i)))}
	o, err := s.shop(ctx, b)
	if errors.Is(err, errRequeue) {
		u.failures = 0
		u.step = stepPoll
		s.sched.after(i, 0)
		return
	}
	if err != nil {
		s.c.note(err)
	}
	s.finish(u, o)
}

// shop holds a seat and pays for it.
func (s *sim) shop(ctx context.Context, u *buyer) (Outcome, error) {
	var giveUp time.Time
	for {
		hold, err := s.hold(ctx, u)
		if errors.Is(err, errSoldOut) {
			if !u.persist {
				return SoldOutAdmitted, nil
			}
			if giveUp.IsZero() {
				giveUp = time.Now().Add(s.cfg.Patience)
			}
			if time.Now().After(giveUp) || s.closed.Load() {
				return SoldOutAdmitted, nil
			}
			if !s.waitForSeats(ctx, u, giveUp) {
				return SoldOutAdmitted, nil
			}
			continue
		}
		if err != nil {
			return outcomeOf(ctx), err
		}
		if !u.planned {
			u.plan, u.planned = planOf(s.cfg, s.holders.Add(1)), true
		}
		if u.plan == abandon {
			s.c.expired.Add(1)
			return Abandoned, nil
		}
		if !sleep(ctx, think(u.rng, s.cfg.Think)) {
			return TimedOut, nil
		}
		o, err := s.pay(ctx, u, hold)
		if errors.Is(err, errHoldExpired) {
			continue
		}
		return o, err
	}
}

func outcomeOf(ctx context.Context) Outcome {
	if ctx.Err() != nil {
		return TimedOut
	}
	return Errored
}

var (
	errSoldOut     = errors.New("sold out")
	errHoldExpired = errors.New("hold expired")
)

// waitForSeats looks at the event page now and then until seats are back.
func (s *sim) waitForSeats(ctx context.Context, u *buyer, until time.Time) bool {
	for time.Now().Before(until) && !s.closed.Load() {
		if !sleep(ctx, time.Duration(2000+u.rng.IntN(2000))*time.Millisecond) {
			return false
		}
		resp, err := s.gw(ctx, u.user, "event page", api.Request{Method: http.MethodGet, Path: s.eventPath})
		if err != nil || resp.Waitroom() != api.StatusAdmitted || resp.Status != http.StatusOK {
			continue
		}
		var ev api.Event
		if resp.Decode(&ev) == nil && ev.Remaining >= s.cfg.Quantity {
			return true
		}
	}
	return false
}

// hold asks for the seats, retrying the same request (same key) through
// outages.
func (s *sim) hold(ctx context.Context, u *buyer) (api.Hold, error) {
	key := api.NewKey()
	for attempt := 0; ; attempt++ {
		resp, err := s.gw(ctx, u.user, "hold", api.Request{
			Method: http.MethodPost, Path: s.eventPath + "/holds", IdempotencyKey: key,
			Body: map[string]int64{"quantity": s.cfg.Quantity},
		})
		if err != nil {
			if ctx.Err() != nil {
				return api.Hold{}, ctx.Err()
			}
			if !sleep(ctx, backoff(u.rng, attempt)) {
				return api.Hold{}, ctx.Err()
			}
			continue
		}
		if resp.Waitroom() != api.StatusAdmitted {
			return api.Hold{}, errRequeue
		}
		switch resp.Status {
		case http.StatusCreated, http.StatusOK:
			var h api.Hold
			if err := resp.Decode(&h); err != nil {
				return h, err
			}
			if resp.Status == http.StatusCreated {
				s.c.holds.Add(1)
				if first := s.c.firstSoldOut(); !first.IsZero() && time.Now().After(first) {
					s.c.resold.Add(1)
				}
			}
			return h, nil
		case http.StatusConflict:
			if resp.ErrorCode() == "request_in_progress" {
				sleep(ctx, 200*time.Millisecond)
				continue
			}
			s.c.holdSoldOut.Add(1)
			s.c.soldOutSeen(time.Now())
			return api.Hold{}, errSoldOut
		case http.StatusUnauthorized, http.StatusForbidden:
			return api.Hold{}, errRequeue
		case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
			s.c.holdRetries.Add(1)
			if !sleep(ctx, jitter(u.rng, resp.RetryAfter(time.Second))) {
				return api.Hold{}, ctx.Err()
			}
			if attempt > 30 {
				// A stored failure would answer the same forever: start over.
				key = api.NewKey()
				attempt = 0
			}
		default:
			return api.Hold{}, resp.Unexpected("hold")
		}
	}
}

// pay books the hold and follows the booking until it settles.
func (s *sim) pay(ctx context.Context, u *buyer, hold api.Hold) (Outcome, error) {
	method := api.CardVisa
	switch u.plan {
	case payDeclined:
		method = api.CardDeclined
	case payLate:
		method = api.FakepaySilent
	case payChangeMind:
		method = api.FakepayFailThenSucceed
	}
	s.c.inPayment.Add(1)
	defer s.c.inPayment.Add(-1)
	retried := false
	for {
		b, err := s.book(ctx, u, hold, method)
		if err != nil {
			return outcomeOf(ctx), err
		}
		paid := time.Now()
		var deliverAt time.Time
		if method == api.FakepaySilent {
			deliverAt, err = s.lateDeadline(ctx, u, hold)
			if err != nil {
				return outcomeOf(ctx), err
			}
		}
		final, delivered, err := s.follow(ctx, u, b, deliverAt)
		if err != nil {
			return outcomeOf(ctx), err
		}
		if method == api.FakepaySilent && !delivered {
			s.c.lateEarly.Add(1)
		}
		switch final.Status {
		case api.BookingConfirmed:
			s.c.confirmed.Add(1)
			s.c.lat["hold to confirmed"].Since(paid)
			seats := make([]string, 0, len(final.Tickets))
			for _, t := range final.Tickets {
				seats = append(seats, fmt.Sprintf("%v", t.Seat))
			}
			if len(seats) == 0 {
				s.c.note(fmt.Errorf("booking %s confirmed without tickets", final.BookingID))
			}
			s.c.seats.Add(int64(len(seats)))
			s.c.sold(final.BookingID, seats, time.Now())
			if final.Overflow {
				return LateAbsorbed, nil
			}
			return Bought, nil
		case api.BookingRefunded, api.BookingCancelled:
			s.c.refunded.Add(1)
			if delivered {
				return LateRefunded, nil
			}
			s.c.expired.Add(1)
			return PaymentFailed, nil
		case api.BookingFailed:
			s.c.declined.Add(1)
			if !retried {
				// The hold is kept after a failed payment: pay again with a
				// good card.
				retried = true
				method = api.CardVisa
				continue
			}
			s.c.expired.Add(1)
			return PaymentFailed, nil
		default:
			return Errored, fmt.Errorf("booking %s ended %q", final.BookingID, final.Status)
		}
	}
}

// book creates the booking (twice at once for a double click).
func (s *sim) book(ctx context.Context, u *buyer, hold api.Hold, method string) (api.Booking, error) {
	key := api.NewKey()
	body := map[string]string{"hold_id": hold.HoldID, "payment_method_token": method}
	once := func() (api.Booking, error) {
		for attempt := 0; ; attempt++ {
			resp, err := s.gw(ctx, u.user, "book", api.Request{Method: http.MethodPost, Path: "/v1/bookings", IdempotencyKey: key, Body: body})
			if err != nil {
				if ctx.Err() != nil {
					return api.Booking{}, ctx.Err()
				}
				sleep(ctx, backoff(u.rng, attempt))
				continue
			}
			if resp.Waitroom() != api.StatusAdmitted {
				return api.Booking{}, errRequeue
			}
			switch resp.Status {
			case http.StatusAccepted, http.StatusOK, http.StatusCreated:
				var b api.Booking
				return b, resp.Decode(&b)
			case http.StatusGone:
				return api.Booking{}, errHoldExpired
			case http.StatusConflict:
				if resp.ErrorCode() == "request_in_progress" {
					sleep(ctx, 200*time.Millisecond)
					continue
				}
				return api.Booking{}, resp.Unexpected("book")
			case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
				if attempt > 30 {
					return api.Booking{}, resp.Unexpected("book")
				}
				sleep(ctx, jitter(u.rng, resp.RetryAfter(time.Second)))
			default:
				return api.Booking{}, resp.Unexpected("book")
			}
		}
	}
	if !u.double {
		b, err := once()
		if err == nil {
			s.c.bookings.Add(1)
		}
		return b, err
	}
	u.double = false
	s.c.doubles.Add(1)
	type answer struct {
		b   api.Booking
		err error
	}
	second := make(chan answer, 1)
	go func() {
		b, err := once()
		second <- answer{b, err}
	}()
	b, err := once()
	other := <-second
	if err != nil {
		b, err = other.b, other.err
	} else if other.err == nil && other.b.BookingID != b.BookingID {
		s.c.doubleDiff.Add(1)
		s.c.note(fmt.Errorf("double click made two bookings (%s, %s) for hold %s", b.BookingID, other.b.BookingID, hold.HoldID))
	}
	if err == nil {
		s.c.bookings.Add(1)
	}
	return b, err
}

// follow polls the booking until it settles. With a deliverAt, the
// payment's success webhook is sent at that time (if the booking has not
// settled by then).
func (s *sim) follow(ctx context.Context, u *buyer, b api.Booking, deliverAt time.Time) (api.Booking, bool, error) {
	delivered := false
	deadline := time.Now().Add(s.followFor)
	for !b.Settled() {
		if time.Now().After(deadline) {
			return b, delivered, fmt.Errorf("booking %s still %s after %s", b.BookingID, b.Status, s.followFor)
		}
		if !deliverAt.IsZero() && !delivered && time.Now().After(deliverAt) {
			if err := s.deliverLate(ctx, u, b); err != nil {
				return b, delivered, err
			}
			delivered = true
		}
		if !sleep(ctx, time.Duration(300+u.rng.IntN(400))*time.Millisecond) {
			return b, delivered, ctx.Err()
		}
		resp, err := s.gw(ctx, u.user, "booking status", api.Request{Method: http.MethodGet, Path: "/v1/bookings/" + b.BookingID})
		if err != nil || resp.Waitroom() != api.StatusAdmitted {
			continue
		}
		if resp.Status != http.StatusOK {
			if resp.Status >= 500 {
				continue
			}
			return b, delivered, resp.Unexpected("booking status")
		}
		if err := resp.Decode(&b); err != nil {
			return b, delivered, err
		}
	}
	return b, delivered, nil
}

// lateDeadline is when a silent payment's webhook is sent: after the hold,
// as extended by the booking, has expired and the reaper has had a turn.
func (s *sim) lateDeadline(ctx context.Context, u *buyer, hold api.Hold) (time.Time, error) {
	resp, err := s.gw(ctx, u.user, "hold status", api.Request{Method: http.MethodGet, Path: "/v1/holds/" + hold.HoldID})
	if err == nil && resp.Status == http.StatusOK {
		var h api.Hold
		if resp.Decode(&h) == nil && !h.ExpiresAt.IsZero() {
			hold = h
		}
	}
	return hold.ExpiresAt.Add(s.lateBy), nil
}

// lateAttempts is how many times a late webhook copy is sent while the
// origin answers 5xx, as a provider redelivers.
const lateAttempts = 6

// deliverLate sends the success webhook the provider held back, as many
// times as configured, at once; a copy answered 5xx is sent again.
func (s *sim) deliverLate(ctx context.Context, u *buyer, b api.Booking) error {
	if b.PaymentID == "" {
		return fmt.Errorf("booking %s has no payment id to confirm", b.BookingID)
	}
	e := api.Succeeded(b)
	errs := make(chan error, s.cfg.LateCopies)
	for i := range s.cfg.LateCopies {
		rng := rand.New(rand.NewPCG(u.rng.Uint64(), uint64(i)))
		go func() {
			var err error
			for attempt := range lateAttempts {
				t0 := time.Now()
				s.c.webhooks.Add(1)
				var status int
				status, err = s.webhooks.Deliver(ctx, e)
				s.c.lat["webhook"].Since(t0)
				if err == nil && status != http.StatusOK {
					err = fmt.Errorf("webhook %s for booking %s answered %d", e.ID, b.BookingID, status)
				}
				if err == nil || (status != 0 && status < 500) || !sleep(ctx, backoff(rng, attempt)) {
					break
				}
			}
			errs <- err
		}()
	}
	var first error
	for range s.cfg.LateCopies {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	s.c.lateSent.Add(1)
	return first
}

// backoff is the pause before retrying a request that got no answer:
// doubling from one second up to eight, spread, so a server that fell
// behind is not buried under retries.
func backoff(rng *rand.Rand, failures int) time.Duration {
	return jitter(rng, time.Second<<min(failures, 3))
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jitter spreads a wait over 90–120% so a crowd told the same Retry-After
// does not come back in one instant.
func jitter(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.3*rng.Float64()))
}

func think(rng *rand.Rand, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(int64(max)))
}
