package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/waitroom/waitroom/waitroom"
	"github.com/waitroom/waitroom/waitroom/lottery"
)

// The handler's settings that are types of their own, and the check of the
// whole configuration.

// JoinRate is a rate of new arrivals per client address.
type JoinRate struct {
	// Arrivals allowed per period, all at once at most. Required.
	Joins int `json:"joins,omitempty"`
	// The period. Required.
	Per caddy.Duration `json:"per,omitempty"`
}

// Key is one HMAC key of the key set.
type Key struct {
	// The kid header of the tokens this key signs. Required, unique.
	ID string `json:"id,omitempty"`
	// The secret, at least 32 bytes after placeholders are replaced.
	Secret string `json:"secret,omitempty"`
}

// Autopilot raises the watermark by itself while visitors wait and the
// event is neither sold out nor paused: by Step every Interval (a fixed
// rate), or, with ClosedLoop, by what the origin publishes of its seats
// (docs/gateway.md, autopilot). Across nodes sharing a store only one
// raises per interval.
type Autopilot struct {
	// Positions admitted per step at a fixed rate. Required without
	// closed_loop.
	Step int64 `json:"step,omitempty"`
	// Time between steps. Required at a fixed rate; default 500ms in the
	// closed loop.
	Interval caddy.Duration `json:"interval,omitempty"`
	// Admit by the origin's published inventory and the measured
	// conversion of admitted users rather than at a fixed rate.
	ClosedLoop bool `json:"closed_loop,omitempty"`
	// The closed loop's cap on users admitted and undecided (admitted
	// within the decision time, not holding). Default: 200.
	MaxUndecided int64 `json:"max_undecided,omitempty"`
	// The share of admitted users who hold, assumed until measured.
	// Default: 0.5.
	Conversion float64 `json:"conversion,omitempty"`
	// The time an admitted user takes to hold, assumed until measured.
	// Default: 30s.
	DecisionTime caddy.Duration `json:"decision_time,omitempty"`
	// The share of the seats of holds expiring soon counted as free.
	// Default: 0.5.
	ExpiringShare float64 `json:"expiring_share,omitempty"`
	// The origin's share of server errors from which nobody is admitted.
	// Default: 0.05.
	MaxErrorRate float64 `json:"max_error_rate,omitempty"`
}

// MinAutopilotInterval is the shortest interval the autopilot takes: each
// step is a store round trip and a change log entry, and a ticker of a
// nanosecond or so keeps a core busy ("1ms" is more likely a slip for "1m").
const MinAutopilotInterval = 10 * time.Millisecond

// closedLoop is the closed loop a configures, with its defaults; nil at a
// fixed rate.
func (a *Autopilot) closedLoop() *waitroom.ClosedLoop {
	if a == nil || !a.ClosedLoop {
		return nil
	}
	c := waitroom.ClosedLoop{
		Interval: time.Duration(a.Interval), MaxUndecided: a.MaxUndecided, Conversion: a.Conversion,
		DecisionTime: time.Duration(a.DecisionTime), ExpiringShare: a.ExpiringShare, MaxErrorRate: a.MaxErrorRate,
	}.WithDefaults()
	return &c
}

