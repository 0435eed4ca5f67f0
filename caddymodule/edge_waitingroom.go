package caddymodule

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap/exp/zapslog"

	"github.com/waitroom/waitroom/edge/cloudflare"
	"github.com/waitroom/waitroom/waitroom"
)

// Steering Cloudflare's own Waiting Room (docs/edge.md): the gateway runs
// the driver, since the closed loop's decisions are made and known there.
// It follows the room in the background, never on the request path.

// CloudflareWaitingRoom is a Cloudflare Waiting Room the gateway keeps in
// step with its room. Global placeholders ({env.CF_API_TOKEN}) are replaced
// in every field.
type CloudflareWaitingRoom struct {
	// The zone of the waiting room. Required.
	ZoneID string `json:"zone_id,omitempty"`
	// The waiting room's id. Required.
	WaitingRoomID string `json:"waiting_room_id,omitempty"`
	// An API token allowed "Waiting Rooms: Edit", usually
	// {env.CF_API_TOKEN}. Required.
	APIToken string `json:"api_token,omitempty"`
	// The API's base URL. Default: https://api.cloudflare.com/client/v4/.
	APIURL string `json:"api_url,omitempty"`
	// How long a change waits for the ones that follow it before the room
	// is written. Default: 5s.
	Debounce caddy.Duration `json:"debounce,omitempty"`
	// With opens_at, how long before the opening Cloudflare's pre-queue
	// starts. Default: 1h; at least 5m.
	PreQueue caddy.Duration `json:"prequeue,omitempty"`
}

// waitingRoomFollow is how often the figures are read again while the
// state does not change: the admissions per minute slide with time.
const waitingRoomFollow = 5 * time.Second

func (c *CloudflareWaitingRoom) config(event int64, opensAt time.Time) cloudflare.WaitingRoomConfig {
	repl := caddy.NewReplacer()
	return cloudflare.WaitingRoomConfig{
		ZoneID:        repl.ReplaceKnown(c.ZoneID, ""),
		WaitingRoomID: repl.ReplaceKnown(c.WaitingRoomID, ""),
		APIToken:      repl.ReplaceKnown(c.APIToken, ""),
		APIURL:        repl.ReplaceKnown(c.APIURL, ""),
		Debounce:      time.Duration(c.Debounce),
		Event:         event,
		OpensAt:       opensAt,
		PreQueue:      time.Duration(c.PreQueue),
	}
}

// waitingRoomSteerer follows a room and steers the Cloudflare room by it.
type waitingRoomSteerer struct {
	driver *cloudflare.WaitingRoom
	// decision is how long an admitted user is counted as deciding: the
	// closed loop's decision time.
	decision time.Duration
	// now is the rooms' clock, which dates the watermarks they applied.
	now    func() time.Time
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// newWaitingRoomSteerer sets up the driver of h's cloudflare_waiting_room.
// It does no I/O and starts nothing.
func (h *Handler) newWaitingRoomSteerer() (*waitingRoomSteerer, error) {
	logger := slog.New(zapslog.NewHandler(h.logger.Core()))
	driver, err := cloudflare.NewWaitingRoom(h.CloudflareWaitingRoom.config(h.Event, h.opensAt), logger)
	if err != nil {
		// Usually a missing field or an unset environment variable.
		return nil, fmt.Errorf("cloudflare_waiting_room: %w (once placeholders are replaced)", err)
	}
	decision := waitroom.DefaultDecisionTime
	if c := h.Autopilot.closedLoop(); c != nil {
		decision = c.DecisionTime
	}
	return &waitingRoomSteerer{driver: driver, decision: decision, now: poolClock}, nil
}

// start steers by room's state once the room has read it from the store,
// and again at every change and every waitingRoomFollow, until stop or the
// end of parent (the config's context).
func (s *waitingRoomSteerer) start(parent context.Context, room *waitroom.Room) {
	ctx, cancel := context.WithCancel(parent)
	s.cancel = cancel
	s.done.Add(2)
	go func() {
		defer s.done.Done()
		s.driver.Run(ctx)
	}()
	go func() {
		defer s.done.Done()
		select {
		case <-ctx.Done():
			return
		case <-room.Ready():
		}
		tick := time.NewTicker(waitingRoomFollow)
		defer tick.Stop()
		for {
			changed := room.Changed()
			marks, _ := room.AppliedWatermarks()
			inv, _ := room.Inventory()
			s.driver.Steer(cloudflare.SteeringOf(cloudflare.FiguresOf(room.State(), marks, inv, s.now(), s.decision)))
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-tick.C:
			}
		}
	}()
}

// stop ends the steering; a write in flight is abandoned, and the config
// that replaces this one steers again.
func (s *waitingRoomSteerer) stop() {
	if s == nil || s.cancel == nil {
		return
	}
	s.cancel()
	s.done.Wait()
}

// parseCloudflareWaitingRoom reads the block of cloudflare_waiting_room.
func parseCloudflareWaitingRoom(d *caddyfile.Dispenser) (*CloudflareWaitingRoom, error) {
	const name = "cloudflare_waiting_room"
	if d.NextArg() {
		return nil, d.Errf("%s takes its settings in a block, not as arguments (got %q)", name, d.Val())
	}
	c := &CloudflareWaitingRoom{}
	given := onceEach{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if err := given.check(d, name+": "+sub); err != nil {
			return nil, err
		}
		var err error
		var dur time.Duration
		switch sub {
		case "zone_id":
			c.ZoneID, err = stringArg(d, name+": "+sub)
		case "waiting_room_id":
			c.WaitingRoomID, err = stringArg(d, name+": "+sub)
		case "api_token":
			c.APIToken, err = stringArg(d, name+": "+sub)
		case "api_url":
			c.APIURL, err = stringArg(d, name+": "+sub)
		case "debounce":
			dur, err = durationArg(d, name+": "+sub)
			c.Debounce = caddy.Duration(dur)
		case "prequeue":
			dur, err = durationArg(d, name+": "+sub)
			c.PreQueue = caddy.Duration(dur)
		default:
			return nil, d.Errf("unrecognized %s subdirective %q", name, sub)
		}
		if err != nil {
			return nil, err
		}
	}
	if c.ZoneID == "" || c.WaitingRoomID == "" || c.APIToken == "" {
		return nil, d.Errf("%s: zone_id, waiting_room_id and api_token are required", name)
	}
	return c, nil
}
