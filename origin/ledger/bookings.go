package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Booking statuses (docs/api.md <booking>).
const (
	BookingPaymentPending = "payment_pending"
	BookingConfirmed      = "confirmed"
	BookingFailed         = "failed"
	BookingCancelled      = "cancelled"
	BookingRefunded       = "refunded"
)

// Refund states of a booking (refund_status): none due (""), decided or
// made and not over (pending), over (succeeded: only then is the booking
// refunded), or failed at the provider (the booking stays cancelled, the
// money owed, until a new attempt succeeds).
const (
	RefundPending   = "pending"
	RefundSucceeded = "succeeded"
	RefundFailed    = "failed"
)

// Booking errors.
var (
	// ErrBookingExists: the hold has a live booking already.
	ErrBookingExists = errors.New("the hold has a booking already")
	// ErrBookingKeyUsed: the user made a booking with this key already.
	ErrBookingKeyUsed = errors.New("idempotency key already used for a booking")
	// ErrNoSeatLeft: every seat number of the event is taken.
	ErrNoSeatLeft = errors.New("no seat number left")
	// ErrOverflowUsedUp: the overflow reserve has no seat left.
	ErrOverflowUsedUp = errors.New("overflow reserve used up")
)

// Booking is a row of the bookings table.
type Booking struct {
	ID             string     `db:"id"`
	HoldID         string     `db:"hold_id"`
	EventID        int64      `db:"event_id"`
	UserID         string     `db:"user_id"`
	Quantity       int64      `db:"quantity"`
	Amount         int64      `db:"amount"`
	Currency       string     `db:"currency"`
	Status         string     `db:"status"`
	StatusReason   string     `db:"status_reason"`
	Provider       string     `db:"provider"`
	PaymentMethod  string     `db:"payment_method"`
	PaymentID      string     `db:"payment_id"`
	Overflow       bool       `db:"overflow"`
	RefundStatus   string     `db:"refund_status"`
	RefundID       string     `db:"refund_id"`
	RefundAttempts int        `db:"refund_attempts"` // refunds failed at the provider before the current one
	IdempotencyKey string     `db:"idempotency_key"`
	RequestDigest  string     `db:"request_digest"`
	Response       []byte     `db:"response"`
	CreatedAt      time.Time  `db:"created_at"`
	UpdatedAt      time.Time  `db:"updated_at"`
	ConfirmedAt    *time.Time `db:"confirmed_at"`
	CheckedAt      time.Time  `db:"checked_at"`
	// FailureChecks: how many times the payment reconciliation asked about
	// the payment of a failed booking, which may still succeed.
	FailureChecks int `db:"failure_checks"`
	// AmountRefunded: money returned at the provider while the sale stands
	// (a partial refund).
	AmountRefunded int64 `db:"amount_refunded"`
	// RefundError: why the provider refused the refund as an invalid
	// request; RefundRetryAt: the next attempt waits until then.
	RefundError   string     `db:"refund_error"`
	RefundRetryAt *time.Time `db:"refund_retry_at"`
	// HoldUntil: when the booking keeps its hold until, for its payment
	// (nil for one made without, before migration 016).
	HoldUntil *time.Time `db:"hold_until"`
	// ProviderRefundPending: a refund made at the provider of a confirmed
	// booking's payment was pending when last looked at, or part of the
	// payment went back while the booking waited for it (migration 024):
	// the payment reconciliation asks about a confirmed one.
	ProviderRefundPending bool `db:"provider_refund_pending"`
}

// NewBooking is what a booking is created with.
type NewBooking struct {
	ID, HoldID     string
	EventID        int64
	UserID         string
	Quantity       int64
	Amount         int64
	Currency       string
	Provider       string
	PaymentMethod  string
	IdempotencyKey string
	RequestDigest  string
	CreatedAt      time.Time
	// HoldUntil is when the booking keeps its hold until (at least): the
	// extension of the hold for the payment (Tx.LockHoldForBooking).
	HoldUntil time.Time
}

// Ticket is a valid ticket of a booking.
type Ticket struct {
	Code    string `db:"code"`
	EventID int64  `db:"event_id"`
	Seat    int64  `db:"seat"`
	// SeatID is the reserved seat, "" for general admission.
	SeatID string `db:"seat_id"`
}

