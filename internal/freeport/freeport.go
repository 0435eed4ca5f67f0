// Package freeport hands out loopback TCP ports for servers that a test, a
// benchmark or the demo starts itself.
package freeport

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// given remembers every port handed out in this process. The kernel may
// offer a just-closed port again, and a caller that asks for two ports
// before either is bound (a gateway's http_port and https_port) would then
// get the same one twice, and its server would refuse the config.
var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Take returns a loopback port nobody listens on right now and that no
// earlier call in this process returned.
func Take() (int, error) {
	given.Lock()
	defer given.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !given.ports[port] {
			given.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("free port: the kernel kept offering ports already handed out")
}
