package origin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/inventory"
	"github.com/waitroom/waitroom/origin/ledger"
)

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
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func holdBody(ev Event, id, user string, qty int64, status string, expires time.Time) []byte {
	b, _ := json.Marshal(holdJSON{
		HoldID: id, EventID: ev.ID, UserID: user, Quantity: qty, Status: status,
		ExpiresAt: rfc3339(expires), Amount: ev.Price * qty, Currency: ev.Currency,
	})
	return append(b, '\n')
}

func holdBodyAt(h Hold, ev Event, now time.Time) []byte {
	return holdBody(ev, h.ID, h.UserID, h.Quantity, h.StatusAt(now), h.ExpiresAt)
}

// response is an answer of the API: a status and a JSON body.
type response struct {
	status int
	body   []byte
	// outcome labels the holds metric.
	outcome string
	// retryAfter, in seconds, for 503s.
	retryAfter int
}

func errorBody(code, msg string) []byte {
	b, _ := json.Marshal(apiError{Error: code, Message: msg})
	return append(b, '\n')
}

func errorResponse(status int, code, msg string) response {
	return response{status: status, body: errorBody(code, msg), outcome: code}
}

func unavailableResponse(msg string) response {
	r := errorResponse(http.StatusServiceUnavailable, "unavailable", msg)
	r.retryAfter = 1
	return r
}

// holdRequest is a validated POST …/holds.
type holdRequest struct {
	user     string
	quantity int64
	key      string
	digest   string
	// scope is the request's Idempotency-Key.
	scope IdemScope
}

func canonicalHold(qty int64) string { return "quantity=" + strconv.FormatInt(qty, 10) }

var (
	errKeyReused = errorResponse(http.StatusUnprocessableEntity, "idempotency_key_reused",
		"this Idempotency-Key was used with a different request body")
	errInProgress = errorResponse(http.StatusConflict, "request_in_progress",
		"a request with this Idempotency-Key is still being processed")
)

// placeHold is the hold flow after the request is authenticated, admitted
// and validated: the Lua hold, which claims the request's Idempotency-Key
// in the same call, then the ledger row at once, or the seats straight
// back if the row cannot be written; then the answer is kept under the key.
// takeOver is the claim of a request that died without answering, which
// this one may replace ("" for none).
func (s *Server) placeHold(ctx context.Context, ev *liveEvent, req holdRequest, takeOver string) response {
	now := s.now()
	ir := inventory.HoldRequest{
		Event:        ev.ID,
		HoldID:       uuid.Must(uuid.NewV7()).String(),
		User:         req.user,
		Quantity:     req.quantity,
		ExpiresAt:    now.Add(min(ev.HoldTTL(), s.HoldMaxLifeOf(ev.Event))).Truncate(time.Second),
		Now:          now,
		KeyDigest:    KeyDigest(req.user, req.key),
		BodyDigest:   req.digest,
		Claim:        req.scope.redisKey(),
		ClaimReplace: takeOver,
		ClaimTTL:     s.idem.Keep,
	}
	ir.ClaimValue = holdClaim(req.digest, ir.HoldID, now)
	res, deadline, err := s.runHold(ctx, ev, ir)
	if err == nil && res.Outcome == inventory.Claimed && res.ClaimedBy == ir.ClaimValue {
		// This call's own claim: the script ran already and its reply was
		// lost (the command was sent again). What it did is unknown; its
		// hold, if it made one, has no row and is settled like an uncertain
		// write.
		s.addUncertain(ev, ir.HoldID, deadline)
		res, err = inventory.HoldResult{}, errors.New("hold script answer lost")
	}
	if err == nil && res.Outcome == inventory.Claimed {
		ev.inflight.Add(-1) // nothing was taken
		resp, stale := s.claimedAnswer(ctx, ev, req, res.ClaimedBy, now)
		if stale && takeOver == "" {
			return s.placeHold(ctx, ev, req, res.ClaimedBy)
		}
		return resp
	}
	resp := s.answerHold(ctx, ev, req, ir, res, deadline, err)
	s.keepAnswer(ctx, req, ir.ClaimValue, resp)
	return resp
}

