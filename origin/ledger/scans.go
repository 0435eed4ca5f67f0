package ledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Scan results: what a gate was told of a scan (the scans table's result).
const (
	ScanAdmitted    = "admitted"
	ScanAlreadyUsed = "already_used"
	ScanVoid        = "ticket_void"
	// ScanWrongEvent is a ticket of another event than the gate's: refused,
	// and recorded at the gate's event.
	ScanWrongEvent = "wrong_event"
)

// ErrScanBeforeIssue is an offline scan dated before its ticket was
// issued: no device scanned it then, and taken as earliest it would take
// the admission from whoever used the ticket.
var ErrScanBeforeIssue = errors.New("scanned before the ticket was issued")

// NewScan is a scan of a ticket at a gate.
type NewScan struct {
	Code string
	// Booking is the booking the code names, read from it once verified:
	// the ledger finds the ticket on that booking's row.
	Booking string
	Gate    string
	// Event is the event the gate scans for; a ticket of another is refused.
	Event int64
	// ScannedAt is when a device scanned offline, by its clock; left zero
	// for an online scan, which is made when the ledger holds the ticket.
	// Kept to the microsecond.
	ScannedAt time.Time
	// Offline: a device verified the code itself and uploads its scan now.
	Offline bool
	// Device is the registered gate device the scan came from; "" for the
	// shared gate token.
	Device string
}

// deviceID is the scan's device as the ledger keeps it: NULL for the
// shared gate token.
func (s NewScan) deviceID() *string {
	if s.Device == "" {
		return nil
	}
	return &s.Device
}

// Scan is a recorded scan.
type Scan struct {
	Gate       string    `db:"gate"`
	ScannedAt  time.Time `db:"scanned_at"`
	RecordedAt time.Time `db:"recorded_at"`
	Offline    bool      `db:"offline"`
	Result     string    `db:"result"`
	First      bool      `db:"first"`
	// Device is the gate device that sent the scan, "" for none.
	Device string `db:"device_id"`
	// LetInBeforeVoid: an offline scan of a void ticket, made before the
	// ticket was voided. The device let its holder in, but the booking was
	// cancelled or refunded since, so it is recorded ScanVoid, never an
	// admission, and marked for the operator to settle.
	LetInBeforeVoid bool `db:"admitted_before_void"`
}

// ScanOutcome is what a scan comes to.
type ScanOutcome struct {
	// Result is ScanAdmitted, ScanAlreadyUsed, ScanVoid or ScanWrongEvent.
	Result string
	Ticket Ticket
	// Scan is this scan as recorded.
	Scan Scan
	// First is the ticket's first admission, this scan when it admitted;
	// nil when nothing admitted the ticket (void before any scan).
	First *Scan
	// Displaced is the admission an earlier offline scan took the first
	// mark from: a later scan that let someone in on a used ticket.
	Displaced *Scan
	// Replayed: an offline scan its sender uploaded again; nothing was
	// written, and the outcome is the ledger's as it stands.
	Replayed bool
	// LetInAgain: an offline scan no earlier than the ticket's admission
	// by another device or gate. The device let its holder in without
	// knowing of the admission, so it is recorded as an admission (not
	// first) and answered as already used: a double admission, as it is
	// when the two scans are uploaded the other way round (Displaced).
	LetInAgain bool
	// Booking is the ticket's booking.
	Booking string
}

// scannedTicket is a ticket as a scan reads it, its row locked.
type scannedTicket struct {
	Ticket
	Valid    bool      `db:"valid"`
	IssuedAt time.Time `db:"issued_at"`
	Booking  string    `db:"booking_id"`
	// VoidedAt is when the ticket was voided: nil while it is valid, and
	// for a ticket voided before the ledger kept the time (migration 018).
	VoidedAt *time.Time `db:"voided_at"`
}

// RecordScan records a scan and says whether it admits. The ticket's row,
// its booking's, is locked for the transaction, so scans of one ticket (and
// its voiding) are decided one at a time: of any number of concurrent scans
// exactly one admits. An online scan admits when no scan admitted the ticket before it,
// and its time is read from clock once the row is locked, so the times of
// online scans follow the order they were decided in. An offline scan
// uploaded late admits when it is earlier than the recorded admission, and
// takes its place (ScanOutcome.Displaced): the ticket admits to its
// earliest scan. One later than an admission by another device or gate is
// recorded as a second admission (ScanOutcome.LetInAgain): the device let
// its holder in. An offline scan of a void ticket made before it was
// voided is refused as void, and recorded so (Scan.LetInBeforeVoid): the
// device let its holder in, on a booking since cancelled or refunded,
// which keeps no admitted ticket. A ticket of another event than s.Event is refused
// (ScanWrongEvent), whatever its state, and recorded. An offline scan its
// sender (s.Device, or the shared token) uploaded before is recorded once
// (ScanOutcome.Replayed); another device's at the same gate and moment is
// a scan of its own. ErrNotFound: the code is no ticket's;
// ErrScanBeforeIssue: an offline scan dated before the ticket was issued,
// not recorded.
func (l *Ledger) RecordScan(ctx context.Context, s NewScan, clock func() time.Time) (ScanOutcome, error) {
	if uuid.Validate(s.Booking) != nil {
		return ScanOutcome{}, fmt.Errorf("read ticket: booking %q: %w", s.Booking, ErrNotFound)
	}
	var out ScanOutcome
	err := pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		out = ScanOutcome{}
		rows, err := tx.Query(ctx, sqlLockScannedTicket, s.Booking, s.Code)
		t, err := collectOne[scannedTicket](rows, err, "read ticket")
		if err != nil {
			return err
		}
		now := clock().UTC().Truncate(time.Microsecond)
		if !s.Offline {
			s.ScannedAt = now
		}
		s.ScannedAt = s.ScannedAt.UTC().Truncate(time.Microsecond)
		if s.Offline && s.ScannedAt.Before(t.IssuedAt) {
			return ErrScanBeforeIssue
		}
		out.Ticket, out.Booking = t.Ticket, t.Booking
		first, err := optionalScan(tx.Query(ctx, sqlFirstScan, s.Code))
		if err != nil {
			return fmt.Errorf("read first scan: %w", err)
		}
		out.First = first
		this := Scan{Gate: s.Gate, ScannedAt: s.ScannedAt, RecordedAt: now, Offline: s.Offline, Device: s.Device}
		if s.Offline {
			again, err := optionalScan(tx.Query(ctx, sqlUploadedScan, s.Code, s.Gate, s.Event, s.ScannedAt, s.Device))
			if err != nil {
				return fmt.Errorf("read uploaded scan: %w", err)
			}
			if again != nil {
				out.Scan, out.Replayed = *again, true
				switch {
				case again.Result == ScanWrongEvent:
					out.Result = ScanWrongEvent
				case !t.Valid:
					out.Result = ScanVoid
				case again.First:
					out.Result = ScanAdmitted
				case first != nil:
					out.Result = ScanAlreadyUsed
				default:
					return errors.New("an uploaded scan recorded before, and no admission of a valid ticket")
				}
				return nil
			}
		}
		switch {
		case t.EventID != s.Event:
			this.Result = ScanWrongEvent
		case !t.Valid:
			this.Result = ScanVoid
			if s.Offline && t.VoidedAt != nil && s.ScannedAt.Before(*t.VoidedAt) {
				// Not by the scanner that let the ticket in before: it
				// knew, and refused it itself, as for an admission.
				var knew bool
				if err := tx.QueryRow(ctx, sqlLetInBeforeVoidBy, s.Code, s.Gate, s.Device, s.ScannedAt).Scan(&knew); err != nil {
					return fmt.Errorf("read scans let in before the void: %w", err)
				}
				this.LetInBeforeVoid = !knew
			}
		case first == nil:
			this.Result, this.First = ScanAdmitted, true
			out.First = &this
		case !s.Offline || (!s.ScannedAt.Before(first.ScannedAt) && s.Gate == first.Gate && s.Device == first.Device):
			// Online, the gate is told; offline by the scanner that let
			// the ticket in (its device, or the shared token at its gate),
			// the device knew it and refused it itself.
			this.Result = ScanAlreadyUsed
		case !s.ScannedAt.Before(first.ScannedAt):
			this.Result = ScanAdmitted
			out.LetInAgain = true
		default:
			if _, err := tx.Exec(ctx, sqlUnmarkFirstScan, s.Code); err != nil {
				return fmt.Errorf("unmark first scan: %w", err)
			}
			displaced := *first
			displaced.First = false
			this.Result, this.First = ScanAdmitted, true
			out.First, out.Displaced = &this, &displaced
		}
		if _, err := tx.Exec(ctx, sqlInsertScan, s.Code, t.Booking, t.EventID, s.Gate, s.ScannedAt, now, s.Offline, this.Result, this.First, s.deviceID(), s.Event, this.LetInBeforeVoid); err != nil {
			return fmt.Errorf("insert scan: %w", err)
		}
		out.Result, out.Scan = this.Result, this
		if out.LetInAgain {
			out.Result = ScanAlreadyUsed
		}
		return nil
	})
	if err != nil {
		return ScanOutcome{}, fmt.Errorf("record scan at gate %s: %w", s.Gate, err)
	}
	return out, nil
}

