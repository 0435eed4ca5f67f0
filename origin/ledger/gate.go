package ledger

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// GateDevice is a gate device the operator registered (migrations 009,
// 012).
type GateDevice struct {
	ID   string `db:"id"`
	Gate string `db:"gate"`
	// Event is the event whose tickets the device scans; nil only for a
	// device registered before devices had one, which migration 012
	// revoked.
	Event     *int64     `db:"event_id"`
	Name      string     `db:"name"`
	CreatedAt time.Time  `db:"created_at"`
	RevokedAt *time.Time `db:"revoked_at"`
	// LastScanAt is when the ledger last recorded a scan of the device.
	LastScanAt *time.Time `db:"last_scan_at"`
}

// NewGateDevice is a device to register: SecretHash is SHA-256 of its
// token's secret, which the ledger never sees.
type NewGateDevice struct {
	ID, Gate, Name string
	Event          int64
	SecretHash     []byte
	CreatedAt      time.Time
}

// AddGateDevice registers a device.
func (l *Ledger) AddGateDevice(ctx context.Context, d NewGateDevice) (GateDevice, error) {
	rows, err := l.pool.Query(ctx, sqlInsertDevice, d.ID, d.Gate, d.Name, d.SecretHash, d.CreatedAt, d.Event)
	return collectOne[GateDevice](rows, err, "register gate device")
}

// GateDevices reads every device, revoked ones included, oldest first.
func (l *Ledger) GateDevices(ctx context.Context) ([]GateDevice, error) {
	rows, err := l.pool.Query(ctx, sqlDevices)
	return collectAll[GateDevice](rows, err, "read gate devices")
}

// GateDevice reads one device; ErrNotFound when there is none.
func (l *Ledger) GateDevice(ctx context.Context, id string) (GateDevice, error) {
	rows, err := l.pool.Query(ctx, sqlDevice, id)
	return collectOne[GateDevice](rows, err, "read gate device "+id)
}

// RevokeGateDevice revokes a device from at on; revoking it again changes
// nothing. ErrNotFound when there is no such device.
func (l *Ledger) RevokeGateDevice(ctx context.Context, id string, at time.Time) (GateDevice, error) {
	rows, err := l.pool.Query(ctx, sqlRevokeDevice, id, at)
	return collectOne[GateDevice](rows, err, "revoke gate device "+id)
}

// GateCredential is what a device's token is checked against.
type GateCredential struct {
	Gate  string `db:"gate"`
	Event int64  `db:"event_id"`
	// CreatedAt is when the device was registered: it scanned nothing
	// before.
	CreatedAt  time.Time `db:"created_at"`
	SecretHash []byte    `db:"secret_hash"`
}

// GateCredential reads the credential of a device not revoked; ErrNotFound
// for a revoked or unknown one.
func (l *Ledger) GateCredential(ctx context.Context, id string) (GateCredential, error) {
	rows, err := l.pool.Query(ctx, sqlDeviceCredential, id)
	return collectOne[GateCredential](rows, err, "read gate device credential")
}

// AnyGateDevice reports whether a device not revoked is registered.
func (l *Ledger) AnyGateDevice(ctx context.Context) (bool, error) {
	var ok bool
	if err := l.pool.QueryRow(ctx, sqlAnyActiveDevice).Scan(&ok); err != nil {
		return false, fmt.Errorf("read gate devices: %w", err)
	}
	return ok, nil
}

// VoidCursor is where a reader of the feed of voided tickets is: the
// snapshot of its last read (after), and, within a read that has more pages,
// that read's snapshot (upto) and the last voiding it was given. The zero
// cursor is the start of the feed.
type VoidCursor struct {
	after, upto string
	xid         string
	id          int64
}

// snapshotText is pg_snapshot's text form, xmin:xmax:xip,…
var snapshotText = regexp.MustCompile(`^[0-9]{1,20}:[0-9]{1,20}:([0-9]{1,20}(,[0-9]{1,20})*)?$`)

