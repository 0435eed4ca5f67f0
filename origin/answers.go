package origin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seats"
)

// The one mapping from the outcomes of the protocol packages to the
// answers of the API (docs/api.md §7–§10): a status, a JSON body, and the
// outcome label of the metrics.

// holdJSON is <hold> of docs/api.md §7.
type holdJSON struct {
	HoldID    string `json:"hold_id"`
	EventID   int64  `json:"event_id"`
	UserID    string `json:"user_id"`
	Quantity  int64  `json:"quantity"`
	Status    string `json:"status"`
	ExpiresAt string `json:"expires_at"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	// Seats are the reserved seats of the hold (docs/api.md §15).
	Seats []string `json:"seats,omitempty"`
	// Section is the general-admission section of the seat map whose
	// places the hold has (docs/api.md §15).
	Section string `json:"section,omitempty"`
}

// holdBodyAt is <hold> for h as a buyer sees it at now.
func holdBodyAt(h ledger.Hold, ev ledger.Event, now time.Time) []byte {
	amount := ev.Price * h.Quantity
	if ev.Seated() {
		amount = h.Amount
	}
	b, _ := json.Marshal(holdJSON{
		HoldID: h.ID, EventID: ev.ID, UserID: h.UserID, Quantity: h.Quantity, Status: h.StatusAt(now),
		ExpiresAt: rfc3339(h.ExpiresAt), Amount: amount, Currency: ev.Currency, Seats: h.Seats, Section: h.Section,
	})
	return append(b, '\n')
}

// seatsUnavailableJSON is the 409 of a hold whose reserved seats are
// taken: the error and the seats (docs/api.md §15).
type seatsUnavailableJSON struct {
	Error   string   `json:"error"`
	Message string   `json:"message"`
	Seats   []string `json:"seats"`
}

// holdAnswers is the answer of each outcome of a hold request (docs/api.md
// §7): its status, and for a refusal its error code and message.
var holdAnswers = map[seats.Outcome]struct {
	status  int
	outcome string
	msg     string
}{
	seats.Held:             {http.StatusCreated, "held", ""},
	seats.Replayed:         {http.StatusCreated, "replayed", ""},
	seats.AlreadyHeld:      {http.StatusOK, "already_held", ""},
	seats.SoldOut:          {http.StatusConflict, "sold_out", "the event is sold out"},
	seats.SeatsUnavailable: {http.StatusConflict, "seats_unavailable", "some of the seats are no longer available"},
	seats.KeyReused:        {http.StatusUnprocessableEntity, "idempotency_key_reused", "this Idempotency-Key was used with a different request body"},
	seats.InProgress:       {http.StatusConflict, "request_in_progress", "a request with this Idempotency-Key is still being processed"},
	seats.Unavailable:      {http.StatusServiceUnavailable, "unavailable", "seats cannot be held right now; retry shortly"},
	seats.PerUserLimit:     {http.StatusUnprocessableEntity, "exceeds_per_user_limit", "you have seats of this event already"},
}

// unavailableMessages says what each step that failed means for the buyer.
var unavailableMessages = map[string]string{
	seats.ReasonNotHeld:     "seats cannot be held right now; retry shortly",
	seats.ReasonNotRecorded: "the hold could not be recorded; retry shortly",
	seats.ReasonUnreadable:  "the hold cannot be read right now; retry shortly",
	seats.ReasonVerifying:   "the hold is being verified; retry shortly",
	seats.ReasonContended:   "the seats chosen were taken meanwhile; retry shortly",
}

// holdAnswer is the answer of a hold request's outcome.
func holdAnswer(ev ledger.Event, res seats.Result) response {
	a, ok := holdAnswers[res.Outcome]
	if !ok {
		return errUnavailable
	}
	switch res.Outcome {
	case seats.Held:
		return response{status: a.status, body: res.Hold.Response, outcome: a.outcome}
	case seats.Replayed:
		if res.Stored != nil {
			return response{status: res.Stored.Status, body: res.Stored.Body, outcome: a.outcome}
		}
		return response{status: a.status, body: res.Hold.Response, outcome: a.outcome}
	case seats.AlreadyHeld:
		return response{status: a.status, body: holdBodyAt(res.Hold, ev, res.At), outcome: a.outcome}
	case seats.SeatsUnavailable:
		b, _ := json.Marshal(seatsUnavailableJSON{Error: a.outcome, Message: a.msg, Seats: res.Taken})
		return response{status: a.status, body: append(b, '\n'), outcome: a.outcome}
	case seats.SoldOut:
		switch {
		case res.Section != "" && res.Remaining > 0:
			return errorResponse(a.status, a.outcome, fmt.Sprintf("only %d seats are left in section %s", res.Remaining, res.Section))
		case res.Section != "":
			return errorResponse(a.status, a.outcome, fmt.Sprintf("section %s is sold out", res.Section))
		case res.Remaining > 0:
			return errorResponse(a.status, a.outcome, fmt.Sprintf("only %d seats are left", res.Remaining))
		}
	case seats.Unavailable:
		msg, ok := unavailableMessages[res.Reason]
		if !ok {
			msg = a.msg
		}
		return unavailableResponse(msg)
	}
	return errorResponse(a.status, a.outcome, a.msg)
}

// bookingAnswers is the answer of each outcome of a booking request
// (docs/api.md §9).
var bookingAnswers = map[booking.Outcome]struct {
	status  int
	outcome string
	msg     string
}{
	booking.Created:       {http.StatusAccepted, "created", ""},
	booking.Declined:      {http.StatusAccepted, "declined", ""},
	booking.Replayed:      {http.StatusAccepted, "replayed", ""},
	booking.Existing:      {http.StatusOK, "existing", ""},
	booking.HoldExpired:   {http.StatusGone, "hold_expired", "the hold has expired; its seats may be someone else's now"},
	booking.HoldNotActive: {http.StatusConflict, "hold_not_active", "the hold is %s, not active"},
	booking.KeyReused:     {http.StatusUnprocessableEntity, "idempotency_key_reused", "this Idempotency-Key was used with a different request body"},
	booking.Unavailable:   {http.StatusServiceUnavailable, "unavailable", "a backing service is unavailable; retry shortly"},
}

// bookingAnswer is the answer of a booking request's outcome.
func (s bookingsAPI) bookingAnswer(ctx context.Context, res booking.Result) response {
	a, ok := bookingAnswers[res.Outcome]
	switch {
	case !ok || res.Outcome == booking.Unavailable:
		return errUnavailable
	case res.Outcome == booking.Existing:
		body, err := s.bookingBody(ctx, res.Booking)
		if err != nil {
			return errUnavailable
		}
		return response{status: a.status, body: body, outcome: a.outcome}
	case res.Body != nil:
		return response{status: a.status, body: res.Body, outcome: a.outcome}
	case res.Outcome == booking.HoldNotActive:
		return errorResponse(a.status, a.outcome, fmt.Sprintf(a.msg, res.HoldStatus))
	}
	return errorResponse(a.status, a.outcome, a.msg)
}

// The gate's answers (docs/api.md §11).

// scanInvalid is the result of a code no key signed, or the ledger never
// issued.
const scanInvalid = "invalid_ticket"

// scanAnswers is the status and the refusal's message of each scan result.
var scanAnswers = map[string]struct {
	status int
	msg    string
}{
	ledger.ScanAdmitted:    {http.StatusOK, ""},
	ledger.ScanAlreadyUsed: {http.StatusConflict, "the ticket was used already"},
	ledger.ScanVoid:        {http.StatusGone, "the ticket is void: its booking was cancelled or refunded"},
	ledger.ScanWrongEvent:  {http.StatusConflict, "the ticket is for another event"},
	scanInvalid:            {http.StatusBadRequest, "not a ticket code"},
	scanBeforeIssue:        {http.StatusBadRequest, "scanned_at is before the ticket was issued: set the device's clock"},
}

// scanBeforeIssue is the result of an offline scan dated before its ticket
// was issued (ledger.ErrScanBeforeIssue): a request the gate got wrong,
// answered as one, and not recorded.
const scanBeforeIssue = "invalid_request"

// scanAnswer is what a scan comes to, before it is put in either form.
type scanAnswer struct {
	result string
	// msg overrides the result's message.
	msg       string
	ticket    *ticketJSON
	scannedAt time.Time
	// event is the ticket's event, said when it is not the gate's.
	event int64
	// first is the ticket's first admission; displaced the later admission
	// it took the place of.
	first, displaced *ledger.Scan
	// letInBeforeVoid: a void ticket's offline scan made before the
	// voiding, whose holder the device let in.
	letInBeforeVoid bool
}

func scanAnswerOf(o ledger.ScanOutcome) scanAnswer {
	t := ticketsJSON([]ledger.Ticket{o.Ticket})[0]
	a := scanAnswer{result: o.Result, ticket: &t, scannedAt: o.Scan.ScannedAt, first: o.First, displaced: o.Displaced,
		letInBeforeVoid: o.Result == ledger.ScanVoid && o.Scan.LetInBeforeVoid}
	if o.Result == ledger.ScanWrongEvent {
		a.event = o.Ticket.EventID
	}
	return a
}

// scanJSON is a scan's answer: the body of POST /v1/scans for one scan, an
// element of "results" for an upload.
type scanJSON struct {
	// Code and Status: an upload's, the scan's code and the status it
	// would have been answered alone.
	Code   string `json:"code,omitempty"`
	Status int    `json:"status,omitempty"`
	// Error and Message: a refusal's.
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
	// Result is admitted, already_used, ticket_void, wrong_event,
	// invalid_ticket or invalid_request.
	Result string      `json:"result"`
	Ticket *ticketJSON `json:"ticket,omitempty"`
	// Event is a wrong_event's: the event the ticket is for.
	Event int64 `json:"event,omitempty"`
	// Gate is the gate that admitted the ticket: this scan's when
	// admitted, the first scan's when already used.
	Gate           string `json:"gate,omitempty"`
	ScannedAt      string `json:"scanned_at,omitempty"`
	FirstScannedAt string `json:"first_scanned_at,omitempty"`
	// Displaced is the admission a late upload of an earlier scan took the
	// place of: whoever it let in came in on a used ticket.
	Displaced *gateScanJSON `json:"displaced,omitempty"`
	// LetInBeforeVoid is a ticket_void's: the device scanned the ticket
	// before it was voided, and let its holder in.
	LetInBeforeVoid bool `json:"let_in_before_void,omitempty"`
}

type gateScanJSON struct {
	Gate      string `json:"gate"`
	ScannedAt string `json:"scanned_at"`
}

// scanTime is a scan's time, to the microsecond the ledger keeps: two
// scans a moment apart must be told apart.
func scanTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func (a scanAnswer) body() scanJSON {
	ans := scanAnswers[a.result]
	j := scanJSON{Status: ans.status, Result: a.result, Ticket: a.ticket, Event: a.event, LetInBeforeVoid: a.letInBeforeVoid}
	if a.result != ledger.ScanAdmitted {
		j.Error, j.Message = a.result, ans.msg
		if a.msg != "" {
			j.Message = a.msg
		}
	}
	if !a.scannedAt.IsZero() {
		j.ScannedAt = scanTime(a.scannedAt)
	}
	switch a.result {
	case ledger.ScanAdmitted:
		j.Gate = a.first.Gate
		if a.displaced != nil {
			j.Displaced = &gateScanJSON{Gate: a.displaced.Gate, ScannedAt: scanTime(a.displaced.ScannedAt)}
		}
	case ledger.ScanAlreadyUsed:
		j.Gate, j.FirstScannedAt = a.first.Gate, scanTime(a.first.ScannedAt)
	}
	return j
}

// single is the answer to a request of one scan.
func (a scanAnswer) single() response {
	if a.result == scanBeforeIssue {
		// Alone, a request refused as any other is.
		return errorResponse(http.StatusBadRequest, "invalid_request", scanAnswers[a.result].msg)
	}
	j := a.body()
	j.Status = 0
	b, _ := json.Marshal(j)
	return response{status: scanAnswers[a.result].status, body: append(b, '\n'), outcome: a.result}
}

// item is the answer to one scan of an upload.
func (a scanAnswer) item(code string) scanJSON {
	j := a.body()
	j.Code = code
	return j
}
