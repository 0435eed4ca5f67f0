package seats

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
)

// Outcome is what a hold request came to.
type Outcome int

const (
	// Held: a new hold, Result.Hold, written to the ledger.
	Held Outcome = iota + 1
	// AlreadyHeld: the buyer holds seats already (Result.Hold; built from
	// Redis when its row may still be being written).
	AlreadyHeld
	// Replayed: a retry of the request that made Result.Hold, whose
	// Response is the first answer; or, with Result.Stored, the answer
	// kept under the Idempotency-Key.
	Replayed
	// SoldOut: fewer seats left than asked for (Result.Remaining).
	SoldOut
	// SeatsUnavailable: some of the reserved seats asked for are another
	// live hold's (Result.Taken names them); nothing was held.
	SeatsUnavailable
	// KeyReused: the Idempotency-Key was used with another request body.
	KeyReused
	// InProgress: a request with the Idempotency-Key is still running.
	InProgress
	// Unavailable: Redis or the ledger cannot make or record the hold now;
	// Result.Reason says which step (retry shortly).
	Unavailable
	// PerUserLimit: the buyer has seats of the event from the overflow
	// reserve (a late payment confirmed meanwhile); nothing was held.
	PerUserLimit
)

// Why a hold request was Unavailable.
const (
	ReasonNotHeld     = "not_held"     // Redis did not take the hold
	ReasonNotRecorded = "not_recorded" // the ledger row could not be written
	ReasonUnreadable  = "unreadable"   // the hold could not be read back
	ReasonVerifying   = "verifying"    // an earlier attempt's write is not final yet
)

// PlaceRequest is a validated hold request.
type PlaceRequest struct {
	Event    *Event
	User     string
	Quantity int64
	// Seats are the reserved seats asked for, all or none (Quantity of
	// them, on the event's map); none for general admission.
	Seats []string
	// Section is the general-admission section of the event's seat map
	// whose places the hold takes (Quantity of them); "" otherwise.
	Section string
	// Position is the queue position of the buyer's token, kept on the
	// hold's row for the audit trail (0: unknown).
	Position int64
	// Key is the request's Idempotency-Key, Scope its record, Digest the
	// request body's digest.
	Key    string
	Scope  idem.Scope
	Digest string
	// Render is the answer a new hold is created with, kept in its ledger
	// row so that a replay survives the loss of Redis.
	Render func(ledger.Hold) []byte
}

// Result is a hold request's outcome.
type Result struct {
	Outcome Outcome
	Hold    ledger.Hold
	// Stored is the answer kept under the Idempotency-Key (Replayed).
	Stored *idem.StoredResponse
	// Remaining is the seats left (SoldOut): those of Section when that
	// is set, a section of the seat map the request named.
	Remaining int64
	Section   string
	// Taken are the seats asked for that another hold has
	// (SeatsUnavailable).
	Taken []string
	// Reason says why the request was Unavailable.
	Reason string
	// At is the time the request was judged by.
	At time.Time
	// Claim is the record this request claimed its Idempotency-Key with,
	// "" when another request's claim answered it: the caller keeps its
	// answer there (or gives the key up) unless it is Held.
	Claim string
}

// Place is the hold flow after the request is authenticated, admitted and
// validated: the Lua hold, which claims the request's Idempotency-Key in
// the same call, then the ledger row at once, or the seats straight back
// if the row cannot be written.
func (p *Protocol) Place(ctx context.Context, req PlaceRequest) Result {
	return p.place(ctx, req, "")
}

