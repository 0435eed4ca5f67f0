package caddymodule

import (
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/waitroom"
)

// TestRetryAfterNearFront: a waiter with few ahead polls at the shortest
// interval, whatever the estimate: admitted, it should learn so within
// seconds. A long estimate (the closed loop admitting a few at a time as
// seats come back) would otherwise have the next in line poll every 30 s,
// hold late, and keep the loop waiting on them before it admits more.
func TestRetryAfterNearFront(t *testing.T) {
	tests := []struct {
		name  string
		s     waitroom.State
		d     time.Duration
		known bool
		ahead int64
		want  int
	}{
		{"far back, long estimate", waitroom.State{}, 10 * time.Minute, true, 5000, maxRetryAfter},
		{"far back, estimate unknown", waitroom.State{}, 0, false, 5000, 10},
		{"near the front, long estimate", waitroom.State{}, 10 * time.Minute, true, 40, minRetryAfter},
		{"near the front, estimate unknown", waitroom.State{}, 0, false, 0, minRetryAfter},
		{"near the front, paused", waitroom.State{Paused: true}, 0, false, 0, 10},
		{"a quarter of the estimate", waitroom.State{}, 60 * time.Second, true, 5000, 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, retryAfter(tt.s, tt.d, tt.known, tt.ahead, nearFront))
		})
	}
}

// TestFrontOf: while the origin's figures are fresh, the front reaches
// twice the seats not yet sold, so the waiters the next raises will reach
// poll often enough to learn of their admission in seconds; never less
// than nearFront, never more than maxNearFront.
func TestFrontOf(t *testing.T) {
	tests := []struct {
		name  string
		inv   waitroom.Inventory
		fresh bool
		want  int64
	}{
		{"stale figures", waitroom.Inventory{Remaining: 2000}, false, nearFront},
		{"few seats left", waitroom.Inventory{Remaining: 10, Held: 40}, true, nearFront},
		{"a sale's start", waitroom.Inventory{Remaining: 490}, true, 980},
		{"free and held", waitroom.Inventory{Remaining: 300, Held: 400}, true, 1400},
		{"a large sale", waitroom.Inventory{Remaining: 20000}, true, maxNearFront},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, frontOf(tt.inv, tt.fresh))
		})
	}
	assert.Equal(t, minRetryAfter, retryAfter(waitroom.State{}, 10*time.Minute, true, 900, frontOf(waitroom.Inventory{Remaining: 490}, true)),
		"900 ahead of 490 seats: near the front")
}

// TestRetryAfterWithinAbandonAfter: a waiting answer never tells its
// holder to come back later than a third of abandon_after, or every waiter
// polling as told would count as gone between polls.
func TestRetryAfterWithinAbandonAfter(t *testing.T) {
	for _, tt := range []struct {
		abandon time.Duration
		want    string
	}{
		{0, "10"}, // the default, 2m30s: the paused answer's 10 s
		{6 * time.Second, "2"},
		{time.Second, "1"},
	} {
		h := provision(t, &Handler{AbandonAfter: caddy.Duration(tt.abandon)})
		update(t, h, waitroom.Change{Paused: ptr(true)})
		res := serve(t, h, get(h, ""))
		require.Equal(t, StatusWaiting, res.status())
		assert.Equal(t, tt.want, res.rec.Header().Get("Retry-After"), "abandon_after %s", tt.abandon)
	}
}
