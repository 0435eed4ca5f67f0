package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/origin/ticketcode"
)

func TestLoadConfig(t *testing.T) {
	valid := map[string]string{
		"DATABASE_URL":       "postgres://postgres@127.0.0.1:5432/waitroom",
		"REDIS_URL":          "redis://127.0.0.1:6379/0",
		"WAITROOM_KEYS":      "k2:" + strings.Repeat("b", 32) + ",k1:" + strings.Repeat("a", 32),
		"ORIGIN_ADMIN_TOKEN": "secret",
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for kk, vv := range valid {
			m[kk] = vv
		}
		m[k] = v
		return m
	}
	withAll := func(kv map[string]string) map[string]string {
		m := with("ORIGIN_ADDR", "")
		for k, v := range kv {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
		check   func(t *testing.T, c config)
	}{
		{name: "defaults", env: valid, check: func(t *testing.T, c config) {
			assert.Equal(t, ":8081", c.addr)
			assert.Equal(t, 10*time.Second, c.reaperInterval)
			assert.Equal(t, 30*time.Second, c.reconcileInterval)
			assert.Equal(t, "k2", c.keys.SigningKeyID())
			assert.Equal(t, "secret", c.adminToken)
			assert.Equal(t, "fakepay", c.payment.Provider)
			assert.Nil(t, c.ticketKey, "fakepay runs with a random ticket key when none is set")
			assert.Equal(t, 2*time.Minute, c.paymentWindow)
			assert.Equal(t, time.Minute, c.paymentPendingAfter)
			assert.Equal(t, time.Second, c.clockSkewMargin)
			assert.Empty(t, c.metricsAddr, "the metrics are the API's (docs/api.md)")
		}},
		{name: "listen addresses", env: withAll(map[string]string{
			"ORIGIN_ADDR": "127.0.0.1:9000", "ORIGIN_METRICS_ADDR": ":9091", "ORIGIN_DEBUG_ADDR": "localhost:0"}), check: func(t *testing.T, c config) {
			assert.Equal(t, "127.0.0.1:9000", c.addr)
			assert.Equal(t, ":9091", c.metricsAddr)
			assert.Equal(t, "localhost:0", c.debugAddr)
		}},
		{name: "listen address without a port", env: with("ORIGIN_ADDR", "notanaddr"), wantErr: "ORIGIN_ADDR is malformed"},
		{name: "listen address with a port out of range", env: with("ORIGIN_ADDR", "127.0.0.1:99999"), wantErr: "ORIGIN_ADDR is malformed"},
		{name: "metrics address without a host part", env: with("ORIGIN_METRICS_ADDR", "9091"), wantErr: "ORIGIN_METRICS_ADDR is malformed"},
		{name: "rebuild settle follows the hold write timeout", env: with("ORIGIN_HOLD_WRITE_TIMEOUT", "5s"), check: func(t *testing.T, c config) {
			assert.Equal(t, 5*time.Second, c.holdWriteTimeout)
			assert.Zero(t, c.rebuildSettle, "unset: the origin derives it from the hold write timeout")
		}},
		{name: "rebuild settle shorter than the hold write timeout", env: withAll(map[string]string{
			"ORIGIN_HOLD_WRITE_TIMEOUT": "5s", "ORIGIN_REBUILD_SETTLE": "2s"}), wantErr: "ORIGIN_REBUILD_SETTLE (2s) must be at least ORIGIN_HOLD_WRITE_TIMEOUT (5s)"},
		{name: "rebuild settle at least the timeout", env: withAll(map[string]string{
			"ORIGIN_HOLD_WRITE_TIMEOUT": "5s", "ORIGIN_REBUILD_SETTLE": "6s"}), check: func(t *testing.T, c config) {
			assert.Equal(t, 6*time.Second, c.rebuildSettle)
		}},
		{name: "hold max life", env: with("ORIGIN_HOLD_MAX_LIFE", "25m"), check: func(t *testing.T, c config) {
			assert.Equal(t, 25*time.Minute, c.holdMaxLife)
		}},
		{name: "bad hold max life", env: with("ORIGIN_HOLD_MAX_LIFE", "forever"), wantErr: "ORIGIN_HOLD_MAX_LIFE"},
		{name: "clock skew margin", env: with("ORIGIN_CLOCK_SKEW_MARGIN", "250ms"), check: func(t *testing.T, c config) {
			assert.Equal(t, 250*time.Millisecond, c.clockSkewMargin)
		}},
		{name: "bad clock skew margin", env: with("ORIGIN_CLOCK_SKEW_MARGIN", "soon"), wantErr: "ORIGIN_CLOCK_SKEW_MARGIN"},
		{name: "ticket key", env: with("TICKET_KEY", strings.Repeat("t", 32)), check: func(t *testing.T, c config) {
			assert.Equal(t, []byte(strings.Repeat("t", 32)), c.ticketKey)
		}},
		{name: "short ticket key", env: with("TICKET_KEY", "short"), wantErr: "TICKET_KEY is malformed"},
		{name: "buyer key", env: with("ORIGIN_BUYER_KEY", strings.Repeat("b", 32)), check: func(t *testing.T, c config) {
			assert.Equal(t, []byte(strings.Repeat("b", 32)), c.buyerKey)
		}},
		{name: "short buyer key", env: with("ORIGIN_BUYER_KEY", "short"), wantErr: "ORIGIN_BUYER_KEY is malformed"},
		{name: "no gate by default", env: valid, check: func(t *testing.T, c config) {
			assert.Empty(t, c.gateToken, "the gate answers 503 until a token is set")
			assert.Empty(t, c.ticketRetiredKeys)
		}},
		{name: "gate token", env: with("ORIGIN_GATE_TOKEN", "gate-0123456789abcdef"), check: func(t *testing.T, c config) {
			assert.Equal(t, "gate-0123456789abcdef", c.gateToken)
		}},
		{name: "gate token flag", env: valid, args: []string{"-gate-token", "flag-0123456789abcdef"}, check: func(t *testing.T, c config) {
			assert.Equal(t, "flag-0123456789abcdef", c.gateToken)
		}},
		{name: "short gate token", env: with("ORIGIN_GATE_TOKEN", "gate"), wantErr: "ORIGIN_GATE_TOKEN is malformed"},
		{name: "gate token with a space", env: with("ORIGIN_GATE_TOKEN", "gate 0123456789abcdef"), wantErr: "ORIGIN_GATE_TOKEN is malformed"},
		{name: "gate token not ASCII", env: with("ORIGIN_GATE_TOKEN", "gäte-0123456789abcdef"), wantErr: "ORIGIN_GATE_TOKEN is malformed"},
		{name: "retired ticket keys", env: with("TICKET_RETIRED_KEYS", retiredKeys(t)), check: func(t *testing.T, c config) {
			require.Len(t, c.ticketRetiredKeys, 2)
			assert.Equal(t, retiredKeys(t), c.ticketRetiredKeys[0].String()+","+c.ticketRetiredKeys[1].String())
		}},
		{name: "bad retired ticket key", env: with("TICKET_RETIRED_KEYS", "0011aabb:notakey"), wantErr: "TICKET_RETIRED_KEYS is malformed"},
		{name: "fakepay knobs", env: withAll(map[string]string{"FAKEPAY_MIN_COPIES": "5", "FAKEPAY_MAX_COPIES": "5", "FAKEPAY_MAX_DELAY": "2s"}),
			check: func(t *testing.T, c config) {
				assert.Equal(t, 5, c.payment.Fakepay.MaxCopies)
				assert.Equal(t, 2*time.Second, c.payment.Fakepay.MaxDelay)
			}},
		{name: "bad fakepay knob", env: with("FAKEPAY_FAILURE_RATE", "2"), wantErr: "FAKEPAY_FAILURE_RATE"},
		{name: "fakepay failure rate NaN", env: with("FAKEPAY_FAILURE_RATE", "NaN"), wantErr: "FAKEPAY_FAILURE_RATE"},
		{name: "fakepay timeout rate NaN", env: with("FAKEPAY_TIMEOUT_RATE", "nan"), wantErr: "FAKEPAY_TIMEOUT_RATE"},
		{name: "fakepay failure rate Inf", env: with("FAKEPAY_FAILURE_RATE", "+Inf"), wantErr: "FAKEPAY_FAILURE_RATE"},
		{name: "fakepay negative copies", env: with("FAKEPAY_MIN_COPIES", "-1"), wantErr: "FAKEPAY_MIN_COPIES"},
		{name: "fakepay negative max copies", env: with("FAKEPAY_MAX_COPIES", "-3"), wantErr: "FAKEPAY_MAX_COPIES"},
		{name: "fakepay negative max attempts: until shutdown", env: with("FAKEPAY_MAX_ATTEMPTS", "-1"), check: func(t *testing.T, c config) {
			assert.Equal(t, -1, c.payment.Fakepay.MaxAttempts, "documented in docs/payments.md")
		}},
		{name: "fakepay webhook secret", env: with("FAKEPAY_WEBHOOK_SECRET", "whsec_x"), check: func(t *testing.T, c config) {
			assert.Equal(t, "whsec_x", c.payment.Fakepay.WebhookSecret)
		}},
		{name: "fakepay webhook secret with a trailing newline", env: with("FAKEPAY_WEBHOOK_SECRET", "whsec_x\n"), wantErr: "FAKEPAY_WEBHOOK_SECRET is malformed"},
		{name: "stripe key with a trailing newline", env: withAll(map[string]string{"PAYMENT_PROVIDER": "stripe",
			"STRIPE_API_KEY": "sk_test_x\n", "STRIPE_WEBHOOK_SECRET": "whsec_x", "TICKET_KEY": strings.Repeat("t", 40)}), wantErr: "STRIPE_API_KEY is malformed"},
		{name: "stripe key with a leading space", env: withAll(map[string]string{"PAYMENT_PROVIDER": "stripe",
			"STRIPE_API_KEY": " sk_test_x", "STRIPE_WEBHOOK_SECRET": "whsec_x", "TICKET_KEY": strings.Repeat("t", 40)}), wantErr: "STRIPE_API_KEY is malformed"},
		{name: "stripe webhook secret with a control character", env: withAll(map[string]string{"PAYMENT_PROVIDER": "stripe",
			"STRIPE_API_KEY": "sk_test_x", "STRIPE_WEBHOOK_SECRET": "whsec\x00x", "TICKET_KEY": strings.Repeat("t", 40)}), wantErr: "STRIPE_WEBHOOK_SECRET is malformed"},
		{name: "stripe webhook secret with a trailing CR", env: withAll(map[string]string{"PAYMENT_PROVIDER": "stripe",
			"STRIPE_API_KEY": "sk_test_x", "STRIPE_WEBHOOK_SECRET": "whsec_x\r", "TICKET_KEY": strings.Repeat("t", 40)}), wantErr: "STRIPE_WEBHOOK_SECRET is malformed"},
		{name: "unknown provider", env: with("PAYMENT_PROVIDER", "paypal"), wantErr: "PAYMENT_PROVIDER"},
		{name: "stripe without its key", env: with("PAYMENT_PROVIDER", "stripe"), wantErr: "STRIPE_API_KEY"},
		{name: "stripe without a ticket key", env: withAll(map[string]string{"PAYMENT_PROVIDER": "stripe",
			"STRIPE_API_KEY": "sk_test_x", "STRIPE_WEBHOOK_SECRET": "whsec_x"}), wantErr: "TICKET_KEY is required"},
		{name: "stripe", env: withAll(map[string]string{"STRIPE_API_KEY": "sk_test_x", "STRIPE_WEBHOOK_SECRET": "whsec_x",
			"TICKET_KEY": strings.Repeat("t", 40)}), args: []string{"-payment-provider", "stripe"},
			check: func(t *testing.T, c config) {
				assert.Equal(t, "stripe", c.payment.Provider)
				assert.Equal(t, "sk_test_x", c.payment.Stripe.APIKey)
			}},
		{name: "environment", env: with("ORIGIN_ADDR", "127.0.0.1:9000"), check: func(t *testing.T, c config) {
			assert.Equal(t, "127.0.0.1:9000", c.addr)
		}},
		{name: "flags override the environment", env: with("ORIGIN_ADDR", ":9000"),
			args: []string{"-addr", ":9100", "-reaper-interval", "2s", "-admin-token", "other"},
			check: func(t *testing.T, c config) {
				assert.Equal(t, ":9100", c.addr)
				assert.Equal(t, 2*time.Second, c.reaperInterval)
				assert.Equal(t, "other", c.adminToken)
			}},
		{name: "flags alone", env: map[string]string{}, args: []string{
			"-database-url", valid["DATABASE_URL"], "-redis-url", valid["REDIS_URL"],
			"-keys", valid["WAITROOM_KEYS"], "-admin-token", "t"}},
		{name: "missing database", env: with("DATABASE_URL", ""), wantErr: "DATABASE_URL is required"},
		{name: "missing redis", env: with("REDIS_URL", ""), wantErr: "REDIS_URL is required"},
		{name: "missing keys", env: with("WAITROOM_KEYS", ""), wantErr: "WAITROOM_KEYS is required"},
		{name: "missing admin token", env: with("ORIGIN_ADMIN_TOKEN", ""), wantErr: "ORIGIN_ADMIN_TOKEN is required"},
		{name: "admin token with a trailing newline", env: with("ORIGIN_ADMIN_TOKEN", "secret\n"), wantErr: "ORIGIN_ADMIN_TOKEN is malformed"},
		{name: "admin token with a space", env: with("ORIGIN_ADMIN_TOKEN", "my secret"), wantErr: "ORIGIN_ADMIN_TOKEN is malformed"},
		{name: "admin token with a leading space", env: with("ORIGIN_ADMIN_TOKEN", " secret"), wantErr: "ORIGIN_ADMIN_TOKEN is malformed"},
		{name: "admin token not ASCII", env: with("ORIGIN_ADMIN_TOKEN", "sécret"), wantErr: "ORIGIN_ADMIN_TOKEN is malformed"},
		{name: "admin token flag with a tab", env: valid, args: []string{"-admin-token", "se\tcret"}, wantErr: "ORIGIN_ADMIN_TOKEN is malformed"},
		{name: "short secret", env: with("WAITROOM_KEYS", "k1:short"), wantErr: "WAITROOM_KEYS is malformed"},
		{name: "keys without kid", env: with("WAITROOM_KEYS", strings.Repeat("a", 40)), wantErr: "WAITROOM_KEYS is malformed"},
		{name: "bad redis url", env: with("REDIS_URL", "http://x"), wantErr: "REDIS_URL is malformed"},
		{name: "redis cluster url", env: with("REDIS_URL", "redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002"),
			check: func(t *testing.T, c config) {
				rdb, err := newRedisClient(c.redisURL)
				require.NoError(t, err)
				defer rdb.Close()
				cluster, ok := rdb.(*redis.ClusterClient)
				require.True(t, ok, "a URL with addr= is Redis Cluster")
				assert.Equal(t, []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}, cluster.Options().Addrs)
				assert.Equal(t, 256, cluster.Options().PoolSize)
			}},
		{name: "bad redis cluster url", env: with("REDIS_URL", "redis://127.0.0.1:7000?addr=7001"), wantErr: "REDIS_URL is malformed"},
		{name: "bad database url", env: with("DATABASE_URL", "postgres://%zz"), wantErr: "DATABASE_URL is malformed"},
		{name: "bad duration", env: with("ORIGIN_REAPER_INTERVAL", "often"), wantErr: "ORIGIN_REAPER_INTERVAL"},
		// A flag is refused what its variable is: a negative interval
		// passed the flag and crashed the reaper once the origin was ready.
		{name: "negative duration flag", env: valid, args: []string{"-reaper-interval=-1s"},
			wantErr: `ORIGIN_REAPER_INTERVAL (-reaper-interval): "-1s" is not a positive duration`},
		{name: "zero duration flag", env: valid, args: []string{"-hold-write-timeout", "0s"},
			wantErr: `ORIGIN_HOLD_WRITE_TIMEOUT (-hold-write-timeout): "0s" is not a positive duration`},
		{name: "negative settle flag", env: valid, args: []string{"-rebuild-settle=-5s"}, wantErr: "ORIGIN_REBUILD_SETTLE (-rebuild-settle)"},
		{name: "events off by default", env: valid, check: func(t *testing.T, c config) {
			assert.Empty(t, c.events.URL)
		}},
		{name: "events", env: withAll(map[string]string{"ORIGIN_EVENTS_URL": "https://site.example/hooks",
			"ORIGIN_EVENTS_SECRET": strings.Repeat("e", 16), "ORIGIN_EVENTS_TIMEOUT": "3s", "ORIGIN_EVENTS_MAX_ATTEMPTS": "5"}),
			check: func(t *testing.T, c config) {
				assert.Equal(t, "https://site.example/hooks", c.events.URL)
				assert.Equal(t, []byte(strings.Repeat("e", 16)), c.events.Secret)
				assert.Equal(t, 3*time.Second, c.events.Timeout)
				assert.Equal(t, 5, c.events.MaxAttempts)
				assert.Equal(t, 72*time.Hour, c.events.MaxAge)
			}},
		{name: "events without secret", env: with("ORIGIN_EVENTS_URL", "https://site.example/hooks"),
			wantErr: "ORIGIN_EVENTS_SECRET is required"},
		{name: "events short secret", env: withAll(map[string]string{"ORIGIN_EVENTS_URL": "https://site.example/hooks",
			"ORIGIN_EVENTS_SECRET": "short"}), wantErr: "ORIGIN_EVENTS_SECRET is malformed"},
		{name: "events bad url", env: withAll(map[string]string{"ORIGIN_EVENTS_URL": "site.example/hooks",
			"ORIGIN_EVENTS_SECRET": strings.Repeat("e", 16)}), wantErr: "ORIGIN_EVENTS_URL is malformed"},
		{name: "events url with a trailing space", env: withAll(map[string]string{"ORIGIN_EVENTS_URL": "https://site.example/hooks ",
			"ORIGIN_EVENTS_SECRET": strings.Repeat("e", 16)}), wantErr: "ORIGIN_EVENTS_URL is malformed"},
		{name: "events url without a host name", env: withAll(map[string]string{"ORIGIN_EVENTS_URL": "http://:8080/hooks",
			"ORIGIN_EVENTS_SECRET": strings.Repeat("e", 16)}), wantErr: "ORIGIN_EVENTS_URL is malformed"},
		{name: "events url with a bad port", env: withAll(map[string]string{"ORIGIN_EVENTS_URL": "https://site.example:99999/hooks",
			"ORIGIN_EVENTS_SECRET": strings.Repeat("e", 16)}), wantErr: "ORIGIN_EVENTS_URL is malformed"},
		{name: "events secret with a trailing newline", env: withAll(map[string]string{"ORIGIN_EVENTS_URL": "https://site.example/hooks",
			"ORIGIN_EVENTS_SECRET": strings.Repeat("e", 16) + "\n"}), wantErr: "ORIGIN_EVENTS_SECRET is malformed"},
		{name: "events bad attempts", env: withAll(map[string]string{"ORIGIN_EVENTS_URL": "https://site.example/hooks",
			"ORIGIN_EVENTS_SECRET": strings.Repeat("e", 16), "ORIGIN_EVENTS_MAX_ATTEMPTS": "0"}), wantErr: "ORIGIN_EVENTS_MAX_ATTEMPTS"},
		{name: "unknown flag", env: valid, args: []string{"-nope"}, wantErr: "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadConfig(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

// retiredKeys is a TICKET_RETIRED_KEYS of two public keys.
func retiredKeys(t *testing.T) string {
	var out []string
	for _, secret := range []string{strings.Repeat("r", 32), strings.Repeat("s", 32)} {
		s, err := ticketcode.NewSigner([]byte(secret))
		require.NoError(t, err)
		out = append(out, s.PublicKey().String())
	}
	return strings.Join(out, ",")
}
