package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/loadtest/api"
	"github.com/waitroom/waitroom/loadtest/sale"
)

// buildServers builds Caddy with the module and the origin, once for the
// test binary. The packages are compiled by the rest of the suite already,
// so this is mostly linking.
func buildServers(t *testing.T) (caddy, origin string) {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "waitroom-loadtest-bin-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "./cmd/caddy", "./cmd/origin")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %w: %s", err, out)
		}
	})
	require.NoError(t, built.err)
	return filepath.Join(built.dir, "caddy"), filepath.Join(built.dir, "origin")
}

var built struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// A short flash sale through the real gateway and origin, on real Redis
// and PostgreSQL, must never oversell and must leave no drift, with and
// without faults. Timings are reported, never asserted.
func TestFlashSale(t *testing.T) {
	redisURL := testenv.RedisURL(t)
	databaseURL := testenv.Postgres(t)
	caddyBin, originBin := buildServers(t)

	tests := []struct {
		name     string
		users    int
		seats    int64
		late     float64
		faults   []string
		gateways int
	}{
		{"plain", 3000, 60, 0.05, nil, 1},
		{"with every fault", 2000, 40, 0.15, faultNames, 1},
		{"three gateways", 3000, 60, 0.05, nil, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f saleFlags
			fs := newFlags("flashsale", "", io.Discard)
			f.register(fs)
			require.NoError(t, fs.parse(nil))
			f.srv = servers{redisURL: redisURL, databaseURL: databaseURL}
			f.caddyBin, f.originBin = caddyBin, originBin
			f.cfg.Users = tc.users
			f.cfg.Window = 2 * time.Second
			f.seats = tc.seats
			f.holdTTL = 4 * time.Second
			f.cfg.Patience = 10 * time.Second
			f.cfg.Late = tc.late
			f.cfg.Conns = 128
			f.cfg.Timeout = 2 * time.Minute
			f.pgPause = 2 * time.Second
			f.faults = strings.Join(tc.faults, ",")
			f.gateways = tc.gateways
			f.quiet = true
			f.chartPath = filepath.Join(t.TempDir(), "sale.png")
			f.jsonPath = filepath.Join(t.TempDir(), "sale.json")
			faults, err := f.check()
			require.NoError(t, err)
			assert.Equal(t, len(tc.faults), len(faults))

			var report strings.Builder
			res, err := flashSale(context.Background(), f, faults, &report, testWriter{t})
			require.NoError(t, err)
			t.Log(report.String())

			assert.False(t, res.TimedOut, "the sale did not finish within its timeout")
			assert.Zero(t, res.Oversold, "oversold")
			assert.Empty(t, res.InvariantError)
			assert.Zero(t, res.Invariant.Drift, "invariant drift at the end")
			assert.Zero(t, res.DuplicateSeats, "seats sold twice")
			assert.Zero(t, res.DoubleBooked, "double clicks that made two bookings")
			assert.False(t, res.Broken())
			assert.Positive(t, res.SeatsSold)
			assert.LessOrEqual(t, res.SeatsSold, res.Event.Capacity)
			assert.Equal(t, res.Invariant.Confirmed, res.SeatsSold, "tickets received vs seats the ledger confirmed")
			assert.Zero(t, res.Outcomes[sale.TimedOut.String()])
			// Every command of the gateways, the origin and this load
			// generator kept its keys on one hash slot: a cluster URL
			// (make test-cluster) refuses any other with CROSSSLOT.
			if !slices.Contains(tc.faults, "redis-restart") {
				require.NotNil(t, res.RedisErrors, "Redis's error answers are read")
				assert.Zero(t, res.RedisErrors["CROSSSLOT"], "%v", res.RedisErrors)
			}
			assert.Positive(t, res.Requests.Edge, "nothing was answered at the edge")
			for _, p := range []string{f.chartPath, f.jsonPath} {
				st, err := os.Stat(p)
				require.NoError(t, err)
				assert.Positive(t, st.Size())
			}
			for _, fr := range res.Faults {
				assert.Empty(t, fr.Error, fr.Name)
			}
			// The money line balances: every captured payment is a sale
			// with its tickets, a refund, or a refund pending or failed.
			assert.Empty(t, res.MoneyError)
			require.NotNil(t, res.Money)
			m := res.Money
			assert.True(t, m.Balanced(), "money: %+v", m)
			assert.Zero(t, m.Kept.Count, "payments kept silently")
			assert.Equal(t, m.Captured.Count, m.Confirmed.Count+m.Refunded.Count+m.RefundPending.Count+m.RefundFailed.Count)
			assert.Equal(t, m.Captured.Amount, m.Confirmed.Amount+m.Refunded.Amount+m.RefundPending.Amount+m.RefundFailed.Amount)
			assert.Equal(t, res.Confirmed, m.Confirmed.Count, "bookings the buyers saw confirmed vs the ledger's")
			assert.Positive(t, m.Captured.Count)
			assert.Contains(t, report.String(), "money")
			// The peak memory of every process of the run is read.
			require.NotEmpty(t, res.Memory)
			for _, pm := range res.Memory {
				assert.Empty(t, pm.Error, pm.Name)
				assert.Positive(t, pm.PeakRSS, pm.Name)
				assert.Positive(t, pm.Processes, pm.Name)
			}
			assert.Zero(t, res.DuplicatePositions, "queue positions given to two users")
			assert.Positive(t, res.Positions)
			assert.Equal(t, tc.gateways, res.Gateways)
			assert.Len(t, res.Memory, 4+tc.gateways, "loadtest, each gateway, origin, Redis, PostgreSQL")

			// The sale ends with the gate rush: every ticket admitted once,
			// those shown twice at two gates at once refused once.
			g := res.GateRush
			require.NotNil(t, g)
			assert.Equal(t, res.Invariant.Confirmed, g.Tickets, "every valid ticket goes through the gates")
			assert.Positive(t, g.ShownTwice)
			assert.Equal(t, g.Tickets+g.ShownTwice, g.Scans)
			assert.Equal(t, g.Tickets, g.Admitted, "scans admitted")
			assert.Equal(t, g.ShownTwice, g.DuplicatesRefused, "duplicates refused")
			assert.Zero(t, g.DoubleAdmissions, "double admissions")
			assert.Zero(t, g.NeverAdmitted)
			assert.Zero(t, g.Unexpected, "%v", g.Errors)
			assert.Empty(t, g.LedgerError)
			assert.Equal(t, api.ScanTotals{Admitted: g.Tickets, AlreadyUsed: g.ShownTwice}, g.Ledger)
			assert.Contains(t, report.String(), "DOUBLE ADMISSIONS")
		})
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
