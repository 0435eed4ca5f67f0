package main

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUpSaysWhichPortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port

	err = portsFree(map[string]int{"--admin-port": taken})
	var ue usageError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "port "+strconv.Itoa(taken)+" is taken")
	assert.Contains(t, err.Error(), "--admin-port")
	ln.Close()
	assert.NoError(t, portsFree(map[string]int{"--admin-port": taken}))
}

func TestUpDemoEventHasEveryKindOfSection(t *testing.T) {
	ev := demoEvent()
	require.NotNil(t, ev.Seating)
	var reserved, ga int
	for _, s := range ev.Seating.Sections {
		if s.Capacity > 0 {
			ga++
		} else {
			reserved++
		}
	}
	assert.Equal(t, 2, reserved)
	assert.Equal(t, 1, ga)
	assert.Equal(t, ev.Seating.Seats(), ev.Capacity)
}
