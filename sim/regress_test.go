package sim

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The runs in testdata/*.steps once reproduced a defect; each replays its
// step list for its seed and must now pass. A file's first lines
// say its seed ("# seed 8: …") and, when the run was made with some
// checks left out, which ("# skip-checks: gate-event").
func TestSimRegressions(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.steps"))
	if err != nil {
		t.Fatal(err)
	}
	seedLine := regexp.MustCompile(`(?m)^# seed (\d+)`)
	skipLine := regexp.MustCompile(`(?m)^# skip-checks: (.*)$`)
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".steps")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			m := seedLine.FindSubmatch(raw)
			if m == nil {
				t.Fatalf("%s names no seed", file)
			}
			seed, err := strconv.ParseUint(string(m[1]), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			steps, err := Spec(seed, file, Options{})
			if err != nil {
				t.Fatal(err)
			}
			skip := map[string]bool{}
			if m := skipLine.FindSubmatch(raw); m != nil {
				for _, c := range strings.Split(string(m[1]), ",") {
					skip[strings.TrimSpace(c)] = true
				}
			}
			if f := RunSkipping(t, seed, steps, total, skip); f != nil {
				t.Errorf("%s: %v", file, f)
			}
		})
	}
}
