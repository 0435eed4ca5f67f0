package origin

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/ticketcode"
)

// The gate (docs/api.md §11): POST /v1/scans admits a ticket once, online
// or, for a device that verified codes itself, by the upload of its scans;
// GET /v1/scans/keys gives devices the public keys they verify with. A gate
// admits to one event: a device's, or the one a scan with the shared token
// names, and refuses every other event's tickets.

// MaxScansPerUpload is the most scans one upload carries.
const MaxScansPerUpload = 256

// maxScanAhead is how far a device's scan time may be ahead of the origin's
// clock: a device whose clock runs further ahead would win every dispute
// over who scanned first, so its upload is refused until its clock is set.
const maxScanAhead = 5 * time.Minute

// scanTimeout bounds the ledger work of one request, an upload's included.
const scanTimeout = 10 * time.Second

// gateName is a gate's name: what the ledger and the answers say a ticket
// was admitted at.
var gateName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

type scansAPI struct{ *Server }

// scanRequest is the body of POST /v1/scans: one scan (code, and
// scanned_at for a scan made offline), or an upload (scans).
type scanRequest struct {
	Code *string `json:"code"`
	Gate string  `json:"gate"`
	// Event is the event the gate admits to: required with the shared
	// token, the device's own when left out.
	Event *int64 `json:"event"`
	// ScannedAt is raw so that null is told from left out: left out, the
	// scan is made now; null is no time, refused as a malformed one rather
	// than taken for an online scan.
	ScannedAt json.RawMessage `json:"scanned_at"`
	Scans     []uploadedScan  `json:"scans"`
}

type uploadedScan struct {
	Code      *string `json:"code"`
	ScannedAt *string `json:"scanned_at"`
}

// parse reads the request of caller into the scans to record, at now;
// upload says whether it was the upload form. A device's scans are at its
// gate and for its event: a body that names them may leave them out, one
// that names others is refused, since the device was set up for somewhere
// else. The shared token names both.
func (req *scanRequest) parse(caller gateCaller, now time.Time) (scans []ledger.NewScan, upload bool, bad *response) {
	invalid := func(msg string) ([]ledger.NewScan, bool, *response) {
		r := errorResponse(http.StatusBadRequest, "invalid_request", msg)
		return nil, false, &r
	}
	if req.Event != nil && *req.Event <= 0 {
		return invalid("event must be the id of the event the gate admits to (a positive integer)")
	}
	if caller.device != "" {
		switch req.Gate {
		case "":
			req.Gate = caller.gate
		case caller.gate:
		default:
			r := errorResponse(http.StatusForbidden, "gate_mismatch",
				"this device is registered for gate "+caller.gate+", not "+req.Gate)
			return nil, false, &r
		}
		switch {
		case req.Event == nil:
			req.Event = &caller.event
		case *req.Event != caller.event:
			r := errWrongEvent(caller.event, *req.Event)
			return nil, false, &r
		}
	}
	if !gateName.MatchString(req.Gate) {
		return invalid("gate must be 1–64 letters, digits and . _ : - (e.g. north-3)")
	}
	if req.Event == nil || *req.Event <= 0 {
		return invalid("event must be the id of the event the gate admits to (a positive integer)")
	}
	scanTime := func(s string) (time.Time, string) {
		t, err := time.Parse(time.RFC3339Nano, s)
		switch {
		case err != nil:
			return time.Time{}, "scanned_at must be an RFC 3339 time"
		case t.After(now.Add(maxScanAhead)):
			return time.Time{}, "scanned_at is ahead of the origin's clock by more than " + maxScanAhead.String() + ": set the device's clock"
		case t.Before(caller.since):
			// The device did not exist yet: its clock is behind, or the
			// scan was made up.
			return time.Time{}, "scanned_at is before this device was registered: set the device's clock"
		}
		return t, ""
	}
	switch {
	case req.Code != nil && req.Scans == nil:
		sc := ledger.NewScan{Code: *req.Code, Gate: req.Gate, Event: *req.Event, Device: caller.device}
		if req.ScannedAt != nil {
			var at string
			if err := json.Unmarshal(req.ScannedAt, &at); err != nil || string(req.ScannedAt) == "null" {
				return invalid("scanned_at must be an RFC 3339 time, or left out for a scan made now")
			}
			t, msg := scanTime(at)
			if msg != "" {
				return invalid(msg)
			}
			sc.ScannedAt, sc.Offline = t, true
		}
		return []ledger.NewScan{sc}, false, nil
	case req.Code == nil && req.ScannedAt == nil && len(req.Scans) > 0:
		if len(req.Scans) > MaxScansPerUpload {
			return invalid("an upload carries at most 256 scans")
		}
		for _, u := range req.Scans {
			if u.Code == nil {
				return invalid("scans: every scan has its code")
			}
			if u.ScannedAt == nil {
				// An uploaded scan was made offline: without its time it
				// is no scan the ledger can place.
				return invalid("scans: every scan has its scanned_at")
			}
			t, msg := scanTime(*u.ScannedAt)
			if msg != "" {
				return invalid("scans: " + msg)
			}
			scans = append(scans, ledger.NewScan{Code: *u.Code, Gate: req.Gate, Event: *req.Event, ScannedAt: t, Offline: true, Device: caller.device})
		}
		return scans, true, nil
	}
	return invalid(`the body is {"code","gate","event"[,"scanned_at"]} or {"gate","event","scans":[{"code","scanned_at"}, …]}`)
}

