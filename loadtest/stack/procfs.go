package stack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// PeakRSS is the most resident memory the process has had (VmHWM in
// /proc/<pid>/status), in bytes.
func PeakRSS(pid int) (int64, error) {
	v, err := procStatus(pid, "VmHWM")
	if err != nil {
		return 0, err
	}
	kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("VmHWM of %d: %w", pid, err)
	}
	return kb << 10, nil
}

// procStatus reads one field of /proc/<pid>/status.
func procStatus(pid int, field string) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, d := range dirs {
		p, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if pp, err := procStatus(p, "PPid"); err == nil && pp == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// RedisPIDs are the process ids the Redis at url reports: one, or one per
// master of a cluster.
func RedisPIDs(ctx context.Context, url string) ([]int, error) {
	var pids []int
	err := eachRedisServer(ctx, url, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		v, ok := infoValues(info)["process_id"]
		if !ok {
			return errors.New("redis INFO has no process_id")
		}
		pid, err := strconv.Atoi(v)
		pids = append(pids, pid)
		return err
	})
	return pids, err
}

// PostgresPIDs are the server's processes: the postmaster first, then its
// children (a backend per connection, and the background workers). The
// postmaster is found as the parent of our own backend.
func PostgresPIDs(ctx context.Context, url string) ([]int, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(ctx)
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	pp, err := procStatus(backend, "PPid")
	if err != nil {
		return nil, fmt.Errorf("postgres is not a process of this machine: %w", err)
	}
	postmaster, err := strconv.Atoi(pp)
	if err != nil {
		return nil, err
	}
	return append([]int{postmaster}, children(postmaster)...), nil
}

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// Linux since 2.6 on every architecture Go supports).
const clockTicks = 100

// CPUTime is the CPU time the process has used so far, user and system.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces: the fields start after its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// After the name: state(3) ... utime(14) stime(15), counted from 1.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
