// Package wrk drives wrk (Debian's package), a C load generator that costs
// the server's machine far less per request than a Go client, so the rates
// it measures are the server's. It runs one measurement and reads wrk's
// report.
package wrk

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Load is one measurement: Conns connections over Threads threads, each
// sending the same request (GET URL with Header) one after the other, or
// the requests a wrk Lua script (Script, given ScriptArgs) makes.
type Load struct {
	URL        string
	Header     map[string]string
	Script     string
	ScriptArgs []string
	Conns      int
	Threads    int
	Duration   time.Duration
}

// Result is what wrk reported, and what it cost.
type Result struct {
	Requests  int64         `json:"requests"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	PerSecond float64       `json:"per_second"`
	// Non2xx counts answers outside 2xx and 3xx; SocketErrors connect,
	// read, write errors and timeouts.
	Non2xx       int64         `json:"non_2xx"`
	SocketErrors int64         `json:"socket_errors"`
	P50          time.Duration `json:"p50_ns"`
	P99          time.Duration `json:"p99_ns"`
	// CPU is the CPU time wrk itself used; CPUShare that as a share of
	// the machine's CPU over the run.
	CPU      time.Duration `json:"cpu_ns"`
	CPUShare float64       `json:"cpu_share"`
}

// Failed is the requests that got no 2xx/3xx answer.
func (r Result) Failed() int64 { return r.Non2xx + r.SocketErrors }

// Path is wrk's path, or an error naming the package to install.
func Path() (string, error) {
	p, err := exec.LookPath("wrk")
	if err != nil {
		return "", fmt.Errorf("wrk is not installed (Debian package wrk: apt-get install wrk): %w", err)
	}
	return p, nil
}

// Run runs one measurement.
func Run(ctx context.Context, l Load) (Result, error) {
	bin, err := Path()
	if err != nil {
		return Result{}, err
	}
	secs := max(1, int(l.Duration.Round(time.Second)/time.Second))
	args := []string{"--latency", "-t", strconv.Itoa(max(l.Threads, 1)), "-c", strconv.Itoa(max(l.Conns, 1)),
		"-d", strconv.Itoa(secs) + "s", "--timeout", "10s"}
	for k, v := range l.Header {
		args = append(args, "-H", k+": "+v)
	}
	if l.Script != "" {
		args = append(args, "-s", l.Script)
	}
	args = append(args, l.URL)
	if len(l.ScriptArgs) > 0 {
		args = append(append(args, "--"), l.ScriptArgs...)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("wrk %s: %w: %s", l.URL, err, strings.TrimSpace(errOut.String()))
	}
	wall := time.Since(start)
	r, err := Parse(out.String())
	if err != nil {
		return r, fmt.Errorf("wrk %s: %w", l.URL, err)
	}
	r.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	r.CPUShare = float64(r.CPU) / float64(wall) / float64(runtime.NumCPU())
	return r, nil
}

// Parse reads wrk's report (run with --latency).
func Parse(out string) (Result, error) {
	var r Result
	var haveRate, haveCount bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "Requests/sec:") && len(f) == 2:
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return r, fmt.Errorf("requests/sec %q: %w", f[1], err)
			}
			r.PerSecond, haveRate = v, true
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return r, fmt.Errorf("request count %q: %w", f[0], err)
			}
			d, err := time.ParseDuration(strings.TrimSuffix(f[3], ","))
			if err != nil {
				return r, fmt.Errorf("elapsed %q: %w", f[3], err)
			}
			r.Requests, r.Elapsed, haveCount = n, d, true
		case strings.HasPrefix(line, "Non-2xx or 3xx responses:") && len(f) == 5:
			n, err := strconv.ParseInt(f[4], 10, 64)
			if err != nil {
				return r, fmt.Errorf("non-2xx count %q: %w", f[4], err)
			}
			r.Non2xx = n
		case strings.HasPrefix(line, "Socket errors:"):
			// Socket errors: connect 0, read 0, write 0, timeout 0
			for i := 3; i < len(f); i += 2 {
				n, err := strconv.ParseInt(strings.TrimSuffix(f[i], ","), 10, 64)
				if err != nil {
					return r, fmt.Errorf("socket errors %q: %w", line, err)
				}
				r.SocketErrors += n
			}
		case len(f) == 2 && (f[0] == "50%" || f[0] == "99%"):
			d, err := time.ParseDuration(f[1])
			if err != nil {
				return r, fmt.Errorf("latency %q: %w", f[1], err)
			}
			if f[0] == "50%" {
				r.P50 = d
			} else {
				r.P99 = d
			}
		}
	}
	if !haveRate || !haveCount {
		return r, errors.New("no request count or rate in its report")
	}
	return r, nil
}
