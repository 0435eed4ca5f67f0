package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Bad command lines exit 2 with a message naming the problem, before
// anything is started.
func TestUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", nil, 2, "usage:"},
		{"unknown subcommand", []string{"stampede"}, 2, `unknown subcommand "stampede"`},
		{"help", []string{"help"}, 0, "flashsale"},
		{"subcommand help", []string{"flashsale", "-h"}, 0, "-users"},
		{"unknown flag", []string{"flashsale", "--userz", "5"}, 2, "flag provided but not defined: -userz"},
		{"bad number", []string{"flashsale", "--users", "many"}, 2, `invalid value "many"`},
		{"negative users", []string{"flashsale", "--users", "-1"}, 2, "users must be positive"},
		{"refresh out of range", []string{"flashsale", "--refresh", "3"}, 2, "refresh must be between 1 and 2"},
		{"fraction out of range", []string{"flashsale", "--abandon", "1.5"}, 2, "abandon must be between 0 and 1"},
		{"fractions add up past 1", []string{"flashsale", "--abandon", "0.6", "--late", "0.6"}, 2, "must not exceed 1"},
		{"hold ttl not whole seconds", []string{"flashsale", "--hold-ttl", "1500ms"}, 2, "whole seconds"},
		{"unknown fault", []string{"flashsale", "--faults", "meteor"}, 2, `unknown fault "meteor"`},
		{"chart format", []string{"flashsale", "--chart", "sale.gif"}, 2, ".svg or .png"},
		{"stray argument", []string{"strategies", "now"}, 2, `unexpected argument "now"`},
		{"unknown strategy", []string{"strategies", "--only", "optimistic"}, 2, `unknown strategy "optimistic"`},
		{"zero buyers", []string{"strategies", "--buyers", "0"}, 2, "--buyers must be positive"},
		{"zero gate", []string{"gate", "--gate", "0"}, 2, "--gate must be positive"},
		{"zero connections", []string{"gateway", "--conns", "0"}, 2, "--conns must be positive"},
		{"negative warmup", []string{"holds", "--warmup", "-1s"}, 2, "--warmup must not be negative"},
		{"missing binary", []string{"gateway", "--caddy", "/nonexistent/caddy", "--redis-url", "redis://127.0.0.1:1/0"}, 2, "/nonexistent/caddy not found"},
		{"missing servers", []string{"strategies", "--redis-url", "", "--database-url", ""}, 2, "REDIS_URL (or --redis-url) and DATABASE_URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), tc.args, &out, &errOut)
			assert.Equal(t, tc.code, code, errOut.String())
			assert.Contains(t, out.String()+errOut.String(), tc.want)
		})
	}
}