// Bookings are the named operations on bookings, their tickets and the
// payment events acted on, over the pool (Ledger.Bookings) or inside a
// transaction (Tx.Bookings). Every change of a booking's status is
// conditional on the status it leaves: a change returns ok false (and no
// error) when the booking was not in it.
type Bookings struct{ q querier }

// Bookings runs booking operations on the pool, each on its own.
func (l *Ledger) Bookings() Bookings { return Bookings{l.pool} }

// Bookings runs booking operations inside the transaction.
func (t Tx) Bookings() Bookings { return Bookings{t.tx} }

// Booking reads one booking.
func (l *Ledger) Booking(ctx context.Context, id string) (Booking, error) {
	return l.Bookings().Get(ctx, id)
}

// TicketsOf reads the valid tickets of a booking, by seat.
func (l *Ledger) TicketsOf(ctx context.Context, bookingID string) ([]Ticket, error) {
	return l.Bookings().TicketsOf(ctx, bookingID)
}

func (b Bookings) one(ctx context.Context, what, sql string, args ...any) (Booking, error) {
	rows, err := b.q.Query(ctx, sql, args...)
	return collectOne[Booking](rows, err, what)
}

// change runs a conditional change of one booking.
func (b Bookings) change(ctx context.Context, what, sql string, args ...any) (Booking, bool, error) {
	got, err := b.one(ctx, what, sql, args...)
	if errors.Is(err, ErrNotFound) {
		return Booking{}, false, nil
	}
	return got, err == nil, err
}

// Get reads one booking.
func (b Bookings) Get(ctx context.Context, id string) (Booking, error) {
	return b.one(ctx, "read booking "+id, sqlBooking, id)
}

// ByKey reads the booking a user made with an Idempotency-Key.
func (b Bookings) ByKey(ctx context.Context, user, key string) (Booking, error) {
	return b.one(ctx, "read booking by idempotency key", sqlBookingByKey, user, key)
}

// LetIn reports whether a gate let in a ticket of the booking. Inside a
// transaction that voided the booking's tickets, it sees every scan: a
// scan locks its ticket, so the void waited for any scan under way.
func (b Bookings) LetIn(ctx context.Context, bookingID string) (bool, error) {
	var in bool
	if err := b.q.QueryRow(ctx, sqlBookingLetIn, bookingID).Scan(&in); err != nil {
		return false, fmt.Errorf("read whether booking %s was let in: %w", bookingID, err)
	}
	return in, nil
}

// LiveOfHold reads the booking of a hold that has not failed.
func (b Bookings) LiveOfHold(ctx context.Context, holdID string) (Booking, error) {
	return b.one(ctx, "read booking of hold "+holdID, sqlLiveBookingOfHold, holdID)
}

// LastFailedOfHold reads the booking of user's hold whose payment failed
// last; ErrNotFound when none did.
func (b Bookings) LastFailedOfHold(ctx context.Context, user, holdID string) (Booking, error) {
	return b.one(ctx, "read failed booking of hold "+holdID, sqlLastFailedBookingOfHold, user, holdID)
}

// ByPayment reads the booking a provider's payment pays.
func (b Bookings) ByPayment(ctx context.Context, provider, paymentID string) (Booking, error) {
	return b.one(ctx, "read booking of payment "+paymentID, sqlBookingByPayment, provider, paymentID)
}

// Lock reads a booking and locks its row until the transaction ends.
func (b Bookings) Lock(ctx context.Context, id string) (Booking, error) {
	return b.one(ctx, "lock booking "+id, sqlLockBooking, id)
}

// Insert writes a new booking, waiting for its payment.
// ErrBookingExists: the hold has a live booking; ErrBookingKeyUsed: the
// user used the key for a booking already.
func (b Bookings) Insert(ctx context.Context, n NewBooking) (Booking, error) {
	got, err := b.one(ctx, "insert booking "+n.ID, sqlInsertBooking, n.ID, n.HoldID, n.EventID, n.UserID, n.Quantity,
		n.Amount, n.Currency, n.Provider, n.PaymentMethod, n.IdempotencyKey, n.RequestDigest, n.CreatedAt, orNull(n.HoldUntil))
	switch uniqueViolation(err) {
	case "bookings_one_per_hold":
		return Booking{}, ErrBookingExists
	case "bookings_idempotency_key":
		return Booking{}, ErrBookingKeyUsed
	}
	return got, err
}

