package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTallySeatAsks(t *testing.T) {
	asks := []*seatAsk{
		{seats: []string{"A-1-1", "A-1-2"}, status: http.StatusCreated, got: []string{"A-1-1", "A-1-2"}},
		// Named a seat held by the first: all-or-nothing kept.
		{seats: []string{"A-1-2", "A-1-3"}, status: http.StatusConflict, code: "seats_unavailable", named: []string{"A-1-2"}},
		// Named a seat it did not ask for: broken.
		{seats: []string{"A-1-4", "A-1-5"}, status: http.StatusConflict, code: "seats_unavailable", named: []string{"A-1-9"}},
		// Got other seats than it asked for: broken.
		{seats: []string{"A-1-6", "A-1-7"}, status: http.StatusCreated, got: []string{"A-1-6"}},
		// Named a seat nobody holds: all-or-nothing, but the conflict is not confirmed.
		{seats: []string{"A-2-1"}, status: http.StatusConflict, code: "seats_unavailable", named: []string{"A-2-1"}},
		{status: http.StatusCreated, got: []string{"B-1-1", "B-1-2", "B-1-3", "B-1-4"}},
		{status: http.StatusCreated, got: []string{"B-1-9", "B-1-10", "B-2-1", "B-2-2"}},
		{status: http.StatusConflict, code: "sold_out"},
	}
	got := tallySeatAsks(asks)
	assert.Equal(t, seatTally{held: 4, multi: 4, multiOK: 2, conflicts: 3, namedHeld: 1,
		bestTogether: 1, bestGroups: 1, bestSoldOut: 1, other: 2}, got)
}

func TestSideBySide(t *testing.T) {
	assert.True(t, sideBySide([]string{"A-1-3", "A-1-2", "A-1-4"}))
	assert.False(t, sideBySide([]string{"A-1-3", "A-2-4"}))
	assert.False(t, sideBySide([]string{"A-1-3", "A-1-5"}))
}
