package sim

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/payment"
)

// Stats add up what runs did.
type Stats struct {
	mu         sync.Mutex
	Runs       int
	Steps      int
	Faults     map[string]int
	Answers    map[string]int
	Payments   map[string]int
	settles    int
	passErrors int
	Elapsed    time.Duration
}

func newStats() *Stats {
	return &Stats{Faults: map[string]int{}, Answers: map[string]int{}, Payments: map[string]int{}}
}

func (s *Stats) fault(kind string) { s.Faults[kind]++ }

func (s *Stats) answer(status int) { s.Answers[fmt.Sprintf("%dxx", status/100)]++ }

// Add merges o into s.
func (s *Stats) Add(o *Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Runs += o.Runs
	s.Steps += o.Steps
	s.settles += o.settles
	s.passErrors += o.passErrors
	for _, m := range []struct{ to, from map[string]int }{{s.Faults, o.Faults}, {s.Answers, o.Answers}, {s.Payments, o.Payments}} {
		for k, v := range m.from {
			m.to[k] += v
		}
	}
}

// Summary is one line per figure.
func (s *Stats) Summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "sim: %d runs, %d steps, %d settle points, %s\n", s.Runs, s.Steps, s.settles, s.Elapsed.Round(time.Second))
	fmt.Fprintf(&b, "  faults injected: %s\n", sortedCounts(s.Faults))
	fmt.Fprintf(&b, "  answers: %s; failed passes: %d\n", sortedCounts(s.Answers), s.passErrors)
	fmt.Fprintf(&b, "  payments at the end: %s\n", sortedCounts(s.Payments))
	return b.String()
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	total := 0
	for k, v := range m {
		keys = append(keys, k)
		total += v
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// Failure is a run that broke an invariant.
type Failure struct {
	Seed  uint64
	Setup Setup
	// Step is the index, in the run's list, of the step after which the
	// check failed (len(steps) for the final settle).
	Step  int
	Check string
	Msg   string
	Logs  []string
}

func (f *Failure) Error() string {
	return fmt.Sprintf("seed %d, step %d: %s: %s", f.Seed, f.Step, f.Check, f.Msg)
}

// Run plays steps from a fresh world for seed: each group of steps, then
// the checks; at the end a final settle. It returns the first failure.
// SIM_SKIP_CHECKS names checks not enforced.
func Run(tb testing.TB, seed uint64, steps []Step, stats *Stats) (f *Failure) {
	skip := map[string]bool{}
	for _, c := range strings.Split(os.Getenv("SIM_SKIP_CHECKS"), ",") {
		if c = strings.TrimSpace(c); c != "" {
			skip[c] = true
		}
	}
	return RunSkipping(tb, seed, steps, stats, skip)
}

// RunSkipping is Run with the checks not enforced given.
func RunSkipping(tb testing.TB, seed uint64, steps []Step, stats *Stats, skip map[string]bool) (f *Failure) {
	rt := &runTB{TB: tb}
	defer rt.close()
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			if fe.skip {
				tb.Skip(fe.msg)
			}
			f = &Failure{Seed: seed, Setup: SetupOf(seed), Step: -1, Check: "setup", Msg: fe.msg}
		}
	}()
	st := newStats()
	st.Runs = 1
	defer stats.Add(st)
	w, err := newWorld(rt, seed, st)
	if err != nil {
		return &Failure{Seed: seed, Setup: SetupOf(seed), Step: -1, Check: "setup", Msg: err.Error()}
	}
	w.skipChecks = skip
	fail := func(i int, v *violation) *Failure {
		f := &Failure{Seed: seed, Setup: w.setup, Step: i, Check: v.check, Msg: v.msg}
		for j, n := range w.nodes {
			for _, l := range n.logs.last() {
				f.Logs = append(f.Logs, fmt.Sprintf("node %d: %s", j, l))
			}
		}
		return f
	}
	trace := os.Getenv("SIM_TRACE") != ""
	for i := 0; i < len(steps); {
		// A group: the step and those after it that run beside it. A
		// settle point runs alone.
		j := i + 1
		for j < len(steps) && steps[j].Par && steps[j].Kind != Settle && steps[i].Kind != Settle {
			j++
		}
		group := steps[i:j]
		st.Steps += len(group)
		w.notes = w.notes[:0]
		v := w.execGroup(group)
		if trace {
			for k, s := range group {
				tb.Logf("%3d %s", i+k, s)
			}
			for _, n := range w.notes {
				tb.Logf("      %s", n)
			}
		}
		if v != nil && !w.skipChecks[v.check] {
			return fail(j-1, v)
		}
		if v := w.check(); v != nil {
			return fail(j-1, v)
		}
		i = j
	}
	if v := w.settle(true); v != nil && !w.skipChecks[v.check] {
		return fail(len(steps), v)
	}
	if v := w.check(); v != nil {
		return fail(len(steps), v)
	}
	w.countPayments()
	return nil
}

