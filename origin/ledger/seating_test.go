package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/origin/seatmap"
)

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Parent    string     `json:"Parent Relationship"`
	Plans     []planNode `json:"Plans"`
}

// eventWideScans lists the scans of event_seats in sql's plan that read
// every seat of an event: a sequential scan, or an index scan whose only
// condition is the event.
func eventWideScans(t *testing.T, l *Ledger, sql string, args ...any) []string {
	t.Helper()
	var raw []byte
	require.NoError(t, l.Pool().QueryRow(context.Background(), "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&raw))
	var plans []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(raw, &plans))
	var wide []string
	var walk func(n planNode)
	walk = func(n planNode) {
		switch {
		case n.NodeType == "Seq Scan" && n.Relation == "event_seats":
			wide = append(wide, "Seq Scan on "+n.Relation)
		case strings.HasPrefix(n.Index, "event_seats") && (n.IndexCond == "" ||
			strings.HasPrefix(n.IndexCond, "(event_id = ") && !strings.Contains(n.IndexCond, " AND ")):
			wide = append(wide, fmt.Sprintf("%s using %s: %s", n.NodeType, n.Index, n.IndexCond))
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plans[0].Plan)
	return wide
}

// A large event created after the seat tables were last analyzed must not
// look empty to the planner (its seats and general-admission places counted
// as a row or so): the claim of a hold's seats then finds them by their
// keys, not by reading the whole event once per seat of the event (minutes
// for 200,000 seats).
func TestNewSeatedEventIsPlannedByItsKeys(t *testing.T) {
	ctx := context.Background()
	l := testLedger(t, testenv.Postgres(t))
	// The statistics as autoanalyze leaves them after an earlier, small
	// event, and kept so while the test runs.
	_, err := l.Pool().Exec(ctx, `ALTER TABLE event_seats SET (autovacuum_enabled = false);
		ALTER TABLE ga_places SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	sectionEvent(t, l, 100)
	_, err = l.Pool().Exec(ctx, `ANALYZE event_seats; ANALYZE ga_places`)
	require.NoError(t, err)

	rows := make([]seatmap.Row, 20)
	for i := range rows {
		rows[i] = seatmap.Row{ID: fmt.Sprint(i + 1), Seats: 1000}
	}
	m := seatmap.Map{Sections: []seatmap.Section{
		{ID: "A", Price: 100, Rows: rows},
		{ID: "GA-East", Price: 50, Capacity: 20_000},
	}}
	ev, err := l.CreateEvent(ctx, Event{ID: testenv.EventID(), Name: "large", Capacity: m.Capacity(),
		Sellable: m.Capacity(), Price: 50, Currency: "inr", HoldTTLSeconds: 60, MaxPerUser: 4, CreatedAt: writerNow, Seating: &m})
	require.NoError(t, err)

	seats := []string{"A-1-499", "A-1-500", "A-1-501", "A-1-502"}
	assert.Empty(t, eventWideScans(t, l, sqlClaimSeats, ev.ID, uuid.NewString(), writerNow.Add(time.Minute), seats, writerNow),
		"the claim of a hold's seats reads the whole event")
	for table, n := range map[string]float64{"event_seats": 20_000, "ga_places": 20_000} {
		var raw []byte
		require.NoError(t, l.Pool().QueryRow(ctx, "EXPLAIN (FORMAT JSON) SELECT * FROM "+table+" WHERE event_id = $1", ev.ID).Scan(&raw))
		var plans []struct {
			Plan struct {
				Rows float64 `json:"Plan Rows"`
			}
		}
		require.NoError(t, json.Unmarshal(raw, &plans))
		assert.Greater(t, plans[0].Plan.Rows, n/2, "the planner's count of the new event's rows in %s", table)
	}
}

// placeScans lists the scans of ga_places in sql's plan, as the server plans
// it under plan_cache_mode mode (force_custom_plan: the first executions of
// a prepared statement; force_generic_plan: the plan it may keep after
// five), that read more places than they are after: a sequential scan, or
// an index scan that finds its rows by the event or the section rather
// than by number or hold. An ordered scan of the section's places is left
// out when it is straight under the statement's LIMIT (LockRows between),
// as that scan stops at the places it needs. sql runs as EXPLAIN EXECUTE
// of a prepared statement, since EXPLAIN of sql with arguments is planned
// as a custom plan only, with the event, the hold and true (a sale's
// read, sqlSeatsOfHold's $3).
func placeScans(t *testing.T, l *Ledger, mode, sql string, event int64, hold string) []string {
	t.Helper()
	ctx := context.Background()
	var raw []byte
	require.NoError(t, l.InTx(ctx, time.Time{}, func(tx Tx) error {
		if _, err := tx.tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
			return err
		}
		if _, err := tx.tx.Exec(ctx, "PREPARE place_scans AS "+sql); err != nil {
			return err
		}
		err := tx.tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (FORMAT JSON) EXECUTE place_scans(%d, '%s', true)", event, uuid.MustParse(hold))).Scan(&raw)
		if err != nil {
			return err
		}
		_, err = tx.tx.Exec(ctx, "DEALLOCATE place_scans")
		return err
	}))
	var plans []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(raw, &plans))
	var wide []string
	var walk func(n planNode, limited bool)
	walk = func(n planNode, limited bool) {
		switch {
		case n.NodeType == "Seq Scan" && n.Relation == "ga_places":
			wide = append(wide, "Seq Scan on "+n.Relation)
		case strings.HasPrefix(n.Index, "ga_places"):
			byKey := strings.Contains(n.IndexCond, "(n = ") || strings.Contains(n.IndexCond, "(hold_id = ")
			ordered := limited && n.NodeType == "Index Scan" && strings.Contains(n.IndexCond, "(section = ")
			if !byKey && !ordered {
				wide = append(wide, fmt.Sprintf("%s using %s: %s", n.NodeType, n.Index, n.IndexCond))
			}
		}
		for _, c := range n.Plans {
			walk(c, c.Parent == "Outer" && (n.NodeType == "Limit" || n.NodeType == "LockRows" && limited))
		}
	}
	walk(plans[0].Plan, false)
	return wide
}

// A confirmation of a hold of a large general-admission section numbers its
// few places by the section's free places in number order and by their
// keys: the planner takes a LIMIT it cannot read for a tenth of the rows,
// and with the section known only at run time it read the event's places
// in number order to find the section's first free ones, then all of them
// again to join the picked numbers to their rows (200,000 places per
// confirmation). Both plans the server may use for it are checked.
func TestSectionHoldIsNumberedByItsKeys(t *testing.T) {
	ctx := context.Background()
	l := testLedger(t, testenv.Postgres(t))
	_, err := l.Pool().Exec(ctx, `ALTER TABLE ga_places SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	sectionEvent(t, l, 100)
	_, err = l.Pool().Exec(ctx, `ANALYZE ga_places`)
	require.NoError(t, err)

	m := seatmap.Map{Sections: []seatmap.Section{
		{ID: "A", Price: 100, Rows: []seatmap.Row{{ID: "1", Seats: 4}}},
		{ID: "GA-West", Price: 50, Capacity: 5_000},
		{ID: "GA-East", Price: 50, Capacity: 20_000},
	}}
	ev, err := l.CreateEvent(ctx, Event{ID: testenv.EventID(), Name: "large", Capacity: m.Capacity(),
		Sellable: m.Capacity(), Price: 50, Currency: "inr", HoldTTLSeconds: 60, MaxPerUser: 4, CreatedAt: writerNow, Seating: &m})
	require.NoError(t, err)
	w := NewConfirmWriter(l)
	for _, user := range []string{"ann", "bob"} {
		require.NoError(t, w.Confirm(ctx, sectionSale(t, l, ev, user, 4)))
	}
	hold := sectionSale(t, l, ev, "cat", 4).HoldID

	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		assert.Empty(t, placeScans(t, l, mode, sqlSeatsOfHold, ev.ID, hold),
			"%s: the numbering of a section hold's places reads the section's places", mode)
	}
}
