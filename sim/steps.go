package sim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Kind is what a step does.
type Kind uint8

// The step kinds. Their names are the replay file's words; keep them.
const (
	Admit Kind = iota + 1
	Hold
	Release
	Book
	Cancel
	Webhook
	Reap
	Reconcile
	Resolve
	PayRecon
	Clock
	RedisRestart
	RedisFlush
	RedisDown
	PGDown
	Heal
	Settle
	// RefundOutcome: the provider's refunds of a payment stay pending from
	// now on, or one pending refund ends (succeeded or failed) with its
	// webhook.
	RefundOutcome
	// Persist: a buyer whose card is declined pays again and again on the
	// same hold (Qty attempts, Dur apart), as a buyer keeping seats with a
	// card that never works would.
	Persist
	// Rebuild: one node rebuilds an event's inventory from the ledger.
	Rebuild
	// Scan: a ticket shown at a gate device (of its event or, with two
	// events, of the other), online, by the shared token, uploaded from
	// offline, or uploaded backdated before the ticket was issued.
	Scan
	// Revoke: a gate device revoked.
	Revoke
	// VoidRead: a gate device reads its event's void feed from its cursor.
	VoidRead
	// ProviderRefund: the provider refunds all or part of a payment from its
	// dashboard (charge.refunded), at once or pending, starts refusing its
	// refunds as invalid, or has a payment not settled yet changed to
	// another amount.
	ProviderRefund
	// Foreign: the provider announces a payment the origin never made.
	Foreign
)

var kindNames = map[Kind]string{
	Admit: "admit", Hold: "hold", Release: "release", Book: "book", Cancel: "cancel", Webhook: "webhook",
	Reap: "reap", Reconcile: "reconcile", Resolve: "resolve", PayRecon: "payrecon", Clock: "clock",
	RedisRestart: "redis-restart", RedisFlush: "redis-flush", RedisDown: "redis-down", PGDown: "pg-down",
	Heal: "heal", Settle: "settle", RefundOutcome: "refund", Persist: "persist",
	Rebuild: "rebuild", Scan: "scan", Revoke: "revoke", VoidRead: "void-read", ProviderRefund: "provider-refund",
	Foreign: "foreign",
}

func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind%d", k)
}

// Wrap is a fault put around one request or pass of a step.
type Wrap uint8

const (
	NoWrap Wrap = iota
	// RedisReplyLost: the node's Redis replies of the connections open now
	// are held (the commands run, the answers do not come back) while the
	// step runs.
	RedisReplyLost
	// PGCutPaused: the node's PostgreSQL traffic is held while the step
	// runs, and the connections cut after Step.Dur: what was sent never ran.
	PGCutPaused
	// PGCutReplies: PostgreSQL gets and runs what the node sends, the
	// replies are held, and the connections are cut after Step.Dur: a
	// commit may have happened that the node never heard of.
	PGCutReplies
	// PayFailure: every provider call during the step fails before
	// reaching the provider; PayTimeout: every one does its work and then
	// loses its answer.
	PayFailure
	PayTimeout
	// PGCutAfterRedis: from the node's first Redis script call during the
	// step on, its PostgreSQL traffic is held, and the connections cut
	// after Step.Dur: a change made in Redis whose ledger step fails (a
	// hold confirmed in Redis, its row left pending).
	PGCutAfterRedis
	// PGStallAfterRedis: as PGCutAfterRedis, but the traffic goes on after
	// Step.Dur, nothing cut: a hold's row reaches the ledger late, after
	// its seats were taken in Redis, while other steps run.
	PGStallAfterRedis
)

var wrapNames = map[Wrap]string{
	RedisReplyLost: "redis-reply-lost", PGCutPaused: "pg-cut-mid-tx", PGCutReplies: "pg-cut-reply-lost",
	PayFailure: "pay-failure", PayTimeout: "pay-timeout", PGCutAfterRedis: "pg-cut-after-redis",
	PGStallAfterRedis: "pg-stall-after-redis",
}

func (w Wrap) String() string { return wrapNames[w] }

