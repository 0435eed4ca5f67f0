package waitroom

import (
	"testing"

	"github.com/waitroom/waitroom/internal/testenv"
)

func testenvRedis(t *testing.T) *testenv.RedisServer { return testenv.StartRedis(t) }
