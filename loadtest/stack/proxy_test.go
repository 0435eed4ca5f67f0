package stack

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// A paused proxy holds the bytes (the client sees a server that stopped
// answering, not one that went away) and lets them through on Resume.
func TestProxyPause(t *testing.T) {
	p, err := StartProxy(echoServer(t))
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)

	_, err = c.Write([]byte("one\n"))
	require.NoError(t, err)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "one\n", line)

	p.Pause()
	_, err = c.Write([]byte("two\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = r.ReadString('\n')
	require.Error(t, err, "bytes passed a paused proxy")

	p.Resume()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "two\n", line)
}

// The counter sees the requests in flight at once.
func TestCounterPeak(t *testing.T) {
	release := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(5)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/holds") {
			arrived.Done()
			<-release
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = up.Serve(ln) }()
	defer up.Close()

	c, err := StartCounter("http://"+ln.Addr().String(), func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/holds") })
	require.NoError(t, err)
	defer c.Close()
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(c.URL()+"/v1/events/1/holds", "application/json", nil)
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	arrived.Wait()
	resp, err := http.Get(c.URL() + "/v1/events/1")
	require.NoError(t, err)
	resp.Body.Close()
	close(release)
	wg.Wait()
	assert.Equal(t, int64(5), c.Peak())
	assert.Equal(t, int64(5), c.Done())
	c.Reset()
	assert.Zero(t, c.Peak())
	assert.Zero(t, c.Done())
}

func TestCaddyfile(t *testing.T) {
	path := t.TempDir() + "/Caddyfile"
	require.NoError(t, WriteCaddyfile(path, CaddyConfig{KeyID: "k1", Sites: []Site{
		{Port: 8001, Upstream: "127.0.0.1:9000", Waitroom: &Waitroom{Event: 42, Store: "redis://127.0.0.1:6379/0", Watermark: 5, HardCap: 100}},
		{Port: 8002, Respond: `{"ok":true}`},
	}}, 2019))
	b, err := readFile(path)
	require.NoError(t, err)
	for _, want := range []string{
		"admin 127.0.0.1:2019", "http://127.0.0.1:8001 {", "event 42", "key k1 {env.WAITROOM_SECRET}",
		"store redis://127.0.0.1:6379/0", "watermark 5", "hard_cap 100", "reverse_proxy 127.0.0.1:9000",
		"http://127.0.0.1:8002 {", "respond `{\"ok\":true}` 200",
	} {
		assert.Contains(t, b, want)
	}
	assert.NotContains(t, b, "lease")
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}
