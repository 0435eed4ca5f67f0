package waitroom

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

func newChallenger(t testing.TB, clk *fakeClock, bits int, keys ...Key) *Challenger {
	t.Helper()
	if keys == nil {
		keys = []Key{{ID: "a", Secret: secretA}}
	}
	c, err := NewChallenger(mustKeySet(t, clk.Now, keys...), 42, bits, time.Minute, clk.Now)
	require.NoError(t, err)
	return c
}

func TestChallengeRoundTrip(t *testing.T) {
	clk := newClock()
	c := newChallenger(t, clk, 12)
	ch := c.Issue()
	assert.Len(t, ch.Nonce, NonceLen)
	assert.Equal(t, 12, ch.Difficulty)
	assert.Equal(t, clk.Now().Add(time.Minute), ch.ExpiresAt)

	sol := Solve(ch.Nonce, 12)
	sum := sha256.Sum256([]byte(sol))
	assert.GreaterOrEqual(t, LeadingZeroBits(sum[:]), 12)
	got, err := c.Verify(sol)
	require.NoError(t, err)
	assert.Equal(t, ch.ExpiresAt, got.ExpiresAt)
	assert.Len(t, got.ID(), 2*nonceRandom)
	assert.Equal(t, ch.Nonce[2*nonceExpiry:2*(nonceExpiry+nonceRandom)], got.ID())
}

func TestChallengeRefusals(t *testing.T) {
	clk := newClock()
	c := newChallenger(t, clk, 10)
	ch := c.Issue()
	sol := Solve(ch.Nonce, 10)
	nonce, counter, _ := strings.Cut(sol, ":")

	// A counter that does not solve it: find one.
	var wrong string
	for i := 0; ; i++ {
		cand := nonce + ":" + string(appendUint(nil, uint64(i)))
		sum := sha256.Sum256([]byte(cand))
		if LeadingZeroBits(sum[:]) < 10 {
			wrong = cand
			break
		}
	}
	// Another gateway's key, another event, another difficulty: each makes
	// a nonce this one never issued.
	other := newChallenger(t, clk, 10, Key{ID: "b", Secret: secretB}).Issue()
	otherEvent, err := NewChallenger(mustKeySet(t, clk.Now, Key{ID: "a", Secret: secretA}), 43, 10, time.Minute, clk.Now)
	require.NoError(t, err)
	easier := newChallenger(t, clk, 4).Issue()
	flipped := []byte(nonce)
	if flipped[len(flipped)-1] == '0' {
		flipped[len(flipped)-1] = '1'
	} else {
		flipped[len(flipped)-1] = '0'
	}

	for name, c2 := range map[string]struct {
		solution string
		want     error
	}{
		"empty":                {"", ErrBadSolution},
		"no colon":             {nonce, ErrBadSolution},
		"empty counter":        {nonce + ":", ErrBadSolution},
		"counter with a space": {nonce + ":12 3", ErrBadSolution},
		"second colon":         {nonce + ":1:2", ErrBadSolution},
		"counter too long":     {nonce + ":" + strings.Repeat("1", 33), ErrBadSolution},
		"short nonce":          {nonce[2:] + ":" + counter, ErrBadSolution},
		"not a solution":       {wrong, ErrBadSolution},
		"other key":            {Solve(other.Nonce, 10), ErrChallengeForged},
		"other event":          {Solve(otherEvent.Issue().Nonce, 10), ErrChallengeForged},
		"lower difficulty":     {Solve(easier.Nonce, 10), ErrChallengeForged},
		"tampered nonce":       {Solve(string(flipped), 10), ErrChallengeForged},
		"not hex":              {Solve(strings.Repeat("z", NonceLen), 10), ErrBadSolution},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Verify(c2.solution)
			assert.ErrorIs(t, err, c2.want)
		})
	}

	t.Run("expired", func(t *testing.T) {
		clk.Advance(time.Minute)
		_, err := c.Verify(sol)
		assert.ErrorIs(t, err, ErrChallengeExpiry)
	})
}

// TestChallengeCounterInAnyNotation: the counter is the client's; a hex
// one solves as well as a decimal one.
func TestChallengeCounterInAnyNotation(t *testing.T) {
	clk := newClock()
	c := newChallenger(t, clk, 8)
	nonce := c.Issue().Nonce
	for i := 0; ; i++ {
		cand := nonce + ":" + fmt.Sprintf("%x", i)
		if sum := sha256.Sum256([]byte(cand)); LeadingZeroBits(sum[:]) >= 8 {
			_, err := c.Verify(cand)
			require.NoError(t, err)
			return
		}
	}
}

