package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A seed draws the same steps every time, and every step reads back from
// the form it is printed in: a printed list replays exactly.
func TestStepsReplay(t *testing.T) {
	opts := Options{Faults: true}
	a, b := Generate(7, 500, opts), Generate(7, 500, opts)
	require.Equal(t, a, b)
	assert.NotEqual(t, a, Generate(8, 500, opts))
	kinds := map[Kind]bool{}
	for _, s := range a {
		kinds[s.Kind] = true
		got, err := ParseStep(s.String())
		require.NoError(t, err, s.String())
		want := s
		// Only what the step's kind uses is printed.
		want.Node, want.User, want.Qty, want.Sel, want.Mode, want.Method, want.Dur, want.Shape = got.Node, got.User, got.Qty, got.Sel, got.Mode, got.Method, got.Dur, got.Shape
		assert.Equal(t, want, got, s.String())
		assert.Equal(t, s.String(), got.String())
	}
	assert.Len(t, kinds, len(kindNames), "every kind is drawn in 500 steps")
	for _, s := range Generate(7, 500, Options{}) {
		assert.Equal(t, NoWrap, s.Wrap, "no faults without Faults")
		assert.NotContains(t, []Kind{RedisRestart, RedisFlush, RedisDown, PGDown, Heal, RefundOutcome, ProviderRefund, Foreign}, s.Kind)
	}
	par := 0
	for _, s := range a {
		if s.Par {
			par++
			assert.NotEqual(t, Settle, s.Kind, "a settle point runs alone")
		}
	}
	assert.Greater(t, par, 100, "steps run beside others")
	for _, s := range Generate(7, 500, Options{Faults: true, Serial: true}) {
		assert.False(t, s.Par, "no groups when serial")
	}
	kindsOfSale := map[SaleKind]bool{}
	for seed := range uint64(4) {
		kindsOfSale[SetupOf(seed).Kind] = true
	}
	assert.Len(t, kindsOfSale, int(saleKinds), "any 4 consecutive seeds draw every kind of sale")
}

func TestSpec(t *testing.T) {
	opts := Options{Faults: true}
	all := Generate(3, 40, opts)
	file := filepath.Join(t.TempDir(), "run.steps")
	var lines strings.Builder
	lines.WriteString("# a comment\n")
	for _, s := range all[5:8] {
		lines.WriteString(s.String() + "\n")
	}
	require.NoError(t, os.WriteFile(file, []byte(lines.String()), 0o644))
	tests := []struct {
		spec string
		want []Step
		err  string
	}{
		{"40", all, ""},
		{"40:5-7", all[5:8], ""},
		{"40:0,39", []Step{all[0], all[39]}, ""},
		{"40:40", nil, "outside"},
		{file, nil, ""},
		{"no/such/file", nil, "steps"},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := Spec(3, tc.spec, opts)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			if tc.want == nil {
				require.Len(t, got, 3)
				for i, s := range got {
					assert.Equal(t, all[5+i].String(), s.String())
				}
				return
			}
			assert.Equal(t, tc.want, got)
		})
	}
	assert.Equal(t, "0-2,5,7-8", FormatIndices([]int{8, 0, 1, 2, 5, 7}))
}

// In a sale of general-admission sections a hold of a section is now and
// then followed by the moves that make a lost ledger step of its
// confirmation matter, ending in a settle point; never elsewhere, and
// never without the fault.
func TestLapsedConfirmationPairing(t *testing.T) {
	const seed = 14
	setup := SetupOf(seed)
	require.Equal(t, SaleSections, setup.Kind)
	steps := Generate(seed, 200, Options{Faults: true})
	found := 0
	for i, s := range steps {
		if s.Kind != Webhook || s.Mode != WebhookOwn {
			continue
		}
		found++
		require.Less(t, i+3, len(steps))
		assert.Equal(t, PGCutAfterRedis, s.Wrap)
		book := steps[i-1]
		assert.Equal(t, Book, book.Kind)
		assert.Equal(t, s.User, book.User)
		assert.Contains(t, []int{0, 3, 5}, book.Method, "a card whose success the provider sends")
		assert.Equal(t, Clock, steps[i+1].Kind)
		assert.Greater(t, steps[i+1].Dur, setup.HoldTTL, "past the holds' lifetime")
		next := steps[i+2]
		assert.Equal(t, Hold, next.Kind)
		assert.Equal(t, ShapeSection, next.Shape)
		assert.NotEqual(t, s.User, next.User)
		assert.Equal(t, setup.MaxPerUser, next.Qty)
		assert.Equal(t, Settle, steps[i+3].Kind)
		got, err := ParseStep(s.String())
		require.NoError(t, err)
		assert.Equal(t, WebhookOwn, got.Mode, s.String())
	}
	assert.Positive(t, found)
	for _, s := range Generate(seed, 200, Options{Faults: true, Skip: map[string]bool{PGCutAfterRedis.String(): true}}) {
		assert.False(t, s.Kind == Webhook && s.Mode == WebhookOwn, "not without the fault")
	}
	for _, s := range Generate(seed+2, 200, Options{Faults: true}) { // general admission
		assert.False(t, s.Kind == Webhook && s.Mode == WebhookOwn, "only in a sale of sections")
	}
}
