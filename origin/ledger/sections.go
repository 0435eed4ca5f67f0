package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waitroom/waitroom/origin/seatmap"
)

// General-admission sections inside a seat map (migration 008). A
// section's places left are split over bucket rows (ga_inventory): a hold
// takes its places with a conditional decrement of one bucket that no
// other hold has locked, starting from a random one, so the holds of one
// section do not queue on one row; only when no single bucket can give
// them does it lock every bucket of the section, in order and in a
// transaction of its own, and take them across several. Places go back to
// their buckets when the hold ends (the holds_ga_follow trigger), and each
// sold place gets a number of the map (ga_places) for its ticket.

// SectionSoldOutError is a hold of a section refused by the ledger: the
// section's buckets have fewer places left than asked for, Left in all.
type SectionSoldOutError struct{ Left int64 }

func (e *SectionSoldOutError) Error() string {
	return fmt.Sprintf("section sold out: %d places left", e.Left)
}

// ErrSectionSoldOut matches every SectionSoldOutError.
var ErrSectionSoldOut = errors.New("section sold out")

func (e *SectionSoldOutError) Is(target error) bool { return target == ErrSectionSoldOut }

// maxSectionBuckets is the most buckets a section has: enough that holds
// of one section rarely find every bucket locked (a hold's transaction is
// short), few enough that the last places of a section are rarely spread
// so thin that a hold needs several.
const maxSectionBuckets = 10

// sectionBuckets is how many buckets a section of capacity places has:
// each with room for at least 8 parties of maxPerUser, 1 to
// maxSectionBuckets.
func sectionBuckets(capacity, maxPerUser int64) int64 {
	return min(max(capacity/(8*max(maxPerUser, 1)), 1), maxSectionBuckets)
}

// insertPlaces writes a new event's sections: their buckets and numbered
// places.
func insertPlaces(ctx context.Context, tx pgx.Tx, e Event) error {
	for _, p := range e.Seating.Places() {
		if _, err := tx.Exec(ctx, sqlInsertSectionBuckets, e.ID, p.Section, p.Capacity, sectionBuckets(p.Capacity, e.MaxPerUser)); err != nil {
			return fmt.Errorf("insert buckets of section %s: %w", p.Section, err)
		}
		if _, err := tx.Exec(ctx, sqlInsertSectionPlaces, e.ID, p.Section, p.First, p.Capacity); err != nil {
			return fmt.Errorf("insert places of section %s: %w", p.Section, err)
		}
	}
	return nil
}

