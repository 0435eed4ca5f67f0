package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/waitroom/waitroom/internal/jsonbody"
	"github.com/waitroom/waitroom/waitroom"
)

func init() {
	caddy.RegisterModule(Admin{})
}

// maxAdminBody is the largest request body the admin API reads.
const maxAdminBody = 64 << 10

// ActorAdmin is the change log's actor of the admin API's changes.
const ActorAdmin = "admin"

// maxReason bounds the reason a change may give, as the log keeps it.
const maxReason = 500

// adminTimeout bounds a change's round trip to the store.
const adminTimeout = 5 * time.Second

// Admin is the waiting room's API on Caddy's admin endpoint. It reads and
// changes the state of every event that a loaded config guards:
//
//	GET  /waitroom/events                   every event's state
//	GET  /waitroom/events/{id}              one event's state
//	POST /waitroom/events/{id}/watermark    {"set": 6000} or {"raise_by": 1000},
//	                                        each with "if_watermark": 5000
//	                                        to change it only from that one
//	POST /waitroom/events/{id}/sold_out     {"sold_out": true}
//	POST /waitroom/events/{id}/pause        {"paused": true}
//	POST /waitroom/events/{id}/hard_cap     {"hard_cap": 800} (0: none), or
//	                                        {"per_remaining": 3} (derived)
//	GET  /waitroom/events/{id}/lottery      the scheduled opening's draw
//	GET  /waitroom/events/{id}/log          the change log, newest first (?limit=N)
//	GET  /waitroom/events/{id}/report       the sale's report (report.go)
//	GET  /waitroom/live                     every event's state, queue and rates
//	GET  /waitroom/console                  the staff console, a page over these
//
// Each answers the event's state, {"event", "watermark", "last_position",
// "hard_cap", "sold_out", "paused"}. A change is written to the event's
// store, so every node sharing it follows within a second, and is logged
// with the values given and the state that resulted. Errors are
// {"error": "<code>", "message": "<text>"}: 400 invalid_request for a body
// that is empty, not JSON, has an unknown field or a negative value, 404
// not_found for an unknown route or event, 405 method_not_allowed, 413
// request_too_large, 409 watermark_changed (with the event's "state") for
// an if_watermark that is not the watermark any more, 422
// watermark_overflow for a raise_by that would take the watermark past the
// largest int64, 503 queue_unavailable when the store cannot be reached.
//
// The lottery route answers, before the draw, {"event", "opens_at",
// "commitment", "drawn": false}; after it {"event", "opens_at",
// "commitment", "seed", "entrants", "algorithm", "base", "drawn": true},
// which cmd/waitroom-verify reads to recompute every position. An event
// without opens_at answers 404 not_found.
type Admin struct {
	logger *zap.Logger
	routes *http.ServeMux
	now    func() time.Time
	rates  *liveRates
}

// CaddyModule returns the Caddy module information.
func (Admin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.waitroom",
		New: func() caddy.Module { return new(Admin) },
	}
}

// Provision sets up the admin routes.
func (a *Admin) Provision(caddy.Context) error {
	// The admin endpoint is not a module of the config's tree, so it has
	// no module logger of its own; name it after the module.
	a.logger = caddy.Log().Named("admin.api.waitroom")
	a.now = poolClock
	// The rates outlive a config, as the rooms they measure do.
	a.rates = &consoleRates
	a.routes = a.newMux()
	return nil
}

// Routes returns the waiting room's admin routes: one prefix on Caddy's
// admin endpoint, routed inside by the module's own mux so that unknown
// routes and wrong methods are answered in the project's error shape.
func (a *Admin) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: adminPrefix, Handler: caddy.AdminHandlerFunc(a.serve)}}
}

// adminPrefix is the part of Caddy's admin endpoint the module owns.
const adminPrefix = "/waitroom/"

// adminMethods are the methods the module's routes are tried with to tell a
// wrong method (405) from an unknown route (404).
var adminMethods = [...]string{http.MethodGet, http.MethodPost}

