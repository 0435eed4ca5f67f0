package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBenchmarkRate(t *testing.T) {
	out := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"EVALSHA 9f90 5 inv:{evt:1}:remaining user:__rand_int__ {"u":"x","q":1} 20","7042.25","0.584","0.048","0.151","2.183","6.519","35.263"
`
	rps, err := benchmarkRate(out)
	require.NoError(t, err)
	assert.InDelta(t, 7042.25, rps, 0.001)
	_, err = benchmarkRate("")
	require.Error(t, err)
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=3,usec=120,usec_per_call=40.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_set:calls=7,usec=14,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n"
	stats, err := parseCommandStats(info)
	require.NoError(t, err)
	assert.Equal(t, map[string]commandStat{"evalsha": {Calls: 3, Usec: 120}, "set": {Calls: 7, Usec: 14}}, stats)
	_, err = parseCommandStats("cmdstat_get:calls=x,usec=1\r\n")
	require.Error(t, err)

	d := holdCosts{commands: stats}.sub(holdCosts{commands: map[string]commandStat{"evalsha": {Calls: 1, Usec: 20}, "set": {Calls: 7, Usec: 14}}})
	assert.Equal(t, map[string]commandStat{"evalsha": {Calls: 2, Usec: 100}}, d.commands, "commands not called in between are left out")
}

func TestMedianRoundIsOneRound(t *testing.T) {
	rounds := func(ratios ...float64) []holdsRound {
		rs := make([]holdsRound, len(ratios))
		for i, r := range ratios {
			rs[i] = holdsRound{ratio: r, perSecond: 1000 * r, cmdline: strconv.Itoa(i)}
		}
		return rs
	}
	for _, c := range []struct {
		ratios []float64
		want   string // the round's own cmdline: its index
	}{
		{[]float64{0.3}, "0"},
		{[]float64{0.3, 0.4, 0.2}, "0"},
		{[]float64{0.3, 0.4, 0.2, 0.35}, "0"}, // the lower middle of an even count
		{[]float64{0.26, 0.40, 0.35, 0.31, 0.36}, "2"},
	} {
		m := medianRound(rounds(c.ratios...))
		if m.cmdline != c.want || m.perSecond != 1000*m.ratio {
			t.Errorf("median round of %v: round %s (ratio %v, %v/s), want round %s", c.ratios, m.cmdline, m.ratio, m.perSecond, c.want)
		}
	}
}

// The rounds after the first take no profile: they must not fail for it.
func TestStartProfilesWithoutFolder(t *testing.T) {
	wait := startProfiles(context.Background(), "http://127.0.0.1:1", "", time.Second)
	require.NoError(t, wait())
}