// Validate checks the configuration. Secrets are checked when Provision
// builds the key set, after their placeholders are replaced.
func (h *Handler) Validate() error {
	if h.Event <= 0 {
		return fmt.Errorf("event: a positive event id is required (got %d)", h.Event)
	}
	if len(h.Keys) == 0 {
		return errors.New("keys: at least one signing key is required")
	}
	for i, k := range h.Keys {
		if k.ID == "" {
			return fmt.Errorf("keys: key %d has no id", i+1)
		}
		if strings.ContainsAny(k.ID, ":, \t\r\n") {
			// The origin, the edge Worker and the backend recipes take the
			// key set as kid:secret[,kid:secret…]; a kid with a colon is
			// read there as another kid, and refuses every token.
			return fmt.Errorf("keys: key id %q cannot be written in WAITROOM_KEYS (kid:secret,…) for the origin: use no colon, comma or space", k.ID)
		}
		if k.Secret == "" {
			return fmt.Errorf("keys: key %q has no secret", k.ID)
		}
	}
	switch {
	case h.Watermark < 0:
		return fmt.Errorf("watermark: must not be negative (got %d)", h.Watermark)
	case h.HardCap < 0:
		return fmt.Errorf("hard_cap: must not be negative (got %d)", h.HardCap)
	case h.HardCapPerRemaining < 0 || math.IsInf(h.HardCapPerRemaining, 0) || math.IsNaN(h.HardCapPerRemaining):
		return fmt.Errorf("hard_cap_per_remaining: must be a positive number (got %v)", h.HardCapPerRemaining)
	case h.HardCapPerRemaining > 0 && h.HardCap > 0:
		return errors.New("hard_cap_per_remaining derives the hard cap: give it or hard_cap, not both")
	case h.Lease < 0:
		return fmt.Errorf("lease: must not be negative (got %d)", h.Lease)
	case h.TokenTTL < 0 || (h.TokenTTL > 0 && time.Duration(h.TokenTTL) < time.Second):
		return fmt.Errorf("token_ttl: must be at least 1s (got %s)", time.Duration(h.TokenTTL))
	case h.AbandonAfter < 0 || (h.AbandonAfter > 0 && time.Duration(h.AbandonAfter) < time.Second):
		return fmt.Errorf("abandon_after: must be at least 1s (got %s)", time.Duration(h.AbandonAfter))
	case h.AdmissionWindow < 0 || (h.AdmissionWindow > 0 && time.Duration(h.AdmissionWindow) < time.Second):
		return fmt.Errorf("admission_window: must be at least 1s (got %s)", time.Duration(h.AdmissionWindow))
	case h.SoldOutMaxAge < 0:
		return fmt.Errorf("sold_out_max_age: must not be negative (got %s)", time.Duration(h.SoldOutMaxAge))
	}
	if h.UserID != "" && !hasPlaceholder(h.UserID) {
		return userIDConstant(h.UserID)
	}
	switch h.WaitingStatus {
	case 0, http.StatusOK, http.StatusAccepted, http.StatusTooManyRequests, http.StatusServiceUnavailable:
	default:
		return fmt.Errorf("waiting_status: must be 200, 202, 429 or 503 (got %d)", h.WaitingStatus)
	}
	if a := h.Autopilot; a != nil && a.ClosedLoop {
		if a.Step != 0 {
			return fmt.Errorf("autopilot: the closed loop takes no step (got %d)", a.Step)
		}
		// By the JSON field names: the closed loop's own check speaks of
		// its Go fields.
		switch {
		case a.Interval < 0:
			return fmt.Errorf("autopilot: interval must not be negative (got %s)", time.Duration(a.Interval))
		case a.Interval > 0 && time.Duration(a.Interval) < MinAutopilotInterval:
			return fmt.Errorf("autopilot: interval must be at least %s (got %s)", MinAutopilotInterval, time.Duration(a.Interval))
		case a.DecisionTime < 0:
			return fmt.Errorf("autopilot: decision_time must not be negative (got %s)", time.Duration(a.DecisionTime))
		case a.MaxUndecided < 0:
			return fmt.Errorf("autopilot: max_undecided must not be negative (got %d)", a.MaxUndecided)
		case a.ExpiringShare < 0 || a.ExpiringShare > 1:
			return fmt.Errorf("autopilot: expiring_share %v is not a share (0 to 1)", a.ExpiringShare)
		case a.MaxErrorRate < 0 || a.MaxErrorRate > 1:
			return fmt.Errorf("autopilot: max_error_rate %v is not a share (0 to 1)", a.MaxErrorRate)
		}
		c := waitroom.ClosedLoop{Interval: time.Duration(a.Interval), MaxUndecided: a.MaxUndecided, Conversion: a.Conversion,
			DecisionTime: time.Duration(a.DecisionTime), ExpiringShare: a.ExpiringShare, MaxErrorRate: a.MaxErrorRate}
		if err := c.Validate(); err != nil {
			return err
		}
	} else if a != nil {
		if a.MaxUndecided != 0 || a.Conversion != 0 || a.DecisionTime != 0 || a.ExpiringShare != 0 || a.MaxErrorRate != 0 {
			return errors.New("autopilot: max_undecided, conversion, decision_time, expiring_share and max_error_rate belong to the closed loop (closed_loop: true)")
		}
		if a.Step <= 0 || a.Interval <= 0 {
			return fmt.Errorf("autopilot: step and interval must both be positive (got %d every %s)", a.Step, time.Duration(a.Interval))
		}
		if time.Duration(a.Interval) < MinAutopilotInterval {
			return fmt.Errorf("autopilot: interval must be at least %s (got %s)", MinAutopilotInterval, time.Duration(a.Interval))
		}
	}
	if err := validateAfterPurchase(h.AfterPurchase); err != nil {
		return err
	}
	switch h.CookieSecure {
	case "", CookieSecureAuto, CookieSecureAlways:
	default:
		return fmt.Errorf("cookie_secure: must be %q or %q (got %q)", CookieSecureAlways, CookieSecureAuto, h.CookieSecure)
	}
	h.opensAt, h.seed = time.Time{}, nil
	if h.OpensAt != "" {
		at, err := time.Parse(time.RFC3339, h.OpensAt)
		if err != nil {
			return fmt.Errorf("opens_at: want an RFC 3339 time such as 2030-01-31T10:00:00Z (got %q)", h.OpensAt)
		}
		h.opensAt = at.UTC()
	}
	if h.LotterySeed != "" {
		if h.OpensAt == "" {
			return errors.New("lottery_seed: only used with opens_at")
		}
		seed, err := lottery.ParseSeed(h.LotterySeed)
		if err != nil {
			return fmt.Errorf("lottery_seed: %w", err)
		}
		h.seed = seed
	}
	if h.Challenge < 0 || h.Challenge > waitroom.MaxChallengeBits {
		return fmt.Errorf("challenge: must be 1 to %d bits (got %d)", waitroom.MaxChallengeBits, h.Challenge)
	}
	if j := h.JoinRate; j != nil && (j.Joins <= 0 || j.Per <= 0 || time.Duration(j.Per)/time.Duration(j.Joins) <= 0) {
		return fmt.Errorf("join_rate: joins and period must both be positive (got %d per %s)", j.Joins, time.Duration(j.Per))
	}
	if h.CloudflareKV != nil {
		if err := h.CloudflareKV.validate(); err != nil {
			return err
		}
	}
	return nil
}

