package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/gaterush"
	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/sale"
	"github.com/waitroom/waitroom/loadtest/stack"
	"github.com/waitroom/waitroom/origin/ledger"
)

// gateFlags is the gate rush that ends the flash sale: every ticket sold
// scanned at the origin's gate, some shown twice at once at two gates.
type gateFlags struct {
	off bool
	cfg gaterush.Config
}

func (g *gateFlags) register(fs *flagSet) {
	d := gaterush.Defaults()
	fs.BoolVar(&g.off, "no-gate-rush", false, "end the sale without the gate rush")
	fs.IntVar(&g.cfg.Gates, "gates", d.Gates, "gates scanning in the gate rush")
	fs.Float64Var(&g.cfg.Twice, "gate-twice", d.Twice, "fraction of tickets shown a second time, at another gate at the same moment")
	fs.IntVar(&g.cfg.Scanners, "gate-scanners", d.Scanners, "tickets scanned at once in the gate rush")
}

func (g *gateFlags) check() error {
	if g.off {
		return nil
	}
	if g.cfg.Gates < 2 || g.cfg.Scanners < 1 {
		return usagef("--gates must be at least 2 and --gate-scanners positive")
	}
	return fraction(map[string]float64{"--gate-twice": g.cfg.Twice})
}

// run scans every valid ticket of the sale's event, as the ledger lists
// them, each gate with a device token of its own (so the origin needs no
// ORIGIN_GATE_TOKEN), and puts the outcome in res; the sale's seed picks
// the tickets shown twice.
func (g *gateFlags) run(ctx context.Context, sys *stack.System, res *sale.Result, errOut io.Writer) error {
	if g.off {
		return nil
	}
	l, err := ledger.Open(ctx, sys.DB.URL, ledger.Options{MaxConns: 2})
	if err != nil {
		return fmt.Errorf("gate rush: %w", err)
	}
	codes, err := l.ValidTicketCodes(ctx, sys.Event.ID)
	l.Close()
	if err != nil {
		return fmt.Errorf("gate rush: %w", err)
	}
	fmt.Fprintf(errOut, "gate rush: %s tickets at %d gates…\n", report.Count(len(codes)), g.cfg.Gates)
	cfg := g.cfg
	cfg.Seed, cfg.Event = res.Config.Seed, sys.Event.ID
	client := api.Client{HTTP: api.NewHTTPClient(cfg.Scanners*2, 10*time.Second), Base: sys.Origin.URL}
	cfg.Origin = client
	cfg.Admin = api.OriginAdmin{Client: client, Token: sys.AdminToken}
	res.GateRush, err = gaterush.Run(ctx, cfg, codes)
	return err
}

func gateErr(r *sale.Result) string {
	g := r.GateRush
	if g == nil || !g.Broken() {
		return ""
	}
	msg := fmt.Sprintf(", gate rush: %d double admissions (ledger %d), %d tickets never admitted",
		g.DoubleAdmissions, g.Ledger.DoubleAdmissions, g.NeverAdmitted)
	if g.LedgerError != "" {
		msg += " (ledger unreadable: " + g.LedgerError + ")"
	}
	return msg
}