// InsertSectionHold writes a new pending hold of h.Quantity places of the
// general-admission section h.Section and takes them from its buckets, in
// one transaction: all of them, or nothing is written (a
// *SectionSoldOutError). A hold may take its places from several buckets:
// the section's last places may be spread over them, and a hold refused
// while the section has them would be a 409 Redis does not give. Holds of
// the section past their expiry at now count as free (they are marked
// expired when the buckets fall short, each noted as owed a release in
// Redis: see OwedRelease). ctx's deadline is the write's, as for
// InsertHold.
func (l *Ledger) InsertSectionHold(ctx context.Context, h Hold, now time.Time) (WriteOutcome, error) {
	if h.Section == "" || len(h.Seats) > 0 || h.Quantity < 1 {
		return WriteFailed, fmt.Errorf("insert section hold %s: a section and a quantity, no seats, are required", h.ID)
	}
	var deadline time.Time
	if d := deadlineOf(ctx); d != nil {
		deadline = *d
	}
	write := func(takePlaces func(Tx) ([]int32, error)) error {
		return l.InTx(ctx, deadline, func(tx Tx) error {
			if err := tx.lockBuyerToHold(ctx, h.EventID, h.UserID); err != nil {
				return err
			}
			buckets, err := takePlaces(tx)
			if err != nil {
				return err
			}
			tag, err := tx.tx.Exec(ctx, sqlInsertSectionHold, h.ID, h.EventID, h.UserID, h.Quantity, h.Amount, h.ExpiresAt,
				h.CreatedAt, h.IdempotencyKey, h.RequestDigest, h.Response, deadlineOf(ctx), h.Position, h.Section, buckets)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return ErrPastDeadline
			}
			return nil
		})
	}
	// A transaction that found no single bucket with the places may still
	// hold one it locked and then saw too short: it is rolled back, and a
	// new one takes every bucket in order, holding none before.
	take := func() error {
		err := write(func(tx Tx) ([]int32, error) { return tx.takeFromOne(ctx, h.EventID, h.Section, h.Quantity) })
		if errors.Is(err, errNoBucketHasAll) {
			err = write(func(tx Tx) ([]int32, error) { return tx.takeFromAll(ctx, h.EventID, h.Section, h.Quantity, now) })
		}
		return err
	}
	err := retryDeadlock(ctx, take)
	if constraintError(err) == ErrLiveHoldExists {
		// The user's previous hold may have lapsed without the reaper
		// marking it: marked on its own first, since its places go back
		// to buckets this transaction would otherwise lock out of order.
		var ended int64
		xerr := pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{}, func(tx pgx.Tx) (err error) {
			ended, err = expireLapsedOfUser(ctx, tx, h.EventID, h.UserID, now)
			return err
		})
		if xerr == nil && ended > 0 {
			err = retryDeadlock(ctx, take)
		}
	}
	if cerr := constraintError(err); cerr != nil {
		return WriteFailed, fmt.Errorf("insert section hold %s: %w", h.ID, cerr)
	}
	switch {
	case err == nil:
		return WriteDone, nil
	case errors.Is(err, ErrSectionSoldOut), errors.Is(err, ErrPastDeadline), errors.Is(err, ErrBuyerHasSeats):
		return WriteFailed, fmt.Errorf("insert section hold %s: %w", h.ID, err)
	case errors.Is(err, ErrUncertain):
		return WriteUncertain, fmt.Errorf("insert section hold %s: %w", h.ID, err)
	}
	return Classify(err), fmt.Errorf("insert section hold %s: %w", h.ID, err)
}

// errNoBucketHasAll: no bucket this transaction could lock had the places
// on its own.
var errNoBucketHasAll = errors.New("no single bucket has the places")

// takeFromOne takes n places of section from one bucket that no other
// transaction has locked and that has them all, and returns the bucket of
// each; errNoBucketHasAll when there is none.
func (t Tx) takeFromOne(ctx context.Context, event int64, section string, n int64) ([]int32, error) {
	var bucket int32
	err := t.tx.QueryRow(ctx, sqlTakePlaces, event, section, n, rand.IntN(maxSectionBuckets)).Scan(&bucket)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNoBucketHasAll
	}
	if err != nil {
		return nil, fmt.Errorf("take places of section %s: %w", section, err)
	}
	out := make([]int32, n)
	for i := range out {
		out[i] = bucket
	}
	return out, nil
}

