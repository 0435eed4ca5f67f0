package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBotRows runs the scenario small: without defences the bot takes a
// good part of the front of the queue; with join_rate it gets no more
// places than the rate allows its one address; no position is given twice.
func TestBotRows(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Caddy")
	}
	c := botConfig{humans: 150, window: time.Second, botRate: 100, first: 30, difficulty: 8,
		joinRate: 3, joinPer: time.Minute, workers: 32}
	for _, pre := range []bool{false, true} {
		none, err := runBotRow(context.Background(), c, "none", pre)
		require.NoError(t, err)
		assert.Zero(t, none.positionsTwice)
		assert.Equal(t, c.humans, none.humansPlaced)
		assert.Greater(t, none.botPlaced, c.joinRate, "undefended, the bot gets more places than join_rate would let it")
		assert.Positive(t, none.botInFirst)

		both, err := runBotRow(context.Background(), c, "challenge+join_rate", pre)
		require.NoError(t, err)
		assert.Zero(t, both.positionsTwice)
		assert.Equal(t, c.humans, both.humansPlaced, "one address per human: none is held back")
		assert.LessOrEqual(t, both.botPlaced, c.joinRate)
		assert.LessOrEqual(t, both.botInFirst, c.joinRate)
	}
}

func TestBotsUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bots", "--humans", "0"}, "--humans must be positive"},
		{[]string{"bots", "--humans", "200000"}, "at most 100000"},
		{[]string{"bots", "--join-rate", "five"}, "--join-rate: want <n>/<duration>"},
		{[]string{"bots", "--join-rate", "5/never"}, "--join-rate: want <n>/<duration>"},
		{[]string{"bots", "--only", "captcha"}, `unknown defence "captcha"`},
		{[]string{"bots", "--difficulty", "40"}, "--difficulty must be at most 28"},
		{[]string{"bots", "now"}, `unexpected argument "now"`},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, run(context.Background(), c.args, &out, &errOut), c.args)
		assert.Contains(t, errOut.String(), c.want, c.args)
	}
}