// place runs the hold flow; takeOver is the claim of a request that died
// without answering, which this one may replace ("" for none).
func (p *Protocol) place(ctx context.Context, req PlaceRequest, takeOver string) Result {
	ev := req.Event
	now := p.now()
	ir := inventory.HoldRequest{
		Event:        ev.ID,
		HoldID:       uuid.Must(uuid.NewV7()).String(),
		User:         req.User,
		Quantity:     req.Quantity,
		Seats:        req.Seats,
		Section:      req.Section,
		ExpiresAt:    now.Add(min(ev.HoldTTL(), p.HoldMaxLifeOf(ev.Event))).Truncate(time.Second),
		Now:          now,
		KeyDigest:    idem.KeyDigest(req.User, req.Key),
		BodyDigest:   req.Digest,
		Claim:        req.Scope.RedisKey(),
		ClaimReplace: takeOver,
		ClaimTTL:     p.idem.Keep,
	}
	ir.ClaimValue = idem.HoldClaim(req.Digest, ir.HoldID, now)
	var res inventory.HoldResult
	var out Result
	claimed := false
	p.inFlight(ctx, ev, func(deadline time.Time) (err error) {
		ir.Deadline = deadline
		res, err = p.inv.Hold(ctx, ir)
		return err
	}, func(deadline time.Time, err error) {
		if err == nil && res.Outcome == inventory.Claimed && res.ClaimedBy == ir.ClaimValue {
			// This call's own claim: the script ran already and its reply was
			// lost (the command was sent again). What it did is unknown; its
			// hold, if it made one, has no row and is settled like an
			// uncertain write.
			p.releases.addUncertain(ev, ir.HoldID, deadline)
			res, err = inventory.HoldResult{}, errors.New("hold script answer lost")
		}
		if err == nil && res.Outcome == inventory.Claimed {
			claimed = true // nothing was taken; answered below, out of flight
			return
		}
		out = p.answer(ctx, req, ir, res, deadline, err)
	})
	if claimed {
		out, stale := p.claimedAnswer(ctx, req, res.ClaimedBy, now)
		if stale && takeOver == "" {
			return p.place(ctx, req, res.ClaimedBy)
		}
		out.At = now
		return out
	}
	out.At, out.Claim = now, ir.ClaimValue
	return out
}

// inFlight runs a change's Redis step and then its ledger step, with the
// event's in-flight count raised from before the first to the end of the
// second: the one place that raises and lowers it. deadline is the ledger
// step's, set before the Redis step (the hold script takes no seat after
// it either). While a rebuild holds the fence, or the keys are missing, the
// count is lowered and the Redis step waits for the rebuild (which may be
// waiting for the count), then runs again. The ledger step runs whatever
// the Redis step returned.
func (p *Protocol) inFlight(ctx context.Context, ev *Event, redisStep func(deadline time.Time) error, ledgerStep func(deadline time.Time, redisErr error)) {
	ev.inflight.Add(1)
	defer ev.inflight.Add(-1)
	var deadline time.Time
	var err error
	for {
		deadline = p.cfg.WallClock().Add(p.cfg.HoldWriteTimeout)
		err = redisStep(deadline)
		if !errors.Is(err, inventory.ErrFrozen) && !errors.Is(err, inventory.ErrNotLoaded) {
			break
		}
		ev.inflight.Add(-1)
		lerr := p.recovery.ensureLoaded(ctx, ev)
		ev.inflight.Add(1)
		if lerr != nil {
			err = errors.Join(err, lerr)
			break
		}
	}
	if err == nil && p.afterRedisStep != nil {
		p.afterRedisStep()
	}
	ledgerStep(deadline, err)
}

func unavailable(reason string) Result { return Result{Outcome: Unavailable, Reason: reason} }