// Key choices of hold and booking requests.
const (
	KeyNew = iota
	// KeyReplay: the user's last key with the same body.
	KeyReplay
	// KeyOtherBody: the user's last key with another body (422).
	KeyOtherBody
)

// Webhook step modes.
const (
	// WebhookDeliver delivers a queued event once; a 5xx answer keeps it
	// queued, as a provider retries.
	WebhookDeliver = iota
	// WebhookDuplicate delivers it twice at once, to two nodes.
	WebhookDuplicate
	// WebhookKeep delivers it and keeps it queued: it comes again later.
	WebhookKeep
	// WebhookDrop loses it.
	WebhookDrop
	// WebhookResend has the provider send a payment's outcome event again
	// (also a silent payment's, which never sent it).
	WebhookResend
	// WebhookBurst delivers every queued event of the chosen one's booking
	// at once, each to another node: a provider's events about one payment
	// racing each other.
	WebhookBurst
	// WebhookOwn delivers the newest queued event of the user's bookings
	// once, as WebhookDeliver: a provider's prompt answer to the payment
	// the buyer just made. Never drawn alone (lapsedConfirmation).
	WebhookOwn
	webhookModes
)

var webhookModeNames = []string{"deliver", "duplicate", "keep", "drop", "resend", "burst", "own"}

// Hold shapes: how a hold names what it takes (by the sale's kind; a
// general-admission event always takes a quantity).
const (
	ShapeQty = iota
	ShapeSeatIDs
	ShapeBest
	ShapeSection
	shapes
)

var shapeNames = []string{"qty", "seat-ids", "best", "section"}

// Scan modes.
const (
	ScanOnline = iota
	ScanShared
	ScanOffline
	ScanBackdated
	scanModes
)

var scanModeNames = []string{"online", "shared", "offline", "backdated"}

// Provider refund modes.
const (
	ProviderPartial = iota
	ProviderFull
	ProviderRefuse
	// ProviderAmend: the amount of a payment the origin has not read
	// succeeded yet is changed at the provider (fakepay refuses once it
	// has, as Stripe fixes a succeeded payment's amount).
	ProviderAmend
	// ProviderPending: all or a third of a payment whose refunds stay
	// pending (RefundsPending) is refunded at the provider, so that the
	// origin must learn of the refund's end, whose events may be lost.
	ProviderPending
	providerModes
)

var providerModeNames = []string{"partial", "full", "refuse", "amend", "pending"}

// Foreign payment modes: for a booking nobody knows, or for a booking the
// origin has (and paid by its own payment).
const (
	ForeignUnknown = iota
	ForeignKnown
	foreignModes
)

var foreignModeNames = []string{"unknown", "known"}

// Refund step modes.
const (
	RefundsPending = iota
	RefundSucceeds
	RefundFails
	refundModes
)

var refundModeNames = []string{"pending", "succeeds", "fails"}

// Payment methods a booking uses, by index.
var methods = []string{"pm_card_visa", "pm_card_chargeDeclined", "pm_fakepay_silent", "pm_fakepay_refund_fails",
	"pm_fakepay_fail_then_succeed", "pm_fakepay_refund_refused"}

// Step is one move of the simulation. Every parameter is drawn when the
// run is generated, none when it runs, so a step list replays the same
// decisions and any sub-list is a valid run (a step that finds nothing to
// act on does nothing).
type Step struct {
	Kind Kind
	Node int
	User int
	Qty  int
	// Sel chooses among what the step could act on (the user's holds, the
	// queued webhooks, …), modulo their number.
	Sel    int
	Mode   int
	Method int
	// Race sends the request twice at once (to two nodes).
	Race bool
	Dur  time.Duration
	Wrap Wrap
	// Shape is how a hold names what it takes (ShapeQty, …).
	Shape int
	// Par runs the step beside the one before it (and that one's group):
	// the steps of a group start together, each At after the group's
	// start, and the checks run when all have ended.
	Par bool
	At  time.Duration
}