// answerHold acts on the hold script's answer (or error), then lowers the
// event's in-flight count that runHold raised. deadline is the ledger
// write's.
func (s *Server) answerHold(ctx context.Context, ev *liveEvent, req holdRequest, ir inventory.HoldRequest, res inventory.HoldResult, deadline time.Time, err error) response {
	defer ev.inflight.Add(-1)
	if err != nil {
		if !errors.Is(err, inventory.ErrNotLoaded) && !errors.Is(err, inventory.ErrFrozen) {
			// The script may have run and its reply been lost: seats it took
			// would have no row, and no request to give them back. Once no run
			// of it can take seats any more (its deadline, which Redis checks),
			// they are returned like those of an uncertain write.
			s.addUncertain(ev, ir.HoldID, deadline)
		}
		s.log.Warn("hold failed in redis", "event", ev.ID, "hold", ir.HoldID, "error", err)
		return unavailableResponse("seats cannot be held right now; retry shortly")
	}
	if res.Reclaimed > 0 {
		s.metrics.reclaimedSeats.Add(float64(res.Reclaimed))
		if res.Remaining > 0 && ev.room.State().SoldOut {
			s.syncSoldOut(ctx, ev)
		}
	}
	switch res.Outcome {
	case inventory.Late:
		// Redis got the call after its deadline (a stalled connection): it
		// took nothing.
		s.log.Warn("hold script reached redis after its deadline", "event", ev.ID, "hold", ir.HoldID)
		return unavailableResponse("seats cannot be held right now; retry shortly")
	case inventory.SoldOut:
		if res.Remaining == 0 && !ev.room.State().SoldOut {
			s.syncSoldOut(ctx, ev)
		}
		if res.Remaining > 0 {
			return errorResponse(http.StatusConflict, "sold_out", fmt.Sprintf("only %d seats are left", res.Remaining))
		}
		return errorResponse(http.StatusConflict, "sold_out", "the event is sold out")
	case inventory.AlreadyHeld:
		return s.existingHold(ctx, ev, req, ir, res)
	case inventory.Held:
		return s.recordHold(ctx, ev, req, ir, res, deadline)
	}
	s.log.Error("hold script answered an unknown outcome", "event", ev.ID, "outcome", res.Outcome)
	return unavailableResponse("seats cannot be held right now; retry shortly")
}

// keepAnswer keeps a hold request's answer under its Idempotency-Key,
// which the hold script claimed for it with claim. A new hold's answer is
// in its ledger row, which the claim names: nothing more to write. A 5xx
// gives the key up, so the client may retry.
func (s *Server) keepAnswer(ctx context.Context, req holdRequest, claim string, resp response) {
	if resp.outcome == "held" {
		return
	}
	ctx = context.WithoutCancel(ctx)
	var err error
	if resp.status >= 500 {
		err = s.idem.AbandonClaim(ctx, req.scope, claim)
	} else {
		err = s.idem.Finish(ctx, req.scope, req.digest, StoredResponse{Status: resp.status, Body: resp.body})
	}
	if err != nil {
		s.log.Warn("idempotency record not kept", "error", err)
	}
}

// claimedAnswer answers a hold request whose Idempotency-Key another
// request claimed first; raw is that request's record. stale: that request
// made a hold that has no ledger row InFlight after the claim, so it died
// without answering (its seats are settled like those of any hold without a
// row), and this request may take the claim over.
func (s *Server) claimedAnswer(ctx context.Context, ev *liveEvent, req holdRequest, raw string, now time.Time) (resp response, stale bool) {
	var rec idemRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		s.log.Warn("unreadable idempotency record", "event", ev.ID, "error", err)
		return errUnavailable, false
	}
	switch {
	case rec.Digest != req.digest:
		return errKeyReused, false
	case rec.Response != nil:
		return response{status: rec.Response.Status, body: rec.Response.Body, outcome: "replayed"}, false
	case rec.Hold == "":
		return errInProgress, false
	}
	h, err := s.ledger.HoldByKey(ctx, ev.ID, req.user, req.key)
	switch {
	case err == nil:
		return replayOf(h, req.digest), false
	case !errors.Is(err, ErrNotFound):
		return unavailableResponse("the hold cannot be read right now; retry shortly"), false
	}
	return errInProgress, now.Sub(time.UnixMilli(rec.At)) >= s.idem.InFlight
}