// answer acts on the hold script's answer (or error). deadline is the
// ledger write's.
func (p *Protocol) answer(ctx context.Context, req PlaceRequest, ir inventory.HoldRequest, res inventory.HoldResult, deadline time.Time, err error) Result {
	ev := req.Event
	if err != nil {
		if !errors.Is(err, inventory.ErrNotLoaded) && !errors.Is(err, inventory.ErrFrozen) {
			// The script may have run and its reply been lost: seats it took
			// would have no row, and no request to give them back. Once no run
			// of it can take seats any more (its deadline, which Redis checks),
			// they are returned like those of an uncertain write.
			p.releases.addUncertain(ev, ir.HoldID, deadline)
		}
		p.log.Warn("hold failed in redis", "event", ev.ID, "hold", ir.HoldID, "error", err)
		return unavailable(ReasonNotHeld)
	}
	if res.Reclaimed > 0 {
		p.metrics.ReclaimedSeats.Add(float64(res.Reclaimed))
		if res.Remaining > 0 && ev.room.State().SoldOut {
			p.registry.SyncSoldOut(ctx, ev)
		}
	}
	switch res.Outcome {
	case inventory.Late:
		// Redis got the call after its deadline (a stalled connection): it
		// took nothing.
		p.log.Warn("hold script reached redis after its deadline", "event", ev.ID, "hold", ir.HoldID)
		return unavailable(ReasonNotHeld)
	case inventory.SoldOut:
		// A section's places may run out while the event has seats left.
		if req.Section == "" && res.Remaining == 0 && !ev.room.State().SoldOut {
			p.registry.SyncSoldOut(ctx, ev)
		}
		p.noteRefused(ctx, ev, req.Position)
		return Result{Outcome: SoldOut, Remaining: res.Remaining, Section: req.Section}
	case inventory.SeatsTaken:
		ev.seatsTaken(res.Taken, true)
		return Result{Outcome: SeatsUnavailable, Taken: res.Taken}
	case inventory.AlreadyHeld:
		return p.existingHold(ctx, req, ir, res)
	case inventory.Held:
		return p.recordHold(ctx, req, ir, res, deadline)
	}
	p.log.Error("hold script answered an unknown outcome", "event", ev.ID, "outcome", res.Outcome)
	return unavailable(ReasonNotHeld)
}

// claimedAnswer answers a hold request whose Idempotency-Key another
// request claimed first; raw is that request's record. stale: that request
// made a hold that has no ledger row InFlight after the claim, so it died
// without answering (its seats are settled like those of any hold without a
// row), and this request may take the claim over.
func (p *Protocol) claimedAnswer(ctx context.Context, req PlaceRequest, raw string, now time.Time) (out Result, stale bool) {
	var rec idem.Record
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		p.log.Warn("unreadable idempotency record", "event", req.Event.ID, "error", err)
		return unavailable(ReasonUnreadable), false
	}
	switch {
	case rec.Digest != req.Digest:
		return Result{Outcome: KeyReused}, false
	case rec.Response != nil:
		return Result{Outcome: Replayed, Stored: rec.Response}, false
	case rec.Hold == "":
		return Result{Outcome: InProgress}, false
	}
	h, err := p.ledger.HoldByKey(ctx, req.Event.ID, req.User, req.Key)
	switch {
	case err == nil:
		return replayOf(h, req.Digest), false
	case !errors.Is(err, ledger.ErrNotFound):
		return unavailable(ReasonUnreadable), false
	}
	return Result{Outcome: InProgress}, now.Sub(time.UnixMilli(rec.At)) >= p.idem.InFlight
}