func (w *world) countPayments() {
	for _, id := range w.fp.all() {
		b, _ := w.oracle.Booking(w.ctx, id)
		for _, p := range w.fp.PaymentsForBooking(id) {
			k := string(p.Status)
			if w.foreignPays[p.ID] {
				k = "foreign"
			} else if p.Status == payment.StatusSucceeded {
				switch {
				case p.AmountRefunded >= p.Amount:
					k = "refunded"
				case p.AmountRefunded > 0 && b.Status == ledger.BookingConfirmed:
					k = "partly refunded, confirmed"
				case b.Status == ledger.BookingConfirmed:
					k = "captured, confirmed"
				default:
					k = "captured, refund " + b.RefundStatus
				}
			}
			w.stats.Payments[k]++
		}
	}
}

// Shrink looks for a shorter list of steps that fails the same check,
// removing chunks then single steps (delta debugging) for at most budget.
// It returns the indices into steps of the shortest failing list found.
func Shrink(tb testing.TB, seed uint64, steps []Step, first *Failure, budget time.Duration, log func(string)) ([]int, *Failure) {
	deadline := time.Now().Add(budget)
	idx := make([]int, 0, len(steps))
	for i := range steps {
		if i <= first.Step {
			idx = append(idx, i)
		}
	}
	best := first
	fails := func(cand []int) *Failure {
		list := make([]Step, len(cand))
		for i, j := range cand {
			list[i] = steps[j]
		}
		f := Run(tb, seed, list, newStats())
		if f != nil && f.Check == first.Check {
			return f
		}
		return nil
	}
	// The failure may need the final settle only if it happened there; a
	// list cut after the failing step fails at its end or before.
	if f := fails(idx); f != nil {
		best = f
	} else {
		idx = idx[:0]
		for i := range steps {
			idx = append(idx, i)
		}
	}
	chunk := len(idx) / 2
	for chunk >= 1 && time.Now().Before(deadline) {
		removed := false
		for start := 0; start < len(idx) && time.Now().Before(deadline); {
			end := min(start+chunk, len(idx))
			cand := append(append([]int(nil), idx[:start]...), idx[end:]...)
			if len(cand) == 0 {
				start = end
				continue
			}
			if f := fails(cand); f != nil {
				idx, best, removed = cand, f, true
				if log != nil {
					log(fmt.Sprintf("shrink: %d steps still fail (%s)", len(idx), f.Check))
				}
				// Cut at the new failing step: what follows it is not needed.
				if f.Step+1 < len(idx) {
					idx = idx[:f.Step+1]
				}
				continue
			}
			start = end
		}
		if !removed {
			chunk /= 2
		}
	}
	return idx, best
}

// runTB gives testenv a test of its own for one run: its cleanups run when
// the run ends, and a fatal error ends the run, not the test, so shrinking
// can run the same seed many times.
type runTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

type fatalError struct {
	msg  string
	skip bool
}

func (r *runTB) Helper() {}

func (r *runTB) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *runTB) Fatalf(format string, args ...any) {
	panic(fatalError{msg: fmt.Sprintf(format, args...)})
}
func (r *runTB) Fatal(args ...any) { panic(fatalError{msg: fmt.Sprint(args...)}) }
func (r *runTB) Errorf(format string, args ...any) {
	panic(fatalError{msg: fmt.Sprintf(format, args...)})
}
func (r *runTB) Error(args ...any) { panic(fatalError{msg: fmt.Sprint(args...)}) }
func (r *runTB) FailNow()          { panic(fatalError{msg: "FailNow"}) }
func (r *runTB) Skipf(format string, args ...any) {
	panic(fatalError{msg: fmt.Sprintf(format, args...), skip: true})
}
func (r *runTB) Skip(args ...any) { panic(fatalError{msg: fmt.Sprint(args...), skip: true}) }
func (r *runTB) SkipNow()         { panic(fatalError{msg: "skipped", skip: true}) }

func (r *runTB) TempDir() string {
	dir, err := os.MkdirTemp("", "waitroom-sim-")
	if err != nil {
		r.Fatalf("temp dir: %v", err)
	}
	r.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (r *runTB) close() {
	r.mu.Lock()
	fs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
