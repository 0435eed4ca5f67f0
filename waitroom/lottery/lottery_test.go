package lottery

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The known answer was computed independently of this package (Python's
// hmac and hashlib following the package doc), so the doc and the code are
// checked against each other.
func TestOrderKnownAnswer(t *testing.T) {
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i)
	}
	got := Order(seed, []string{"carol", "alice", "dave", "bob", "erin", "frank", "alice"})
	assert.Equal(t, []string{"dave", "bob", "carol", "alice", "erin", "frank"}, got)
	assert.Equal(t, "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd", Commitment(seed))
	assert.Equal(t, map[string]int64{"dave": 11, "bob": 12, "carol": 13, "alice": 14, "erin": 15, "frank": 16},
		Positions(seed, []string{"frank", "erin", "dave", "carol", "bob", "alice"}, 10))
}

func TestOrderDoesNotDependOnArrivalOrder(t *testing.T) {
	seed := NewSeed()
	a := Order(seed, []string{"x", "y", "z", "w"})
	b := Order(seed, []string{"w", "z", "y", "x"})
	assert.Equal(t, a, b)
	assert.Empty(t, Order(seed, nil))
	assert.Equal(t, []string{"only"}, Order(seed, []string{"only"}))
}

func TestUniformRejectsTheBiasedTail(t *testing.T) {
	// n = 2^63 + 1: half of the 64-bit values are past the last whole
	// multiple of n and must be drawn again; the results stay below n.
	s := newStream(NewSeed())
	n := uint64(1)<<63 + 1
	for range 1000 {
		require.Less(t, s.uniform(n), n)
	}
	assert.Greater(t, s.counter, uint64(1200), "about two values per result are drawn")
	s = newStream(NewSeed())
	for range 100 {
		require.Zero(t, s.uniform(1))
	}
}

// TestOrderIsUniform draws many times and checks, with a chi-square test
// over (sorted index, position), that each entrant is as likely to get any
// position. The seeds are fixed (SHA-256 of the trial's number), so the
// test gives the same answer on every run: a bound crossed by chance
// would otherwise fail one run in a thousand.
func TestOrderIsUniform(t *testing.T) {
	const n, trials = 8, 16000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("e%02d", i)
	}
	var counts [n][n]float64
	for trial := range trials {
		seed := sha256.Sum256(binary.BigEndian.AppendUint64(nil, uint64(trial)))
		for pos, id := range Order(seed[:], ids) {
			var idx int
			fmt.Sscanf(id, "e%02d", &idx)
			counts[idx][pos]++
		}
	}
	expected := float64(trials) / n
	chi := 0.0
	for i := range n {
		for j := range n {
			d := counts[i][j] - expected
			chi += d * d / expected
		}
	}
	// Each trial adds a whole permutation, n cells that are not drawn
	// independently: for uniform orders the sum has mean n(n-1), n/(n-1)
	// times that of a chi-square of (n-1)² = 49 degrees of freedom, and
	// that shape scaled. Scaled back, its 0.999 quantile is about 85.4.
	chi *= float64(n-1) / n
	assert.Less(t, chi, 85.4, "chi-square %.1f", chi)
	assert.Greater(t, chi, 20.0, "too regular to be random: %.1f", chi)
	t.Logf("chi-square %.1f of 49 degrees of freedom", chi)
}

func TestCheck(t *testing.T) {
	seed := NewSeed()
	p := Published{Commitment: Commitment(seed), Seed: hex.EncodeToString(seed), Entrants: []string{"b", "a"}, Algorithm: Algorithm}
	order, err := Check(p)
	require.NoError(t, err)
	assert.Equal(t, Order(seed, p.Entrants), order)

	bad := p
	bad.Seed = hex.EncodeToString(NewSeed())
	_, err = Check(bad)
	assert.ErrorIs(t, err, ErrCommitment)
	bad = p
	bad.Algorithm = "other"
	_, err = Check(bad)
	assert.ErrorIs(t, err, ErrAlgorithm)
}

func TestParseSeed(t *testing.T) {
	_, err := ParseSeed("zz")
	assert.Error(t, err)
	_, err = ParseSeed("00ff")
	assert.ErrorContains(t, err, "at least 16")
	b, err := ParseSeed("000102030405060708090a0b0c0d0e0f")
	require.NoError(t, err)
	assert.Len(t, b, 16)
}
