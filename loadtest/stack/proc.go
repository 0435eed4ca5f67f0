// Package stack starts and stops what a load run needs besides the servers
// it is given: the origin and Caddy as child processes, and, for fault
// injection, a Redis of its own and a pausable proxy in front of Postgres.
// Everything it starts it stops again, on success, failure and Ctrl-C alike.
package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a child process whose output goes to a log file.
type Proc struct {
	Name string
	Log  string

	cmd  *exec.Cmd
	done chan struct{}
	err  error

	mu      sync.Mutex
	stopped bool
}

// StartProc runs path with args and env (added to this process's
// environment), writing its stdout and stderr to logPath.
func StartProc(name, path string, args, env []string, logPath string) (*Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group: Ctrl-C reaches us, and we stop it in order.
		Setpgid: true,
		// A safety net should this process die without stopping it.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, path, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process ended, and how, without waiting.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop asks the process to end (SIGTERM), and kills it after grace.
func (p *Proc) Stop(grace time.Duration) error {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s; killed", p.Name, grace)
	}
}

// Kill ends the process at once, as a crash would.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Pause stops the process (SIGSTOP) until Resume: it keeps its sockets but
// answers nothing, as a hung server does.
func (p *Proc) Pause() error { return p.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume lets a paused process run again.
func (p *Proc) Resume() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// Tail is the end of the process's log, for error messages.
func (p *Proc) Tail(lines int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	all := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return string(bytes.Join(all, []byte("\n")))
}

// failed describes a process that exited when it should not have.
func (p *Proc) failed() error {
	exited, err := p.Exited()
	if !exited {
		return nil
	}
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		return nil
	}
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("%s exited (%v); the end of %s:\n%s", p.Name, err, p.Log, indent(p.Tail(15)))
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// waitUntil polls ready every 50 ms until it returns nil, the process
// exits, or timeout passes.
func waitUntil(ctx context.Context, p *Proc, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if err := p.failed(); err != nil {
			return err
		}
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w; the end of %s:\n%s", p.Name, timeout, last, p.Log, indent(p.Tail(15)))
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}