// isSnapshot reports whether s is a snapshot PostgreSQL reads: of its
// form, and held to the rules its input function keeps (64-bit ids, none
// zero, xmin ≤ xmax, the running ones within [xmin, xmax) and in order).
// A cursor that breaks one was not handed out by the feed, and must be
// refused as such rather than fail the query.
func isSnapshot(s string) bool {
	if !snapshotText.MatchString(s) {
		return false
	}
	parts := strings.SplitN(s, ":", 3)
	xmin, err1 := strconv.ParseUint(parts[0], 10, 64)
	xmax, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil || xmin == 0 || xmax < xmin {
		return false
	}
	if parts[2] == "" {
		return true
	}
	last := xmin
	for x := range strings.SplitSeq(parts[2], ",") {
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil || v < last || v >= xmax {
			return false
		}
		last = v
	}
	return true
}

// ErrBadCursor is a void cursor the feed did not hand out.
var ErrBadCursor = errors.New("not a cursor of the void feed")

// String is the cursor as a reader keeps it: opaque, URL-safe, and ""
// for the start.
func (c VoidCursor) String() string {
	if c == (VoidCursor{}) {
		return ""
	}
	s := c.after
	if c.upto != "" {
		s = strings.Join([]string{c.after, c.upto, c.xid, strconv.FormatInt(c.id, 10)}, "|")
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// ParseVoidCursor reads VoidCursor.String; ErrBadCursor for anything else.
func ParseVoidCursor(s string) (VoidCursor, error) {
	if s == "" {
		return VoidCursor{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return VoidCursor{}, ErrBadCursor
	}
	parts := strings.Split(string(b), "|")
	if len(parts) == 1 && isSnapshot(parts[0]) {
		return VoidCursor{after: parts[0]}, nil
	}
	if len(parts) != 4 || (parts[0] != "" && !isSnapshot(parts[0])) || !isSnapshot(parts[1]) {
		return VoidCursor{}, ErrBadCursor
	}
	if _, err := strconv.ParseUint(parts[2], 10, 64); err != nil {
		return VoidCursor{}, ErrBadCursor
	}
	id, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || id < 1 {
		return VoidCursor{}, ErrBadCursor
	}
	return VoidCursor{after: parts[0], upto: parts[1], xid: parts[2], id: id}, nil
}

// VoidPage is one read of the feed.
type VoidPage struct {
	Tickets []Ticket
	// Next is the cursor to read on from; More says that the read has more
	// pages, to fetch at once.
	Next VoidCursor
	More bool
}

type voidRow struct {
	Ticket
	XID string `db:"xid"`
	ID  int64  `db:"id"`
}

// VoidedTickets reads up to limit tickets of the event voided after c, in
// the order the feed keeps. Every ticket voided is read once by a reader
// that follows Next, whatever the order the voidings commit in: a read
// takes the voidings its snapshot sees that the last read's did not.
func (l *Ledger) VoidedTickets(ctx context.Context, event int64, c VoidCursor, limit int) (VoidPage, error) {
	upto := c.upto
	if upto == "" {
		if err := l.pool.QueryRow(ctx, sqlCurrentSnapshot).Scan(&upto); err != nil {
			return VoidPage{}, fmt.Errorf("read void feed: %w", err)
		}
	}
	var after *string
	if c.after != "" {
		after = &c.after
	}
	xid := c.xid
	if xid == "" {
		xid = "0"
	}
	rows, err := l.pool.Query(ctx, sqlVoidFeed, event, after, upto, xid, c.id, limit)
	got, err := collectAll[voidRow](rows, err, fmt.Sprintf("read void feed of event %d", event))
	if err != nil {
		return VoidPage{}, err
	}
	page := VoidPage{Tickets: make([]Ticket, len(got)), Next: VoidCursor{after: upto}}
	for i, r := range got {
		page.Tickets[i] = r.Ticket
	}
	if len(got) == limit {
		last := got[len(got)-1]
		page.Next = VoidCursor{after: c.after, upto: upto, xid: last.XID, id: last.ID}
		page.More = true
	}
	return page, nil
}

// VoidTicketsAt voids a booking's tickets as VoidTickets does, and records
// now, the origin's clock, as the time they were voided: an offline scan
// uploaded afterwards is judged against it (RecordScan), by the same clock
// as the devices' times are bounded by.
func (t Tx) VoidTicketsAt(ctx context.Context, bookingID string, event int64, now time.Time) error {
	if _, err := t.tx.Exec(ctx, sqlVoidTime, now.UTC().Truncate(time.Microsecond)); err != nil {
		return fmt.Errorf("record when the tickets of booking %s were voided: %w", bookingID, err)
	}
	return t.VoidTickets(ctx, bookingID, event)
}
