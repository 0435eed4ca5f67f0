package waitroom

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math/bits"
	"strings"
	"sync"
	"time"
)

// Proof of work at join: a new arrival is given a challenge nonce and joins
// by finding a counter such that SHA-256("<nonce>:<counter>") starts with
// the configured number of zero bits. The nonce needs no state to check: it
// carries its expiry and a MAC under a key derived from the gateway's key
// set, so any node of the fleet accepts what another issued. That it is
// used once is the store's business (NonceStore), kept apart from the
// cryptographic check so the check stays in memory.

// DefaultChallengeBits is the difficulty `challenge` uses when given no
// number: 2^19 ≈ 524,000 hashes on average. The page's solver (plain
// JavaScript SHA-256 in a Web Worker, one compression per try since the
// nonce fills the first block) does about 1.9 million tries a second on one
// core of a server under Node; a mid-range phone runs such code three to
// five times slower, 0.4–0.6 million a second, so it needs about a second
// on average. A native client on one core (Solve, Go, SHA-NI) takes about
// 0.1 s (BenchmarkSolveDefault): the challenge caps a bot at some ten places
// a second per core it spends, a cost rather than a wall, which is why it
// comes with join_rate.
const DefaultChallengeBits = 19

// MaxChallengeBits bounds the difficulty: 2^28 hashes is already minutes on
// a phone.
const MaxChallengeBits = 28

// DefaultChallengeTTL is how long a challenge can be answered: long enough
// for a slow phone (the work is random: one in a hundred solves takes over
// 4.6 times the average), short enough that solutions cannot be stockpiled
// for long.
const DefaultChallengeTTL = 5 * time.Minute

// HeaderSolution carries a solved challenge: "<nonce>:<counter>".
const HeaderSolution = "X-Waitroom-Solution"

// Layout of a nonce before its hex encoding.
const (
	nonceExpiry = 8
	nonceRandom = 12
	nonceMAC    = 16
	nonceBytes  = nonceExpiry + nonceRandom + nonceMAC
	// NonceLen is the length of a nonce, hex-encoded.
	NonceLen = 2 * nonceBytes
	// maxCounterLen bounds the counter: a uint64 in decimal is 20 digits;
	// a client may count in any notation of printable ASCII.
	maxCounterLen = 32
)

// Errors of Challenger.Verify: each means "give the client a new challenge".
var (
	ErrBadSolution     = errors.New("not a solution of the challenge")
	ErrChallengeForged = errors.New("challenge not issued by this gateway")
	ErrChallengeExpiry = errors.New("challenge expired")
)

// Challenge is a nonce handed to a new arrival.
type Challenge struct {
	Nonce      string
	Difficulty int
	ExpiresAt  time.Time
}

// Solved is a verified solution: Nonce identifies it for the single-use
// check until ExpiresAt.
type Solved struct {
	Nonce     [nonceRandom]byte
	ExpiresAt time.Time
}

// ID is the solved nonce's random part, hex: the key of its single-use
// record.
func (s Solved) ID() string { return hex.EncodeToString(s.Nonce[:]) }

// Challenger issues and verifies challenges of one event at one difficulty.
type Challenger struct {
	event int64
	bits  int
	ttl   time.Duration
	now   func() time.Time
	// macs pools one HMAC state per key, so verifying allocates nothing.
	macs []*sync.Pool
}

// macState is a pooled HMAC with the buffers it writes into.
type macState struct {
	h   hash.Hash
	msg [8 + 1 + nonceExpiry + nonceRandom]byte
	sum []byte
}

// challengeLabel separates the challenge key from every other use of a
// signing secret.
const challengeLabel = "waitroom challenge v1"

// NewChallenger returns a challenger for event at difficulty bits (1 to
// MaxChallengeBits) whose nonces live ttl (DefaultChallengeTTL when 0),
// keyed by ks: the first key issues, every key verifies. now is the clock
// (time.Now when nil).
func NewChallenger(ks *KeySet, event int64, difficulty int, ttl time.Duration, now func() time.Time) (*Challenger, error) {
	if difficulty < 1 || difficulty > MaxChallengeBits {
		return nil, fmt.Errorf("challenge difficulty must be 1 to %d bits (got %d)", MaxChallengeBits, difficulty)
	}
	if ttl <= 0 {
		ttl = DefaultChallengeTTL
	}
	if now == nil {
		now = time.Now
	}
	c := &Challenger{event: event, bits: difficulty, ttl: ttl, now: now}
	for _, k := range ks.keys {
		m := hmac.New(sha256.New, k.Secret)
		m.Write([]byte(challengeLabel))
		key := m.Sum(nil)
		c.macs = append(c.macs, &sync.Pool{New: func() any {
			return &macState{h: hmac.New(sha256.New, key), sum: make([]byte, 0, sha256.Size)}
		}})
	}
	return c, nil
}