// runHold runs the hold script, loading the event into Redis first if its
// keys are missing, and waiting for a rebuild in progress. It returns with
// the event's in-flight count raised (the caller lowers it once the ledger
// write is settled): counted from before the script, so a rebuild that
// freezes the keys right after the script ran still waits for this write.
// It is not raised while waiting for a rebuild, which waits for the count.
//
// It also returns the deadline of the hold's ledger write (wall clock),
// set before the script ran: so a hold made before a rebuild froze the
// inventory has its row written within HoldWriteTimeout of the freeze, or
// never, on whichever node it was made (what RebuildSettle counts on). The
// script itself takes no seat after it.
func (s *Server) runHold(ctx context.Context, ev *liveEvent, ir inventory.HoldRequest) (inventory.HoldResult, time.Time, error) {
	ev.inflight.Add(1)
	ir.Deadline = time.Now().Add(s.cfg.HoldWriteTimeout)
	res, err := s.inv.Hold(ctx, ir)
	if errors.Is(err, inventory.ErrNotLoaded) || errors.Is(err, inventory.ErrFrozen) {
		ev.inflight.Add(-1)
		lerr := s.ensureLoaded(ctx, ev)
		ev.inflight.Add(1)
		if lerr != nil {
			return res, ir.Deadline, errors.Join(err, lerr)
		}
		ir.Deadline = time.Now().Add(s.cfg.HoldWriteTimeout)
		res, err = s.inv.Hold(ctx, ir)
	}
	return res, ir.Deadline, err
}

// recordHold writes the new hold's ledger row by deadline, committed in a
// batch with the rows of holds made at the same moment (ledger.HoldWriter), and
// answers once it is. The 201 body goes into the same row, so a replay of
// this request survives the loss of Redis.
func (s *Server) recordHold(ctx context.Context, ev *liveEvent, req holdRequest, ir inventory.HoldRequest, res inventory.HoldResult, deadline time.Time) response {
	body := holdBody(ev.Event, ir.HoldID, req.user, req.quantity, StatusPending, ir.ExpiresAt)
	row := Hold{
		ID: ir.HoldID, EventID: ev.ID, UserID: req.user, Quantity: req.quantity, Amount: ev.Price * req.quantity,
		Status: StatusPending, ExpiresAt: ir.ExpiresAt, CreatedAt: ir.Now, UpdatedAt: ir.Now,
		IdempotencyKey: req.key, RequestDigest: req.digest, Response: body,
	}
	// The write gets its own deadline, detached from the client: a client
	// that hangs up must not leave a seat taken with no row and no
	// compensation.
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	outcome, err := s.holdRows.Write(wctx, row, ir.Now)
	switch {
	case err == nil:
		if res.Remaining == 0 {
			s.syncSoldOut(wctx, ev)
		}
		return response{status: http.StatusCreated, body: body, outcome: "held"}

	case errors.Is(err, ledger.ErrDuplicateKey):
		// This key made a hold before (since released or expired, so Redis
		// no longer knows it): answer as the first time.
		s.compensate(wctx, ev, ir.HoldID)
		first, ferr := s.ledger.HoldByKey(wctx, ev.ID, req.user, req.key)
		if ferr != nil {
			return unavailableResponse("the hold could not be recorded; retry shortly")
		}
		return replayOf(first, req.digest)

	case errors.Is(err, ledger.ErrLiveHoldExists):
		// The ledger knows a live hold Redis had lost: the ledger wins.
		s.compensate(wctx, ev, ir.HoldID)
		live, lerr := s.ledger.LiveHoldOfUser(wctx, ev.ID, req.user)
		if lerr != nil {
			return unavailableResponse("the hold could not be recorded; retry shortly")
		}
		if live.IdempotencyKey == req.key {
			return replayOf(live, req.digest)
		}
		s.log.Warn("ledger refused a second live hold that redis allowed", "event", ev.ID, "hold", live.ID)
		return response{status: http.StatusOK, body: holdBodyAt(live, ev.Event, ir.Now), outcome: "already_held"}

	case outcome == ledger.WriteUncertain:
		// The row may still be committed, until its deadline: returning
		// the seats now could sell them twice. Keep them until then.
		s.addUncertain(ev, ir.HoldID, deadline)
		s.log.Warn("hold write outcome unknown; seats kept until the ledger answers", "event", ev.ID, "hold", ir.HoldID, "error", err)
		return unavailableResponse("the hold could not be recorded; retry shortly")

	default:
		s.compensate(wctx, ev, ir.HoldID)
		s.log.Warn("hold write failed; seats returned", "event", ev.ID, "hold", ir.HoldID, "error", err)
		return unavailableResponse("the hold could not be recorded; retry shortly")
	}
}