// recordHold writes the new hold's ledger row by deadline, committed in a
// batch with the rows of holds made at the same moment (ledger.HoldWriter),
// and answers once it is.
func (p *Protocol) recordHold(ctx context.Context, req PlaceRequest, ir inventory.HoldRequest, res inventory.HoldResult, deadline time.Time) Result {
	ev := req.Event
	row := ledger.Hold{
		ID: ir.HoldID, EventID: ev.ID, UserID: req.User, Quantity: req.Quantity,
		Amount: ev.amountOf(req.Quantity, res.Record.Seats, res.Record.Section),
		Status: ledger.StatusPending, ExpiresAt: ir.ExpiresAt, CreatedAt: ir.Now, UpdatedAt: ir.Now,
		IdempotencyKey: req.Key, RequestDigest: req.Digest, Position: req.Position, Seats: res.Record.Seats,
		Section: res.Record.Section,
	}
	row.Response = req.Render(row)
	// The write gets its own deadline, detached from the client: a client
	// that hangs up must not leave a seat taken with no row and no
	// compensation.
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	var outcome ledger.WriteOutcome
	var err error
	switch {
	case len(row.Seats) > 0:
		// Alone, in a transaction of its own: the seats' claim is
		// conditional, and a batch would share its outcome.
		outcome, err = p.ledger.InsertSeatedHold(wctx, row, ir.Now)
	case row.Section != "":
		// Alone too: the decrement of the section's buckets is conditional.
		outcome, err = p.ledger.InsertSectionHold(wctx, row, ir.Now)
	default:
		outcome, err = p.holdRows.Write(wctx, row, ir.Now)
	}
	var taken *ledger.SeatsTakenError
	var short *ledger.SectionSoldOutError
	switch {
	case err == nil:
		if res.Remaining == 0 {
			p.registry.SyncSoldOut(wctx, ev)
		}
		p.extendAdmission(ctx, ev, row)
		ev.seatsTaken(row.Seats, true)
		return Result{Outcome: Held, Hold: row}

	case errors.As(err, &taken):
		// Redis let the seats go and the ledger says another live hold has
		// some: the ledger wins, and the seats Redis gave go back.
		p.releases.compensate(wctx, ev, ir.HoldID)
		p.log.Warn("ledger refused seats that redis allowed", "event", ev.ID, "hold", ir.HoldID, "seats", taken.Seats)
		return Result{Outcome: SeatsUnavailable, Taken: taken.Seats}

	case errors.As(err, &short):
		// Redis had the places and the ledger's buckets have not: the
		// ledger wins, and the places Redis gave go back.
		p.releases.compensate(wctx, ev, ir.HoldID)
		p.log.Warn("ledger refused places that redis allowed", "event", ev.ID, "hold", ir.HoldID, "section", row.Section, "left", short.Left)
		return Result{Outcome: SoldOut, Remaining: short.Left, Section: row.Section}

	case errors.Is(err, ledger.ErrDuplicateKey):
		// This key made a hold before (since released or expired, so Redis
		// no longer knows it): answer as the first time.
		p.releases.compensate(wctx, ev, ir.HoldID)
		first, ferr := p.ledger.HoldByKey(wctx, ev.ID, req.User, req.Key)
		if ferr != nil {
			return unavailable(ReasonNotRecorded)
		}
		return replayOf(first, req.Digest)

	case errors.Is(err, ledger.ErrLiveHoldExists):
		// The ledger knows a live hold Redis had lost: the ledger wins.
		p.releases.compensate(wctx, ev, ir.HoldID)
		live, lerr := p.ledger.LiveHoldOfUser(wctx, ev.ID, req.User)
		if lerr != nil {
			return unavailable(ReasonNotRecorded)
		}
		if live.IdempotencyKey == req.Key {
			return replayOf(live, req.Digest)
		}
		p.log.Warn("ledger refused a second live hold that redis allowed", "event", ev.ID, "hold", live.ID)
		return Result{Outcome: AlreadyHeld, Hold: live}

	case errors.Is(err, ledger.ErrBuyerHasSeats):
		// A late payment of the buyer was confirmed from the overflow
		// reserve while this hold's row was on its way: the ledger wins.
		p.releases.compensate(wctx, ev, ir.HoldID)
		return Result{Outcome: PerUserLimit}

	case outcome == ledger.WriteUncertain:
		// The row may still be committed, until its deadline: returning
		// the seats now could sell them twice. Keep them until then.
		p.releases.addUncertain(ev, ir.HoldID, deadline)
		p.log.Warn("hold write outcome unknown; seats kept until the ledger answers", "event", ev.ID, "hold", ir.HoldID, "error", err)
		return unavailable(ReasonNotRecorded)

	default:
		p.releases.compensate(wctx, ev, ir.HoldID)
		p.log.Warn("hold write failed; seats returned", "event", ev.ID, "hold", ir.HoldID, "error", err)
		return unavailable(ReasonNotRecorded)
	}
}