// NoteOfflineRefusal notes an offline scan refused with no scan row (an
// expired or forged code, one never issued, a time before the ticket's
// issue) as result, and says whether it is new: false for one its sender
// noted before, an upload sent again, so that it is counted once.
func (l *Ledger) NoteOfflineRefusal(ctx context.Context, s NewScan, result string, now time.Time) (bool, error) {
	code := sha256.Sum256([]byte(s.Code))
	tag, err := l.pool.Exec(ctx, sqlNoteOfflineRefusal, code[:], s.Gate, s.Event,
		s.ScannedAt.UTC().Truncate(time.Microsecond), s.deviceID(), result, now.UTC().Truncate(time.Microsecond))
	if err != nil {
		return false, fmt.Errorf("note refused scan at gate %s: %w", s.Gate, err)
	}
	return tag.RowsAffected() == 1, nil
}

func optionalScan(rows pgx.Rows, err error) (*Scan, error) {
	if err != nil {
		return nil, err
	}
	s, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Scan])
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &s, nil
}

// ScansOf reads every recorded scan of a ticket, in scan time order.
func (l *Ledger) ScansOf(ctx context.Context, code string) ([]Scan, error) {
	rows, err := l.pool.Query(ctx, sqlScansOf, code)
	return collectAll[Scan](rows, err, "read scans")
}

