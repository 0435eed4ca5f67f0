package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

// gathered reads the metrics of event from reg, by name: a gauge's value,
// or a histogram's sample count by outcome.
func gathered(t *testing.T, reg *prometheus.Registry, event int64) (gauges map[string]float64, decisions map[string]uint64) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	gauges, decisions = map[string]float64{}, map[string]uint64{}
	ev := strconv.FormatInt(event, 10)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["event"] != ev {
				continue
			}
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				gauges[f.GetName()] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				decisions[labels["outcome"]] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return gauges, decisions
}

// TestQueueMetrics: the gauges are the event's queue as its room sees it,
// and each answer is timed under its outcome in the config's registry.
func TestQueueMetrics(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	h := &Handler{Event: testenv.EventID(), Keys: []Key{{ID: "k1", Secret: testSecret}}, Watermark: 2, HardCap: 4}
	require.NoError(t, h.Provision(ctx))
	t.Cleanup(func() { require.NoError(t, h.Cleanup()) })
	<-h.room.ready
	reg := ctx.GetMetricsRegistry()

	for range 5 { // 1 and 2 admitted, 3 and 4 waiting, 5 past the hard cap
		serve(t, h, get(h, ""))
	}
	gauges, decisions := gathered(t, reg, h.Event)
	assert.Equal(t, map[string]float64{
		"caddy_waitroom_watermark":          2,
		"caddy_waitroom_last_position":      5,
		"caddy_waitroom_admitted_positions": 2,
		"caddy_waitroom_waiting_positions":  2,
	}, gauges)
	assert.Equal(t, map[string]uint64{StatusAdmitted: 2, StatusWaiting: 2, StatusSoldOut: 1}, nonZero(decisions))

	// An admitted request's decision is timed before the site answers.
	tok, err := h.keys.Issue("v_metrics", h.Event, 1, h.ttl)
	require.NoError(t, err)
	r := get(h, tok.Raw)
	r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
	var seenBySite uint64
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		_, d := gathered(t, reg, h.Event)
		seenBySite = d[StatusAdmitted]
		return nil
	})
	require.NoError(t, h.ServeHTTP(httptest.NewRecorder(), r, next))
	assert.Equal(t, uint64(3), seenBySite, "recorded when passed on")

	update(t, h, waitroom.Change{SoldOut: ptr(true)})
	gauges, _ = gathered(t, reg, h.Event)
	assert.Equal(t, 0.0, gauges["caddy_waitroom_waiting_positions"], "nobody waits for a sold-out event")
	assert.Equal(t, 2.0, gauges["caddy_waitroom_admitted_positions"])
}

func nonZero(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

// TestDecisionOutcomes: every status the handler sets is an outcome of the
// histogram, and anything else counts as an error.
func TestDecisionOutcomes(t *testing.T) {
	for _, status := range []string{StatusAdmitted, StatusWaiting, StatusSoldOut, StatusUnavailable,
		StatusPreQueue, StatusChallenge, StatusRateLimited, StatusCompleted, "", "something else"} {
		t.Run(status, func(t *testing.T) {
			ev := strconv.FormatInt(testenv.EventID(), 10)
			m := metricsFor(ev)
			d := m.startDecision(caddy.NewReplacer(), ev, nil)
			if status != "" {
				setPlaceholders(&d.repl, status, 0)
			}
			d.Done()
			want := status
			if status == "" || status == "something else" {
				want = outcomeError
			}
			var got dto.Metric
			require.NoError(t, metrics.decisions.WithLabelValues(ev, want).(prometheus.Histogram).Write(&got))
			assert.Equal(t, uint64(1), got.GetHistogram().GetSampleCount())
		})
	}
}
