package redisurl

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// Logger sends go-redis's own log lines (failed dials, reconnects, pool
// trouble) through a structured logger rather than the standard library's,
// which writes past it to stderr: redis.SetLogger(redisurl.Logger{Log: l}).
// go-redis has one logger per process, so the last call wins.
type Logger struct{ Log *slog.Logger }

// Printf logs one go-redis line at warning level: go-redis logs only what
// went wrong.
func (l Logger) Printf(ctx context.Context, format string, v ...any) {
	l.Log.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "go-redis")
}
