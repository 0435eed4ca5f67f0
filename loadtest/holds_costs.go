package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/stack"
)

// holdCosts are the counters a hold's cost is read from: the CPU time of
// the origin, Redis and PostgreSQL processes, and Redis's command
// statistics.
type holdCosts struct {
	origin, redis, postgres time.Duration
	// postgresBy is postgres by process: backends come and go.
	postgresBy map[int]time.Duration
	commands   map[string]commandStat
}

// commandStat is one command's line of Redis's INFO commandstats.
type commandStat struct {
	Calls int64 `json:"calls"`
	Usec  int64 `json:"usec"`
}

// readHoldCosts reads the counters. The CPU time of a process that is not
// of this machine (a Redis or PostgreSQL named by URL elsewhere) reads 0.
func readHoldCosts(ctx context.Context, rdb *redis.Client, databaseURL string, originPID int) (holdCosts, error) {
	var c holdCosts
	var err error
	if c.origin, err = stack.CPUTime(originPID); err != nil {
		return c, err
	}
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return c, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	if c.commands, err = parseCommandStats(info); err != nil {
		return c, err
	}
	if pids, err := stack.RedisPIDs(ctx, "redis://"+rdb.Options().Addr); err == nil && len(pids) == 1 {
		c.redis, _ = stack.CPUTime(pids[0])
	}
	c.postgresBy = map[int]time.Duration{}
	if pids, err := stack.PostgresPIDs(ctx, databaseURL); err == nil {
		for _, pid := range pids {
			if t, err := stack.CPUTime(pid); err == nil {
				c.postgresBy[pid] = t
			}
		}
	}
	return c, nil
}

// parseCommandStats reads INFO commandstats: lines such as
// "cmdstat_evalsha:calls=3,usec=120,usec_per_call=40.00,…".
func parseCommandStats(info string) (map[string]commandStat, error) {
	stats := map[string]commandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s commandStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			var err error
			switch k {
			case "calls":
				s.Calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				s.Usec, err = strconv.ParseInt(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("redis INFO commandstats: %q: %w", line, err)
			}
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return stats, nil
}

// sub is what was spent between b and c. A PostgreSQL process that started
// in between counts whole; one that ended in between is missed.
func (c holdCosts) sub(b holdCosts) holdCosts {
	d := holdCosts{origin: c.origin - b.origin, redis: c.redis - b.redis, commands: map[string]commandStat{}}
	for pid, t := range c.postgresBy {
		d.postgres += t - b.postgresBy[pid]
	}
	for name, s := range c.commands {
		p := b.commands[name]
		if s.Calls > p.Calls {
			d.commands[name] = commandStat{Calls: s.Calls - p.Calls, Usec: s.Usec - p.Usec}
		}
	}
	return d
}

// write prints the CPU time per hold of each process, client's included,
// and the Redis commands per hold with their time in Redis.
func (c holdCosts) write(out io.Writer, holds int64, client time.Duration) {
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.1f µs", float64(d.Microseconds())/float64(max(holds, 1)))
	}
	t := report.Table{Header: []string{"CPU time per hold", "origin", "Redis", "PostgreSQL", "wrk"}}
	t.Add("user + system", per(c.origin), per(c.redis), per(c.postgres), per(client))
	fmt.Fprintln(out)
	t.Write(out)
	names := make([]string, 0, len(c.commands))
	for name := range c.commands {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return c.commands[names[i]].Usec > c.commands[names[j]].Usec })
	ct := report.Table{Header: []string{"Redis command", "calls per hold", "µs per call"}}
	for _, name := range names {
		s := c.commands[name]
		ct.Add(name, fmt.Sprintf("%.2f", float64(s.Calls)/float64(max(holds, 1))), fmt.Sprintf("%.1f", float64(s.Usec)/float64(s.Calls)))
	}
	fmt.Fprintln(out)
	ct.Write(out)
	fmt.Fprintln(out)
}

// startProfiles takes a CPU profile and an allocation profile of the origin
// (its profiler at debugURL) over the next d, into dir, and returns a
// function that waits for them. With no debugURL or no dir (the rounds
// after the first) it does nothing.
func startProfiles(ctx context.Context, debugURL, dir string, d time.Duration) func() error {
	if debugURL == "" || dir == "" {
		return func() error { return nil }
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return func() error { return err }
	}
	secs := max(1, int(d/time.Second)-1)
	errc := make(chan error, 2)
	for name, path := range map[string]string{"cpu": "/debug/pprof/profile", "allocs": "/debug/pprof/allocs"} {
		go func() {
			errc <- fetchProfile(ctx, http.DefaultClient, fmt.Sprintf("%s%s?seconds=%d", debugURL, path, secs), filepath.Join(dir, name+".pprof"))
		}()
	}
	return func() error {
		return errors.Join(<-errc, <-errc)
	}
}