// Answered keeps the answer of the request that made the booking, and the
// payment id if it had none.
func (b Bookings) Answered(ctx context.Context, id, paymentID string, body []byte, now time.Time) error {
	if _, err := b.q.Exec(ctx, sqlBookingAnswered, id, paymentID, body, now); err != nil {
		return fmt.Errorf("keep response of booking %s: %w", id, err)
	}
	return nil
}

// Confirm confirms a booking waiting for its payment.
func (b Bookings) Confirm(ctx context.Context, id, paymentID string, overflow bool, reason string, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "confirm booking "+id, sqlConfirmBooking, id, reason, overflow, paymentID, now)
}

// Revive puts a failed booking whose payment succeeded after all back to
// waiting for its payment, to be settled as any paid booking (in tx, with
// its hold locked and no other live booking of it).
func (b Bookings) Revive(ctx context.Context, id, paymentID string, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "revive booking "+id, sqlReviveBooking, id, paymentID, now)
}

// PartlyRefunded records the money of a confirmed booking's payment the
// provider says was returned, less than the whole: the sale stands. pending:
// a refund made at the provider is still on its way, so the payment
// reconciliation asks about the booking until none is.
func (b Bookings) PartlyRefunded(ctx context.Context, id string, refunded int64, pending bool, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "record partial refund of booking "+id, sqlPartlyRefunded, id, refunded, now, pending)
}

// MarkRefundPendingWhileWaiting marks a booking still waiting for its
// payment, part of which went back at the provider, as one whose refunds
// the payment reconciliation asks about once it is confirmed: a
// confirmation may be under way on what the provider said before. False
// when the booking no longer waits.
func (b Bookings) MarkRefundPendingWhileWaiting(ctx context.Context, id string, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "mark the refunds of booking "+id+" to be asked about", sqlMarkRefundPendingWhileWaiting, id, now)
}

// RefundedInFullAfterEntry records that all of a confirmed booking's
// payment went back at the provider after a gate let a ticket of it in:
// the sale stands, the seats in use, with the whole amount in
// amount_refunded.
func (b Bookings) RefundedInFullAfterEntry(ctx context.Context, id string, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "record full refund after entry of booking "+id, sqlRefundedInFullAfterEntry, id, now)
}

// RefundRefused records that the provider refused the booking's refund
// attempt as an invalid request: failed, with the reason, and not tried
// again before retryAt.
func (b Bookings) RefundRefused(ctx context.Context, id string, attempt int, reason string, retryAt, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "record refused refund of booking "+id, sqlRefundRefused, id, reason, retryAt, now, attempt)
}

// Fail marks failed a booking waiting for its payment.
// answer (nil for none) is the answer of the request that made the booking,
// kept with the failure: as Answered would keep it, without another write.
func (b Bookings) Fail(ctx context.Context, id, paymentID, reason string, answer []byte, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "fail booking "+id, sqlFailBooking, id, reason, paymentID, now, answer)
}

// RefundPayment cancels a booking waiting for its payment (or failed) whose
// money no seat answers: its refund is decided, to be made after the
// commit.
func (b Bookings) RefundPayment(ctx context.Context, id, reason, paymentID string, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "refund booking "+id, sqlRefundPayment, id, reason, paymentID, now)
}

// Cancel cancels a confirmed booking; refund is its refund status.
func (b Bookings) Cancel(ctx context.Context, id, reason, refund string, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "cancel booking "+id, sqlCancelBooking, id, reason, refund, now)
}

// RefundOutcome is what the provider said of a refund attempt.
type RefundOutcome int

const (
	// RefundWasMade: made and not over; its id is kept to ask about it.
	RefundWasMade RefundOutcome = iota
	// RefundWasDone: the money went back (refundID "": through a refund the
	// origin did not make).
	RefundWasDone
	// RefundWasFailed: the refund failed, maybe after it had succeeded.
	RefundWasFailed
)

// RecordRefund records what the provider said of the booking's refund
// attempt; an answer about another attempt changes nothing.
func (b Bookings) RecordRefund(ctx context.Context, id string, attempt int, o RefundOutcome, refundID string, now time.Time) (Booking, bool, error) {
	sql := sqlRefundMade
	switch o {
	case RefundWasDone:
		sql = sqlRefundDone
	case RefundWasFailed:
		sql = sqlRefundFailed
	}
	return b.change(ctx, "record refund of booking "+id, sql, id, refundID, now, attempt)
}

