package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waitroom/waitroom/loadtest/latency"
	"github.com/waitroom/waitroom/loadtest/report"
	"github.com/waitroom/waitroom/loadtest/stack"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/ticketcode"
)

func runConfirm(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("confirm", "Confirmations per second of one event: what the ledger writes for every paid\nbooking (hold and booking confirmed, seat numbers taken, tickets inserted,\nunder the server's deadline check), through the origin's confirmation writer\n(the confirmations of the moment in one transaction), run by many concurrent\npayers against the origin's own connection pool, until every seat of the event is\nsold. The seat numbers are then checked unique and within the capacity, and\nwhat PostgreSQL's sessions waited on during the run is sampled from\npg_stat_activity.", errOut)
	var srv servers
	srv.register(fs, true)
	seats := fs.Int64("seats", 50_000, "seats of the event, each sold to its own payer")
	payers := fs.Int("payers", 500, "concurrent payers")
	conns := fs.Int("conns", 32, "the ledger's connection pool (the origin's default)")
	jsonPath := fs.String("json", "", "also write the figures to this JSON file")
	alone := fs.Bool("alone", false, "each confirmation in a transaction of its own, as the origin confirmed before the confirmation writer (to compare)")
	commitDelay := fs.Duration("commit-delay", 0, "PostgreSQL's commit_delay for the ledger's sessions (with commit_siblings 5): the server's own group commit, to compare (0: off)")
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile of the confirmations (this process: the ledger's side of the origin) to this file")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := positive(map[string]float64{"seats": float64(*seats), "payers": float64(*payers), "conns": float64(*conns)}); err != nil {
		return err
	}
	if err := srv.check(false, true); err != nil {
		return err
	}
	db, err := stack.CreateDatabase(ctx, srv.databaseURL, "waitroom_confirm")
	if err != nil {
		return err
	}
	defer func() { _ = db.Drop(context.WithoutCancel(ctx)) }()
	ledgerURL := db.URL
	if *commitDelay > 0 {
		// Set for these sessions only (a superuser's setting).
		u, err := url.Parse(db.URL)
		if err != nil {
			return err
		}
		q := u.Query()
		q.Set("commit_delay", strconv.FormatInt(commitDelay.Microseconds(), 10))
		q.Set("commit_siblings", "5")
		u.RawQuery = q.Encode()
		ledgerURL = u.String()
	}
	lg, err := ledger.Open(ctx, ledgerURL, ledger.Options{MaxConns: int32(*conns)})
	if err != nil {
		return err
	}
	defer lg.Close()

	now := time.Now().UTC()
	ev, err := lg.CreateEvent(ctx, ledger.Event{ID: 1, Name: "Confirmations benchmark", Capacity: *seats,
		Sellable: *seats, Price: 90000, Currency: "inr", HoldTTLSeconds: 3600, MaxPerUser: 1, CreatedAt: now})
	if err != nil {
		return err
	}
	fmt.Fprintf(errOut, "writing %d holds and their bookings…\n", *seats)
	bookings, err := confirmSetup(ctx, lg, ev, now)
	if err != nil {
		return err
	}

	signer, err := ticketcode.NewSigner([]byte("confirm-benchmark-ticket-key-32-bytes!"))
	if err != nil {
		return err
	}
	sign := func(b ledger.Booking, nums []int32) ([]string, error) {
		codes := make([]string, len(nums))
		for i, n := range nums {
			var err error
			if codes[i], err = signer.Sign(ticketcode.Claims{BookingID: b.ID, EventID: ev.ID, Seat: strconv.Itoa(int(n))}); err != nil {
				return nil, err
			}
		}
		return codes, nil
	}
	// The origin's path: the confirmation writer, which commits the
	// confirmations queued at the same moment together.
	writer := ledger.NewConfirmWriter(lg)
	confirm := func(b ledger.Booking) error {
		at := time.Now().UTC()
		return writer.Confirm(ctx, ledger.Confirmation{HoldID: b.HoldID, BookingID: b.ID, PaymentID: "pay_" + b.ID,
			EventID: ev.ID, Now: at, Deadline: at.Add(5 * time.Second),
			Sign: func(nums []int32, _ []string) ([]string, error) { return sign(b, nums) }})
	}
	if *alone {
		// The same statements, one transaction and one commit each.
		confirm = func(b ledger.Booking) error {
			at := time.Now().UTC()
			return lg.InTx(ctx, at.Add(5*time.Second), func(tx ledger.Tx) error {
				if _, err := tx.ConfirmHold(ctx, b.HoldID, at); err != nil {
					return err
				}
				c, ok, err := tx.Bookings().Confirm(ctx, b.ID, "pay_"+b.ID, false, "", at)
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("booking %s was not waiting for its payment", b.ID)
				}
				nums, err := tx.TakeSeats(ctx, ev.ID, c.Quantity)
				if err != nil {
					return err
				}
				codes, err := sign(c, nums)
				if err != nil {
					return err
				}
				return tx.IssueTickets(ctx, c.ID, codes, nums, nil, at)
			})
		}
	}

	before, err := db.SettledWrites(ctx, 15*time.Second)
	if err != nil {
		return err
	}
	walBefore, err := readWAL(ctx, db.URL)
	if err != nil {
		return err
	}
	fmt.Fprintf(errOut, "%d payers confirm %d bookings through %d connections…\n", *payers, len(bookings), *conns)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	waits := sampleWaits(ctx, db)
	var (
		next   atomic.Int64
		failed atomic.Int64
		first  atomic.Value
		lat    latency.Recorder
		wg     sync.WaitGroup
	)
	start := time.Now()
	for range *payers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(bookings)) || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				if err := confirm(bookings[i]); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err.Error())
					continue
				}
				lat.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	waited := waits()
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	after, err := db.SettledWrites(ctx, 15*time.Second)
	if err != nil {
		return err
	}
	writes := after.Sub(before)
	walAfter, err := readWAL(ctx, db.URL)
	if err != nil {
		return err
	}
	wal := walAfter.sub(walBefore)
	numbering, err := checkSeatNumbers(ctx, db.URL, ev)
	if err != nil {
		return err
	}

	confirmed := int64(len(bookings)) - failed.Load()
	perSecond := float64(confirmed) / elapsed.Seconds()
	l := lat.Summary()
	mode := "confirmation writer"
	if *alone {
		mode = "one transaction each"
	}
	if *commitDelay > 0 {
		mode += fmt.Sprintf(", commit_delay %d µs", commitDelay.Microseconds())
	}
	t := report.Table{Header: []string{"mode", "confirmations", "payers", "time", "confirmations/s", "p50", "p99", "failed"}}
	t.Add(mode, report.Count(confirmed), *payers, report.Seconds(elapsed), report.Rate(perSecond),
		report.Millis(l.P50), report.Millis(l.P99), report.Count(failed.Load()))
	t.Write(out)
	if f, ok := first.Load().(string); ok {
		fmt.Fprintf(out, "first failure: %.300s\n", f)
	}
	perSeat := float64(writes.Rows()) / float64(max(confirmed, 1))
	fmt.Fprintf(out, "\nconfirmations/s: %s (goal ≥ 3,000: %s)\n", report.Rate(perSecond), met(perSecond >= 3000))
	fmt.Fprintf(out, "seat numbers: %s\n", numbering)
	fmt.Fprintf(out, "PostgreSQL per confirmation: %.2f rows written, %.2f commits; rows by table: %v\n",
		perSeat, float64(writes.Commits)/float64(max(confirmed, 1)), writes.Tables)
	fmt.Fprintf(out, "WAL per confirmation (the whole server): %.2f flushes to disk, %.0f bytes\n",
		float64(wal.Syncs)/float64(max(confirmed, 1)), float64(wal.Bytes)/float64(max(confirmed, 1)))
	fmt.Fprintf(out, "what the ledger's sessions waited on (share of %d samples of pg_stat_activity):\n", waited.samples)
	for _, w := range waited.top(6) {
		fmt.Fprintf(out, "  %-34s %5.1f%%\n", w.name, 100*float64(w.n)/float64(max(waited.total, 1)))
	}
	if failed.Load() > 0 || !numbering.ok {
		return errBroken
	}
	if *jsonPath != "" {
		return report.WriteJSON(*jsonPath, map[string]any{
			"mode": mode, "seats": *seats, "payers": *payers, "conns": *conns, "confirmed": confirmed,
			"seconds": elapsed.Seconds(), "confirmations_per_second": perSecond, "latency": l,
			"postgres": writes, "rows_per_confirmation": perSeat, "wal": wal, "waits": waited.counts,
		})
	}
	return nil
}

