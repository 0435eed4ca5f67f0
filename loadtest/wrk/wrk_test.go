package wrk

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const report = `Running 1s test @ http://127.0.0.1:18999/
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     4.79ms    8.78ms  62.35ms   91.66%
    Req/Sec     1.72k   807.65     2.68k    50.00%
  Latency Distribution
     50%  850.00us
     75%    3.68ms
     90%   11.49ms
     99%   50.41ms
  1731 requests in 1.03s, 0.86MB read
  Socket errors: connect 0, read 2, write 1, timeout 4
  Non-2xx or 3xx responses: 12
Requests/sec:   1683.65
Transfer/sec:    854.98KB
`

func TestParse(t *testing.T) {
	r, err := Parse(report)
	require.NoError(t, err)
	assert.Equal(t, int64(1731), r.Requests)
	assert.Equal(t, 1030*time.Millisecond, r.Elapsed)
	assert.InDelta(t, 1683.65, r.PerSecond, 1e-9)
	assert.Equal(t, int64(12), r.Non2xx)
	assert.Equal(t, int64(7), r.SocketErrors)
	assert.Equal(t, int64(19), r.Failed())
	assert.Equal(t, 850*time.Microsecond, r.P50)
	assert.Equal(t, 50410*time.Microsecond, r.P99)
}

func TestParseRejects(t *testing.T) {
	for name, out := range map[string]string{
		"empty":      "",
		"no rate":    "  10 requests in 1.00s, 1KB read\n",
		"bad count":  "  ten requests in 1.00s, 1KB read\nRequests/sec: 10\n",
		"bad errors": "  10 requests in 1.00s, 1KB read\n  Socket errors: connect x, read 0, write 0, timeout 0\nRequests/sec: 10\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(out)
			assert.Error(t, err)
		})
	}
}