// errWrongEvent refuses a device's request for another event than its own.
func errWrongEvent(own, asked int64) response {
	return errorResponse(http.StatusForbidden, "wrong_event",
		fmt.Sprintf("this device is registered for event %d, not %d", own, asked))
}

// uploadJSON is the answer to an upload: each scan's answer, in the order
// of the request.
type uploadJSON struct {
	Gate    string     `json:"gate"`
	Event   int64      `json:"event"`
	Results []scanJSON `json:"results"`
}

func (s scansAPI) handleScan(w http.ResponseWriter, r *http.Request) {
	if bodyTooLarge(w, r) {
		return
	}
	caller, ok := s.gateAuth(w, r)
	if !ok {
		return
	}
	body, bad := readBody(w, r)
	if bad != nil {
		writeResponse(w, *bad)
		return
	}
	var req scanRequest
	if bad := decodeStrict(body, &req); bad != nil {
		writeResponse(w, *bad)
		return
	}
	now := s.cfg.Clock().UTC()
	scans, upload, bad := req.parse(caller, now)
	if bad != nil {
		writeResponse(w, *bad)
		return
	}
	ctx, cancel := contextWithTimeout(r, scanTimeout)
	defer cancel()
	if caller.device == "" {
		// A device's event exists (the ledger's reference); one the
		// shared token names may not.
		if _, err := s.ledger.Event(ctx, *req.Event); err != nil {
			lookupFailed(w, err, "event")
			return
		}
	}
	if !upload {
		a, err := s.scan(ctx, scans[0], now)
		if err != nil {
			s.log.Warn("scan", "gate", req.Gate, "device", caller.device, "error", err)
			writeResponse(w, errUnavailable)
			return
		}
		writeResponse(w, a.single())
		return
	}
	// Earliest first, so that of two scans of one ticket in one upload the
	// earlier is recorded as the admission straight away.
	order := make([]int, len(scans))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(scans[a].ScannedAt.UnixNano(), scans[b].ScannedAt.UnixNano()) })
	out := uploadJSON{Gate: req.Gate, Event: *req.Event, Results: make([]scanJSON, len(scans))}
	for _, i := range order {
		a, err := s.scan(ctx, scans[i], now)
		if err != nil {
			// The scans recorded so far stay recorded; the device uploads
			// again, and each is answered as before (RecordScan's replay).
			s.log.Warn("scan upload", "gate", req.Gate, "device", caller.device, "recorded", i, "error", err)
			writeResponse(w, errUnavailable)
			return
		}
		out.Results[i] = a.item(scans[i].Code)
	}
	writeJSON(w, http.StatusOK, out)
}