// newMux routes the module's requests.
func (a *Admin) newMux() *http.ServeMux {
	m := http.NewServeMux()
	m.Handle("GET /waitroom/events", a.handle(a.listEvents))
	m.Handle("GET /waitroom/events/{id}", a.handle(a.withEvent(a.getEvent)))
	m.Handle("POST /waitroom/events/{id}/watermark", a.handle(a.withEvent(a.setWatermark)))
	m.Handle("POST /waitroom/events/{id}/sold_out", a.handle(a.withEvent(a.setSoldOut)))
	m.Handle("POST /waitroom/events/{id}/pause", a.handle(a.withEvent(a.setPaused)))
	m.Handle("POST /waitroom/events/{id}/hard_cap", a.handle(a.withEvent(a.setHardCap)))
	m.Handle("GET /waitroom/events/{id}/lottery", a.handle(a.withEvent(a.lottery)))
	m.Handle("GET /waitroom/events/{id}/log", a.handle(a.withEvent(a.changeLog)))
	m.Handle("GET /waitroom/events/{id}/applied", a.handle(a.withEvent(a.applied)))
	m.Handle("GET /waitroom/events/{id}/report", a.handle(a.withEvent(a.report)))
	m.Handle("GET /waitroom/live", a.handle(a.live))
	m.Handle("GET /waitroom/console", a.handle(a.console))
	m.Handle(adminPrefix, a.handle(func(w http.ResponseWriter, r *http.Request) error { return a.unrouted(m, w, r) }))
	return m
}

// serve answers every request under the prefix.
func (a *Admin) serve(w http.ResponseWriter, r *http.Request) error {
	a.routes.ServeHTTP(w, r)
	return nil
}

// unrouted answers a request no route took: 405 with Allow when the path
// is a route's under another method, else 404.
func (a *Admin) unrouted(m *http.ServeMux, w http.ResponseWriter, r *http.Request) error {
	var allowed []string
	for _, method := range adminMethods {
		probe := r.Clone(r.Context())
		probe.Method = method
		if _, pattern := m.Handler(probe); pattern != adminPrefix && pattern != "" {
			allowed = append(allowed, method)
		}
	}
	if len(allowed) == 0 {
		return apiError(http.StatusNotFound, "no such route: %s", r.URL.Path)
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	return apiError(http.StatusMethodNotAllowed, "method %s not allowed; use %s", r.Method, strings.Join(allowed, " or "))
}

// handle adapts a route that returns its error to the mux, writing errors
// in the project's error shape rather than leaving them to the admin
// endpoint's.
func (a *Admin) handle(route func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, r, route(w, r))
	})
}

// eventRoute is a route of one event a loaded config guards.
type eventRoute func(w http.ResponseWriter, r *http.Request, entry *roomEntry) error

// withEvent finds the {id} of the path among the loaded events: 404 when
// it is not one.
func (a *Admin) withEvent(route eventRoute) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		raw := r.PathValue("id")
		id, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || id <= 0 {
			return apiError(http.StatusNotFound, "unknown event %q", raw)
		}
		entry := findRoom(id)
		if entry == nil {
			return apiError(http.StatusNotFound, "unknown event %d: no loaded config guards it", id)
		}
		return route(w, r, entry)
	}
}

func (a *Admin) fail(w http.ResponseWriter, r *http.Request, err error) {
	if err == nil {
		return
	}
	var apiErr caddy.APIError
	if !errors.As(err, &apiErr) {
		// Only writing the answer fails this way, when it is too late to
		// answer anything else.
		a.logger.Debug("writing an answer", zap.String("uri", r.RequestURI), zap.Error(err))
		return
	}
	a.logger.Debug("request refused",
		zap.String("method", r.Method), zap.String("uri", r.RequestURI),
		zap.Int("status", apiErr.HTTPStatus), zap.Error(apiErr.Err))
	msg := apiErr.Message
	if apiErr.Err != nil {
		msg = apiErr.Err.Error()
	}
	if apiErr.HTTPStatus == http.StatusServiceUnavailable {
		// A 503 means "try again", and says when, as the handler's does.
		w.Header().Set("Retry-After", strconv.Itoa(unavailableRetryFor(apiErr.Err)))
	}
	_ = writeJSON(w, apiErr.HTTPStatus, struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}{errorCode(apiErr), msg})
}