func (s Step) String() string {
	var b strings.Builder
	b.WriteString(s.Kind.String())
	add := func(k string, v any) { fmt.Fprintf(&b, " %s=%v", k, v) }
	switch s.Kind {
	case Admit:
		add("qty", s.Qty)
	case Hold:
		add("node", s.Node)
		add("user", s.User)
		add("qty", s.Qty)
		add("sel", s.Sel)
		add("shape", shapeNames[s.Shape%shapes])
		add("key", keyName(s.Mode))
	case Release, Cancel:
		add("node", s.Node)
		add("user", s.User)
		add("sel", s.Sel)
	case Book:
		add("node", s.Node)
		add("user", s.User)
		add("sel", s.Sel)
		add("method", methods[s.Method%len(methods)])
		add("key", keyName(s.Mode))
	case Webhook:
		add("node", s.Node)
		add("user", s.User)
		add("sel", s.Sel)
		add("mode", webhookModeNames[s.Mode%webhookModes])
	case Reap, Reconcile, Resolve, PayRecon, PGDown:
		add("node", s.Node)
	case Rebuild:
		add("node", s.Node)
		add("sel", s.Sel)
	case Scan:
		add("node", s.Node)
		add("user", s.User)
		add("sel", s.Sel)
		add("qty", s.Qty)
		add("mode", scanModeNames[s.Mode%scanModes])
	case Revoke, VoidRead:
		add("node", s.Node)
		add("sel", s.Sel)
	case ProviderRefund:
		add("sel", s.Sel)
		add("mode", providerModeNames[s.Mode%providerModes])
	case Foreign:
		add("node", s.Node)
		add("sel", s.Sel)
		add("mode", foreignModeNames[s.Mode%foreignModes])
	case Persist:
		add("node", s.Node)
		add("user", s.User)
		add("qty", s.Qty)
		add("dur", s.Dur)
	case RefundOutcome:
		add("sel", s.Sel)
		add("mode", refundModeNames[s.Mode%refundModes])
	case Clock:
		add("dur", s.Dur)
	}
	if s.Race {
		add("race", true)
	}
	if s.Par {
		add("par", true)
		add("at", s.At)
	}
	if s.Wrap != NoWrap {
		add("fault", s.Wrap)
		if s.Wrap == PGCutPaused || s.Wrap == PGCutReplies || s.Wrap == PGCutAfterRedis || s.Wrap == PGStallAfterRedis {
			add("after", s.Dur)
		}
	}
	return b.String()
}

func keyName(m int) string { return [...]string{"new", "replay", "other-body"}[m%3] }

// ParseStep reads a step as String writes it.
func ParseStep(line string) (Step, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return Step{}, fmt.Errorf("empty step")
	}
	var s Step
	for k, n := range kindNames {
		if n == f[0] {
			s.Kind = k
		}
	}
	if s.Kind == 0 {
		return s, fmt.Errorf("unknown step %q", f[0])
	}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return s, fmt.Errorf("step %q: %q is not key=value", line, kv)
		}
		var err error
		atoi := func() int {
			n, e := strconv.Atoi(v)
			err = e
			return n
		}
		switch k {
		case "node":
			s.Node = atoi()
		case "user":
			s.User = atoi()
		case "qty":
			s.Qty = atoi()
		case "sel":
			s.Sel = atoi()
		case "key":
			s.Mode = index([]string{"new", "replay", "other-body"}, v, &err)
		case "mode":
			switch s.Kind {
			case RefundOutcome:
				s.Mode = index(refundModeNames, v, &err)
			case Scan:
				s.Mode = index(scanModeNames, v, &err)
			case ProviderRefund:
				s.Mode = index(providerModeNames, v, &err)
			case Foreign:
				s.Mode = index(foreignModeNames, v, &err)
			default:
				s.Mode = index(webhookModeNames, v, &err)
			}
		case "shape":
			s.Shape = index(shapeNames, v, &err)
		case "par":
			s.Par = v == "true"
		case "at":
			s.At, err = time.ParseDuration(v)
		case "method":
			s.Method = index(methods, v, &err)
		case "race":
			s.Race = v == "true"
		case "dur", "after":
			s.Dur, err = time.ParseDuration(v)
		case "fault":
			s.Wrap = 0
			for w, n := range wrapNames {
				if n == v {
					s.Wrap = w
				}
			}
			if s.Wrap == 0 {
				err = fmt.Errorf("unknown fault %q", v)
			}
		default:
			err = fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return s, fmt.Errorf("step %q: %w", line, err)
		}
	}
	return s, nil
}