// replayOf answers a retry of the request that created h.
func replayOf(h Hold, digest string) response {
	if h.RequestDigest != digest {
		return errKeyReused
	}
	return response{status: http.StatusCreated, body: h.Response, outcome: "replayed"}
}

// existingHold answers a user who holds seats already.
func (s *Server) existingHold(ctx context.Context, ev *liveEvent, req holdRequest, ir inventory.HoldRequest, res inventory.HoldResult) response {
	if res.Record.KeyDigest == ir.KeyDigest {
		// A retry of the request that made this hold, whose idempotency
		// record is gone (Redis restarted): the ledger has the answer.
		h, err := s.ledger.Hold(ctx, res.HoldID)
		switch {
		case errors.Is(err, ErrNotFound):
			// The first attempt's write failed with an unknown outcome (or
			// is still under way); the seats go back once it is final.
			s.addUncertain(ev, res.HoldID, s.unknownDeadline())
			return unavailableResponse("the hold is being verified; retry shortly")
		case err != nil:
			return unavailableResponse("the hold cannot be read right now; retry shortly")
		}
		return replayOf(h, req.digest)
	}
	if res.Record.Confirmed {
		h, err := s.ledger.Hold(ctx, res.HoldID)
		if err != nil {
			return unavailableResponse("the hold cannot be read right now; retry shortly")
		}
		return response{status: http.StatusOK, body: holdBodyAt(h, ev.Event, ir.Now), outcome: "already_held"}
	}
	// Built from Redis alone: the ledger row may still be being written by
	// the request that made the hold.
	return response{
		status:  http.StatusOK,
		body:    holdBody(ev.Event, res.HoldID, req.user, res.Record.Quantity, StatusPending, res.ExpiresAt),
		outcome: "already_held",
	}
}

// compensate returns the seats of a hold that has no ledger row.
func (s *Server) compensate(ctx context.Context, ev *liveEvent, holdID string) {
	s.metrics.compensations.Inc()
	s.releaseSeats(ctx, ev, holdID, inventory.PendingOnly)
}

// releaseSeats returns a hold's seats in Redis after the ledger says it is
// no longer live. If Redis cannot take it now, the release is kept, in its
// mode, and retried by the reaper; until then the seats are under-sold,
// never over-sold.
func (s *Server) releaseSeats(ctx context.Context, ev *liveEvent, holdID string, mode inventory.ReleaseMode) inventory.ReleaseResult {
	return s.release(ctx, ev, holdID, pendingRelease{event: ev.ID, mode: mode})
}

// releaseKeepingBuyer returns the seats of a hold whose buyer was served from
// the overflow reserve, and keeps the buyer counted by the one-hold-per-user
// guard (inventory.KeepBuyer).
func (s *Server) releaseKeepingBuyer(ctx context.Context, ev *liveEvent, holdID, user string) inventory.ReleaseResult {
	return s.release(ctx, ev, holdID, pendingRelease{event: ev.ID, mode: inventory.KeepBuyer, user: user})
}

// releaseLateHold returns the seats of a paid hold that expired before its
// payment landed; when the payment was served from the overflow reserve
// (absorbed), the buyer stays counted by the one-hold-per-user guard.
func (s *Server) releaseLateHold(ctx context.Context, ev *liveEvent, b Booking, absorbed bool) {
	if absorbed {
		s.releaseKeepingBuyer(ctx, ev, b.HoldID, b.UserID)
		return
	}
	s.releaseSeats(ctx, ev, b.HoldID, inventory.AnyHold)
}

// pendingRelease is a release Redis could not take yet.
type pendingRelease struct {
	event int64
	mode  inventory.ReleaseMode
	// user is the buyer (KeepBuyer only).
	user string
}

