package sale

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	require.NoError(t, Defaults().Validate())
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no users", func(c *Config) { c.Users = 0 }, "users must be positive"},
		{"no window", func(c *Config) { c.Window = 0 }, "window must be positive"},
		{"refresh below 1", func(c *Config) { c.Refresh = 0.5 }, "refresh must be between 1 and 2"},
		{"abandon above 1", func(c *Config) { c.Abandon = 2 }, "abandon must be between 0 and 1"},
		{"negative late", func(c *Config) { c.Late = -0.1 }, "late must be between 0 and 1"},
		{"plans past 1", func(c *Config) { c.Abandon, c.Decline, c.Late = 0.5, 0.3, 0.3 }, "must not exceed 1"},
		{"negative patience", func(c *Config) { c.Patience = -time.Second }, "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.change(&c)
			err := c.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The crowd is drawn from the seed: the same seed gives the same crowd,
// and its make-up follows the configured fractions.
func TestCrowd(t *testing.T) {
	cfg := Defaults()
	cfg.Users, cfg.Seed = 20000, 42
	s := &sim{cfg: cfg}
	a, b := s.crowd(), s.crowd()
	require.Len(t, a, cfg.Users)
	refresh, persist, double := 0, 0, 0
	for i := range a {
		u := &a[i]
		if i > 0 {
			assert.GreaterOrEqual(t, u.arrival, a[i-1].arrival, "sorted by arrival")
		}
		assert.Equal(t, u.arrival, b[i].arrival)
		assert.GreaterOrEqual(t, u.arrival, time.Duration(0))
		assert.Less(t, u.arrival, cfg.Window)
		if u.refresh {
			refresh++
		}
		if u.persist {
			persist++
		}
		if u.double {
			double++
		}
	}
	near := func(name string, got int, want float64) {
		assert.InDelta(t, want, float64(got)/float64(cfg.Users), 0.02, name)
	}
	near("refresh", refresh, cfg.Refresh-1)
	near("persist", persist, cfg.Persist)
	near("double click", double, cfg.DoubleClick)
}

// What holders do is drawn by the order of their first hold: the same
// seed gives every mode the same sequence, in the configured fractions.
func TestPlansByHoldOrder(t *testing.T) {
	cfg := Defaults()
	cfg.Seed, cfg.Abandon, cfg.Decline = 42, 0.3, 0.1
	const holders = 20000
	counts := map[plan]int{}
	same := 0
	other := cfg
	other.Seed++
	for n := uint64(1); n <= holders; n++ {
		p := planOf(cfg, n)
		require.Equal(t, p, planOf(cfg, n), "holder %d", n)
		counts[p]++
		if planOf(other, n) == p {
			same++
		}
	}
	near := func(name string, got int, want float64) {
		assert.InDelta(t, want, float64(got)/holders, 0.02, name)
	}
	near("abandon", counts[abandon], cfg.Abandon)
	near("decline", counts[payDeclined], cfg.Decline)
	near("late", counts[payLate], cfg.Late)
	near("change of mind", counts[payChangeMind], cfg.ChangeMind)
	// Another seed draws another sequence: two plans agree only as often
	// as chance has them agree.
	assert.Less(t, same, holders*7/10, "a new seed draws new plans")
}

func TestJitter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		d := jitter(rng, 10*time.Second)
		assert.GreaterOrEqual(t, d, 9*time.Second)
		assert.LessOrEqual(t, d, 12*time.Second)
	}
	assert.Zero(t, think(rng, 0))
}
