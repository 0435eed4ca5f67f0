package faultproxy

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoServer echoes every line and counts the bytes it read, so a test can
// tell what reached the server from what came back.
func echoServer(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var got atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						got.Add(int64(n))
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), &got
}

type conn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &conn{t: t, c: c, r: bufio.NewReader(c)}
}

func (c *conn) send(line string) {
	c.t.Helper()
	_, err := c.c.Write([]byte(line + "\n"))
	require.NoError(c.t, err)
}

// read waits up to d for a line.
func (c *conn) read(d time.Duration) (string, error) {
	require.NoError(c.t, c.c.SetReadDeadline(time.Now().Add(d)))
	return c.r.ReadString('\n')
}

func (c *conn) echo(line string) {
	c.t.Helper()
	c.send(line)
	got, err := c.read(5 * time.Second)
	require.NoError(c.t, err)
	assert.Equal(c.t, line+"\n", got)
}

func (c *conn) silent() {
	c.t.Helper()
	_, err := c.read(200 * time.Millisecond)
	require.Error(c.t, err, "bytes passed a stalled path")
}

func start(t *testing.T) (*Proxy, *atomic.Int64) {
	t.Helper()
	addr, got := echoServer(t)
	p, err := Start(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p, got
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, p *Proxy, got *atomic.Int64)
	}{
		{"a paused proxy holds the bytes, also of connections opened meanwhile, and lets them through on Resume", func(t *testing.T, p *Proxy, got *atomic.Int64) {
			c := dial(t, p)
			c.echo("one")
			p.Pause()
			c.send("two")
			c.silent()
			late := dial(t, p)
			late.send("three")
			late.silent()
			p.Resume()
			line, err := c.read(5 * time.Second)
			require.NoError(t, err)
			assert.Equal(t, "two\n", line)
			c.echo("four")
			line, err = late.read(5 * time.Second)
			require.NoError(t, err)
			assert.Equal(t, "three\n", line)
		}},
		{"a stall holds the connections open now only", func(t *testing.T, p *Proxy, got *atomic.Int64) {
			c := dial(t, p)
			c.echo("one")
			p.Stall()
			c.send("two")
			c.silent()
			assert.Equal(t, int64(4), got.Load(), "the server got the held bytes")
			dial(t, p).echo("fresh")
			require.NoError(t, p.Unstall())
			line, err := c.read(time.Second)
			require.NoError(t, err, "Unstall returns once the server answered")
			assert.Equal(t, "two\n", line)
		}},
		{"stalled replies: the server acts, the client hears nothing until Unstall", func(t *testing.T, p *Proxy, got *atomic.Int64) {
			c := dial(t, p)
			c.echo("one")
			p.StallReplies()
			c.send("two")
			c.silent()
			assert.Equal(t, int64(8), got.Load(), "the server got the request")
			require.NoError(t, p.Unstall())
			line, err := c.read(5 * time.Second)
			require.NoError(t, err)
			assert.Equal(t, "two\n", line)
		}},
		{"a cut closes the connections and refuses new ones until Restore", func(t *testing.T, p *Proxy, got *atomic.Int64) {
			c := dial(t, p)
			c.echo("one")
			p.Cut()
			_, err := c.read(5 * time.Second)
			require.ErrorIs(t, err, io.EOF)
			refused := dial(t, p)
			_, err = refused.read(5 * time.Second)
			require.ErrorIs(t, err, io.EOF)
			p.Restore()
			dial(t, p).echo("two")
		}},
		{"a client that gives up on a stalled path still has its request delivered, then its hang-up", func(t *testing.T, p *Proxy, got *atomic.Int64) {
			c := dial(t, p)
			c.echo("one")
			p.Stall()
			c.send("two")
			heldUp(t, p)
			require.NoError(t, c.c.Close())
			assert.Equal(t, int64(4), got.Load())
			require.NoError(t, p.Unstall())
			assert.Equal(t, int64(8), got.Load(), "delivered late")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, got := start(t)
			tc.run(t, p, got)
		})
	}
}

// heldUp waits until the proxy holds bytes a client sent.
func heldUp(t *testing.T, p *Proxy) {
	t.Helper()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for l := range p.links {
			if l.up.hasHeld() {
				return true
			}
		}
		return false
	}, 5*time.Second, time.Millisecond)
}

// PauseFor resumes by itself.
func TestPauseFor(t *testing.T) {
	p, _ := start(t)
	c := dial(t, p)
	p.PauseFor(300 * time.Millisecond)
	c.send("one")
	c.silent()
	line, err := c.read(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "one\n", line)
}

// Close cuts the connections and stops listening.
func TestClose(t *testing.T) {
	p, _ := start(t)
	c := dial(t, p)
	c.echo("one")
	p.Pause()
	require.NoError(t, p.Close())
	_, err := c.read(5 * time.Second)
	require.Error(t, err)
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err)
}
