package waitroom_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: rooms,
// watchers and Redis clients must all stop with their context or Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
