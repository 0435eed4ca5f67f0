// Package faultproxy is a TCP proxy that puts network faults between a
// client and a server we may not own (a shared Redis or PostgreSQL): cut
// connections, a path that stops delivering without breaking, replies lost
// on the way back. Tests, the simulation and the demo share it.
package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// AnswerTimeout bounds how long Unstall waits for the server to answer what
// it was sent late.
const AnswerTimeout = 30 * time.Second

// ErrNoAnswer: the server did not answer, within AnswerTimeout, bytes that
// Unstall delivered late.
var ErrNoAnswer = errors.New("faultproxy: the server did not answer the bytes delivered late")

// Proxy forwards TCP connections to a server. It can cut them (Cut), to put
// a client through an outage of a server others still share; stall them
// (Stall, StallReplies, Pause): a network path that stops delivering
// without breaking, so that what the client sent reaches the server late,
// maybe long after the client gave up waiting.
type Proxy struct {
	target string
	ln     net.Listener

	mu sync.Mutex
	// down: Cut and not yet Restored, new connections are refused.
	down bool
	// paused: connections opened now start stalled both ways (Pause).
	paused bool
	closed bool
	links  map[*link]struct{}
	// onSend, when set, sees every chunk a client sends before it goes on.
	onSend func([]byte)
}

// link is one forwarded connection: a flow each way.
type link struct {
	client, server net.Conn
	up, down       *flow // client → server, server → client
}

// flow is one direction of a link. While stalled it keeps what it reads
// (and the end of it) to deliver, in order, once unstalled.
type flow struct {
	dst net.Conn
	// end is what the source closing means for the destination.
	end func()

	mu      sync.Mutex
	stalled bool
	held    [][]byte
	ended   bool
	// answered, when set, is closed at the next bytes or end from the
	// source (Unstall waits on it).
	answered chan struct{}
}

// Start listens on a free loopback port and forwards to target (host:port)
// until Close.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, links: make(map[*link]struct{})}
	go p.serve()
	return p, nil
}

// OnSend makes fn see every chunk of bytes a client sends, before the
// chunk is forwarded (or held): a fault can start at a given request, such
// as cutting another server once this one is asked to change something.
// nil removes it.
func (p *Proxy) OnSend(fn func([]byte)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onSend = fn
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening and cuts every connection, dropping what is held.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.cutLocked()
	p.mu.Unlock()
	return p.ln.Close()
}

// Cut closes every open connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	p.cutLocked()
}

func (p *Proxy) cutLocked() {
	for l := range p.links {
		l.close()
		delete(p.links, l)
	}
}

// Restore accepts connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// Stall holds every byte the connections open now carry from now on, both
// ways, until Unstall. Nothing breaks: the client sees a server that stopped
// answering, and if it gives up and hangs up, what it sent is still
// delivered later (then its hang-up), as TCP would after a network stall.
// Connections opened after Stall pass freely.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.up.stall()
		l.down.stall()
	}
}

// StallReplies is Stall for what the server sends only: the server gets and
// acts on every request, the client hears nothing back until Unstall (a
// reply lost on the way, as far as a client with a timeout can tell).
func (p *Proxy) StallReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.down.stall()
	}
}

// Pause is Stall for every connection, also those opened while paused
// (as a SIGSTOP of the server would look from the client), until Resume or
// Unstall.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
	for l := range p.links {
		l.up.stall()
		l.down.stall()
	}
}

// PauseFor pauses for d, then resumes.
func (p *Proxy) PauseFor(d time.Duration) {
	p.Pause()
	time.AfterFunc(d, p.Resume)
}

// Resume ends a Pause or a stall and lets what was held through, without
// waiting for the server to act on it.
func (p *Proxy) Resume() { p.release(false) }

// Unstall is Resume, and then waits until the server has answered, or
// closed, every connection on which it was sent something late: by then it
// has acted on it. ErrNoAnswer after AnswerTimeout.
func (p *Proxy) Unstall() error { return p.release(true) }

func (p *Proxy) release(wait bool) error {
	p.mu.Lock()
	p.paused = false
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	var answers []chan struct{}
	for _, l := range links {
		// Armed before the held bytes go: the answer cannot come earlier.
		if wait && l.up.hasHeld() {
			answers = append(answers, l.down.awaitAnswer())
		}
		l.up.unstall()
		l.down.unstall()
	}
	timeout := time.NewTimer(AnswerTimeout)
	defer timeout.Stop()
	for _, a := range answers {
		select {
		case <-a:
		case <-timeout.C:
			return ErrNoAnswer
		}
	}
	return nil
}

func (p *Proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.down || p.closed
		p.mu.Unlock()
		if refuse {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		l := &link{client: in, server: out}
		// The client hanging up half-closes the server side, so the server
		// still answers (and acts on) what it got; the server closing ends
		// the link.
		l.up = &flow{dst: out, end: func() {
			if tcp, ok := out.(*net.TCPConn); ok {
				_ = tcp.CloseWrite()
				return
			}
			out.Close()
		}}
		l.down = &flow{dst: in, end: l.close}
		p.mu.Lock()
		if p.down || p.closed {
			// Cut while dialling.
			p.mu.Unlock()
			l.close()
			continue
		}
		if p.paused {
			l.up.stalled, l.down.stalled = true, true
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		go p.pipe(l, l.up, in)
		go p.pipe(l, l.down, out)
	}
}

func (p *Proxy) pipe(l *link, f *flow, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && f == l.up {
			p.mu.Lock()
			fn := p.onSend
			p.mu.Unlock()
			if fn != nil {
				fn(buf[:n])
			}
		}
		if n > 0 {
			f.send(buf[:n])
		}
		if err != nil {
			break
		}
	}
	f.finish()
	if f == l.down {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}
}

func (l *link) close() {
	l.client.Close()
	l.server.Close()
}

func (f *flow) stall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stalled = true
}

func (f *flow) hasHeld() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.held) > 0
}

func (f *flow) awaitAnswer() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{})
	f.answered = ch
	if f.ended {
		// The server closed already: it will act on nothing more.
		f.answer()
	}
	return ch
}

func (f *flow) unstall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.held {
		_, _ = f.dst.Write(b) // a client gone meanwhile does not stop the rest
	}
	f.held, f.stalled = nil, false
	if f.ended {
		f.end()
	}
}

// send forwards b, or holds a copy while stalled.
func (f *flow) send(b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer()
	if f.stalled {
		f.held = append(f.held, bytes.Clone(b))
		return
	}
	_, _ = f.dst.Write(b)
}

// finish passes on the end of the source, after what is held.
func (f *flow) finish() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer()
	f.ended = true
	if !f.stalled {
		f.end()
	}
}

func (f *flow) answer() {
	if f.answered != nil {
		close(f.answered)
		f.answered = nil
	}
}
