package stack

import (
	"crypto/sha256"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This test process has some resident memory and has used some CPU; a
// process that does not exist has neither.
func TestProcfs(t *testing.T) {
	rss, err := PeakRSS(os.Getpid())
	require.NoError(t, err)
	assert.Greater(t, rss, int64(1<<20))
	// Work until the kernel has counted a tick of it (10 ms).
	sum := sha256.Sum256(nil)
	var cpu time.Duration
	for i := 0; i < 1_000_000 && cpu == 0; i++ {
		for range 1000 {
			sum = sha256.Sum256(sum[:])
		}
		cpu, err = CPUTime(os.Getpid())
		require.NoError(t, err)
	}
	assert.Positive(t, cpu)

	_, err = PeakRSS(1 << 30)
	assert.Error(t, err)
	_, err = CPUTime(1 << 30)
	assert.Error(t, err)
}
