package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTakeNeverRepeatsAndIsFree(t *testing.T) {
	seen := map[int]bool{}
	for range 2000 {
		port, err := Take()
		require.NoError(t, err)
		require.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true
	}
	port, err := Take()
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	require.NoError(t, err, "the port handed out can be bound")
	l.Close()
}