func index(names []string, v string, err *error) int {
	for i, n := range names {
		if n == v {
			return i
		}
	}
	*err = fmt.Errorf("unknown value %q", v)
	return 0
}

// SaleKind is the kind of sale a seed draws.
type SaleKind uint8

const (
	// SaleGA: one general-admission event, with an overflow reserve.
	SaleGA SaleKind = iota
	// SaleReserved: a reserved seat map of two sections, held by seat_ids,
	// best_available or quantity.
	SaleReserved
	// SaleSections: a seat map with a reserved section and two
	// general-admission sections (sold by quantity from buckets).
	SaleSections
	// SaleTwoEvents: two general-admission events on the same servers,
	// each with its own gate devices.
	SaleTwoEvents
	saleKinds
)

var saleKindNames = []string{"general admission", "reserved seats", "general-admission sections", "two events"}

func (k SaleKind) String() string { return saleKindNames[k%saleKinds] }

// SectionSpec is a section of a drawn seat map: rows of seats, or a
// general-admission capacity.
type SectionSpec struct {
	ID       string
	Price    int64
	Rows     []int
	Capacity int
}

// Setup is the sale a seed runs: drawn from the seed, like the steps.
type Setup struct {
	Kind       SaleKind
	Nodes      int
	Users      int
	Capacity   int
	OverflowPc int
	MaxPerUser int
	HoldTTL    time.Duration
	// Sections is the seat map (SaleReserved, SaleSections).
	Sections []SectionSpec
	// Capacity2 is the second event's (SaleTwoEvents).
	Capacity2 int
}

func (s Setup) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d origin nodes, %d users, ", s.Kind, s.Nodes, s.Users)
	switch s.Kind {
	case SaleReserved, SaleSections:
		for i, sec := range s.Sections {
			if i > 0 {
				b.WriteString(" + ")
			}
			if sec.Capacity > 0 {
				fmt.Fprintf(&b, "%s (%d places)", sec.ID, sec.Capacity)
			} else {
				fmt.Fprintf(&b, "%s (rows %v)", sec.ID, sec.Rows)
			}
		}
	case SaleTwoEvents:
		fmt.Fprintf(&b, "%d and %d seats (overflow %d%%)", s.Capacity, s.Capacity2, s.OverflowPc)
	default:
		fmt.Fprintf(&b, "%d seats (overflow %d%%)", s.Capacity, s.OverflowPc)
	}
	fmt.Fprintf(&b, ", max %d per user, holds of %s", s.MaxPerUser, s.HoldTTL)
	return b.String()
}

func rngOf(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream^0x9e3779b97f4a7c15))
}

// SetupOf draws the sale of a seed; its kind is the seed modulo 4 (so any
// 4 consecutive seeds run every kind).
func SetupOf(seed uint64) Setup {
	r := rngOf(seed, 1)
	s := Setup{
		Kind:       SaleKind(seed % uint64(saleKinds)),
		Nodes:      2 + r.IntN(2),
		Users:      6 + r.IntN(14),
		Capacity:   4 + r.IntN(24),
		OverflowPc: []int{0, 10, 25}[r.IntN(3)],
		MaxPerUser: 1 + r.IntN(4),
		HoldTTL:    time.Duration(30+r.IntN(4)*30) * time.Second,
	}
	rows := func(n, lo, hi int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = lo + r.IntN(hi-lo+1)
		}
		return out
	}
	switch s.Kind {
	case SaleReserved:
		s.OverflowPc = 0
		s.Sections = []SectionSpec{{ID: "A", Price: 1500, Rows: rows(1+r.IntN(2), 2, 6)}, {ID: "B", Price: 1000, Rows: rows(1+r.IntN(2), 2, 5)}}
	case SaleSections:
		s.OverflowPc = 0
		s.Sections = []SectionSpec{{ID: "A", Price: 1500, Rows: rows(1, 2, 5)},
			{ID: "GA-1", Price: 800, Capacity: 2 + r.IntN(9)}, {ID: "GA-2", Price: 500, Capacity: 2 + r.IntN(7)}}
	case SaleTwoEvents:
		s.Capacity2 = 4 + r.IntN(16)
	}
	if len(s.Sections) > 0 {
		s.Capacity = 0
		for _, sec := range s.Sections {
			s.Capacity += sec.Capacity
			for _, n := range sec.Rows {
				s.Capacity += n
			}
		}
	}
	return s
}