// ScanTotals counts an event's scans from the ledger.
type ScanTotals struct {
	// Admitted counts the tickets admitted (one first admission each).
	Admitted int64 `db:"admitted"`
	// AlreadyUsed and Void count the scans refused.
	AlreadyUsed int64 `db:"already_used"`
	Void        int64 `db:"void"`
	// WrongEvent counts the tickets of other events refused at its gates.
	WrongEvent int64 `db:"wrong_event"`
	// LetInThenVoided counts the void tickets an offline scan let in
	// before they were voided (Scan.LetInBeforeVoid): bookings cancelled
	// or refunded whose holders came in.
	LetInThenVoided int64 `db:"let_in_then_voided"`
	// DoubleAdmissions counts the tickets more than one scan let in: only
	// offline scans, which verify without the ledger, can make one.
	DoubleAdmissions int64 `db:"double_admissions"`
}

// ScanTotals counts the scans at the event's gates.
func (l *Ledger) ScanTotals(ctx context.Context, event int64) (ScanTotals, error) {
	rows, err := l.pool.Query(ctx, sqlScanTotals, event)
	return collectOne[ScanTotals](rows, err, fmt.Sprintf("count scans of event %d", event))
}

// ValidTicketCodes reads the codes of the event's valid tickets: what the
// gates are to admit.
func (l *Ledger) ValidTicketCodes(ctx context.Context, event int64) ([]string, error) {
	rows, err := l.pool.Query(ctx, sqlValidTicketCodes, event)
	if err != nil {
		return nil, fmt.Errorf("read ticket codes of event %d: %w", event, err)
	}
	codes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read ticket codes of event %d: %w", event, err)
	}
	return codes, nil
}