// confirmSetup writes one pending hold per seat and a booking waiting for
// its payment on each, as the origin does before a payment succeeds.
func confirmSetup(ctx context.Context, lg *ledger.Ledger, ev ledger.Event, now time.Time) ([]ledger.Booking, error) {
	n := int(ev.Capacity)
	holds := make([]ledger.Hold, n)
	for i := range holds {
		holds[i] = ledger.Hold{ID: uuid.NewString(), EventID: ev.ID, UserID: "payer-" + strconv.Itoa(i), Quantity: 1,
			Amount: ev.Price, ExpiresAt: now.Add(time.Hour), CreatedAt: now, IdempotencyKey: uuid.NewString(),
			RequestDigest: "-", Response: []byte("{}"), Position: int64(i + 1)}
	}
	for lo := 0; lo < n; lo += 1000 {
		batch := holds[lo:min(lo+1000, n)]
		if _, _, err := lg.InsertHolds(ctx, batch, make([]*time.Time, len(batch))); err != nil {
			return nil, err
		}
	}
	out := make([]ledger.Booking, n)
	var next atomic.Int64
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					errs <- nil
					return
				}
				h := holds[i]
				b, err := lg.Bookings().Insert(ctx, ledger.NewBooking{ID: uuid.NewString(), HoldID: h.ID, EventID: ev.ID,
					UserID: h.UserID, Quantity: 1, Amount: h.Amount, Currency: ev.Currency, Provider: "fakepay",
					PaymentMethod: "card", IdempotencyKey: uuid.NewString(), RequestDigest: "-", CreatedAt: now})
				if err != nil {
					errs <- err
					return
				}
				out[i] = b
			}
		}()
	}
	var err error
	for range 16 {
		err = errors.Join(err, <-errs)
	}
	return out, err
}