// Options chooses what a generated run may do.
type Options struct {
	// Faults allows every fault kind; without it only the sale's own
	// moves (and its passes) are drawn.
	Faults bool
	// Skip leaves out step kinds and faults by name (Kind and Wrap names).
	Skip map[string]bool
	// Serial runs every step alone; otherwise about a third of the steps
	// join the group of the step before them and run beside it.
	Serial bool
}

type weighted struct {
	kind   Kind
	weight int
	fault  bool
}

var weights = []weighted{
	{Admit, 4, false}, {Hold, 18, false}, {Release, 3, false}, {Book, 16, false}, {Cancel, 4, false},
	{Webhook, 16, false}, {Reap, 4, false}, {Reconcile, 4, false}, {Resolve, 2, false}, {PayRecon, 4, false},
	{Clock, 8, false}, {Settle, 2, false}, {Persist, 1, false},
	{RedisRestart, 1, true}, {RedisFlush, 1, true}, {RedisDown, 1, true}, {PGDown, 1, true}, {Heal, 3, true},
	{RefundOutcome, 3, true},
	{Rebuild, 1, false}, {Scan, 6, false}, {Revoke, 1, false}, {VoidRead, 2, false},
	{ProviderRefund, 2, true}, {Foreign, 1, true},
}

// racing are the moves a step of the same buyer most often races with.
var racing = map[Kind][]Kind{
	Hold:     {Webhook, Book, PayRecon},
	Book:     {Release, Webhook, Cancel, Book},
	Release:  {Book, Hold},
	Webhook:  {Hold, PayRecon, Webhook, Cancel},
	Cancel:   {Webhook, Book},
	PayRecon: {Webhook},
}

