package waitroom

import (
	"context"
	"errors"
	"time"
)

// ErrEntriesClosed is returned by LotteryStore.Enter once the pre-queue's
// entries are closed: the draw is under way or done, so the arrival joins
// the queue after the entrants instead.
var ErrEntriesClosed = errors.New("pre-queue entries closed")

// Closed is what closing a pre-queue's entries fixed: Count positions after
// Base (Base+1 … Base+Count) are reserved for the entrants.
type Closed struct {
	Base  int64
	Count int64
}

// LotteryRecord is what a store keeps of an event's pre-queue lottery.
type LotteryRecord struct {
	// Seed is nil until a node kept one.
	Seed []byte
	// EntriesClosed is set once CloseEntries ran; Reserved is what it
	// fixed.
	EntriesClosed bool
	Reserved      Closed
	// Drawn is set once every entrant's position is stored.
	Drawn bool
}

// LotteryStore keeps a scheduled opening's lottery: the seed every node
// shares, the entrants, the positions reserved for them and the positions
// drawn. Every record lives until the until given with it (a bounded
// retention after the opening).
type LotteryStore interface {
	// EnsureSeed keeps seed unless a seed is kept already (the first
	// writer wins) and returns the kept one.
	EnsureSeed(ctx context.Context, event int64, seed []byte, until time.Time) ([]byte, error)
	// Enter registers subject as an entrant (once, however often it
	// enters); ErrEntriesClosed once CloseEntries ran.
	Enter(ctx context.Context, event int64, subject string, until time.Time) error
	// CloseEntries closes the entries, once: the first call reserves the
	// entrants' positions after every position handed out so far; later
	// calls return what the first fixed. ErrNoState or ErrRestoring when
	// no position can be handed out now.
	CloseEntries(ctx context.Context, event int64, until time.Time) (Closed, error)
	// Entrants lists the entrants, in no particular order.
	Entrants(ctx context.Context, event int64) ([]string, error)
	// SaveDraw stores the drawn positions and marks the draw done. Writing
	// the same draw again changes nothing: the draw is a function of the
	// seed, the entrants and the base.
	SaveDraw(ctx context.Context, event int64, positions map[string]int64, until time.Time) error
	// Lottery reads the record.
	Lottery(ctx context.Context, event int64) (LotteryRecord, error)
	// DrawnPosition is subject's drawn position; ok is false when it was
	// not an entrant.
	DrawnPosition(ctx context.Context, event int64, subject string) (pos int64, ok bool, err error)
}

// NonceStore remembers used challenge nonces until they expire, so that each
// solves one join across the fleet.
type NonceStore interface {
	// UseNonce records id as used until until; fresh is false when it was
	// used already.
	UseNonce(ctx context.Context, event int64, id string, until time.Time) (fresh bool, err error)
}
