package sale

import (
	"context"
	"time"

	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/gaterush"
	"github.com/waitroom/waitroom/loadtest/latency"
)

// Result is the report of a sale.
type Result struct {
	Config   Config        `json:"config"`
	Event    api.Event     `json:"event"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// TimedOut is set when the sale was cut off by Config.Timeout.
	TimedOut bool `json:"timed_out"`

	Users    int64            `json:"users"`
	Outcomes map[string]int64 `json:"outcomes"`

	Requests struct {
		Gateway int64 `json:"gateway"`
		// Origin is the requests the gateway passed on (admitted); Edge the
		// ones it answered itself.
		Origin      int64   `json:"origin"`
		Edge        int64   `json:"edge"`
		EdgePercent float64 `json:"edge_percent"`
		Webhooks    int64   `json:"webhooks"`
		Unavailable int64   `json:"unavailable"`
		NoAnswer    int64   `json:"no_answer"`
	} `json:"requests"`

	Admitted    int64 `json:"admitted"`
	Holds       int64 `json:"holds"`
	HoldSoldOut int64 `json:"hold_sold_out_answers"`
	HoldRetries int64 `json:"hold_retries"`
	Bookings    int64 `json:"bookings"`
	Confirmed   int64 `json:"confirmed_bookings"`
	// SeatsSold is the tickets the buyers received.
	SeatsSold int64 `json:"seats_sold"`
	// Expired is holds never paid for, left to expire; Resold holds made
	// after the first sell-out with seats that came back.
	Expired int64 `json:"expired"`
	Resold  int64 `json:"resold"`
	// Declined counts failed payments (each such buyer retried once).
	Declined     int64 `json:"declined"`
	DoubleClicks int64 `json:"double_clicks"`
	// DoubleBooked counts double clicks answered with two bookings.
	DoubleBooked int64 `json:"double_booked"`
	LateSent     int64 `json:"late_webhooks_sent"`
	LateEarly    int64 `json:"late_settled_before_webhook"`
	LateAbsorbed int64 `json:"late_absorbed"`
	LateRefunded int64 `json:"late_refunded"`

	// Oversold is seats sold beyond the capacity plus seats sold twice.
	Oversold       int64         `json:"oversold"`
	DuplicateSeats int64         `json:"duplicate_seats"`
	Invariant      api.Invariant `json:"invariant"`
	InvariantError string        `json:"invariant_error,omitempty"`
	SettledIn      time.Duration `json:"settled_in_ns"`
	// Money is read once the payments settled (or Settle ran out); nil
	// without Target.Money.
	Money      *Money `json:"money,omitempty"`
	MoneyError string `json:"money_error,omitempty"`

	PostgresRows    int64            `json:"postgres_rows_written"`
	PostgresCommits int64            `json:"postgres_commits"`
	PostgresTables  map[string]int64 `json:"postgres_rows_by_table"`
	WritesPerSeat   float64          `json:"postgres_rows_per_seat_sold"`
	RedisCommands   int64            `json:"redis_commands"`
	// RedisErrors is the error answers Redis gave during the sale, by code
	// (INFO errorstats, every server of a cluster), read by the caller
	// (nil: not read). CROSSSLOT would be a command whose keys are not on
	// one hash slot, which a cluster refuses.
	RedisErrors map[string]int64 `json:"redis_errors,omitempty"`

	// SoldOutAfter is when a hold was first refused for lack of seats;
	// LastSaleAfter when the last booking was confirmed.
	SoldOutAfter  time.Duration `json:"sold_out_after_ns"`
	LastSaleAfter time.Duration `json:"last_sale_after_ns"`

	Latency map[string]latency.Summary `json:"latency"`
	// Lag is how late the load generator sent the crowd's requests against
	// their schedule (arrival, Retry-After): large, and the figures above
	// measure the load generator rather than the system.
	Lag latency.Summary `json:"load_generator_lag"`

	// Gateways is how many gateways the crowd went through. Positions is
	// the queue positions the users were given, and DuplicatePositions
	// those given to more than one user (must be 0). Coherence is, per
	// raise of the watermark, the time from the first gateway showing it
	// to the last (with more than one gateway; read every 50 ms), as this
	// load generator saw it. AppliedCoherence is the same by the gateways'
	// own records of when they applied each watermark, and
	// AppliedUnreached the values some gateway never applied before the
	// sale ended; AppliedError says why they could not be read.
	Gateways           int             `json:"gateways"`
	Positions          int64           `json:"positions"`
	DuplicatePositions int64           `json:"duplicate_positions"`
	Coherence          latency.Summary `json:"watermark_coherence"`
	CoherenceMisses    int64           `json:"watermark_reads_failed"`
	AppliedCoherence   latency.Summary `json:"watermark_coherence_applied"`
	AppliedUnreached   int64           `json:"watermark_values_unreached"`
	AppliedError       string          `json:"watermark_applied_error,omitempty"`
	// Applied is each gateway's record itself, first gateway first, for
	// the JSON report.
	Applied []api.Applied `json:"watermarks_applied,omitempty"`
	// Rates are requests (or commands, rows) per second per layer over the
	// sale.
	Rates map[string]float64 `json:"rates"`

	// Memory is the peak resident memory of every process of the run, read
	// by the caller once the sale is over (nil: not read).
	Memory []ProcessMemory `json:"memory,omitempty"`

	// GateRush is the scans at the gates after the sale; nil when none
	// was run.
	GateRush *gaterush.Result `json:"gate_rush,omitempty"`

	Pilot    PilotStats    `json:"autopilot"`
	Faults   []FaultRecord `json:"faults"`
	Errors   []string      `json:"errors"`
	ErrCount int64         `json:"error_count"`
	Timeline []Sample      `json:"timeline"`
}

// PilotStats is what the gateway's autopilot did, from the event's change
// log.
type PilotStats struct {
	Raises   int   `json:"raises"`
	Admitted int64 `json:"admitted_positions"`
	// LastReason is why it made its last raise.
	LastReason string `json:"last_reason,omitempty"`
	Error      string `json:"error,omitempty"`
}

// pilotStats reads the autopilot's raises of the watermark from the
// gateway's change log (its newest waitroom.MaxLogEntries changes).
func (s *sim) pilotStats(ctx context.Context) PilotStats {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	log, err := s.gwAdmin.ChangeLog(ctx, s.target.Event)
	if err != nil {
		return PilotStats{Error: err.Error()}
	}
	var p PilotStats
	for _, e := range log {
		from, okFrom := e.From.(float64)
		to, okTo := e.To.(float64)
		if e.Actor != "autopilot" || e.Field != "watermark" || !okFrom || !okTo {
			continue
		}
		if p.Raises == 0 {
			p.LastReason = e.Reason
		}
		p.Raises++
		p.Admitted += int64(to - from)
	}
	return p
}

// ProcessMemory is the peak resident memory (VmHWM) of one server, summed
// over its processes (PostgreSQL runs one per connection; their shared
// buffers are counted in each).
type ProcessMemory struct {
	Name      string `json:"name"`
	Processes int    `json:"processes"`
	PeakRSS   int64  `json:"peak_rss_bytes"`
	// Largest is the peak of the largest single process.
	Largest int64  `json:"largest_bytes"`
	Error   string `json:"error,omitempty"`
}

// Broken reports whether the sale broke the inventory: any seat oversold,
// drift left at the end, or the invariant unreadable; or a ticket the gate
// rush admitted twice or not at all.
func (r *Result) Broken() bool {
	return r.Oversold != 0 || r.DuplicatePositions != 0 || r.Invariant.Drift != 0 || r.InvariantError != "" || r.DoubleBooked != 0 || r.MoneyKept() ||
		(r.GateRush != nil && r.GateRush.Broken()) || r.RedisErrors["CROSSSLOT"] != 0
}

// MoneyKept reports whether a captured payment ended as neither a sale
// with its tickets nor a refund (or the account could not be read).
func (r *Result) MoneyKept() bool {
	return r.MoneyError != "" || (r.Money != nil && !r.Money.Balanced())
}

func (s *sim) result(ctx context.Context, end time.Time, before outside, timedOut bool) *Result {
	c := s.c
	r := &Result{Config: s.cfg, Event: s.event, Started: s.start, Duration: end.Sub(s.start), TimedOut: timedOut}
	r.Users = int64(s.cfg.Users)
	r.Outcomes = map[string]int64{}
	for o := range numOutcomes {
		if n := c.outcomes[o].Load(); n > 0 {
			r.Outcomes[o.String()] = n
		}
	}
	r.Requests.Gateway = c.gateway.Load()
	r.Requests.Origin = c.reached.Load()
	r.Requests.Edge = r.Requests.Gateway - r.Requests.Origin - c.transport.Load()
	if r.Requests.Gateway > 0 {
		r.Requests.EdgePercent = 100 * float64(r.Requests.Edge) / float64(r.Requests.Gateway)
	}
	r.Requests.Webhooks = c.webhooks.Load()
	r.Requests.Unavailable = c.unavailable.Load()
	r.Requests.NoAnswer = c.transport.Load()

	r.Admitted = c.admitted.Load()
	r.Holds = c.holds.Load()
	r.HoldSoldOut = c.holdSoldOut.Load()
	r.HoldRetries = c.holdRetries.Load()
	r.Bookings = c.bookings.Load()
	r.Confirmed = c.confirmed.Load()
	r.SeatsSold = c.seats.Load()
	r.Expired = c.expired.Load()
	r.Resold = c.resold.Load()
	r.Declined = c.declined.Load()
	r.DoubleClicks = c.doubles.Load()
	r.DoubleBooked = c.doubleDiff.Load()
	r.LateSent = c.lateSent.Load()
	r.LateEarly = c.lateEarly.Load()
	r.LateAbsorbed = c.outcomes[LateAbsorbed].Load()
	r.LateRefunded = c.outcomes[LateRefunded].Load()

	// The invariant is read once the system is quiet: the reaper and the
	// reconciler get up to Settle to finish what the sale left in flight.
	settleStart := time.Now()
	deadline := settleStart.Add(s.cfg.Settle)
	for {
		inv, err := s.invariant(ctx)
		if err == nil {
			r.Invariant, r.InvariantError = inv, ""
			if inv.Drift == 0 {
				break
			}
		} else {
			r.InvariantError = err.Error()
		}
		if time.Now().After(deadline) || !sleep(ctx, 500*time.Millisecond) {
			break
		}
	}
	r.SettledIn = time.Since(settleStart)
	s.readMoney(ctx, r)

	c.mu.Lock()
	r.DuplicateSeats = c.dupSeats
	r.Errors = append([]string(nil), c.errs...)
	r.ErrCount = c.errCount
	if !c.firstOut.IsZero() {
		r.SoldOutAfter = c.firstOut.Sub(s.start)
	}
	if !c.lastSale.IsZero() {
		r.LastSaleAfter = c.lastSale.Sub(s.start)
	}
	c.mu.Unlock()
	sold := max(r.SeatsSold, r.Invariant.Confirmed)
	r.Oversold = max(0, sold-s.event.Capacity) + r.DuplicateSeats

	after, err := s.counters(ctx)
	if err == nil && after.haveDB && before.haveDB {
		r.PostgresRows = after.writes.Rows - before.writes.Rows
		r.PostgresCommits = after.writes.Commits - before.writes.Commits
		r.PostgresTables = map[string]int64{}
		for t, n := range after.writes.Tables {
			if d := n - before.writes.Tables[t]; d != 0 {
				r.PostgresTables[t] = d
			}
		}
		if r.SeatsSold > 0 {
			r.WritesPerSeat = float64(r.PostgresRows) / float64(r.SeatsSold)
		}
	}
	if err == nil && after.haveRedis && before.haveRedis && after.commands >= before.commands {
		r.RedisCommands = after.commands - before.commands
	}

	r.Latency = map[string]latency.Summary{}
	for _, st := range steps {
		if sm := c.lat[st].Summary(); sm.Count > 0 {
			r.Latency[st] = sm
		}
	}
	r.Lag = s.sched.lag.Summary()
	r.Gateways = len(s.gateways)
	r.Positions, r.DuplicatePositions = s.positions.read()
	r.Coherence = s.coherence.lag.Summary()
	if len(s.gateways) > 1 {
		if recs, err := s.readApplied(ctx); err != nil {
			r.AppliedError = err.Error()
		} else {
			r.Applied = recs
			r.AppliedCoherence, r.AppliedUnreached = appliedCoherence(recs)
		}
	}
	s.mu.Lock()
	r.CoherenceMisses = s.coherence.misses
	s.mu.Unlock()
	secs := r.Duration.Seconds()
	r.Rates = map[string]float64{
		"gateway":  float64(r.Requests.Gateway) / secs,
		"origin":   float64(r.Requests.Origin+r.Requests.Webhooks) / secs,
		"postgres": float64(r.PostgresCommits) / secs,
		"redis":    float64(r.RedisCommands) / secs,
	}
	r.Pilot = s.pilotStats(ctx)
	s.mu.Lock()
	r.Faults = append([]FaultRecord(nil), s.faults...)
	r.Timeline = append([]Sample(nil), s.timeline...)
	s.mu.Unlock()
	return r
}

// readMoney reads the money account once no payment or refund waits for
// the provider any more, or after Settle.
func (s *sim) readMoney(ctx context.Context, r *Result) {
	if s.target.Money == nil {
		return
	}
	deadline := time.Now().Add(s.cfg.Settle)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := s.target.Money(rctx)
		cancel()
		if err == nil {
			r.Money, r.MoneyError = &m, ""
			if m.settled() {
				return
			}
		} else {
			r.MoneyError = err.Error()
		}
		if time.Now().After(deadline) || !sleep(ctx, 500*time.Millisecond) {
			return
		}
	}
}

// Steps lists the steps whose latency a Result holds, in report order.
func Steps() []string { return append([]string(nil), steps...) }
