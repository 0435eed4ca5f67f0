package caddymodule

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// buildCaddy builds cmd/caddy (Caddy with this module) for the test.
func buildCaddy(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command builds the gateway binary")
	bin := filepath.Join(t.TempDir(), "caddy")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/waitroom/waitroom/cmd/caddy")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/caddy:\n%s", out)
	return bin
}

// gateway is a Caddy process of its own.
type gateway struct {
	name      string
	adminPort int
	httpPort  int
}

func (g gateway) url(path string) string {
	return fmt.Sprintf("http://localhost:%d%s", g.httpPort, path)
}

// startGateway runs bin with a one-site config in front of the event's
// store; it is stopped when the test ends.
func startGateway(t *testing.T, bin, name string, event int64, store string) gateway {
	t.Helper()
	return startGatewayWith(t, bin, name, event, store, "")
}

// startGatewayWith is startGateway with more waitroom subdirectives.
func startGatewayWith(t *testing.T, bin, name string, event int64, store, more string) gateway {
	t.Helper()
	dir := t.TempDir()
	g := gateway{name: name, adminPort: testenv.FreePort(t), httpPort: testenv.FreePort(t)}
	config := fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	skip_install_trust
	grace_period 1ns
}

http://localhost:%d {
	waitroom {
		event %d
		key k1 %s
		store %s
		%s
	}
	respond "gateway %s"
}
`, g.adminPort, g.httpPort, testenv.FreePort(t), g.httpPort, event, testSecret, store, more, name)
	file := filepath.Join(dir, "Caddyfile")
	require.NoError(t, os.WriteFile(file, []byte(config), 0o600))
	logFile, err := os.Create(filepath.Join(dir, "caddy.log"))
	require.NoError(t, err)

	cmd := exec.Command(bin, "run", "--config", file, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir, "HOME="+dir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("gateway %s log:\n%s", name, b)
			}
		}
	})
	testenv.WaitForPort(t, fmt.Sprintf("127.0.0.1:%d", g.adminPort))
	testenv.WaitForPort(t, fmt.Sprintf("127.0.0.1:%d", g.httpPort))
	return g
}

// TestTwoGatewaysShareOneRedis runs two Caddy processes on one Redis: what
// the admin API of one changes, the other obeys, with positions handed out
// from one queue.
func TestTwoGatewaysShareOneRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs Caddy")
	}
	store := testenv.RedisURL(t)
	testenv.Redis(t) // fail or skip now if Redis is not there
	bin := buildCaddy(t)
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	a := startGateway(t, bin, "a", ev, store)
	b := startGateway(t, bin, "b", ev, store)

	// One queue: positions continue from one gateway to the other.
	alice, bob := newVisitor(t), newVisitor(t)
	assert.Equal(t, 1.0, alice.get(a.url("/")).json(t)["position"])
	assert.Equal(t, 2.0, bob.get(b.url("/")).json(t)["position"])

	// Raised on b, obeyed by a.
	code, _, raw := adminCall(t, b.adminPort, http.MethodPost, "/waitroom/events/"+evs+"/watermark", `{"set": 1}`)
	require.Equal(t, http.StatusOK, code, raw)
	require.Eventually(t, func() bool {
		res := alice.get(a.url("/"))
		return res.Header.Get(HeaderStatus) == "admitted" && res.body == "gateway a"
	}, 15*time.Second, 50*time.Millisecond, "gateway a admits what gateway b allowed")
	res := bob.get(b.url("/"))
	assert.Equal(t, "waiting", res.Header.Get(HeaderStatus))

	// The token works on either gateway: same keys, same event.
	res = alice.get(b.url("/"))
	assert.Equal(t, "admitted", res.Header.Get(HeaderStatus))
	assert.Equal(t, "gateway b", res.body)

	// Sold out on a, obeyed by b.
	code, _, raw = adminCall(t, a.adminPort, http.MethodPost, "/waitroom/events/"+evs+"/sold_out", `{"sold_out": true}`)
	require.Equal(t, http.StatusOK, code, raw)
	require.Eventually(t, func() bool {
		return newVisitor(t).get(b.url("/")).StatusCode == http.StatusGone
	}, 15*time.Second, 50*time.Millisecond, "gateway b turns newcomers away once a says sold out")
	assert.Equal(t, http.StatusGone, bob.get(b.url("/")).StatusCode)
	assert.Equal(t, "admitted", alice.get(b.url("/")).Header.Get(HeaderStatus))

	// Both report the same state.
	require.Eventually(t, func() bool {
		_, sa, _ := adminCall(t, a.adminPort, http.MethodGet, "/waitroom/events/"+evs, "")
		_, sb, _ := adminCall(t, b.adminPort, http.MethodGet, "/waitroom/events/"+evs, "")
		return assert.ObjectsAreEqual(sa, sb) && sb["sold_out"] == true && sb["watermark"] == 1.0
	}, 15*time.Second, 50*time.Millisecond)
}

// TestTakeOverOnAnotherGateway: the place an account took over from an
// anonymous token is the account's on every gateway sharing the store: the
// token is a new arrival at the other within a poll, and the account's new
// device gets the place there.
func TestTakeOverOnAnotherGateway(t *testing.T) {
	useClock(t)
	store := testenv.RedisURL(t)
	ev := testenv.EventID()
	setUpEvent(t, store, ev)
	a := provision(t, &Handler{Event: ev, Store: store, UserID: "{http.request.header.X-User-ID}"})
	b := provision(t, &Handler{Event: ev, Store: store, Lease: 2, UserID: "{http.request.header.X-User-ID}"})
	setWatermark(t, a, 0)
	anon, p := placedToken(t, a, do(t, a, get(a, "")))
	_, got := placedToken(t, a, do(t, a, asUser(get(a, anon), "alice")))
	require.Equal(t, p, got, "alice took the place over")

	refresh(t, b)
	_, again := placedToken(t, b, do(t, b, get(b, anon)))
	assert.NotEqual(t, p, again, "the token is a new arrival at the other gateway")
	_, got = placedToken(t, b, do(t, b, asUser(get(b, ""), "alice")))
	assert.Equal(t, p, got, "alice's new device at the other gateway")
}
