package admission_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/waitroom/waitroom/caddymodule"
	admission "github.com/waitroom/waitroom/examples/backends/go"
	"github.com/waitroom/waitroom/waitroom"
)

// guide is the page that tells a site how to read the admitted visitor.
const guide = "../../../docs/gateway.md"

// guideSite is the Caddyfile of docs/gateway.md "Checking admission in your
// backend": the first indented block of that section.
func guideSite(t *testing.T) string {
	raw, err := os.ReadFile(guide)
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(raw), "\n### Checking admission in your backend\n")
	require.True(t, ok, "docs/gateway.md has no section Checking admission in your backend")
	section, _, _ = strings.Cut(section, "\n## ")
	var block []string
	for line := range strings.SplitSeq(section, "\n") {
		code, indented := strings.CutPrefix(line, "    ")
		switch {
		case indented:
			block = append(block, code)
		case len(block) > 0 && line == "":
			block = append(block, "")
		case len(block) > 0:
			return strings.Join(block, "\n")
		}
	}
	require.NotEmpty(t, block, "the section shows no Caddyfile")
	return strings.Join(block, "\n")
}

// TestGuideSiteBehindTheGateway runs the guide's site in Caddy in front of
// this recipe: on the guarded paths the backend sees the gateway's identity
// and the recipe admits it; everywhere else it sees none, whatever the
// client sent.
func TestGuideSiteBehindTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Caddy")
	}
	const secret = "an-example-secret-of-at-least-32-bytes"
	t.Setenv("WAITROOM_SECRET", secret)
	keys, err := waitroom.ParseKeys("k1:" + secret)
	require.NoError(t, err)
	ks, err := waitroom.NewKeySet(nil, keys...)
	require.NoError(t, err)

	// The site: the recipe on the guarded paths, and what it was told
	// everywhere.
	type seen struct{ user, position, token, status string }
	var (
		mu   sync.Mutex
		last seen
	)
	saw := func() seen { mu.Lock(); defer mu.Unlock(); return last }
	record := func(s seen) { mu.Lock(); defer mu.Unlock(); last = s }
	site := http.NewServeMux()
	site.Handle("/buy/", admission.Middleware(ks, 42, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tk, _ := admission.FromContext(r.Context())
		fmt.Fprintf(w, "%s %d", tk.Subject, tk.Position)
	})))
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := seen{
			strings.Join(r.Header.Values("X-Waitroom-User"), ","),
			strings.Join(r.Header.Values("X-Waitroom-Position"), ","),
			strings.Join(r.Header.Values("X-Waitroom-Token"), ","),
			r.Header.Get("X-Waitroom-Status"),
		}
		// Any other spelling a backend might read as one of them.
		for name := range r.Header {
			if strings.Contains(strings.ToLower(name), "waitroom") && !strings.HasPrefix(name, "X-Waitroom-") {
				got.user += " " + name
			}
		}
		record(got)
		site.ServeHTTP(w, r)
	}))
	t.Cleanup(backend.Close)

	port, admin := freePort(t), freePort(t)
	caddytest.Default.AdminPort = admin
	caddytest.Default.LoadRequestTimeout = 15 * time.Second
	config := strings.NewReplacer(
		"tickets.example.com", "http://localhost:"+strconv.Itoa(port),
		"localhost:8081", backend.Listener.Addr().String(),
	).Replace(guideSite(t))
	tc := caddytest.NewTester(t)
	// Nothing of the run is kept: no autosaved config, storage in the
	// test's directory.
	tc.InitServer(fmt.Sprintf("{\n\tskip_install_trust\n\tpersist_config off\n\tstorage file_system %q\n\tadmin localhost:%d\n\thttp_port %d\n\thttps_port %d\n\tgrace_period 1ns\n}\n\n%s",
		t.TempDir(), admin, port, freePort(t), config), "caddyfile")
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	res, err := http.Post(fmt.Sprintf("http://localhost:%d/waitroom/events/42/watermark", admin), "application/json", strings.NewReader(`{"set": 1}`))
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	get := func(path string, header ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://localhost:%d%s", port, path), nil)
		require.NoError(t, err)
		req.Header.Set("Accept", "application/json")
		for i := 0; i < len(header); i += 2 {
			req.Header[header[i]] = append(req.Header[header[i]], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(body)
	}
	forged := []string{"X-Waitroom-User", "staff", "X_Waitroom_Position", "1", "x-waitroom-status", "admitted"}

	t.Run("guarded: the gateway's identity, which the recipe admits", func(t *testing.T) {
		record(seen{})
		res, body := get("/buy/seats", forged...)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		assert.Equal(t, "admitted", res.Header.Get("X-Waitroom-Status"))
		tk, err := ks.Verify(res.Header.Get("X-Waitroom-Token"), 42)
		require.NoError(t, err)
		assert.Equal(t, seen{tk.Subject, "1", tk.Raw, ""}, saw())
		assert.Equal(t, tk.Subject+" 1", body)
	})
	t.Run("guarded: a forged token is a new arrival, never the site's", func(t *testing.T) {
		record(seen{})
		res, body := get("/buy/seats", append([]string{"X-Waitroom-Token", "forged"}, forged...)...)
		assert.Equal(t, "waiting", res.Header.Get("X-Waitroom-Status"), body)
		assert.Equal(t, seen{}, saw())
	})
	for _, path := range []string{"/account", "/"} {
		t.Run("unguarded "+path+": no queue identity at all", func(t *testing.T) {
			record(seen{user: "unset"})
			res, body := get(path, append([]string{"X-Waitroom-Token", "forged"}, forged...)...)
			require.Equal(t, http.StatusNotFound, res.StatusCode, body)
			assert.Empty(t, res.Header.Get("X-Waitroom-Status"))
			assert.Equal(t, seen{}, saw())
		})
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
