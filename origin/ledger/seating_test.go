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