// replayOf answers a retry of the request that created h.
func replayOf(h ledger.Hold, digest string) Result {
	if h.RequestDigest != digest {
		return Result{Outcome: KeyReused}
	}
	return Result{Outcome: Replayed, Hold: h}
}

// existingHold answers a user who holds seats already.
func (p *Protocol) existingHold(ctx context.Context, req PlaceRequest, ir inventory.HoldRequest, res inventory.HoldResult) Result {
	if res.Record.KeyDigest == ir.KeyDigest {
		// A retry of the request that made this hold, whose idempotency
		// record is gone (Redis restarted): the ledger has the answer.
		h, err := p.ledger.Hold(ctx, res.HoldID)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			// The first attempt's write failed with an unknown outcome (or
			// is still under way); the seats go back once it is final.
			p.releases.addUncertain(req.Event, res.HoldID, p.releases.unknownDeadline())
			return unavailable(ReasonVerifying)
		case err != nil:
			return unavailable(ReasonUnreadable)
		}
		return replayOf(h, req.Digest)
	}
	if res.Record.Confirmed {
		h, err := p.ledger.Hold(ctx, res.HoldID)
		if err != nil {
			return unavailable(ReasonUnreadable)
		}
		return Result{Outcome: AlreadyHeld, Hold: h}
	}
	// Built from Redis alone: the ledger row may still be being written by
	// the request that made the hold.
	return Result{Outcome: AlreadyHeld, Hold: ledger.Hold{
		ID: res.HoldID, EventID: req.Event.ID, UserID: req.User, Quantity: res.Record.Quantity,
		Amount: req.Event.amountOf(res.Record.Quantity, res.Record.Seats, res.Record.Section), Status: ledger.StatusPending,
		ExpiresAt: res.ExpiresAt, Seats: res.Record.Seats, Section: res.Record.Section,
	}}
}

// admissionMargin keeps a buyer admitted a little past the hold's expiry,
// so one whose hold lapses while answering the payment page is not sent to
// the back of the queue for it.
const admissionMargin = time.Minute

// admissionExtendTimeout bounds the store call: the hold is answered
// whatever it does.
const admissionExtendTimeout = 500 * time.Millisecond

// extendAdmission keeps h's holder admitted at every gateway until h
// expires (plus admissionMargin), whatever the admission window: a buyer
// who holds seats, perhaps paying, is never turned away by it. Detached
// from the client, which may hang up once answered. A store that cannot
// answer fails nothing: a gateway keeps a token admitted when it cannot
// read the extension.
func (p *Protocol) extendAdmission(ctx context.Context, ev *Event, h ledger.Hold) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), admissionExtendTimeout)
	defer cancel()
	// The same call tells the gateways' autopilot, which measures by it who
	// of those admitted hold.
	if err := ev.notes.note(ctx, ev.room.Holder(h.UserID, h.ExpiresAt.Sub(p.now())+admissionMargin, h.Position)); err != nil {
		p.log.Warn("admission not extended for a holder, or its hold not noted for the autopilot", "event", ev.ID, "hold", h.ID, "error", err)
	}
}

// noteRefused tells the gateways' autopilot that the holder of position
// found no seat: a hold it makes later, of a seat that came back, measures
// the seat's return rather than its decision. Detached and bounded like
// extendAdmission; the refusal is answered whatever the store does.
func (p *Protocol) noteRefused(ctx context.Context, ev *Event, position int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), admissionExtendTimeout)
	defer cancel()
	if err := ev.room.NoteRefused(ctx, position); err != nil {
		p.log.Warn("refusal not noted for the autopilot", "event", ev.ID, "position", position, "error", err)
	}
}