// takeFromAll takes n places of section across its buckets, all locked in
// order, which must be the first locks the transaction takes, and returns
// the bucket of each; a *SectionSoldOutError when they have fewer, even
// once the section's lapsed holds are expired.
func (t Tx) takeFromAll(ctx context.Context, event int64, section string, n int64, now time.Time) ([]int32, error) {
	var left int64
	for attempt := 0; attempt < 2; attempt++ {
		var buckets, counts []int32
		left = 0
		rows, err := t.tx.Query(ctx, sqlLockSectionBuckets, event, section)
		if err != nil {
			return nil, fmt.Errorf("lock buckets of section %s: %w", section, err)
		}
		var b, r int32
		_, err = pgx.ForEachRow(rows, []any{&b, &r}, func() error {
			buckets, counts = append(buckets, b), append(counts, r)
			left += int64(r)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("lock buckets of section %s: %w", section, err)
		}
		if left >= n {
			return t.takeAcross(ctx, event, section, n, buckets, counts)
		}
		if attempt > 0 {
			break
		}
		ids, err := lockLapsed(ctx, t.tx, sqlLockLapsedOfSection, event, section, now)
		if err != nil {
			return nil, fmt.Errorf("expire lapsed holds of section %s: %w", section, err)
		}
		if len(ids) == 0 {
			break
		}
		tag, err := t.tx.Exec(ctx, sqlExpireLockedOwed, ids, now)
		if err != nil {
			return nil, fmt.Errorf("expire lapsed holds of section %s: %w", section, err)
		}
		if tag.RowsAffected() == 0 {
			break
		}
	}
	return nil, &SectionSoldOutError{Left: left}
}

// takeAcross takes n places from the locked buckets (their counts as
// read), the first buckets first.
func (t Tx) takeAcross(ctx context.Context, event int64, section string, n int64, buckets, counts []int32) ([]int32, error) {
	var from, qs, out []int32
	for i, b := range buckets {
		q := min(int64(counts[i]), n-int64(len(out)))
		if q <= 0 {
			continue
		}
		from, qs = append(from, b), append(qs, int32(q))
		for range q {
			out = append(out, b)
		}
	}
	tag, err := t.tx.Exec(ctx, sqlTakePlacesAcross, event, section, from, qs)
	if err != nil {
		return nil, fmt.Errorf("take places of section %s: %w", section, err)
	}
	if tag.RowsAffected() != int64(len(from)) {
		return nil, fmt.Errorf("take places of section %s: %d of %d buckets had their places", section, tag.RowsAffected(), len(from))
	}
	return out, nil
}

// OwedRelease is a hold of a section that the ledger ended on its own (a
// new hold of the section expired it, lapsed, when the buckets fell
// short), whose places Redis may still count: it may be confirmed there,
// its confirmation's ledger step having failed, and Redis never reclaims
// a confirmed hold. Its release in Redis is owed until ReleasesMade.
type OwedRelease struct {
	HoldID  string `db:"hold_id"`
	EventID int64  `db:"event_id"`
}

// ReleasesOwed reads up to limit of the releases Redis is owed, of event
// (0: of every event), oldest first.
func (l *Ledger) ReleasesOwed(ctx context.Context, event int64, limit int) ([]OwedRelease, error) {
	rows, err := l.pool.Query(ctx, sqlReleasesOwed, event, limit)
	return collectAll[OwedRelease](rows, err, "read releases owed")
}

// ReleasesMade forgets the owed releases of the holds ids, made in Redis.
func (l *Ledger) ReleasesMade(ctx context.Context, ids []string) error {
	if _, err := l.pool.Exec(ctx, sqlReleasesMade, ids); err != nil {
		return fmt.Errorf("forget %d releases made: %w", len(ids), err)
	}
	return nil
}

// SectionCounts reads the places of event's general-admission sections
// that live holds have at now (confirmed, or pending and not past their
// expiry), by section; a section no live hold has is absent.
func (l *Ledger) SectionCounts(ctx context.Context, event int64, now time.Time) (map[string]int64, error) {
	rows, err := l.pool.Query(ctx, sqlSectionCounts, event, now)
	if err != nil {
		return nil, fmt.Errorf("count places of event %d: %w", event, err)
	}
	out := make(map[string]int64)
	var section string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&section, &n}, func() error { out[section] = n; return nil }); err != nil {
		return nil, fmt.Errorf("count places of event %d: %w", event, err)
	}
	return out, nil
}