// errorCode is the machine-readable code of an error answer.
func errorCode(e caddy.APIError) string {
	switch {
	case e.Message != "":
		return e.Message
	case e.HTTPStatus == http.StatusBadRequest:
		return "invalid_request"
	case e.HTTPStatus == http.StatusNotFound:
		return "not_found"
	case e.HTTPStatus == http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case e.HTTPStatus == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case e.HTTPStatus == http.StatusServiceUnavailable:
		return "queue_unavailable"
	default:
		return "internal_error"
	}
}

func apiError(status int, format string, args ...any) caddy.APIError {
	return caddy.APIError{HTTPStatus: status, Err: fmt.Errorf(format, args...)}
}

func (a *Admin) listEvents(w http.ResponseWriter, _ *http.Request) error {
	states := []waitroom.State{}
	for _, e := range eventRooms() {
		states = append(states, e.room.State())
	}
	return writeJSON(w, http.StatusOK, states)
}

func (a *Admin) getEvent(w http.ResponseWriter, _ *http.Request, entry *roomEntry) error {
	return writeJSON(w, http.StatusOK, entry.room.State())
}

func (a *Admin) setWatermark(w http.ResponseWriter, r *http.Request, entry *roomEntry) error {
	var body struct {
		Set     *int64 `json:"set"`
		RaiseBy *int64 `json:"raise_by"`
		// IfWatermark is the watermark the caller saw: of two desks
		// raising it from one view, the second is told rather than both
		// raising it.
		IfWatermark *int64 `json:"if_watermark"`
		Reason      string `json:"reason"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	var change waitroom.Change
	var given zap.Field
	switch {
	case body.Set == nil && body.RaiseBy == nil:
		return apiError(http.StatusBadRequest, `give "set" or "raise_by"`)
	case body.Set != nil && body.RaiseBy != nil:
		return apiError(http.StatusBadRequest, `give "set" or "raise_by", not both`)
	case body.Set != nil && *body.Set < 0:
		return apiError(http.StatusBadRequest, `"set" must not be negative (got %d)`, *body.Set)
	case body.RaiseBy != nil && *body.RaiseBy < 0:
		return apiError(http.StatusBadRequest, `"raise_by" must not be negative (got %d)`, *body.RaiseBy)
	case body.IfWatermark != nil && *body.IfWatermark < 0:
		return apiError(http.StatusBadRequest, `"if_watermark" must not be negative (got %d)`, *body.IfWatermark)
	case body.Set != nil:
		change.SetWatermark = body.Set
		given = zap.Int64("set", *body.Set)
	default:
		change.RaiseBy = *body.RaiseBy
		given = zap.Int64("raise_by", *body.RaiseBy)
	}
	change.Reason = body.Reason
	change.IfWatermark = body.IfWatermark
	return a.change(w, r, entry, "watermark", change, given)
}

func (a *Admin) setSoldOut(w http.ResponseWriter, r *http.Request, entry *roomEntry) error {
	var body struct {
		SoldOut *bool  `json:"sold_out"`
		Reason  string `json:"reason"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	if body.SoldOut == nil {
		return apiError(http.StatusBadRequest, `give "sold_out": true or false`)
	}
	return a.change(w, r, entry, "sold_out", waitroom.Change{SoldOut: body.SoldOut, Reason: body.Reason}, zap.Bool("sold_out", *body.SoldOut))
}

func (a *Admin) setPaused(w http.ResponseWriter, r *http.Request, entry *roomEntry) error {
	var body struct {
		Paused *bool  `json:"paused"`
		Reason string `json:"reason"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	if body.Paused == nil {
		return apiError(http.StatusBadRequest, `give "paused": true or false`)
	}
	return a.change(w, r, entry, "pause", waitroom.Change{Paused: body.Paused, Reason: body.Reason}, zap.Bool("paused", *body.Paused))
}

// setHardCap changes the hard cap live: positions past it are answered
// sold out at once. It then outlives the configured hard_cap (reloads, new
// nodes) until the store loses the event's state.
func (a *Admin) setHardCap(w http.ResponseWriter, r *http.Request, entry *roomEntry) error {
	var body struct {
		HardCap      *int64   `json:"hard_cap"`
		PerRemaining *float64 `json:"per_remaining"`
		Reason       string   `json:"reason"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	switch {
	case body.HardCap != nil && body.PerRemaining != nil:
		return apiError(http.StatusBadRequest, `give "hard_cap" or "per_remaining", not both`)
	case body.PerRemaining != nil && (*body.PerRemaining <= 0 || math.IsInf(*body.PerRemaining, 0)):
		return apiError(http.StatusBadRequest, `"per_remaining" must be a positive number (got %v)`, *body.PerRemaining)
	case body.PerRemaining != nil:
		// Derived from the inventory from now on: the leading gateway sets
		// it within a poll once the origin's figures are fresh.
		return a.change(w, r, entry, "hard_cap", waitroom.Change{HardCapPerRemaining: body.PerRemaining, Reason: body.Reason},
			zap.Float64("per_remaining", *body.PerRemaining))
	case body.HardCap == nil:
		return apiError(http.StatusBadRequest, `give "hard_cap": a position, or 0 for none; or "per_remaining": positions per seat remaining`)
	case *body.HardCap < 0:
		return apiError(http.StatusBadRequest, `"hard_cap" must not be negative (got %d)`, *body.HardCap)
	}
	return a.change(w, r, entry, "hard_cap", waitroom.Change{HardCap: body.HardCap, Reason: body.Reason}, zap.Int64("hard_cap", *body.HardCap))
}

// changeLog answers the event's change log, newest first: all that the
// store keeps, or the newest ?limit=N.
func (a *Admin) changeLog(w http.ResponseWriter, r *http.Request, entry *roomEntry) error {
	limit := 0
	if q := r.URL.Query().Get("limit"); q != "" {
		n, err := strconv.ParseInt(q, 10, 64)
		if errors.Is(err, strconv.ErrRange) && n > 0 {
			// Too large for any integer is still more than the log keeps.
			err = nil
		}
		if err != nil || n < 1 {
			return apiError(http.StatusBadRequest, "limit must be a positive number (got %q)", q)
		}
		limit = int(min(n, waitroom.MaxLogEntries))
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	log, err := entry.room.ChangeLog(ctx, limit)
	switch {
	case errors.Is(err, waitroom.ErrNotLogged):
		return apiError(http.StatusNotFound, "the store of event %d keeps no change log", entry.key.Event)
	case err != nil:
		return apiError(http.StatusServiceUnavailable, "the queue store is unavailable: %v", err)
	}
	return writeJSON(w, http.StatusOK, log)
}

// applied answers the watermarks this node applied and when, by its own
// clock: how long a fleet took to agree on a change, measured by the
// nodes rather than by whoever polls them.
func (a *Admin) applied(w http.ResponseWriter, _ *http.Request, entry *roomEntry) error {
	marks, dropped := entry.room.AppliedWatermarks()
	return writeJSON(w, http.StatusOK, struct {
		Event   int64                       `json:"event"`
		Applied []waitroom.AppliedWatermark `json:"applied"`
		Dropped int64                       `json:"dropped"`
	}{entry.key.Event, marks, dropped})
}

// change applies a change to the event's state in its store and answers
// the state that resulted.
func (a *Admin) change(w http.ResponseWriter, r *http.Request, entry *roomEntry, action string, change waitroom.Change, given zap.Field) error {
	id := entry.key.Event
	if len(change.Reason) > maxReason {
		return apiError(http.StatusBadRequest, `"reason" is longer than %d bytes`, maxReason)
	}
	change.Actor = ActorAdmin
	if change.Reason == "" {
		change.Reason = "admin API from " + r.RemoteAddr
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	state, err := entry.room.Update(ctx, change)
	switch {
	case errors.Is(err, waitroom.ErrWatermarkMoved):
		return a.watermarkChanged(ctx, w, entry, *change.IfWatermark)
	case errors.Is(err, waitroom.ErrNegative):
		return apiError(http.StatusBadRequest, "%v", err)
	case errors.Is(err, waitroom.ErrOverflow):
		// The store's own words (a Redis error) are nothing the caller can
		// act on.
		return caddy.APIError{HTTPStatus: http.StatusUnprocessableEntity, Message: "watermark_overflow",
			Err: fmt.Errorf("the watermark cannot be raised that far: it would pass %d, the largest position", int64(math.MaxInt64))}
	case err != nil:
		a.logger.Warn("event state change failed",
			given, zap.Int64("event", id), zap.String("remote", r.RemoteAddr), zap.Error(err))
		return apiError(http.StatusServiceUnavailable, "the queue store is unavailable: %v", err)
	}
	a.logger.Info("event state changed", given,
		zap.Int64("event", id),
		zap.String("change", action),
		zap.String("remote", r.RemoteAddr),
		zap.Int64("watermark", state.Watermark),
		zap.Int64("last_position", state.LastPosition),
		zap.Int64("hard_cap", state.HardCap),
		zap.Bool("sold_out", state.SoldOut),
		zap.Bool("paused", state.Paused))
	return writeJSON(w, http.StatusOK, state)
}

// watermarkChanged answers a change refused for its if_watermark: 409 with
// the state as it is now, for the caller to decide again from.
func (a *Admin) watermarkChanged(ctx context.Context, w http.ResponseWriter, entry *roomEntry, saw int64) error {
	state, err := entry.room.Refresh(ctx)
	if err != nil {
		return apiError(http.StatusServiceUnavailable, "the queue store is unavailable: %v", err)
	}
	return writeJSON(w, http.StatusConflict, struct {
		Error   string         `json:"error"`
		Message string         `json:"message"`
		State   waitroom.State `json:"state"`
	}{"watermark_changed", fmt.Sprintf("the watermark is %d, not %d (if_watermark): nothing changed", state.Watermark, saw), state})
}

// lotteryBody is the lottery route's answer: the published draw, with
// drawn telling which form it is.
type lotteryBody struct {
	Event      int64     `json:"event"`
	OpensAt    string    `json:"opens_at"`
	Commitment string    `json:"commitment"`
	Drawn      bool      `json:"drawn"`
	Seed       *string   `json:"seed,omitempty"`
	Entrants   *[]string `json:"entrants,omitempty"`
	Algorithm  *string   `json:"algorithm,omitempty"`
	Base       *int64    `json:"base,omitempty"`
}

func (a *Admin) lottery(w http.ResponseWriter, r *http.Request, entry *roomEntry) error {
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	v, err := entry.room.Lottery(ctx)
	switch {
	case errors.Is(err, waitroom.ErrNoOpening):
		return apiError(http.StatusNotFound, "event %d has no scheduled opening (opens_at)", entry.key.Event)
	case err != nil:
		return apiError(http.StatusServiceUnavailable, "the queue store is unavailable: %v", err)
	}
	body := lotteryBody{Event: entry.key.Event, OpensAt: v.OpensAt.UTC().Format(time.RFC3339Nano), Commitment: v.Commitment, Drawn: v.Drawn}
	if v.Drawn {
		p := v.Published
		body.Seed, body.Entrants, body.Algorithm, body.Base = &p.Seed, &p.Entrants, &p.Algorithm, &p.Base
	}
	return writeJSON(w, http.StatusOK, body)
}

// decodeBody reads one JSON object into v, as every route with a body
// does (docs/api.md §1): refused when over maxAdminBody (413), and when it
// is not one object of UTF-8 text without a NUL, or has a field v lacks
// (400).
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := jsonbody.Read(w, r, maxAdminBody)
	if err == nil {
		err = jsonbody.Decode(b, v)
	}
	var invalid *jsonbody.InvalidError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jsonbody.ErrTooLarge):
		return apiError(http.StatusRequestEntityTooLarge, "the body is larger than %d bytes", maxAdminBody)
	case errors.As(err, &invalid):
		return apiError(http.StatusBadRequest, "%s", invalid.Reason)
	default:
		return apiError(http.StatusBadRequest, "the body could not be read: %v", err)
	}
}

// Interface guards
var (
	_ caddy.AdminRouter = (*Admin)(nil)
	_ caddy.Provisioner = (*Admin)(nil)
)