// scan verifies a code and records its scan. A code is judged expired by
// the time it was scanned, so an upload made after the end still counts;
// an expired code of another event is the ledger's to refuse as such.
func (s scansAPI) scan(ctx context.Context, sc ledger.NewScan, now time.Time) (scanAnswer, error) {
	at := now
	if sc.Offline {
		at = sc.ScannedAt
	}
	c, err := s.verifier.Verify(sc.Code, at)
	switch {
	case errors.Is(err, ticketcode.ErrExpired) && c.EventID == sc.Event:
		return s.refuse(ctx, sc, "expired", scanAnswer{result: ledger.ScanVoid, msg: "the ticket has expired", scannedAt: at}, now)
	case err != nil && !errors.Is(err, ticketcode.ErrExpired):
		return s.refuse(ctx, sc, scanInvalid, scanAnswer{result: scanInvalid}, now)
	}
	sc.Booking = c.BookingID
	o, err := s.ledger.RecordScan(ctx, sc, s.cfg.Clock)
	switch {
	case errors.Is(err, ledger.ErrScanBeforeIssue):
		return s.refuse(ctx, sc, "before_issue", scanAnswer{result: scanBeforeIssue}, now)
	case errors.Is(err, ledger.ErrNotFound):
		// Signed, yet never issued: only the holder of the signing key
		// could have made it.
		s.log.Warn("scan of a signed code the ledger never issued", "gate", sc.Gate)
		return s.refuse(ctx, sc, scanInvalid, scanAnswer{result: scanInvalid}, now)
	case err != nil:
		return scanAnswer{}, err
	}
	if !o.Replayed {
		// A scan sent again (an upload retried) was counted when it was
		// recorded: counted again, admissions would outnumber tickets.
		s.metrics.scans.WithLabelValues(o.Result).Inc()
	}
	if o.Result == ledger.ScanWrongEvent {
		a := scanAnswerOf(o)
		a.msg = fmt.Sprintf("the ticket is for event %d; this gate admits to event %d", o.Ticket.EventID, sc.Event)
		return a, nil
	}
	switch {
	case o.Replayed:
	case o.Scan.LetInBeforeVoid:
		s.metrics.scans.WithLabelValues("let_in_before_void").Inc()
		s.log.Warn("a ticket was let in offline before its booking was cancelled or refunded: its holder is inside",
			"booking", o.Booking, "gate", o.Scan.Gate, "device", o.Scan.Device, "scanned_at", o.Scan.ScannedAt)
	case o.Displaced != nil:
		s.metrics.scans.WithLabelValues("double_admission").Inc()
		s.log.Warn("a ticket was let in twice: an offline scan uploaded late was earlier than its admission",
			"first_gate", o.First.Gate, "first_scanned_at", o.First.ScannedAt, "later_gate", o.Displaced.Gate, "later_scanned_at", o.Displaced.ScannedAt)
	case o.LetInAgain:
		s.metrics.scans.WithLabelValues("double_admission").Inc()
		s.log.Warn("a ticket was let in twice: an offline scan uploaded late was later than its admission",
			"first_gate", o.First.Gate, "first_scanned_at", o.First.ScannedAt, "later_gate", o.Scan.Gate, "later_scanned_at", o.Scan.ScannedAt)
	}
	return scanAnswerOf(o), nil
}

// refuse counts a scan refused with no scan row, as label, and answers a.
// An offline scan is counted once per sender, as a recorded one is: a
// device sends an upload again when its answer was lost, and its refusals
// counted again would outnumber the scans made. Online scans are never
// deduplicated.
func (s scansAPI) refuse(ctx context.Context, sc ledger.NewScan, label string, a scanAnswer, now time.Time) (scanAnswer, error) {
	if sc.Offline {
		fresh, err := s.ledger.NoteOfflineRefusal(ctx, sc, label, now)
		if err != nil {
			return scanAnswer{}, err
		}
		if !fresh {
			return a, nil
		}
	}
	s.metrics.scans.WithLabelValues(label).Inc()
	return a, nil
}

// keyJSON is a public key of GET /v1/scans/keys.
type keyJSON struct {
	ID        string `json:"id"`
	Algorithm string `json:"algorithm"`
	PublicKey string `json:"public_key"`
}

