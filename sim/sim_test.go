package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The runs come from the environment (the Makefile passes them on):
//
//	SEED       one seed to run (with STEPS or SIMSTEPS: a replay)
//	SEEDS      how many seeds, from SEED_BASE (default 1): the CI set is 96,
//	           24 of each kind of sale (a seed's kind is the seed modulo 4)
//	STEPS      steps per seed (default 80), or "N:indices" of a shrunk run
//	SIMSTEPS   a file of steps, one per line (as a failure writes it)
//	SIM_SKIP   step kinds or faults left out, comma-separated
//	SIM_SHRINK how long a failure is shrunk for (default 90s; 0: not)
//	SIM_SERIAL every step alone (no concurrent groups; a replay needs the same)
//	SIM_KINDS  only the seeds of these kinds of sale (0–3, comma-separated)
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var total = newStats()

// quietRedis drops go-redis's own log lines: the simulation takes Redis
// away on purpose, and every dial that fails would say so.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{})
	start := time.Now()
	code := m.Run()
	total.Elapsed = time.Since(start)
	if total.Runs > 0 {
		fmt.Print(total.Summary())
	}
	os.Exit(code)
}

func TestSim(t *testing.T) {
	opts := Options{Faults: env("SIM_FAULTS", "on") != "off", Skip: map[string]bool{}, Serial: os.Getenv("SIM_SERIAL") != ""}
	for _, k := range strings.Split(os.Getenv("SIM_SKIP"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			opts.Skip[k] = true
		}
	}
	spec := env("STEPS", "80")
	if f := os.Getenv("SIMSTEPS"); f != "" {
		spec = f
	}
	shrink, err := time.ParseDuration(env("SIM_SHRINK", "90s"))
	if err != nil {
		t.Fatalf("SIM_SHRINK: %v", err)
	}
	var seeds []uint64
	if s := os.Getenv("SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SEED: %v", err)
		}
		seeds = []uint64{seed}
	} else {
		n, err1 := strconv.Atoi(env("SEEDS", "96"))
		base, err2 := strconv.ParseUint(env("SEED_BASE", "1"), 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("SEEDS / SEED_BASE: %v %v", err1, err2)
		}
		for i := range n {
			seeds = append(seeds, base+uint64(i))
		}
	}
	if k := os.Getenv("SIM_KINDS"); k != "" {
		var kept []uint64
		for _, seed := range seeds {
			if strings.Contains(","+k+",", fmt.Sprintf(",%d,", seed%uint64(saleKinds))) {
				kept = append(kept, seed)
			}
		}
		seeds = kept
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			steps, err := Spec(seed, spec, opts)
			if err != nil {
				t.Fatal(err)
			}
			f := Run(t, seed, steps, total)
			if f == nil {
				return
			}
			report(t, seed, spec, steps, f, shrink)
		})
	}
}

// report prints the failure, shrinks it, and says how to replay it.
func report(t *testing.T, seed uint64, spec string, steps []Step, f *Failure, budget time.Duration) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "FAILED seed %d (%s)\n  after step %d of %d: %s: %s\n", seed, f.Setup, f.Step, len(steps), f.Check, f.Msg)
	if f.Step >= 0 && f.Step < len(steps) {
		fmt.Fprintf(&b, "  the step: %s\n", steps[f.Step])
	}
	// A replay needs the same generation knobs.
	knobs := ""
	for _, k := range []string{"SIM_SKIP", "SIM_FAULTS", "SIM_SERIAL", "SIM_SKIP_CHECKS"} {
		if v := os.Getenv(k); v != "" {
			knobs += k + "=" + v + " "
		}
	}
	fmt.Fprintf(&b, "  replay: %smake sim SEED=%d STEPS=%s\n", knobs, seed, spec)
	idx := make([]int, len(steps))
	for i := range idx {
		idx[i] = i
	}
	best := f
	if budget > 0 && f.Step >= 0 {
		idx, best = Shrink(t, seed, steps, f, budget, func(s string) { t.Log(s) })
	}
	short := make([]Step, len(idx))
	var lines strings.Builder
	fmt.Fprintf(&lines, "# seed %d: %s: %s\n", seed, best.Check, best.Msg)
	for i, j := range idx {
		short[i] = steps[j]
		fmt.Fprintf(&lines, "%s\n", steps[j])
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("waitroom-sim-%d.steps", seed))
	if err := os.WriteFile(path, []byte(lines.String()), 0o644); err != nil {
		t.Logf("write %s: %v", path, err)
	}
	fmt.Fprintf(&b, "  shrunk to %d steps (%s: %s):\n", len(short), best.Check, best.Msg)
	for i, s := range short {
		fmt.Fprintf(&b, "    %3d  %s\n", i, s)
	}
	if n, err := strconv.Atoi(spec); err == nil {
		fmt.Fprintf(&b, "  replay the shrunk run: %smake sim SEED=%d STEPS=%d:%s\n", knobs, seed, n, FormatIndices(idx))
	}
	fmt.Fprintf(&b, "  or: make sim SEED=%d SIMSTEPS=%s\n", seed, path)
	if len(best.Logs) > 0 {
		b.WriteString("  the origin nodes' last warnings:\n")
		for _, l := range best.Logs[max(0, len(best.Logs)-30):] {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	t.Error(b.String())
}
