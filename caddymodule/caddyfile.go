package caddymodule

import (
	"math"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/waitroom/waitroom/waitroom"
	"github.com/waitroom/waitroom/waitroom/lottery"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("waitroom", parseCaddyfile)
	// After the directives that authenticate (basic_auth, forward_auth, so
	// user_id can read what they set), rewrite requests or wrap responses
	// (encode, intercept), and before every directive that routes or
	// answers (invoke, handle, route, respond, reverse_proxy, file_server…),
	// so nothing reaches the site without passing the queue.
	httpcaddyfile.RegisterDirectiveOrder("waitroom", httpcaddyfile.Before, "templates")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var w Handler
	err := w.UnmarshalCaddyfile(h.Dispenser)
	return &w, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	waitroom [<matcher>] {
//		event            <id>
//		key              <kid> <secret>
//		store            memory|<redis url>
//		lease            <n>
//		watermark        <n>
//		hard_cap         <n>
//		hard_cap_per_remaining <k>
//		token_ttl        <duration>
//		abandon_after    <duration>
//		admission_window <duration>
//		user_id          <placeholder>
//		waiting_status   200|202|429|503
//		sold_out_max_age <duration>
//		sold_out_at_zero
//		waiting_template <file>
//		sold_out_template <file>
//		locales          <dir>
//		autopilot        <step> <interval>
//		autopilot {
//			interval       <duration>
//			max_undecided  <n>
//			conversion     <share>
//			decision_time  <duration>
//			expiring_share <share>
//			max_error_rate <share>
//		}
//		cookie_secure    always|auto
//		after_purchase   <path pattern…>
//		opens_at         <RFC 3339 time>
//		lottery_seed     <hex>
//		challenge        [<bits>]
//		join_rate        <n> <duration>
//		cloudflare_kv {
//			account_id   <id>
//			namespace_id <id>
//			api_token    <token>
//			api_url      <url>
//			debounce     <duration>
//		}
//		cloudflare_waiting_room {
//			zone_id         <id>
//			waiting_room_id <id>
//			api_token       <token>
//			api_url         <url>
//			debounce        <duration>
//			prequeue        <duration>
//		}
//	}
//
// event and at least one key are required; key may be repeated (the first
// signs, all verify), as may after_purchase; any other subdirective given
// twice in one block is refused rather than the last one kept. autopilot with two arguments raises at a fixed rate;
// with a block (possibly empty) it is the closed loop, steered by the
// origin's inventory (docs/gateway.md). The defaults are those of the JSON fields of Handler;
// challenge without a number means waitroom.DefaultChallengeBits.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.Errf("waitroom takes its settings in a block, not as arguments (got %q)", d.Val())
	}
	given := onceEach{}
	for d.NextBlock(0) {
		sub := d.Val()
		if sub != "key" && sub != "after_purchase" {
			if err := given.check(d, sub); err != nil {
				return err
			}
		}
		switch sub {
		case "event":
			n, err := intArg(d, sub, 1)
			if err != nil {
				return err
			}
			h.Event = n
		case "key":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("key: want <kid> <secret>, got %d argument(s)", len(args))
			}
			h.Keys = append(h.Keys, Key{ID: args[0], Secret: args[1]})
		case "store":
			v, err := stringArg(d, sub)
			if err != nil {
				return err
			}
			h.Store = v
		case "lease":
			n, err := intArg(d, sub, 1)
			if err != nil {
				return err
			}
			h.Lease = n
		case "watermark":
			n, err := intArg(d, sub, 0)
			if err != nil {
				return err
			}
			h.Watermark = n
		case "hard_cap":
			n, err := intArg(d, sub, 0)
			if err != nil {
				return err
			}
			h.HardCap = n
		case "hard_cap_per_remaining":
			v, err := stringArg(d, sub)
			if err != nil {
				return err
			}
			k, err := strconv.ParseFloat(v, 64)
			if err != nil || !(k > 0) || math.IsInf(k, 0) { // !(k > 0): NaN too
				return d.Errf("%s: want a positive number of positions per seat remaining (got %q)", sub, v)
			}
			h.HardCapPerRemaining = k
		case "token_ttl":
			dur, err := durationArg(d, sub)
			if err != nil {
				return err
			}
			if dur < time.Second {
				return d.Errf("token_ttl: must be at least 1s (got %s)", dur)
			}
			h.TokenTTL = caddy.Duration(dur)
		case "admission_window":
			dur, err := durationArg(d, sub)
			if err != nil {
				return err
			}
			if dur < time.Second {
				return d.Errf("admission_window: must be at least 1s (got %s)", dur)
			}
			h.AdmissionWindow = caddy.Duration(dur)
		case "abandon_after":
			dur, err := durationArg(d, sub)
			if err != nil {
				return err
			}
			if dur < time.Second {
				return d.Errf("abandon_after: must be at least 1s (got %s)", dur)
			}
			h.AbandonAfter = caddy.Duration(dur)
		case "user_id":
			v, err := stringArg(d, sub)
			if err != nil {
				return err
			}
			if !hasPlaceholder(v) {
				return d.Err(userIDConstant(v).Error())
			}
			h.UserID = v
		case "waiting_status":
			n, err := intArg(d, sub, 0)
			if err != nil {
				return err
			}
			switch n {
			case 200, 202, 429, 503:
			default:
				return d.Errf("waiting_status: must be 200, 202, 429 or 503 (got %d)", n)
			}
			h.WaitingStatus = int(n)
		case "sold_out_max_age":
			dur, err := durationArg(d, sub)
			if err != nil {
				return err
			}
			if dur <= 0 {
				return d.Errf("sold_out_max_age: must be positive (got %s)", dur)
			}
			h.SoldOutMaxAge = caddy.Duration(dur)
		case "sold_out_at_zero":
			if d.NextArg() {
				// Named like every other subdirective's error: Caddy's own
				// ("wrong argument count") leaves the operator to guess.
				return d.Errf("sold_out_at_zero: takes no argument (got %q)", d.Val())
			}
			h.SoldOutAtZero = true
		case "waiting_template":
			v, err := stringArg(d, sub)
			if err != nil {
				return err
			}
			h.WaitingTemplate = v
		case "sold_out_template":
			v, err := stringArg(d, sub)
			if err != nil {
				return err
			}
			h.SoldOutTemplate = v
		case "locales":
			v, err := stringArg(d, sub)
			if err != nil {
				return err
			}
			h.Locales = v
		case "autopilot":
			a, err := parseAutopilot(d)
			if err != nil {
				return err
			}
			h.Autopilot = a
		case "cookie_secure":
			v, err := stringArg(d, sub)
			if err != nil {
				return err
			}
			switch v {
			case CookieSecureAlways, CookieSecureAuto:
			default:
				return d.Errf("cookie_secure: must be %s or %s (got %q)", CookieSecureAlways, CookieSecureAuto, v)
			}
			h.CookieSecure = v
		case "after_purchase":
			// Repeatable: each adds its patterns. A bad pattern is
			// refused when the config is validated.
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Errf("after_purchase: want at least one path pattern (e.g. /bookings/* /tickets)")
			}
			h.AfterPurchase = append(h.AfterPurchase, args...)
		case "opens_at":
			v, err := stringArg(d, sub)
			if err != nil {
				return err
			}
			if _, err := time.Parse(time.RFC3339, v); err != nil {
				return d.Errf("opens_at: want an RFC 3339 time such as 2030-01-31T10:00:00Z (got %q)", v)
			}
			h.OpensAt = v
		case "lottery_seed":
			v, err := stringArg(d, sub)
			if err != nil {
				return err
			}
			if _, err := lottery.ParseSeed(v); err != nil {
				return d.Errf("lottery_seed: %v", err)
			}
			h.LotterySeed = v
		case "challenge":
			args := d.RemainingArgs()
			switch len(args) {
			case 0:
				h.Challenge = waitroom.DefaultChallengeBits
			case 1:
				n, err := strconv.Atoi(args[0])
				if err != nil || n < 1 || n > waitroom.MaxChallengeBits {
					return d.Errf("challenge: bits must be an integer from 1 to %d (got %q)", waitroom.MaxChallengeBits, args[0])
				}
				h.Challenge = n
			default:
				return d.Errf("challenge: want at most one argument (<bits>), got %d", len(args))
			}
		case "join_rate":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("join_rate: want <n> <duration>, got %d argument(s)", len(args))
			}
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 1 {
				return d.Errf("join_rate: n must be a positive integer (got %q)", args[0])
			}
			per, err := caddy.ParseDuration(args[1])
			if err != nil || per <= 0 {
				return d.Errf("join_rate: duration must be a positive duration (got %q)", args[1])
			}
			if per/time.Duration(n) <= 0 {
				return d.Errf("join_rate: %d per %s is too fast to count", n, per)
			}
			h.JoinRate = &JoinRate{Joins: n, Per: caddy.Duration(per)}
		case "cloudflare_kv":
			kv, err := parseCloudflareKV(d)
			if err != nil {
				return err
			}
			h.CloudflareKV = kv
		case "cloudflare_waiting_room":
			wr, err := parseCloudflareWaitingRoom(d)
			if err != nil {
				return err
			}
			h.CloudflareWaitingRoom = wr
		default:
			return d.Errf("unrecognized waitroom subdirective %q", sub)
		}
	}
	return nil
}

