package origin_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts (rooms, hold writers, webhooks, servers)
// ends with it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