// RetryRefund starts a new refund attempt after attempt failed.
func (b Bookings) RetryRefund(ctx context.Context, id string, attempt int, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "retry refund of booking "+id, sqlRetryRefund, id, attempt, now)
}

// RefundedAtProvider ends a confirmed booking whose payment was refunded at
// the provider.
func (b Bookings) RefundedAtProvider(ctx context.Context, id, reason string, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "refund booking "+id, sqlRefundedAtProvider, id, reason, now)
}

// ProviderRefundFailed makes the refund of a booking ended by a refund
// made at the provider, which failed since, the origin's to make: the
// booking is cancelled, its refund pending.
func (b Bookings) ProviderRefundFailed(ctx context.Context, id string, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "refund booking "+id+" again", sqlProviderRefundFailed, id, now)
}

// RefundedUnsettled ends a booking still waiting for its payment, whose
// payment was refunded at the provider before it settled.
func (b Bookings) RefundedUnsettled(ctx context.Context, id, reason, paymentID string, now time.Time) (Booking, bool, error) {
	return b.change(ctx, "refund booking "+id, sqlRefundedUnsettled, id, reason, paymentID, now)
}

// ClaimUnsettled leases up to limit bookings waiting for their payment or
// owing a refund, not looked at since before, until the next look (SKIP
// LOCKED: nodes split the work). A payment pending while its booking keeps
// the hold, and a refund not made yet, are taken every now - before; a
// payment pending past that and a refund pending at the provider, each
// wait twice the one before, at most an hour. A refund refused as an
// invalid request waits for its retry time; a failed booking's payment,
// which may still succeed, is asked about a few times, each wait twice the
// one before.
func (b Bookings) ClaimUnsettled(ctx context.Context, now, before time.Time, limit int) ([]Booking, error) {
	rows, err := b.q.Query(ctx, sqlClaimUnsettled, now, before, limit)
	return collectAll[Booking](rows, err, "lease unsettled bookings")
}

// CountFailedRefunds counts the bookings whose refund failed.
func (b Bookings) CountFailedRefunds(ctx context.Context) (int64, error) {
	var n int64
	if err := b.q.QueryRow(ctx, sqlCountFailedRefunds).Scan(&n); err != nil {
		return 0, fmt.Errorf("count failed refunds: %w", err)
	}
	return n, nil
}

// CountUnresolvedPayments counts the bookings made before before, still
// waiting for a payment whose id the ledger has not recorded.
func (b Bookings) CountUnresolvedPayments(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	if err := b.q.QueryRow(ctx, sqlCountUnresolvedPayments, before).Scan(&n); err != nil {
		return 0, fmt.Errorf("count unresolved payments: %w", err)
	}
	return n, nil
}

// EventSeen reports whether a provider's webhook event was acted on: a row
// of payment_events, or the event a confirmation recorded on its booking.
func (b Bookings) EventSeen(ctx context.Context, provider, eventID string) (bool, error) {
	var seen bool
	if err := b.q.QueryRow(ctx, sqlPaymentEventSeen, provider, eventID).Scan(&seen); err != nil {
		return false, fmt.Errorf("check event %s: %w", eventID, err)
	}
	return seen, nil
}

