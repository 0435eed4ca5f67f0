package testenv

import (
	"net/url"
	"testing"

	"github.com/waitroom/waitroom/internal/faultproxy"
)

// Proxy is a faultproxy.Proxy owned by one test: closed when the test ends,
// and failing the test when the server never answers what Unstall
// delivered late.
type Proxy struct {
	*faultproxy.Proxy
	t testing.TB
}

// NewProxy listens on a free loopback port and forwards to target
// (host:port). It closes when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &Proxy{Proxy: p, t: t}
}

// Proxied returns serverURL (a Redis or PostgreSQL URL) going through a new
// Proxy to its server, and that proxy.
func Proxied(t testing.TB, serverURL string) (string, *Proxy) {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := NewProxy(t, u.Host)
	u.Host = p.Addr()
	return u.String(), p
}

// Unstall delivers what was held and waits until the server has answered,
// or closed, every connection on which it was sent something late.
func (p *Proxy) Unstall() {
	p.t.Helper()
	if err := p.Proxy.Unstall(); err != nil {
		p.t.Fatalf("proxy: %v", err)
	}
}