// Generate draws n steps from seed.
func Generate(seed uint64, n int, o Options) []Step {
	setup := SetupOf(seed)
	r := rngOf(seed, 2)
	// The faults added later draw from a stream of their own, so the
	// steps an earlier form of the generator drew for a seed stay as they
	// were.
	rf := rngOf(seed, 3)
	afterRedis := o.Faults && !o.Skip[PGCutAfterRedis.String()]
	stallAfterRedis := o.Faults && !o.Skip[PGStallAfterRedis.String()]
	var table []weighted
	total := 0
	for _, w := range weights {
		if (w.fault && !o.Faults) || o.Skip[w.kind.String()] {
			continue
		}
		table = append(table, w)
		total += w.weight
	}
	var wraps []Wrap
	if o.Faults {
		for _, w := range []Wrap{RedisReplyLost, PGCutPaused, PGCutReplies, PayFailure, PayTimeout} {
			if !o.Skip[w.String()] {
				wraps = append(wraps, w)
			}
		}
	}
	steps := make([]Step, n)
	for i := range steps {
		pick := r.IntN(total)
		var k Kind
		for _, w := range table {
			if pick < w.weight {
				k = w.kind
				break
			}
			pick -= w.weight
		}
		s := Step{Kind: k, Node: r.IntN(setup.Nodes), User: r.IntN(setup.Users), Sel: r.IntN(1 << 16)}
		// Concurrency: the step joins the group before it (at most 4
		// steps), often for the same user and then often as the move that
		// races the one before it (a payment landing while the buyer holds
		// again, a release while the buyer books, a failure while a
		// success settles), so that one buyer's requests race each other
		// and the passes.
		if !o.Serial && i > 0 && k != Settle && steps[i-1].Kind != Settle && r.IntN(3) == 0 {
			size := 1
			for j := i - 1; j > 0 && steps[j].Par; j-- {
				size++
			}
			if size < 4 {
				s.Par = true
				s.At = time.Duration(r.IntN(8)) * time.Millisecond
				if r.IntN(2) == 0 {
					s.User = steps[i-1].User
					if rivals := racing[steps[i-1].Kind]; len(rivals) > 0 && r.IntN(2) == 0 {
						if rk := rivals[r.IntN(len(rivals))]; !o.Skip[rk.String()] {
							s.Kind, k = rk, rk
						}
					}
				}
			}
		}
		switch k {
		case Admit:
			s.Qty = 1 + r.IntN(max(setup.Users/3, 1))
		case Hold:
			s.Qty = 1 + r.IntN(setup.MaxPerUser)
			if r.IntN(20) == 0 {
				s.Qty = setup.MaxPerUser + 1 // refused: over the limit
			}
			s.Mode = pickKey(r)
			s.Race = r.IntN(10) == 0
			s.Shape = r.IntN(shapes)
		case Book:
			s.Method = []int{0, 0, 0, 0, 1, 2, 3, 4, 4, 5}[r.IntN(10)]
			s.Mode = pickKey(r)
			s.Race = r.IntN(8) == 0
		case Webhook:
			s.Mode = []int{WebhookDeliver, WebhookDeliver, WebhookDeliver, WebhookDuplicate, WebhookKeep, WebhookDrop, WebhookResend, WebhookBurst, WebhookBurst}[r.IntN(9)]
		case Scan:
			s.Mode = r.IntN(scanModes)
			s.Qty = []int{0, 0, 0, 1}[r.IntN(4)]
		case ProviderRefund:
			s.Mode = r.IntN(providerModes)
		case Foreign:
			s.Mode = r.IntN(foreignModes)
		case RefundOutcome:
			s.Mode = r.IntN(refundModes)
		case Persist:
			s.Qty = 2 + r.IntN(7)
			s.Dur = time.Duration(10+r.IntN(20)) * time.Second
		case Clock:
			switch r.IntN(4) {
			case 0, 1:
				s.Dur = time.Duration(1+r.IntN(10)) * time.Second
			case 2:
				s.Dur = time.Duration(20+r.IntN(30)) * time.Second
			default:
				s.Dur = setup.HoldTTL + time.Duration(1+r.IntN(int(setup.HoldTTL/time.Second)))*time.Second
			}
		}
		switch k {
		case Hold, Release, Book, Cancel, Webhook, Reap, PayRecon, Reconcile:
			if len(wraps) > 0 && r.IntN(8) == 0 {
				s.Wrap = wraps[r.IntN(len(wraps))]
				s.Dur = time.Duration(r.IntN(30)) * time.Millisecond
			}
		}
		// A payment's Redis step whose ledger step fails: a settlement (a
		// webhook, the payment reconciliation, a booking paid at once)
		// that confirms the hold in Redis and then loses PostgreSQL.
		// A hold whose row reaches the ledger late, its seats taken in
		// Redis: what a buyer's late payment, settling beside it, counts.
		late := rf.IntN(10)
		lateDur := time.Duration(rf.IntN(30)) * time.Millisecond
		switch k {
		case Book, Webhook, PayRecon:
			if afterRedis && s.Wrap == NoWrap && late == 0 {
				s.Wrap, s.Dur = PGCutAfterRedis, lateDur
			}
		case Hold:
			if stallAfterRedis && s.Wrap == NoWrap && late < 2 {
				s.Wrap, s.Dur = PGStallAfterRedis, 20*time.Millisecond+2*lateDur
			}
		}
		// A payment that changes its mind matters most when the origin
		// never heard its first answer: the booking stays pending while both
		// outcomes come.
		if k == Book && s.Method == 4 && s.Wrap == NoWrap && o.Faults && !o.Skip[PayTimeout.String()] && r.IntN(3) == 0 {
			s.Wrap = PayTimeout
		}
		steps[i] = s
	}
	aftermath(steps, setup, o, rngOf(seed, 4))
	lapsedConfirmation(steps, setup, o, rngOf(seed, 5))
	return steps
}

