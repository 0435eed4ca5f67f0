package origin_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHoldOutcomesNamedInTheirHelp: the holds counter's HELP, which a
// dashboard's reader sees, names the outcome labels the series carries,
// the per-user limit's among them (its answer's code is longer).
func TestHoldOutcomesNamedInTheirHelp(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ev := h.createEvent(map[string]any{"capacity": 10, "max_per_user": 2})
	require.Equal(t, http.StatusCreated, h.hold(ev.ID, "ann", 1, "a").status)
	require.Equal(t, http.StatusUnprocessableEntity, h.hold(ev.ID, "bob", 3, "b").status)

	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(h.do(http.MethodGet, "/metrics", nil, nil).body))
	require.NoError(t, err)
	holds := families["waitroom_origin_holds_total"]
	require.NotNil(t, holds)
	named := map[string]bool{}
	for _, w := range strings.FieldsFunc(holds.GetHelp(), func(r rune) bool { return r == ' ' || r == ',' || r == ':' }) {
		named[w] = true
	}
	var outcomes []string
	for _, m := range holds.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "outcome" {
				outcomes = append(outcomes, l.GetValue())
			}
		}
	}
	assert.ElementsMatch(t, []string{"held", "per_user_limit"}, outcomes)
	for _, o := range outcomes {
		assert.True(t, named[o], "HELP %q does not name the outcome %q", holds.GetHelp(), o)
	}
}
