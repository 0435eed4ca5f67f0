package redisurl_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/waitroom/waitroom/internal/redisurl"
)

// TestLoggerTakesGoRedisLines: with the logger set, go-redis's own line
// about a failed dial comes out through slog, not the standard log.
func TestLoggerTakesGoRedisLines(t *testing.T) {
	var buf bytes.Buffer
	redis.SetLogger(redisurl.Logger{Log: slog.New(slog.NewJSONHandler(&buf, nil))})
	t.Cleanup(func() { redis.SetLogger(redisurl.Logger{Log: slog.Default()}) })

	// Nothing listens on port 1: every dial is refused at once.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	_ = c.Ping(context.Background()).Err()

	assert.Contains(t, buf.String(), `"component":"go-redis"`)
	assert.Contains(t, buf.String(), `"level":"WARN"`)
	assert.Contains(t, buf.String(), "127.0.0.1:1")
}
