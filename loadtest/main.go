// Command loadtest proves the product in numbers: a whole flash sale through
// the gateway and the origin, the four-strategy benchmark, the waiting-room
// gate, the gateway's throughput ratios and the origin's durable holds per
// second. Every run stays on loopback, is bounded in size and time, and
// stops by itself.
//
//	go run ./loadtest <subcommand> [flags]
//
// Exit status: 0 done, 1 the run failed or broke an invariant (oversold or
// drift not zero), 2 bad usage, 130 interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, out, errOut io.Writer) error
}

var commands = []command{
	{"flashsale", "a whole flash sale through the gateway and the origin, with a report", runFlashSale},
	{"strategies", "four ways to sell the last ticket: 500 buyers, 100 tickets", runStrategies},
	{"admission", "the same crowd under the fixed-rate autopilot and the closed loop, side by side", runAdmission},
	{"gate", "peak concurrency at the inventory without and with the waiting room", runGate},
	{"gateway", "gateway throughput ratios: plain Caddy vs Caddy with the waiting room", runGateway},
	{"holds", "durable holds per second through the origin vs the bare hold script", runHolds},
	{"seats", "reserved seating: hot-seat contention (specific seats, best available) and seat map reads with wrk", runSeats},
	{"confirm", "confirmations per second of one event: 50,000 seats, 500 concurrent payers", runConfirm},
	{"up", "the product on this machine for a person to try, until Ctrl-C: origin, Caddy, a demo event", runUp},
	{"bots", "one bot client at 200 joins/s among 5,000 humans, with and without the challenge and join_rate", runBots},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a bad command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// failure is a run that completed but broke what it checks: exit status 1
// after the report is printed.
var errBroken = errors.New("invariant broken")

func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(errOut)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], out, errOut)
		var ue usageError
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ue):
			fmt.Fprintf(errOut, "loadtest %s: %s\nRun 'go run ./loadtest %s -h' for its flags.\n", c.name, ue.msg, c.name)
			return 2
		case ctx.Err() != nil:
			fmt.Fprintf(errOut, "loadtest %s: interrupted; everything it started is stopped\n", c.name)
			return 130
		case errors.Is(err, errBroken):
			fmt.Fprintf(errOut, "loadtest %s: %v\n", c.name, err)
			return 1
		default:
			fmt.Fprintf(errOut, "loadtest %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(errOut, "loadtest: unknown subcommand %q\n\n", args[0])
	usage(errOut)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: go run ./loadtest <subcommand> [flags]")
	fmt.Fprintln(w, "\nsubcommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'go run ./loadtest <subcommand> -h' for a subcommand's flags.")
}