// walCounts is what pg_stat_wal counted, for the whole server: the WAL
// flushed to disk (each commit waits for one, or shares one) and its bytes.
type walCounts struct {
	Syncs int64 `json:"syncs"`
	Bytes int64 `json:"bytes"`
}

func (w walCounts) sub(o walCounts) walCounts { return walCounts{w.Syncs - o.Syncs, w.Bytes - o.Bytes} }

func readWAL(ctx context.Context, url string) (walCounts, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return walCounts{}, err
	}
	defer conn.Close(ctx)
	var w walCounts
	if err := conn.QueryRow(ctx, `SELECT wal_sync, wal_bytes::bigint FROM pg_stat_wal`).Scan(&w.Syncs, &w.Bytes); err != nil {
		return walCounts{}, fmt.Errorf("read pg_stat_wal: %w", err)
	}
	return w, nil
}

// numbering is what the tickets' seat numbers look like after the run.
type numbering struct {
	tickets, distinct, lowest, highest int64
	ok                                 bool
}

func (n numbering) String() string {
	verdict := "unique, within the capacity"
	if !n.ok {
		verdict = "BROKEN"
	}
	return fmt.Sprintf("%d tickets, %d distinct seats, from %d to %d: %s", n.tickets, n.distinct, n.lowest, n.highest, verdict)
}

func checkSeatNumbers(ctx context.Context, url string, ev ledger.Event) (numbering, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return numbering{}, err
	}
	defer conn.Close(ctx)
	var n numbering
	err = conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT seat), coalesce(min(seat), 0), coalesce(max(seat), 0)
		FROM tickets WHERE event_id = $1 AND valid`, ev.ID).Scan(&n.tickets, &n.distinct, &n.lowest, &n.highest)
	if err != nil {
		return numbering{}, fmt.Errorf("check seat numbers: %w", err)
	}
	n.ok = n.tickets == n.distinct && n.lowest >= 1 && n.highest <= ev.Capacity
	return n, nil
}

// waitCounts is what the active sessions of the run's database were
// waiting on, one count per session per sample ("running" when on the CPU).
type waitCounts struct {
	counts         map[string]int64
	samples, total int64
}

type waitCount struct {
	name string
	n    int64
}

func (w waitCounts) top(k int) []waitCount {
	var all []waitCount
	for name, n := range w.counts {
		all = append(all, waitCount{name, n})
	}
	slices.SortFunc(all, func(a, b waitCount) int { return int(b.n - a.n) })
	return all[:min(k, len(all))]
}

// sampleWaits samples pg_stat_activity every 10 ms until the returned
// function is called, which stops and returns the counts. A lock queue
// shows as Lock waits; a server doing the work as running and IO.
func sampleWaits(ctx context.Context, db *stack.Database) func() waitCounts {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan waitCounts, 1)
	go func() {
		w := waitCounts{counts: map[string]int64{}}
		defer func() { done <- w }()
		conn, err := pgx.Connect(ctx, db.URL)
		if err != nil {
			return
		}
		defer conn.Close(context.WithoutCancel(ctx))
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rows, err := conn.Query(ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'running') FROM pg_stat_activity
				WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()`)
			if err != nil {
				return
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return
			}
			w.samples++
			for _, name := range names {
				w.counts[name]++
				w.total++
			}
		}
	}()
	return func() waitCounts {
		cancel()
		return <-done
	}
}
