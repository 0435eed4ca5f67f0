package stack

import (
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