// lapsedConfirmation follows, now and then, a hold of a general-admission
// section with the moves that make a lost ledger step of its confirmation
// matter (drawn from a stream of its own): other buyers hold the rest of
// the section; the first books at once with a card whose success the
// provider sends, the provider answers at once and the settlement loses
// PostgreSQL after its Redis step (the hold confirmed there, pending in the
// ledger); the clock passes every hold's lifetime; one more buyer then asks
// the section for all a buyer may take. Redis has the lapsed holds' places
// back, the ledger has not (no reaper ran), so its buckets fall short and
// the new hold expires the lapsed holds itself, the one confirmed in Redis
// among them; a settle point follows, before a drift corrector's pass can
// hide what the protocol lost. Random steps rarely line these up before a
// pass repairs the confirmation: most bookings find their hold lapsed or
// released, most queued events are duplicates or of holds that lapsed, and
// a section is seldom full when a hold that lapsed is confirmed.
func lapsedConfirmation(steps []Step, setup Setup, o Options, r *rand.Rand) {
	var ga []SectionSpec
	for _, sec := range setup.Sections {
		if sec.Capacity > 0 {
			ga = append(ga, sec)
		}
	}
	if len(ga) == 0 || !o.Faults || setup.Users < 3 {
		return
	}
	for _, k := range []string{Hold.String(), Book.String(), Webhook.String(), Clock.String(), PGCutAfterRedis.String()} {
		if o.Skip[k] {
			return
		}
	}
	paying := []int{0, 3, 5} // methods whose success the provider sends
	for i := 0; i < len(steps); i++ {
		h := steps[i]
		if h.Kind != Hold || h.Shape%shapes != ShapeSection || r.IntN(4) != 0 {
			continue
		}
		qty := min(h.Qty, setup.MaxPerUser)
		rest := ga[h.Sel%len(ga)].Capacity - qty
		fillers := min((rest+setup.MaxPerUser-1)/setup.MaxPerUser, setup.Users-2)
		n := 1 + fillers + 5 // the steps of the pairing
		if i+n >= len(steps) {
			break
		}
		free := true
		for j := i + 1; j < i+n; j++ {
			free = free && steps[j].Kind != Settle
		}
		if !free {
			continue
		}
		u := h.User
		others := r.Perm(setup.Users - 1)
		other := func(k int) int { return (u + 1 + others[k]) % setup.Users }
		section := func(user int) Step {
			return Step{Kind: Hold, Node: r.IntN(setup.Nodes), User: user, Qty: setup.MaxPerUser,
				Sel: h.Sel, Shape: ShapeSection, Mode: KeyNew}
		}
		steps[i].Qty, steps[i].Mode, steps[i].Race, steps[i].Wrap = qty, KeyNew, false, NoWrap
		j := i + 1
		for k := range fillers {
			steps[j] = section(other(k))
			j++
		}
		steps[j] = Step{Kind: Book, Node: h.Node, User: u, Method: paying[r.IntN(len(paying))], Mode: KeyNew}
		steps[j+1] = Step{Kind: Webhook, Node: r.IntN(setup.Nodes), User: u, Mode: WebhookOwn,
			Wrap: PGCutAfterRedis, Dur: time.Duration(1+r.IntN(10)) * time.Millisecond}
		steps[j+2] = lapse(setup, r)
		steps[j+3] = section(other(fillers))
		steps[j+4] = Step{Kind: Settle}
		steps[i+n].Par, steps[i+n].At = false, 0 // the pairing ends its group
		i += n
	}
}