// parseAutopilot reads autopilot <step> <interval> (a fixed rate) or
// autopilot { … } (the closed loop).
func parseAutopilot(d *caddyfile.Dispenser) (*Autopilot, error) {
	args := d.RemainingArgs()
	nesting := d.Nesting()
	if len(args) == 0 {
		a := &Autopilot{ClosedLoop: true}
		given := onceEach{}
		for d.NextBlock(nesting) {
			sub := "autopilot " + d.Val()
			if err := given.check(d, sub); err != nil {
				return nil, err
			}
			var err error
			switch d.Val() {
			case "interval":
				var v time.Duration
				if v, err = durationArg(d, sub); err == nil && v <= 0 {
					err = d.Errf("%s: must be positive (got %s)", sub, v)
				} else if err == nil && v < MinAutopilotInterval {
					err = d.Errf("%s: must be at least %s (got %s)", sub, MinAutopilotInterval, v)
				}
				a.Interval = caddy.Duration(v)
			case "decision_time":
				var v time.Duration
				if v, err = durationArg(d, sub); err == nil && v <= 0 {
					err = d.Errf("%s: must be positive (got %s)", sub, v)
				}
				a.DecisionTime = caddy.Duration(v)
			case "max_undecided":
				a.MaxUndecided, err = intArg(d, sub, 1)
			case "conversion":
				a.Conversion, err = shareArg(d, sub)
			case "expiring_share":
				a.ExpiringShare, err = shareArg(d, sub)
			case "max_error_rate":
				a.MaxErrorRate, err = shareArg(d, sub)
			default:
				err = d.Errf("unrecognized autopilot subdirective %q", d.Val())
			}
			if err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	if len(args) != 2 {
		return nil, d.Errf("autopilot: want <step> <interval> or a block, got %d argument(s)", len(args))
	}
	if d.NextBlock(nesting) {
		return nil, d.Errf("autopilot: a fixed rate (<step> <interval>) takes no block")
	}
	step, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || step < 1 {
		return nil, d.Errf("autopilot: step must be a positive integer (got %q)", args[0])
	}
	interval, err := caddy.ParseDuration(args[1])
	if err != nil || interval <= 0 {
		return nil, d.Errf("autopilot: interval must be a positive duration (got %q)", args[1])
	}
	if interval < MinAutopilotInterval {
		return nil, d.Errf("autopilot: interval must be at least %s (got %s)", MinAutopilotInterval, interval)
	}
	return &Autopilot{Step: step, Interval: caddy.Duration(interval)}, nil
}

// shareArg reads the one argument of sub, a share from 0 (excluded) to 1.
func shareArg(d *caddyfile.Dispenser, sub string) (float64, error) {
	v, err := stringArg(d, sub)
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0 && f <= 1) { // NaN fails both
		return 0, d.Errf("%s: want a share above 0 and at most 1 (got %q)", sub, v)
	}
	return f, nil
}

// parseCloudflareKV reads the block of cloudflare_kv.
func parseCloudflareKV(d *caddyfile.Dispenser) (*CloudflareKV, error) {
	if d.NextArg() {
		return nil, d.Errf("cloudflare_kv takes its settings in a block, not as arguments (got %q)", d.Val())
	}
	kv := &CloudflareKV{}
	given := onceEach{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if err := given.check(d, "cloudflare_kv: "+sub); err != nil {
			return nil, err
		}
		var err error
		switch sub {
		case "account_id":
			kv.AccountID, err = stringArg(d, "cloudflare_kv: "+sub)
		case "namespace_id":
			kv.NamespaceID, err = stringArg(d, "cloudflare_kv: "+sub)
		case "api_token":
			kv.APIToken, err = stringArg(d, "cloudflare_kv: "+sub)
		case "api_url":
			kv.APIURL, err = stringArg(d, "cloudflare_kv: "+sub)
		case "debounce":
			var dur time.Duration
			dur, err = durationArg(d, "cloudflare_kv: "+sub)
			kv.Debounce = caddy.Duration(dur)
		default:
			return nil, d.Errf("unrecognized cloudflare_kv subdirective %q", sub)
		}
		if err != nil {
			return nil, err
		}
	}
	return kv, nil
}

// onceEach holds the line each subdirective of a block was first given on:
// the Caddyfile's unmarshalling would keep a repeated one's last value
// silently, whichever the operator meant.
type onceEach map[string]int

// check refuses the current subdirective, named sub in the error, when the
// block gave it before.
func (o onceEach) check(d *caddyfile.Dispenser, sub string) error {
	if first, ok := o[d.Val()]; ok {
		return d.Errf("%s: given twice in one block (first on line %d); give it once", sub, first)
	}
	o[d.Val()] = d.Line()
	return nil
}

// stringArg reads the one argument of subdirective sub.
func stringArg(d *caddyfile.Dispenser, sub string) (string, error) {
	args := d.RemainingArgs()
	if len(args) != 1 {
		return "", d.Errf("%s: want exactly one argument, got %d", sub, len(args))
	}
	return args[0], nil
}

// intArg reads the one integer argument of sub, at least least.
func intArg(d *caddyfile.Dispenser, sub string, least int64) (int64, error) {
	v, err := stringArg(d, sub)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, d.Errf("%s: %q is not an integer", sub, v)
	}
	if n < least {
		if least == 0 {
			return 0, d.Errf("%s: must not be negative (got %d)", sub, n)
		}
		return 0, d.Errf("%s: must be at least %d (got %d)", sub, least, n)
	}
	return n, nil
}

// durationArg reads the one duration argument of sub, in Caddy's syntax
// (which also takes days: "1d").
func durationArg(d *caddyfile.Dispenser, sub string) (time.Duration, error) {
	v, err := stringArg(d, sub)
	if err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return 0, d.Errf("%s: %q is not a duration", sub, v)
	}
	return dur, nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Handler)(nil)