// SectionAudit is the ledger's account of one general-admission section.
type SectionAudit struct {
	Section string `db:"section"`
	// Capacity is the section's places; Remaining those left in its
	// buckets; Taken those of holds not ended (pending, even past their
	// expiry until marked, or confirmed); Sold those confirmed; Numbered
	// the place numbers given to holds.
	Capacity  int64 `db:"capacity"`
	Remaining int64 `db:"remaining"`
	Taken     int64 `db:"taken"`
	Sold      int64 `db:"sold"`
	Numbered  int64 `db:"numbered"`
	// Ticketed counts the section's places with a valid ticket.
	Ticketed int64 `db:"ticketed"`
	// Stray counts numbered places whose hold is not confirmed (ended, or
	// not sold yet): a number no sale has.
	Stray int64 `db:"stray"`
	// Unmatched counts valid tickets of the section whose place is not
	// numbered to their booking's hold; DoubleTicketed the places with more
	// than one valid ticket.
	Unmatched      int64 `db:"unmatched"`
	DoubleTicketed int64 `db:"double_ticketed"`
}

// Faults says what is wrong with the section, nil when it is sound: every
// place is in a bucket or a live hold (Remaining + Taken == Capacity), each
// place sold has a number (Numbered == Sold) and only those (Stray == 0),
// and every valid ticket's place is its own hold's and no other valid
// ticket's (Unmatched == 0, DoubleTicketed == 0).
func (a SectionAudit) Faults() []string {
	var out []string
	if a.Remaining+a.Taken != a.Capacity {
		out = append(out, fmt.Sprintf("%d places left in the buckets and %d taken by holds, of %d", a.Remaining, a.Taken, a.Capacity))
	}
	if a.Numbered != a.Sold {
		out = append(out, fmt.Sprintf("%d places numbered for %d sold", a.Numbered, a.Sold))
	}
	if a.Stray != 0 {
		out = append(out, fmt.Sprintf("%d places numbered to a hold that is not sold", a.Stray))
	}
	if a.Unmatched != 0 {
		out = append(out, fmt.Sprintf("%d valid tickets whose place is not their hold's", a.Unmatched))
	}
	if a.DoubleTicketed != 0 {
		out = append(out, fmt.Sprintf("%d places with more than one valid ticket", a.DoubleTicketed))
	}
	return out
}

// ErrSectionsUnsound: a general-admission section's account does not add
// up (SectionAudit.Faults).
var ErrSectionsUnsound = errors.New("general-admission sections unsound")

// AuditSections reads the account of each general-admission section of
// event, in section order.
func (l *Ledger) AuditSections(ctx context.Context, event int64) ([]SectionAudit, error) {
	rows, err := l.pool.Query(ctx, sqlAuditSections, event)
	return collectAll[SectionAudit](rows, err, fmt.Sprintf("audit sections of event %d", event))
}

// CheckSections audits event's general-admission sections, in one
// snapshot, and returns their accounts; with an error matching
// ErrSectionsUnsound that names every fault when one of them is not sound.
// Meant for tests and the simulation, with the sale at rest or not: every
// change of a section (a hold, its end, its numbers and tickets) commits
// in one transaction, so no snapshot sees one half-done.
func (l *Ledger) CheckSections(ctx context.Context, event int64) ([]SectionAudit, error) {
	var audit []SectionAudit
	err := pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlAuditSections, event)
		audit, err = collectAll[SectionAudit](rows, err, fmt.Sprintf("audit sections of event %d", event))
		return err
	})
	if err != nil {
		return nil, err
	}
	var faults []string
	for _, a := range audit {
		for _, f := range a.Faults() {
			faults = append(faults, fmt.Sprintf("section %s: %s", a.Section, f))
		}
	}
	if len(faults) > 0 {
		return audit, fmt.Errorf("event %d: %w: %s", event, ErrSectionsUnsound, strings.Join(faults, "; "))
	}
	return audit, nil
}

// placeLabel names the seat a ticket row shows: a reserved seat's id, or a
// section's place.
func placeLabel(seat string, place int32) string {
	if place > 0 {
		return seatmap.PlaceLabel(seat, int64(place))
	}
	return seat
}