// aftermath pairs a hold whose row reaches the ledger late with the moves
// that make it matter, now and then (drawn from a stream of its own, so
// the steps without such a fault stay as they were): the hold is a
// returning buyer's, one who booked a few steps before and whose hold
// lapsed (the clock moved past its lifetime while the payment was
// pending), taking all a buyer may; the buyer's earlier payment lands
// beside it, while its row is still on the way.
func aftermath(steps []Step, setup Setup, o Options, r *rand.Rand) {
	free := func(i int) bool { return i > 0 && i < len(steps) && steps[i].Kind != Settle }
	for i := range steps {
		s := &steps[i]
		if s.Kind != Hold || s.Wrap != PGStallAfterRedis || r.IntN(3) == 0 {
			continue
		}
		j := i - 2
		for ; j >= 0 && j >= i-6 && (steps[j].Kind != Book || steps[j].Method == 1 /* declined */); j-- {
		}
		if j < 0 || j < i-6 || !free(i-1) || o.Skip[Clock.String()] || o.Skip[Webhook.String()] {
			continue
		}
		s.User, s.Qty, s.Mode, s.Race = steps[j].User, setup.MaxPerUser, KeyNew, false
		s.Dur = time.Duration(100+r.IntN(100)) * time.Millisecond
		steps[i-1], s.Par, s.At = lapse(setup, r), false, 0
		if free(i+1) && !o.Serial {
			steps[i+1] = Step{Kind: Webhook, Node: (s.Node + 1) % setup.Nodes, User: s.User, Sel: r.IntN(1 << 16),
				Mode: WebhookDeliver, Par: true, At: time.Duration(10+r.IntN(30)) * time.Millisecond}
			if i+2 < len(steps) {
				steps[i+2].Par, steps[i+2].At = false, 0 // the pair is a group of its own
			}
		}
	}
}

// lapse is a clock step past a hold's whole lifetime.
func lapse(setup Setup, r *rand.Rand) Step {
	return Step{Kind: Clock, Dur: setup.HoldTTL + time.Duration(1+r.IntN(int(setup.HoldTTL/time.Second)))*time.Second}
}

func pickKey(r *rand.Rand) int {
	return []int{KeyNew, KeyNew, KeyNew, KeyNew, KeyReplay, KeyOtherBody}[r.IntN(6)]
}

// Spec names the steps of a run: "300" (that many, generated from the
// seed), "300:4,17,20-25" (those indices of the 300), or the path of a
// file with one step per line (String's form; # starts a comment).
func Spec(seed uint64, spec string, o Options) ([]Step, error) {
	if n, err := strconv.Atoi(spec); err == nil {
		return Generate(seed, n, o), nil
	}
	if count, list, ok := strings.Cut(spec, ":"); ok {
		n, err := strconv.Atoi(count)
		if err != nil {
			return nil, fmt.Errorf("steps %q: %w", spec, err)
		}
		all := Generate(seed, n, o)
		idx, err := parseIndices(list, n)
		if err != nil {
			return nil, fmt.Errorf("steps %q: %w", spec, err)
		}
		out := make([]Step, len(idx))
		for i, j := range idx {
			out[i] = all[j]
		}
		return out, nil
	}
	raw, err := os.ReadFile(spec)
	if err != nil {
		return nil, fmt.Errorf("steps: %w", err)
	}
	var out []Step
	for _, line := range strings.Split(string(raw), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if strings.TrimSpace(line) == "" {
			continue
		}
		s, err := ParseStep(line)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func parseIndices(list string, n int) ([]int, error) {
	var out []int
	for _, part := range strings.Split(list, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, err
			}
		}
		for i := a; i <= b; i++ {
			if i < 0 || i >= n {
				return nil, fmt.Errorf("index %d outside 0..%d", i, n-1)
			}
			out = append(out, i)
		}
	}
	return out, nil
}

// FormatIndices writes indices (sorted) in parseIndices' form, with ranges.
func FormatIndices(idx []int) string {
	idx = append([]int(nil), idx...)
	sort.Ints(idx)
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", idx[i], idx[j]))
		} else {
			parts = append(parts, strconv.Itoa(idx[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
