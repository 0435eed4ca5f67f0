package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/waitroom/waitroom/waitroom"
)

// GatewayAdmin is the waiting room's API on Caddy's admin endpoint.
type GatewayAdmin struct{ Client }

func (a GatewayAdmin) call(ctx context.Context, method, path string, body any) (GatewayState, error) {
	resp, err := a.Do(ctx, Request{Method: method, Path: path, Body: body})
	if err != nil {
		return GatewayState{}, fmt.Errorf("gateway admin %s %s: %w", method, path, err)
	}
	if resp.Status != http.StatusOK {
		return GatewayState{}, resp.Unexpected("gateway admin " + method + " " + path)
	}
	var s GatewayState
	return s, resp.Decode(&s)
}

func eventPath(event int64) string { return "/waitroom/events/" + strconv.FormatInt(event, 10) }

// State reads event's state.
func (a GatewayAdmin) State(ctx context.Context, event int64) (GatewayState, error) {
	return a.call(ctx, http.MethodGet, eventPath(event), nil)
}

// Raise admits by more positions.
func (a GatewayAdmin) Raise(ctx context.Context, event, by int64) (GatewayState, error) {
	return a.call(ctx, http.MethodPost, eventPath(event)+"/watermark", map[string]int64{"raise_by": by})
}

// SetWatermark sets the watermark.
func (a GatewayAdmin) SetWatermark(ctx context.Context, event, watermark int64) (GatewayState, error) {
	return a.call(ctx, http.MethodPost, eventPath(event)+"/watermark", map[string]int64{"set": watermark})
}

// LogEntry is one change of the change log.
type LogEntry struct {
	Actor  string `json:"actor"`
	Field  string `json:"field"`
	From   any    `json:"from"`
	To     any    `json:"to"`
	Reason string `json:"reason"`
}

// ChangeLog reads event's change log, newest first.
func (a GatewayAdmin) ChangeLog(ctx context.Context, event int64) ([]LogEntry, error) {
	resp, err := a.Do(ctx, Request{Method: http.MethodGet, Path: eventPath(event) + "/log"})
	if err != nil {
		return nil, fmt.Errorf("gateway admin change log: %w", err)
	}
	if resp.Status != http.StatusOK {
		return nil, resp.Unexpected("gateway admin change log")
	}
	var log []LogEntry
	return log, resp.Decode(&log)
}

// Applied is a gateway's own record of the watermarks it applied, and
// when by its clock.
type Applied struct {
	Applied []waitroom.AppliedWatermark `json:"applied"`
	// Dropped is how many older ones it no longer remembers.
	Dropped int64 `json:"dropped"`
}

// Applied reads the gateway's record of the watermarks it applied.
func (a GatewayAdmin) Applied(ctx context.Context, event int64) (Applied, error) {
	resp, err := a.Do(ctx, Request{Method: http.MethodGet, Path: eventPath(event) + "/applied"})
	if err != nil {
		return Applied{}, fmt.Errorf("gateway admin applied watermarks: %w", err)
	}
	if resp.Status != http.StatusOK {
		return Applied{}, resp.Unexpected("gateway admin applied watermarks")
	}
	var out Applied
	return out, resp.Decode(&out)
}

// OriginAdmin is the origin's admin API.
type OriginAdmin struct {
	Client
	Token string
}

// CreateEvent creates an event.
func (a OriginAdmin) CreateEvent(ctx context.Context, e NewEvent) (Event, error) {
	resp, err := a.Do(ctx, Request{Method: http.MethodPost, Path: "/v1/events", Bearer: a.Token, Body: e})
	if err != nil {
		return Event{}, fmt.Errorf("create event: %w", err)
	}
	if resp.Status != http.StatusCreated {
		return Event{}, resp.Unexpected("create event")
	}
	var out Event
	return out, resp.Decode(&out)
}

// Event reads an event.
func (a OriginAdmin) Event(ctx context.Context, id int64) (Event, error) {
	resp, err := a.Do(ctx, Request{Method: http.MethodGet, Path: "/v1/events/" + strconv.FormatInt(id, 10)})
	if err != nil {
		return Event{}, fmt.Errorf("read event: %w", err)
	}
	if resp.Status != http.StatusOK {
		return Event{}, resp.Unexpected("read event")
	}
	var out Event
	return out, resp.Decode(&out)
}

// Invariant reads the Redis ↔ Postgres invariant of an event.
func (a OriginAdmin) Invariant(ctx context.Context, id int64) (Invariant, error) {
	return a.invariant(ctx, http.MethodGet, "/invariant", id)
}

// Rebuild rebuilds an event's Redis keys from Postgres.
func (a OriginAdmin) Rebuild(ctx context.Context, id int64) (Invariant, error) {
	return a.invariant(ctx, http.MethodPost, "/rebuild", id)
}

func (a OriginAdmin) invariant(ctx context.Context, method, suffix string, id int64) (Invariant, error) {
	path := "/v1/admin/events/" + strconv.FormatInt(id, 10) + suffix
	resp, err := a.Do(ctx, Request{Method: method, Path: path, Bearer: a.Token})
	if err != nil {
		return Invariant{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.Status != http.StatusOK {
		return Invariant{}, resp.Unexpected(method + " " + path)
	}
	var out Invariant
	return out, resp.Decode(&out)
}
