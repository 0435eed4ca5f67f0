package stack

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"
)

// Counter is a reverse proxy in front of the origin that counts the
// requests of interest in flight: the concurrency that reaches the
// inventory.
type Counter struct {
	ln       net.Listener
	srv      *http.Server
	match    func(*http.Request) bool
	inFlight atomic.Int64
	peak     atomic.Int64
	done     atomic.Int64
}

// StartCounter proxies to target, counting the requests match accepts.
func StartCounter(target string, match func(*http.Request) bool) (*Counter, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{
		MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	c := &Counter{ln: ln, match: match}
	c.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.match(r) {
			rp.ServeHTTP(w, r)
			return
		}
		n := c.inFlight.Add(1)
		for {
			p := c.peak.Load()
			if n <= p || c.peak.CompareAndSwap(p, n) {
				break
			}
		}
		rp.ServeHTTP(w, r)
		c.inFlight.Add(-1)
		c.done.Add(1)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

// URL is the proxy's base URL.
func (c *Counter) URL() string { return "http://" + c.ln.Addr().String() }

// Peak is the most counted requests in flight at once since Reset.
func (c *Counter) Peak() int64 { return c.peak.Load() }

// Done is the counted requests answered since Reset.
func (c *Counter) Done() int64 { return c.done.Load() }

// Reset starts counting afresh.
func (c *Counter) Reset() {
	c.peak.Store(c.inFlight.Load())
	c.done.Store(0)
}

// Close stops the proxy.
func (c *Counter) Close() error { return c.srv.Close() }
