package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		{name: "short secret", env: with("WAITROOM_KEYS", "k1:short"), wantErr: "WAITROOM_KEYS is malformed"},
		{name: "keys without kid", env: with("WAITROOM_KEYS", strings.Repeat("a", 40)), wantErr: "WAITROOM_KEYS is malformed"},
		{name: "bad redis url", env: with("REDIS_URL", "http://x"), wantErr: "REDIS_URL is malformed"},
		{name: "bad database url", env: with("DATABASE_URL", "postgres://%zz"), wantErr: "DATABASE_URL is malformed"},
		{name: "bad duration", env: with("ORIGIN_REAPER_INTERVAL", "often"), wantErr: "ORIGIN_REAPER_INTERVAL"},
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
