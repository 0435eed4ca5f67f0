// Package lottery is the draw that gives a scheduled opening's pre-queue
// entrants their places: a Fisher–Yates shuffle of the entrant ids driven by
// HMAC-SHA256 of a seed whose SHA-256 was published before anyone entered.
//
// It has no dependency beyond the standard library so that anyone can read
// it in one sitting and rebuild the order from the published seed and list.
//
// The algorithm (Algorithm names it):
//
//  1. The entrant ids are de-duplicated and sorted in ascending bytewise
//     order (Go's string comparison, i.e. by UTF-8 bytes).
//  2. A random stream: block k (k = 0, 1, 2, …) is HMAC-SHA256 with the
//     seed (its raw bytes) as the key and the 8-byte big-endian encoding
//     of k as the message; the first 8 bytes of the MAC, read big-endian,
//     are the 64-bit value r_k.
//  3. uniform(n), a value in [0, n): take the next r_k; with
//     rem = 2^64 mod n, a value r_k ≥ 2^64 − rem is rejected and the next
//     one taken (so that every result is exactly equally likely); the
//     result is r_k mod n. Rejected values consume their k too.
//  4. Fisher–Yates from the last index down: for i = n−1, n−2, …, 1:
//     j = uniform(i+1); swap a[i] and a[j].
//  5. The entrant at index x of the shuffled list gets position
//     base + x + 1, where base is the number of positions handed out
//     before the draw (normally 0).
package lottery

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"slices"
)

// Algorithm names the draw described in the package doc; it is published
// with every draw so that a later change of algorithm cannot be mistaken for
// this one.
const Algorithm = "waitroom-lottery-v1: entrant ids de-duplicated and sorted ascending bytewise; " +
	"Fisher-Yates for i = n-1 down to 1 swapping a[i] with a[j], j = uniform(i+1); " +
	"uniform(m) takes r = first 8 bytes big-endian of HMAC-SHA256(key=seed, msg=uint64 big-endian counter), " +
	"counter from 0, one per value drawn, rejecting r >= 2^64 - (2^64 mod m), result r mod m; " +
	"position = base + index + 1"

// SeedSize is the size of a generated seed: as many bytes as the hash.
const SeedSize = 32

// MinSeedSize is the shortest seed accepted from configuration.
const MinSeedSize = 16

// NewSeed returns a seed from crypto/rand.
func NewSeed() []byte {
	b := make([]byte, SeedSize)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return b
}

// ParseSeed reads a hex seed of at least MinSeedSize bytes.
func ParseSeed(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("lottery seed: not hex: %w", err)
	}
	if len(b) < MinSeedSize {
		return nil, fmt.Errorf("lottery seed: %d bytes, at least %d required", len(b), MinSeedSize)
	}
	return b, nil
}

// Commitment is the hex SHA-256 of seed: published before the entries open,
// it binds the operator to the seed without revealing it.
func Commitment(seed []byte) string {
	sum := sha256.Sum256(seed)
	return hex.EncodeToString(sum[:])
}

// stream is the random stream of step 2 and uniform of step 3.
type stream struct {
	h       hash.Hash
	mac     []byte
	counter uint64
}

func newStream(seed []byte) *stream { return &stream{h: hmac.New(sha256.New, seed)} }

func (s *stream) next() uint64 {
	var msg [8]byte
	binary.BigEndian.PutUint64(msg[:], s.counter)
	s.counter++
	s.h.Reset()
	s.h.Write(msg[:])
	s.mac = s.h.Sum(s.mac[:0])
	return binary.BigEndian.Uint64(s.mac[:8])
}

// uniform returns a value in [0, n) for n ≥ 1.
func (s *stream) uniform(n uint64) uint64 {
	rem := (-n) % n // 2^64 mod n, computed without overflowing
	for {
		r := s.next()
		if r <= ^uint64(0)-rem { // r < 2^64 - rem
			return r % n
		}
	}
}

// Sorted returns the entrant ids de-duplicated and sorted ascending
// bytewise: step 1, the list that is published.
func Sorted(entrants []string) []string {
	a := slices.Clone(entrants)
	slices.Sort(a)
	return slices.Compact(a)
}

// Order draws the order of entrants with seed: the entrant at index x gets
// position base+x+1. The input is not modified.
func Order(seed []byte, entrants []string) []string {
	a := Sorted(entrants)
	s := newStream(seed)
	for i := len(a) - 1; i >= 1; i-- {
		j := s.uniform(uint64(i) + 1)
		a[i], a[j] = a[j], a[i]
	}
	return a
}

// Positions draws as Order does and maps each entrant to its position.
func Positions(seed []byte, entrants []string, base int64) map[string]int64 {
	order := Order(seed, entrants)
	out := make(map[string]int64, len(order))
	for x, id := range order {
		out[id] = base + int64(x) + 1
	}
	return out
}

// Published is a draw as the admin API publishes it
// (GET /waitroom/events/{id}/lottery), with what an auditor needs to
// rebuild the order.
type Published struct {
	Event      int64    `json:"event,omitempty"`
	OpensAt    string   `json:"opens_at,omitempty"`
	Commitment string   `json:"commitment"`
	Seed       string   `json:"seed"`
	Entrants   []string `json:"entrants"`
	Algorithm  string   `json:"algorithm"`
	// Base is how many positions were handed out before the draw.
	Base int64 `json:"base"`
}

// ErrCommitment is returned by Check when the seed does not hash to the
// published commitment.
var ErrCommitment = errors.New("the seed does not match the commitment")

// ErrAlgorithm is returned by Check for a draw made by another algorithm.
var ErrAlgorithm = errors.New("unknown lottery algorithm")

// Check verifies a published draw (the seed against its commitment, the
// algorithm's name) and returns its order.
func Check(p Published) ([]string, error) {
	if p.Algorithm != Algorithm {
		return nil, fmt.Errorf("%w: %q", ErrAlgorithm, p.Algorithm)
	}
	seed, err := hex.DecodeString(p.Seed)
	if err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	if Commitment(seed) != p.Commitment {
		return nil, fmt.Errorf("%w: sha256(seed) = %s, published %s", ErrCommitment, Commitment(seed), p.Commitment)
	}
	return Order(seed, p.Entrants), nil
}