// Difficulty is the number of leading zero bits a solution needs.
func (c *Challenger) Difficulty() int { return c.bits }

// mac computes the MAC of a nonce's expiry and random part with key i into
// out.
func (c *Challenger) mac(i int, body []byte, out []byte) {
	p := c.macs[i]
	st := p.Get().(*macState)
	binary.BigEndian.PutUint64(st.msg[:8], uint64(c.event))
	st.msg[8] = byte(c.bits)
	copy(st.msg[9:], body)
	st.h.Reset()
	st.h.Write(st.msg[:])
	st.sum = st.h.Sum(st.sum[:0])
	copy(out, st.sum[:nonceMAC])
	p.Put(st)
}

// Issue makes a new challenge.
func (c *Challenger) Issue() Challenge {
	exp := c.now().Add(c.ttl).Truncate(time.Second).UTC()
	var raw [nonceBytes]byte
	binary.BigEndian.PutUint64(raw[:nonceExpiry], uint64(exp.Unix()))
	_, _ = rand.Read(raw[nonceExpiry : nonceExpiry+nonceRandom])
	c.mac(0, raw[:nonceExpiry+nonceRandom], raw[nonceExpiry+nonceRandom:])
	return Challenge{Nonce: hex.EncodeToString(raw[:]), Difficulty: c.bits, ExpiresAt: exp}
}

// Verify checks a solution "<nonce>:<counter>" (the counter in decimal, or
// any printable ASCII but ':', up to 32 characters): the work first (the
// cheapest test, and the one garbage fails), then the nonce's expiry and
// MAC. It allocates nothing.
func (c *Challenger) Verify(solution string) (Solved, error) {
	colon := strings.IndexByte(solution, ':')
	if colon != NonceLen {
		return Solved{}, fmt.Errorf("%w: want <%d hex digits>:<counter>", ErrBadSolution, NonceLen)
	}
	counter := solution[colon+1:]
	if len(counter) == 0 || len(counter) > maxCounterLen {
		return Solved{}, ErrBadSolution
	}
	for i := 0; i < len(counter); i++ {
		if counter[i] <= ' ' || counter[i] > '~' || counter[i] == ':' {
			return Solved{}, ErrBadSolution
		}
	}
	var buf [NonceLen + 1 + maxCounterLen]byte
	n := copy(buf[:], solution)
	sum := sha256.Sum256(buf[:n])
	if LeadingZeroBits(sum[:]) < c.bits {
		return Solved{}, ErrBadSolution
	}
	var raw [nonceBytes]byte
	if _, err := hex.Decode(raw[:], buf[:NonceLen]); err != nil {
		return Solved{}, ErrBadSolution
	}
	exp := time.Unix(int64(binary.BigEndian.Uint64(raw[:nonceExpiry])), 0).UTC()
	if !c.now().Before(exp) {
		return Solved{}, ErrChallengeExpiry
	}
	var want [nonceMAC]byte
	for i := range c.macs {
		c.mac(i, raw[:nonceExpiry+nonceRandom], want[:])
		if hmac.Equal(want[:], raw[nonceExpiry+nonceRandom:]) {
			s := Solved{ExpiresAt: exp}
			copy(s.Nonce[:], raw[nonceExpiry:nonceExpiry+nonceRandom])
			return s, nil
		}
	}
	return Solved{}, ErrChallengeForged
}

// LeadingZeroBits counts the zero bits at the start of b.
func LeadingZeroBits(b []byte) int {
	n := 0
	for _, x := range b {
		if x != 0 {
			return n + bits.LeadingZeros8(x)
		}
		n += 8
	}
	return n
}

// Solve finds a counter for nonce at difficulty bits, as a client does;
// for tests and the load generator. It returns the solution header value.
func Solve(nonce string, difficulty int) string {
	prefix := []byte(nonce + ":")
	buf := make([]byte, 0, len(prefix)+maxCounterLen)
	for counter := uint64(0); ; counter++ {
		buf = append(buf[:0], prefix...)
		buf = appendUint(buf, counter)
		sum := sha256.Sum256(buf)
		if LeadingZeroBits(sum[:]) >= difficulty {
			return string(buf)
		}
	}
}

func appendUint(b []byte, v uint64) []byte {
	var d [maxCounterLen]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}