// handleKeys serves GET /v1/scans/keys: the public keys ticket codes are
// verified with, the signing key's first. They are public: knowing them
// lets anyone check a ticket, and nobody make one.
func (s scansAPI) handleKeys(w http.ResponseWriter, r *http.Request) {
	if s.tickets == nil {
		writeError(w, http.StatusNotFound, "not_found", "this origin issues no tickets")
		return
	}
	keys := []keyJSON{}
	for _, k := range append([]ticketcode.PublicKey{s.tickets.PublicKey()}, s.cfg.TicketRetiredKeys...) {
		keys = append(keys, keyJSON{ID: k.ID, Algorithm: "Ed25519", PublicKey: base64.RawURLEncoding.EncodeToString(k.Key)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": keys})
}

// scanTotalsJSON is GET /v1/admin/events/{id}/scans.
type scanTotalsJSON struct {
	Event            int64 `json:"event"`
	Admitted         int64 `json:"admitted"`
	AlreadyUsed      int64 `json:"already_used"`
	Void             int64 `json:"ticket_void"`
	WrongEvent       int64 `json:"wrong_event"`
	DoubleAdmissions int64 `json:"double_admissions"`
	LetInThenVoided  int64 `json:"let_in_then_voided"`
}

// handleScanTotals serves GET /v1/admin/events/{id}/scans: the scans at
// the event's gates counted in the ledger.
func (s scansAPI) handleScanTotals(w http.ResponseWriter, r *http.Request) {
	if !s.gate.isAdmin(w, r) {
		return
	}
	id, ok := pathID(w, r, "event")
	if !ok {
		return
	}
	if _, err := s.ledger.Event(r.Context(), id); err != nil {
		lookupFailed(w, err, "event")
		return
	}
	t, err := s.ledger.ScanTotals(r.Context(), id)
	if err != nil {
		writeResponse(w, errUnavailable)
		return
	}
	writeJSON(w, http.StatusOK, scanTotalsJSON{Event: id, Admitted: t.Admitted, AlreadyUsed: t.AlreadyUsed,
		Void: t.Void, WrongEvent: t.WrongEvent, DoubleAdmissions: t.DoubleAdmissions, LetInThenVoided: t.LetInThenVoided})
}

// maxVoidPage is the most tickets one read of the void feed returns, and
// its default.
const maxVoidPage = 1000

// voidFeedJSON is GET /v1/scans/void.
type voidFeedJSON struct {
	Event   int64        `json:"event"`
	Tickets []ticketJSON `json:"tickets"`
	Next    string       `json:"next"`
	More    bool         `json:"more"`
}

// handleVoidFeed serves GET /v1/scans/void?event=&since=&limit=: the
// event's tickets voided since the cursor, for a device that verifies
// codes offline to refuse them (docs/origin.md, the gate). A device reads
// its own event's feed only.
func (s scansAPI) handleVoidFeed(w http.ResponseWriter, r *http.Request) {
	caller, ok := s.gateAuth(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	event, err := strconv.ParseInt(q.Get("event"), 10, 64)
	if err != nil || event <= 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", "event must be an event id (a positive integer)")
		return
	}
	if caller.device != "" && event != caller.event {
		writeResponse(w, errWrongEvent(caller.event, event))
		return
	}
	since, err := ledger.ParseVoidCursor(q.Get("since"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "since must be a cursor the feed handed out (next), or empty for the start")
		return
	}
	limit := maxVoidPage
	if raw := q.Get("limit"); raw != "" {
		limit, err = strconv.Atoi(raw)
		if err != nil || limit < 1 || limit > maxVoidPage {
			writeError(w, http.StatusBadRequest, "invalid_request", "limit must be 1–1000")
			return
		}
	}
	ctx, cancel := contextWithTimeout(r, scanTimeout)
	defer cancel()
	if _, err := s.ledger.Event(ctx, event); err != nil {
		lookupFailed(w, err, "event")
		return
	}
	page, err := s.ledger.VoidedTickets(ctx, event, since, limit)
	if err != nil {
		s.log.Warn("void feed not read", "event", event, "error", err)
		writeResponse(w, errUnavailable)
		return
	}
	writeJSON(w, http.StatusOK, voidFeedJSON{Event: event, Tickets: ticketsJSON(page.Tickets), Next: page.Next.String(), More: page.More})
}