func TestChallengeSurvivesKeyRotation(t *testing.T) {
	clk := newClock()
	old := newChallenger(t, clk, 8, Key{ID: "a", Secret: secretA})
	rotated := newChallenger(t, clk, 8, Key{ID: "b", Secret: secretB}, Key{ID: "a", Secret: secretA})
	_, err := rotated.Verify(Solve(old.Issue().Nonce, 8))
	assert.NoError(t, err, "a nonce of the old key is still good until it expires")
}

func TestNewChallengerRefusesDifficulty(t *testing.T) {
	ks := mustKeySet(t, nil, Key{ID: "a", Secret: secretA})
	for _, bits := range []int{0, -1, MaxChallengeBits + 1} {
		_, err := NewChallenger(ks, 1, bits, 0, nil)
		assert.Error(t, err, bits)
	}
}

func TestLeadingZeroBits(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		want int
	}{
		{[]byte{0x80}, 0}, {[]byte{0x01}, 7}, {[]byte{0, 0x40}, 9}, {[]byte{0, 0, 0}, 24}, {[]byte{0, 0, 0x0f}, 20},
	} {
		assert.Equal(t, c.want, LeadingZeroBits(c.b), c.b)
	}
}

// TestNoncesAreSingleUse runs the used-nonce set of both stores: the
// second use of a nonce is refused until it expires, for every node of a
// fleet sharing Redis.
func TestNoncesAreSingleUse(t *testing.T) {
	ctx := context.Background()
	clk := newLockedClock()
	rdb := testenv.Redis(t)
	for name, pair := range map[string][2]NonceStore{
		"memory": {NewMemoryStore(clk.Now), nil},
		"redis":  {NewRedisStore(rdb, RedisOptions{}), NewRedisStore(rdb, RedisOptions{})},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := pair[0], pair[1]
			if b == nil {
				b = a
			}
			ev := testenv.EventID()
			id := NewVisitorID()
			fresh, err := a.UseNonce(ctx, ev, id, time.Now().Add(time.Minute))
			require.NoError(t, err)
			assert.True(t, fresh)
			fresh, err = b.UseNonce(ctx, ev, id, time.Now().Add(time.Minute))
			require.NoError(t, err)
			assert.False(t, fresh, "used once already, on any node")
			fresh, err = a.UseNonce(ctx, ev+1, id, time.Now().Add(time.Minute))
			require.NoError(t, err)
			assert.True(t, fresh, "per event")
		})
	}
	t.Run("memory forgets expired ones", func(t *testing.T) {
		m := NewMemoryStore(clk.Now)
		fresh, _ := m.UseNonce(ctx, 1, "x", clk.Now().Add(time.Minute))
		require.True(t, fresh)
		clk.Advance(time.Minute)
		fresh, _ = m.UseNonce(ctx, 1, "x", clk.Now().Add(time.Minute))
		assert.True(t, fresh, "an expired nonce is refused by its MAC check, not remembered")
	})
}

// BenchmarkVerifySolution is the cryptographic check of a solution: the
// work (one SHA-256 of about 80 bytes) and the nonce's MAC (HMAC-SHA256).
func BenchmarkVerifySolution(b *testing.B) {
	clk := newClock()
	c := newChallenger(b, clk, 16)
	sol := Solve(c.Issue().Nonce, 16)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Verify(sol); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyWrongSolution is what garbage costs: it fails at the work.
func BenchmarkVerifyWrongSolution(b *testing.B) {
	clk := newClock()
	c := newChallenger(b, clk, 16)
	sol := c.Issue().Nonce + ":1"
	b.ReportAllocs()
	for b.Loop() {
		_, _ = c.Verify(sol)
	}
}

func TestVerifySolutionAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	clk := newClock()
	c := newChallenger(t, clk, 8)
	sol := Solve(c.Issue().Nonce, 8)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.Verify(sol); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

// BenchmarkSolveDefault is what a native client (a bot) pays per place at
// the default difficulty, on one core.
func BenchmarkSolveDefault(b *testing.B) {
	clk := newClock()
	c := newChallenger(b, clk, DefaultChallengeBits)
	for b.Loop() {
		_ = Solve(c.Issue().Nonce, DefaultChallengeBits)
	}
}
