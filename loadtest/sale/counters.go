package sale

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/loadtest/latency"
)

// Outcome is how a user's visit ended.
type Outcome int

// Outcomes, in report order.
const (
	Bought Outcome = iota
	LateAbsorbed
	LateRefunded
	Abandoned
	PaymentFailed
	SoldOutAtEdge
	SoldOutAdmitted
	TimedOut
	Errored
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	Bought:          "bought",
	LateAbsorbed:    "paid late, seat from the overflow buffer",
	LateRefunded:    "paid late, refunded",
	Abandoned:       "held, then abandoned",
	PaymentFailed:   "payment failed",
	SoldOutAtEdge:   "told sold out by the gateway",
	SoldOutAdmitted: "admitted, found it sold out",
	TimedOut:        "still going at the timeout",
	Errored:         "stopped by an error",
}

func (o Outcome) String() string { return outcomeNames[o] }

// steps whose latency is recorded, in report order.
var steps = []string{"join", "poll", "event page", "hold", "hold status", "book", "booking status", "webhook", "queue wait", "hold to confirmed"}

// counters are what the crowd saw, updated concurrently.
type counters struct {
	gateway     atomic.Int64 // requests sent to the gateway
	reached     atomic.Int64 // …of which admitted and passed to the origin
	unavailable atomic.Int64 // 503 from the gateway (queue store down)
	transport   atomic.Int64 // requests that got no answer at all
	webhooks    atomic.Int64 // deliveries to the origin directly

	admitted    atomic.Int64 // users admitted
	holds       atomic.Int64 // holds made (201)
	resold      atomic.Int64 // …of which made after the first sell-out, with seats that came back
	expired     atomic.Int64 // holds never paid for (left to expire)
	holdSoldOut atomic.Int64 // 409 sold_out answers to a hold
	holdRetries atomic.Int64 // 503 answers to a hold, retried
	bookings    atomic.Int64 // bookings made (202)
	confirmed   atomic.Int64 // bookings confirmed
	seats       atomic.Int64 // tickets received
	declined    atomic.Int64 // bookings failed at the provider
	refunded    atomic.Int64 // bookings refunded
	doubles     atomic.Int64 // double-clicked bookings
	doubleDiff  atomic.Int64 // …answered with two different bookings
	inPayment   atomic.Int64 // users waiting for a payment right now
	lateSent    atomic.Int64 // late webhooks delivered
	lateEarly   atomic.Int64 // silent payments settled before we sent the webhook

	outcomes [numOutcomes]atomic.Int64
	finished atomic.Int64

	lat map[string]*latency.Recorder

	mu        sync.Mutex
	seatsSeen map[string]string // seat → booking, to catch a seat sold twice
	dupSeats  int64
	errs      []string
	errCount  int64
	lastSale  time.Time
	firstOut  time.Time // first hold answered sold_out
}

func newCounters() *counters {
	c := &counters{lat: map[string]*latency.Recorder{}, seatsSeen: map[string]string{}}
	for _, s := range steps {
		c.lat[s] = &latency.Recorder{}
	}
	return c
}

// note keeps the first few distinct errors for the report.
func (c *counters) note(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errCount++
	msg := err.Error()
	for _, e := range c.errs {
		if e == msg {
			return
		}
	}
	if len(c.errs) < 10 {
		c.errs = append(c.errs, msg)
	}
}

// soldOutSeen records the first time a hold was refused for lack of seats.
func (c *counters) soldOutSeen(at time.Time) {
	c.mu.Lock()
	if c.firstOut.IsZero() {
		c.firstOut = at
	}
	c.mu.Unlock()
}

func (c *counters) firstSoldOut() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.firstOut
}

// sold records a confirmed booking's seats.
func (c *counters) sold(booking string, seats []string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range seats {
		if other, ok := c.seatsSeen[s]; ok && other != booking {
			c.dupSeats++
			continue
		}
		c.seatsSeen[s] = booking
	}
	if at.After(c.lastSale) {
		c.lastSale = at
	}
}