// RecordEvent records a webhook event acted on; false: recorded already
// (also by the confirmation it made).
func (b Bookings) RecordEvent(ctx context.Context, provider, eventID, typ, paymentID, bookingID string, now time.Time) (bool, error) {
	tag, err := b.q.Exec(ctx, sqlRecordPaymentEvent, provider, eventID, typ, paymentID, bookingID, now)
	if err != nil {
		return false, fmt.Errorf("record event %s: %w", eventID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// TicketsOf reads the valid tickets of a booking, by seat.
func (b Bookings) TicketsOf(ctx context.Context, bookingID string) ([]Ticket, error) {
	rows, err := b.q.Query(ctx, sqlTicketsOfBooking, bookingID)
	return collectAll[Ticket](rows, err, "read tickets of booking "+bookingID)
}

// TicketIsValid reports whether a ticket was issued on booking bookingID
// (the one its verified code names) and not cancelled.
func (b Bookings) TicketIsValid(ctx context.Context, bookingID, code string) (bool, error) {
	if uuid.Validate(bookingID) != nil {
		return false, nil
	}
	var ok bool
	if err := b.q.QueryRow(ctx, sqlTicketIsValid, bookingID, code).Scan(&ok); err != nil {
		return false, fmt.Errorf("check ticket: %w", err)
	}
	return ok, nil
}

// The overflow reserve (on the event's row, whose lock orders the late
// payments of one event), seat numbers (on the event's seat blocks) and
// tickets, inside a transaction.

// TakeOverflow takes n seats of the event's overflow reserve
// (ErrOverflowUsedUp: not that many left).
func (t Tx) TakeOverflow(ctx context.Context, event, n int64) error {
	var used int64
	err := t.tx.QueryRow(ctx, sqlTakeOverflow, event, n).Scan(&used)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrOverflowUsedUp
	}
	if err != nil {
		return fmt.Errorf("take overflow seats: %w", err)
	}
	return nil
}

// GiveOverflow gives n seats back to the event's overflow reserve.
func (t Tx) GiveOverflow(ctx context.Context, event, n int64) error {
	ok, err := t.exec(ctx, "give overflow seats back", sqlGiveOverflow, event, n)
	if err == nil && !ok {
		err = errors.New("the overflow reserve does not count its seats")
	}
	return err
}

// LockBuyer takes the buyer's lock (event, user) until the transaction
// ends: a late payment takes it before it counts the buyer's seats, as a
// new hold's row is written under it (sqlLockBuyers). Take it before any
// row lock: the hold path takes it first.
func (t Tx) LockBuyer(ctx context.Context, event int64, user string) error {
	if _, err := t.tx.Exec(ctx, sqlLockBuyers, []int64{event}, []string{user}); err != nil {
		return fmt.Errorf("lock buyer %s of event %d: %w", user, event, err)
	}
	return nil
}

// lockBuyerToHold takes the buyer's lock for a new hold's row, written
// after it in the transaction: ErrBuyerHasSeats when the buyer has seats
// from the overflow reserve.
func (t Tx) lockBuyerToHold(ctx context.Context, event int64, user string) error {
	if err := t.LockBuyer(ctx, event, user); err != nil {
		return err
	}
	var has bool
	if err := t.tx.QueryRow(ctx, sqlBuyerHasOverflow, event, user).Scan(&has); err != nil {
		return fmt.Errorf("seats of buyer %s: %w", user, err)
	}
	if has {
		return ErrBuyerHasSeats
	}
	return nil
}

// SeatsOfBuyer counts the seats user has in the event at now besides
// booking bookingID of hold holdID: live holds, and bookings confirmed from
// the overflow reserve.
func (t Tx) SeatsOfBuyer(ctx context.Context, event int64, user, bookingID, holdID string, now time.Time) (int64, error) {
	var n int64
	if err := t.tx.QueryRow(ctx, sqlSeatsOfBuyer, event, user, bookingID, holdID, now).Scan(&n); err != nil {
		return 0, fmt.Errorf("count seats of buyer %s: %w", user, err)
	}
	return n, nil
}

// TakeSeats hands out n seat numbers of the event: freed ones first, then
// new ones from the event's seat blocks, within the capacity (ErrNoSeatLeft
// when fewer than n are left; the caller rolls back, or used a savepoint).
// The numbers come from blocks no other confirmation holds, one after
// another until there are enough, so the confirmations of one event don't
// queue on one row. Only when every block left is held by others does it
// wait, for all of them in block order. The first try runs in a savepoint,
// undone when it falls short: the rows it locked would otherwise stay locked
// while the transaction waits for the others, and two such transactions
// would deadlock. A block's row is locked, not rewritten (migration 015),
// except once when it runs out.
func (t Tx) TakeSeats(ctx context.Context, event, n int64) ([]int32, error) {
	rows, err := t.tx.Query(ctx, sqlTakeFreedSeats, event, n)
	seats, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("take seats: %w", err)
	}
	want := int32(n) - int32(len(seats))
	if want == 0 {
		return seats, nil
	}
	var fresh []int32
	err = t.Savepoint(ctx, func(sp Tx) error {
		start, held := rand.IntN(seatBlocks), []int32{}
		for left := want; left > 0; {
			blocks, err := sp.lockSeatBlocks(ctx, sqlLockSeatBlock, event, start, held)
			if err != nil {
				return err
			}
			if len(blocks) == 0 {
				return errNoFreeBlock
			}
			b := blocks[0]
			if err := sp.readBlockNext(ctx, event, &b); err != nil {
				return err
			}
			held, start = append(held, b.block), int(b.block)
			took, err := sp.takeFromBlocks(ctx, event, []seatBlock{b}, min(left, b.stop-b.next))
			if err != nil {
				return err
			}
			fresh, left = append(fresh, took...), left-int32(len(took))
		}
		return nil
	})
	if errors.Is(err, errNoFreeBlock) {
		fresh = nil
		var blocks []seatBlock
		if blocks, err = t.lockSeatBlocks(ctx, sqlLockSeatBlocks, event); err == nil {
			fresh, err = t.takeFromBlocks(ctx, event, blocks, want)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("take seats: %w", err)
	}
	return append(seats, fresh...), nil
}

// seatBlock is a locked block of seat numbers: the first it has not handed
// out (once read, see readBlockNext), and its end (excluded).
type seatBlock struct {
	block, next, stop int32
	read              bool
}

// lockSeatBlocks locks blocks by query; where each stands is read when it
// is taken from (readBlockNext), not for every block locked.
func (t Tx) lockSeatBlocks(ctx context.Context, query string, args ...any) ([]seatBlock, error) {
	rows, _ := t.tx.Query(ctx, query, args...) // its error is the rows'
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (seatBlock, error) {
		var b seatBlock
		return b, r.Scan(&b.block, &b.next, &b.stop)
	})
}

// readBlockNext reads the first number a locked block has not handed out.
// Run after the lock was taken, so its snapshot has the tickets of whoever
// held it.
func (t Tx) readBlockNext(ctx context.Context, event int64, b *seatBlock) error {
	if b.read {
		return nil
	}
	if err := t.tx.QueryRow(ctx, sqlSeatBlockNext, event, b.next, b.stop).Scan(&b.next); err != nil {
		return fmt.Errorf("read seat block %d: %w", b.block, err)
	}
	b.read = true
	return nil
}

// takeFromBlocks takes want numbers from the locked blocks, in their
// order, and marks those that ran out (ErrNoSeatLeft when they have fewer).
func (t Tx) takeFromBlocks(ctx context.Context, event int64, blocks []seatBlock, want int32) ([]int32, error) {
	var seats []int32
	var runOut []int32
	for _, b := range blocks {
		if want == 0 && !b.read {
			break
		}
		if err := t.readBlockNext(ctx, event, &b); err != nil {
			return nil, err
		}
		for ; b.next < b.stop && want > 0; b.next++ {
			seats = append(seats, b.next)
			want--
		}
		if b.next == b.stop {
			runOut = append(runOut, b.block)
		}
	}
	if want > 0 {
		return nil, ErrNoSeatLeft
	}
	if len(runOut) > 0 {
		if _, err := t.tx.Exec(ctx, sqlSeatBlocksRunOut, event, runOut); err != nil {
			return nil, err
		}
	}
	return seats, nil
}

// errNoFreeBlock: no block with enough numbers was free, or none has them.
var errNoFreeBlock = errors.New("no free seat block")

// seatBlocks is the most blocks an event has (migration 007): where a
// confirmation starts looking for one, at random so that concurrent ones
// spread over them.
const seatBlocks = 64

// IssueTickets issues a booking's tickets, on its row: codes[i] for seat
// number seats[i], of reserved seat seatIDs[i] (nil for general admission).
// A booking's tickets are issued once.
func (t Tx) IssueTickets(ctx context.Context, bookingID string, codes []string, seats []int32, seatIDs []string, now time.Time) error {
	tag, err := t.tx.Exec(ctx, sqlIssueTickets, bookingID, codes, seats, seatIDs, now)
	if err == nil && tag.RowsAffected() != 1 {
		err = errors.New("its tickets were issued before")
	}
	if err != nil {
		return fmt.Errorf("issue tickets of booking %s: %w", bookingID, err)
	}
	return nil
}

// VoidTickets voids a booking's tickets and frees their seat numbers.
func (t Tx) VoidTickets(ctx context.Context, bookingID string, event int64) error {
	rows, err := t.tx.Query(ctx, sqlVoidTickets, bookingID)
	voided, err := pgx.CollectRows(rows, pgx.RowTo[[]int32])
	if err != nil {
		return fmt.Errorf("void tickets of booking %s: %w", bookingID, err)
	}
	var seats []int32
	for _, s := range voided {
		seats = append(seats, s...)
	}
	if _, err := t.tx.Exec(ctx, sqlFreeSeats, event, seats); err != nil {
		return fmt.Errorf("free seats of booking %s: %w", bookingID, err)
	}
	return nil
}