// releaseRank orders the modes by what they do: each does what the one
// before does, and more.
func releaseRank(m inventory.ReleaseMode) int {
	switch m {
	case inventory.DropBuyer:
		// The end of the sale KeepBuyer kept the buyer for.
		return 3
	case inventory.KeepBuyer:
		return 2
	case inventory.AnyHold:
		return 1
	}
	return 0
}

func (s *Server) runRelease(ctx context.Context, holdID string, p pendingRelease) (inventory.ReleaseResult, error) {
	if p.mode == inventory.KeepBuyer {
		return s.inv.ReleaseKeepingBuyer(ctx, p.event, holdID, p.user, s.now())
	}
	return s.inv.Release(ctx, p.event, holdID, p.mode)
}

func (s *Server) release(ctx context.Context, ev *liveEvent, holdID string, p pendingRelease) inventory.ReleaseResult {
	res, err := s.runRelease(ctx, holdID, p)
	if err != nil {
		s.log.Warn("seat release deferred: redis unavailable", "event", ev.ID, "hold", holdID, "mode", p.mode, "error", err)
		s.pendingMu.Lock()
		if prev, ok := s.unreleased[holdID]; !ok || releaseRank(p.mode) >= releaseRank(prev.mode) {
			// A weaker mode never replaces a stronger one kept for the hold.
			s.unreleased[holdID] = p
		}
		s.pendingMu.Unlock()
		return res
	}
	if res.Seats > 0 && ev.room.State().SoldOut {
		s.syncSoldOut(ctx, ev)
	}
	return res
}

// syncSoldOut makes the shared sold-out flag match the inventory: set when
// remaining is 0, cleared when released seats came back. Every gateway
// follows the flag within a second. A flag the origin did not set (an
// operator's) is never cleared here: it stays until the operator lifts it.
// The origin knows its own by a mark it writes next to the flag
// (soldOutMark).
func (s *Server) syncSoldOut(ctx context.Context, ev *liveEvent) {
	ev.soldOutMu.Lock()
	defer ev.soldOutMu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	n, loaded, err := s.inv.Remaining(ctx, ev.ID)
	if err != nil || !loaded {
		return
	}
	want := n == 0
	st := ev.room.State()
	mark := soldOutMark(ev.ID)
	switch {
	case want && !st.SoldOut:
		// The mark first: a flag set without it would pass for an
		// operator's and never be cleared.
		if err := s.rdb.Set(ctx, mark, "1", 0).Err(); err != nil {
			s.log.Warn("could not mark the sold-out flag as the origin's", "event", ev.ID, "error", err)
			return
		}
	case !want && st.SoldOut:
		ours, err := s.rdb.Exists(ctx, mark).Result()
		if err != nil || ours == 0 {
			return // an operator's flag, or unknown: left as it is
		}
	case !st.SoldOut:
		// Lifted by anyone: a mark left would claim a later operator's flag.
		if err := s.rdb.Del(ctx, mark).Err(); err != nil {
			s.log.Warn("could not clear the sold-out mark", "event", ev.ID, "error", err)
		}
		return
	default:
		return
	}
	if _, err := ev.room.Update(ctx, waitroomChange(want)); err != nil {
		s.log.Warn("could not update the sold-out flag", "event", ev.ID, "sold_out", want, "error", err)
		return
	}
	if !want {
		if err := s.rdb.Del(ctx, mark).Err(); err != nil {
			s.log.Warn("could not clear the sold-out mark", "event", ev.ID, "error", err)
		}
	}
	s.log.Info("sold-out flag updated", "event", ev.ID, "sold_out", want, "remaining", n)
}

// soldOutMark is the key that says the event's sold-out flag is the
// origin's, on the event's slot.
func soldOutMark(event int64) string { return "origin:" + inventory.Tag(event) + ":sold_out_set" }

// ReleaseHold gives a buyer's pending hold back: the ledger first (the
// truth), then the seats in Redis.
func (s *Server) ReleaseHold(ctx context.Context, h Hold) error {
	ev, err := s.event(ctx, h.EventID)
	if err != nil {
		return err
	}
	if _, err := s.ledger.ReleaseHold(ctx, h.ID, s.now()); err != nil {
		return err
	}
	// The ledger has it released: whatever Redis says of it (a confirmation
	// whose ledger step failed) is out of date.
	s.releaseSeats(ctx, ev, h.ID, inventory.AnyHold)
	return nil
}