// hasPlaceholder reports whether s names a placeholder ({…}).
func hasPlaceholder(s string) bool {
	open := strings.IndexByte(s, '{')
	return open >= 0 && strings.IndexByte(s[open:], '}') > 1
}

// userIDConstant is the error of a user_id without a placeholder: the same
// id for every visitor, who would all share one account's one place.
func userIDConstant(v string) error {
	return fmt.Errorf("user_id: %q has no placeholder, so every visitor would be the same account; name where the id is, e.g. {http.request.header.X-User-ID}", v)
}

// The handlers of one config that guard one event share its room (pool.go),
// built from the settings of whichever is provisioned first: a second
// handler with other settings would be ignored, or, under another room key,
// run a second room writing its own defaults and autopilot to the same
// store. Several sites may guard one event, with the same settings.
var (
	eventGuardsMu sync.Mutex
	// eventGuards holds, per config being loaded or running (told apart by
	// its context's Done channel), the settings of each event's first
	// handler.
	eventGuards = map[<-chan struct{}]map[int64]eventSettings{}
)

// eventSettings are the settings of a handler that its event's room holds.
// The store is not among them: handlers of one event on one Redis under
// another lease or client name are two gateways of a fleet in one process,
// each with its own room, whose defaults and autopilot still meet in the
// store.
type eventSettings struct {
	room          roomKey
	soldOutAtZero bool
}

// claimEvent records the settings s of a handler of ctx's config, refusing
// them when another handler of the config guards the same event with other
// ones.
func claimEvent(ctx caddy.Context, s eventSettings) error {
	done := ctx.Done()
	if done == nil {
		return nil
	}
	eventGuardsMu.Lock()
	defer eventGuardsMu.Unlock()
	byEvent, ok := eventGuards[done]
	if !ok {
		byEvent = map[int64]eventSettings{}
		eventGuards[done] = byEvent
		context.AfterFunc(ctx, func() {
			eventGuardsMu.Lock()
			delete(eventGuards, done)
			eventGuardsMu.Unlock()
		})
	}
	first, ok := byEvent[s.room.Event]
	if !ok {
		byEvent[s.room.Event] = s
		return nil
	}
	if diff := first.differences(s); len(diff) > 0 {
		return fmt.Errorf("event %d is guarded twice in this config with different settings (%s): "+
			"the handlers of one event share its queue, so give them the same settings, or guard it once",
			s.room.Event, strings.Join(diff, ", "))
	}
	return nil
}

// differences names each setting that a and b give different values, with
// both values where they are no secret.
func (a eventSettings) differences(b eventSettings) []string {
	var out []string
	both := func(name string, x, y any) {
		if x != y {
			out = append(out, fmt.Sprintf("%s %v and %v", name, x, y))
		}
	}
	both("watermark", a.room.Watermark, b.room.Watermark)
	both("hard_cap", a.room.HardCap, b.room.HardCap)
	both("hard_cap_per_remaining", a.room.HardCapPerRemaining, b.room.HardCapPerRemaining)
	if a.room.PilotStep != b.room.PilotStep || a.room.PilotInterval != b.room.PilotInterval || a.room.ClosedLoop != b.room.ClosedLoop {
		out = append(out, "autopilot")
	}
	both("opens_at", openingTime(a.room.OpensAt), openingTime(b.room.OpensAt))
	if a.room.Seed != b.room.Seed {
		// Secret until the draw.
		out = append(out, "lottery_seed")
	}
	both("abandon_after", a.room.AbandonAfter, b.room.AbandonAfter)
	both("admission_window", a.room.AdmissionWindow, b.room.AdmissionWindow)
	both("sold_out_at_zero", a.soldOutAtZero, b.soldOutAtZero)
	return out
}

// openingTime is a room key's opens_at as the config gives it.
func openingTime(ns int64) string {
	if ns == 0 {
		return "none"
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339)
}
