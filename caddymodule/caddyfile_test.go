package caddymodule

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateGolden = flag.Bool("update", false, "rewrite the adapt golden files in testdata/")

func TestUnmarshalCaddyfile(t *testing.T) {
	secret := testSecret
	for _, c := range []struct {
		name  string
		input string
		want  Handler
		err   string
	}{
		{
			name:  "minimal",
			input: "waitroom {\n event 42\n key k1 " + secret + "\n}",
			want:  Handler{Event: 42, Keys: []Key{{ID: "k1", Secret: secret}}},
		},
		{
			name: "every subdirective",
			input: `waitroom {
				event 42
				key k2 ` + secret + `-new
				key k1 {env.WAITROOM_SECRET}
				store redis://127.0.0.1:6379/0
				lease 100
				watermark 5000
				hard_cap 50000
				token_ttl 1h
				user_id {http.request.header.X-User-ID}
				waiting_status 429
				sold_out_max_age 1m
				sold_out_at_zero
				waiting_template /etc/caddy/waiting.html
				sold_out_template /etc/caddy/sold_out.html
				autopilot 100 10s
				cookie_secure always
				opens_at 2030-01-31T10:00:00Z
				lottery_seed 000102030405060708090a0b0c0d0e0f
				challenge 20
				join_rate 5 1m
			}`,
			want: Handler{
				Event:           42,
				Keys:            []Key{{ID: "k2", Secret: secret + "-new"}, {ID: "k1", Secret: "{env.WAITROOM_SECRET}"}},
				Store:           "redis://127.0.0.1:6379/0",
				Lease:           100,
				Watermark:       5000,
				HardCap:         50000,
				TokenTTL:        caddy.Duration(time.Hour),
				UserID:          "{http.request.header.X-User-ID}",
				WaitingStatus:   429,
				SoldOutMaxAge:   caddy.Duration(time.Minute),
				SoldOutAtZero:   true,
				WaitingTemplate: "/etc/caddy/waiting.html",
				SoldOutTemplate: "/etc/caddy/sold_out.html",
				Autopilot:       &Autopilot{Step: 100, Interval: caddy.Duration(10 * time.Second)},
				CookieSecure:    "always",
				OpensAt:         "2030-01-31T10:00:00Z",
				LotterySeed:     "000102030405060708090a0b0c0d0e0f",
				Challenge:       20,
				JoinRate:        &JoinRate{Joins: 5, Per: caddy.Duration(time.Minute)},
			},
		},
		{name: "challenge default", input: "waitroom {\n challenge\n}", want: Handler{Challenge: 19}},
		{name: "opens_at with offset", input: "waitroom {\n opens_at 2030-01-31T15:30:00+05:30\n}", want: Handler{OpensAt: "2030-01-31T15:30:00+05:30"}},
		{name: "opens_at missing", input: "waitroom {\n opens_at\n}", err: "opens_at: want exactly one argument"},
		{name: "opens_at not a time", input: "waitroom {\n opens_at tomorrow\n}", err: `opens_at: want an RFC 3339 time such as 2030-01-31T10:00:00Z (got "tomorrow")`},
		{name: "opens_at without zone", input: "waitroom {\n opens_at 2030-01-31T10:00:00\n}", err: "opens_at: want an RFC 3339 time"},
		{name: "lottery seed not hex", input: "waitroom {\n lottery_seed xyz\n}", err: "lottery_seed: lottery seed: not hex"},
		{name: "lottery seed short", input: "waitroom {\n lottery_seed 00ff\n}", err: "at least 16"},
		{name: "challenge zero", input: "waitroom {\n challenge 0\n}", err: "challenge: bits must be an integer from 1 to 28"},
		{name: "challenge too hard", input: "waitroom {\n challenge 29\n}", err: "challenge: bits must be an integer from 1 to 28"},
		{name: "challenge not a number", input: "waitroom {\n challenge hard\n}", err: `(got "hard")`},
		{name: "challenge two values", input: "waitroom {\n challenge 1 2\n}", err: "challenge: want at most one argument"},
		{name: "join rate one arg", input: "waitroom {\n join_rate 5\n}", err: "join_rate: want <n> <duration>, got 1"},
		{name: "join rate zero", input: "waitroom {\n join_rate 0 1m\n}", err: "join_rate: n must be a positive integer"},
		{name: "join rate bad duration", input: "waitroom {\n join_rate 5 soon\n}", err: "join_rate: duration must be a positive duration"},
		{name: "join rate too fast", input: "waitroom {\n join_rate 1000 1ns\n}", err: "too fast to count"},
		{name: "memory store", input: "waitroom {\n store memory\n}", want: Handler{Store: "memory"}},
		{name: "days", input: "waitroom {\n token_ttl 1d\n}", want: Handler{TokenTTL: caddy.Duration(24 * time.Hour)}},
		{name: "admission_window", input: "waitroom {\n admission_window 20m\n}", want: Handler{AdmissionWindow: caddy.Duration(20 * time.Minute)}},
		{name: "abandon_after", input: "waitroom {\n abandon_after 90s\n}", want: Handler{AbandonAfter: caddy.Duration(90 * time.Second)}},
		{name: "zero watermark", input: "waitroom {\n watermark 0\n}", want: Handler{}},
		{name: "cookie secure auto", input: "waitroom {\n cookie_secure auto\n}", want: Handler{CookieSecure: "auto"}},
		{name: "cookie secure always", input: "waitroom {\n cookie_secure always\n}", want: Handler{CookieSecure: "always"}},
		{name: "waiting status 202", input: "waitroom {\n waiting_status 202\n}", want: Handler{WaitingStatus: 202}},
		{name: "waiting status 503", input: "waitroom {\n waiting_status 503\n}", want: Handler{WaitingStatus: 503}},
		{name: "waiting status 200", input: "waitroom {\n waiting_status 200\n}", want: Handler{WaitingStatus: 200}},
		{name: "watermark twice", input: "waitroom {\n watermark 10\n event 4\n watermark 20\n}", err: "watermark: given twice in one block (first on line 2)"},
		{name: "a flag twice", input: "waitroom {\n sold_out_at_zero\n sold_out_at_zero\n}", err: "sold_out_at_zero: given twice"},
		{name: "autopilot twice", input: "waitroom {\n autopilot 10 1s\n autopilot {\n }\n}", err: "autopilot: given twice"},
		{name: "autopilot subdirective twice", input: "waitroom {\n autopilot {\n conversion 0.5\n conversion 0.6\n }\n}", err: "autopilot conversion: given twice in one block (first on line 3)"},
		{name: "cloudflare_kv subdirective twice", input: "waitroom {\n cloudflare_kv {\n debounce 1s\n debounce 2s\n }\n}", err: "cloudflare_kv: debounce: given twice"},
		{name: "keys and after_purchase repeat", input: "waitroom {\n key a s1\n key b s2\n after_purchase /a\n after_purchase /b\n}",
			want: Handler{Keys: []Key{{ID: "a", Secret: "s1"}, {ID: "b", Secret: "s2"}}, AfterPurchase: []string{"/a", "/b"}}},

		{name: "unknown subdirective", input: "waitroom {\n evnt 42\n}", err: `unrecognized waitroom subdirective "evnt"`},
		{name: "inline argument", input: "waitroom 42", err: "in a block"},
		{name: "event missing value", input: "waitroom {\n event\n}", err: "event: want exactly one argument"},
		{name: "event two values", input: "waitroom {\n event 1 2\n}", err: "event: want exactly one argument, got 2"},
		{name: "event not a number", input: "waitroom {\n event forty-two\n}", err: `event: "forty-two" is not an integer`},
		{name: "event zero", input: "waitroom {\n event 0\n}", err: "event: must be at least 1"},
		{name: "key without secret", input: "waitroom {\n key k1\n}", err: "key: want <kid> <secret>, got 1"},
		{name: "key three args", input: "waitroom {\n key k1 a b\n}", err: "key: want <kid> <secret>, got 3"},
		{name: "store without value", input: "waitroom {\n store\n}", err: "store: want exactly one argument"},
		{name: "lease zero", input: "waitroom {\n lease 0\n}", err: "lease: must be at least 1"},
		{name: "negative watermark", input: "waitroom {\n watermark -1\n}", err: "watermark: must not be negative"},
		{name: "watermark not a number", input: "waitroom {\n watermark lots\n}", err: "watermark: \"lots\" is not an integer"},
		{name: "negative hard cap", input: "waitroom {\n hard_cap -5\n}", err: "hard_cap: must not be negative"},
		{name: "bad token ttl", input: "waitroom {\n token_ttl soon\n}", err: `token_ttl: "soon" is not a duration`},
		{name: "tiny token ttl", input: "waitroom {\n token_ttl 10ms\n}", err: "token_ttl: must be at least 1s"},
		{name: "tiny admission_window", input: "waitroom {\n admission_window 1ms\n}", err: "admission_window: must be at least 1s"},
		{name: "tiny abandon_after", input: "waitroom {\n abandon_after 10ms\n}", err: "abandon_after: must be at least 1s"},
		{name: "user id missing", input: "waitroom {\n user_id\n}", err: "user_id: want exactly one argument"},
		{name: "user id without a placeholder", input: "waitroom {\n user_id X-User-ID\n}", err: `user_id: "X-User-ID" has no placeholder`},
		{name: "user id shorthand", input: "waitroom {\n user_id {header.X-User-ID}\n}", want: Handler{UserID: "{header.X-User-ID}"}},
		{name: "bad waiting status", input: "waitroom {\n waiting_status 404\n}", err: "waiting_status: must be 200, 202, 429 or 503 (got 404)"},
		{name: "waiting status not a number", input: "waitroom {\n waiting_status ok\n}", err: "waiting_status: \"ok\" is not an integer"},
		{name: "bad max age", input: "waitroom {\n sold_out_max_age forever\n}", err: "sold_out_max_age: \"forever\" is not a duration"},
		{name: "sold_out_at_zero takes no argument", input: "waitroom {\n sold_out_at_zero on\n}", err: `sold_out_at_zero: takes no argument (got "on")`},
		{name: "zero max age", input: "waitroom {\n sold_out_max_age 0s\n}", err: "sold_out_max_age: must be positive"},
		{name: "waiting template missing", input: "waitroom {\n waiting_template\n}", err: "waiting_template: want exactly one argument"},
		{name: "sold out template missing", input: "waitroom {\n sold_out_template\n}", err: "sold_out_template: want exactly one argument"},
		{name: "autopilot closed loop, defaults", input: "waitroom {\n autopilot {\n }\n}", want: Handler{Autopilot: &Autopilot{ClosedLoop: true}}},
		{name: "autopilot closed loop, no block", input: "waitroom {\n autopilot\n event 7\n}", want: Handler{Event: 7, Autopilot: &Autopilot{ClosedLoop: true}}},
		{
			name: "autopilot closed loop, every subdirective",
			input: `waitroom {
				autopilot {
					interval 250ms
					max_undecided 80
					conversion 0.6
					decision_time 20s
					expiring_share 0.25
					max_error_rate 0.1
				}
				event 9
			}`,
			want: Handler{Event: 9, Autopilot: &Autopilot{ClosedLoop: true, Interval: caddy.Duration(250 * time.Millisecond), MaxUndecided: 80,
				Conversion: 0.6, DecisionTime: caddy.Duration(20 * time.Second), ExpiringShare: 0.25, MaxErrorRate: 0.1}},
		},
		{name: "autopilot unknown subdirective", input: "waitroom {\n autopilot {\n speed 3\n }\n}", err: `unrecognized autopilot subdirective "speed"`},
		{name: "autopilot conversion above 1", input: "waitroom {\n autopilot {\n conversion 1.5\n }\n}", err: "autopilot conversion: want a share above 0 and at most 1"},
		{name: "autopilot zero conversion", input: "waitroom {\n autopilot {\n conversion 0\n }\n}", err: "autopilot conversion: want a share"},
		{name: "autopilot zero interval", input: "waitroom {\n autopilot {\n interval 0s\n }\n}", err: "autopilot interval: must be positive"},
		{name: "autopilot bad decision time", input: "waitroom {\n autopilot {\n decision_time soon\n }\n}", err: `autopilot decision_time: "soon" is not a duration`},
		{name: "autopilot max undecided zero", input: "waitroom {\n autopilot {\n max_undecided 0\n }\n}", err: "autopilot max_undecided: must be at least 1"},
		{name: "autopilot fixed rate with a block", input: "waitroom {\n autopilot 10 1s {\n conversion 0.5\n }\n}", err: "takes no block"},
		{name: "hard cap per remaining", input: "waitroom {\n hard_cap_per_remaining 2.5\n}", want: Handler{HardCapPerRemaining: 2.5}},
		{name: "hard cap per remaining zero", input: "waitroom {\n hard_cap_per_remaining 0\n}", err: "hard_cap_per_remaining: want a positive number"},
		{name: "hard cap per remaining not a number", input: "waitroom {\n hard_cap_per_remaining lots\n}", err: "hard_cap_per_remaining: want a positive number"},
		// ParseFloat reads these; NaN then fails no comparison, and the
		// config could not even be written as JSON.
		{name: "hard cap per remaining NaN", input: "waitroom {\n hard_cap_per_remaining NaN\n}", err: "hard_cap_per_remaining: want a positive number"},
		{name: "autopilot conversion NaN", input: "waitroom {\n autopilot {\n conversion NaN\n }\n}", err: "autopilot conversion: want a share"},
		{name: "autopilot expiring_share nan", input: "waitroom {\n autopilot {\n expiring_share nan\n }\n}", err: "autopilot expiring_share: want a share"},
		{name: "autopilot max_error_rate NaN", input: "waitroom {\n autopilot {\n max_error_rate NaN\n }\n}", err: "autopilot max_error_rate: want a share"},
		{name: "autopilot one arg", input: "waitroom {\n autopilot 100\n}", err: "autopilot: want <step> <interval> or a block, got 1"},
		{name: "autopilot bad step", input: "waitroom {\n autopilot 0 10s\n}", err: "autopilot: step must be a positive integer"},
		{name: "cookie secure missing", input: "waitroom {\n cookie_secure\n}", err: "cookie_secure: want exactly one argument, got 0"},
		{name: "cookie secure two values", input: "waitroom {\n cookie_secure always auto\n}", err: "cookie_secure: want exactly one argument, got 2"},
		{name: "cookie secure unknown", input: "waitroom {\n cookie_secure sometimes\n}", err: `cookie_secure: must be always or auto (got "sometimes")`},
		{name: "cookie secure wrong case", input: "waitroom {\n cookie_secure Always\n}", err: `cookie_secure: must be always or auto (got "Always")`},
		{name: "autopilot bad interval", input: "waitroom {\n autopilot 10 never\n}", err: "autopilot: interval must be a positive duration"},
		// A ticker that fires every nanosecond keeps a core busy raising
		// the watermark; "1ms" is more likely a slip for "1m".
		{name: "autopilot interval too short", input: "waitroom {\n autopilot 10 1ms\n}", err: "autopilot: interval must be at least 10ms (got 1ms)"},
		{name: "autopilot closed loop interval too short", input: "waitroom {\n autopilot {\n interval 1ns\n }\n}", err: "autopilot interval: must be at least 10ms (got 1ns)"},
		{name: "autopilot shortest interval", input: "waitroom {\n autopilot 1 10ms\n}", want: Handler{Autopilot: &Autopilot{Step: 1, Interval: caddy.Duration(10 * time.Millisecond)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(c.input))
			if c.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				assert.Contains(t, err.Error(), "Testfile:", "the error names where it is")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, h)
		})
	}
}

