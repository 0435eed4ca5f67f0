package main

import (
	"testing"

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