// TestAdaptGolden adapts each testdata/*.caddyfiletest (a Caddyfile, a line
// of dashes, the JSON it must become) and compares. Run with -update to
// rewrite the JSON halves after a deliberate change.
func TestAdaptGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.caddyfiletest")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			in, want, ok := strings.Cut(string(data), "----------")
			require.True(t, ok, "a line of dashes separates the Caddyfile from the JSON")
			in = strings.TrimSpace(in) + "\n"
			got := adapt(t, in)
			if *updateGolden {
				require.NoError(t, os.WriteFile(file, []byte(in+"----------\n"+got+"\n"), 0o644))
				return
			}
			assert.Equal(t, strings.TrimSpace(want), got)
		})
	}
}

func adapt(t *testing.T, caddyfileText string) string {
	t.Helper()
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfileText), nil)
	require.NoError(t, err)
	assert.Empty(t, warnings)
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, out, "", "\t"))
	return pretty.String()
}

func TestAdaptErrorsNameTheProblem(t *testing.T) {
	_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(`:8080 {
	waitroom {
		event 42
		key k1 `+testSecret+`
		colour blue
	}
	respond ok
}`), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unrecognized waitroom subdirective "colour"`)
	assert.Contains(t, err.Error(), "Caddyfile:5")
}

// TestCaddyfileExample checks that the shipped example adapts, passes Caddy's
// validation (every module provisioned, as `caddy adapt --validate` does)
// and is already formatted as `caddy fmt` would have it.
func TestCaddyfileExample(t *testing.T) {
	t.Setenv("WAITROOM_SECRET", "an-example-secret-of-at-least-32-bytes")
	text, err := os.ReadFile("../Caddyfile.example")
	require.NoError(t, err)
	assert.Equal(t, string(text), string(caddyfile.Format(text)), "caddy fmt would change Caddyfile.example")

	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(text, map[string]any{"filename": "Caddyfile.example"})
	require.NoError(t, err)
	assert.Empty(t, warnings)
	assert.NotContains(t, string(out), "an-example-secret", "the secret stays out of the JSON config")

	var cfg caddy.Config
	require.NoError(t, json.Unmarshal(out, &cfg))
	require.NoError(t, caddy.Validate(&cfg))

	// The provider's webhooks are routed before the room and never meet
	// it; everything else meets the room before the reverse proxy.
	hooks := strings.Index(string(out), `"/v1/webhooks/*"`)
	wr := strings.Index(string(out), `"handler":"waitroom"`)
	rp := strings.LastIndex(string(out), `"handler":"reverse_proxy"`)
	require.Positive(t, hooks)
	require.Positive(t, wr)
	assert.Less(t, hooks, wr)
	assert.Less(t, wr, rp)
	assert.Equal(t, 1, strings.Count(string(out), `"handler":"waitroom"`))

	t.Setenv("WAITROOM_SECRET", "")
	require.NoError(t, json.Unmarshal(out, &cfg))
	err = caddy.Validate(&cfg)
	require.Error(t, err, "no secret, no config")
	assert.Contains(t, err.Error(), `secret "{env.WAITROOM_SECRET}" is empty`, "the message names the variable")
}
