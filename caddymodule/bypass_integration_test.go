package caddymodule

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// TestBypassRecipes loads the three recipes of docs/gateway.md ("Bypassing
// the room") in one site: staff with the secret header, staff by client IP
// behind a trusted proxy, and health checks. The event admits no one
// (watermark 0), so anything that reaches the backend got past the room by
// a recipe, not by its place in the queue.
func TestBypassRecipes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Caddy")
	}
	const keyEnv = "WAITROOM_TEST_STAFF_KEY"
	staffKey := "staff-" + strings.Repeat("k", 40)
	t.Setenv(keyEnv, staffKey)
	port := testenv.FreePort(t)
	ev := testenv.EventID()
	evs := strconv.FormatInt(ev, 10)
	backend := upstream(t)
	tc := caddytest.NewTester(t)
	tc.InitServer(fmt.Sprintf(`{
	skip_install_trust
	admin localhost:%[1]d
	http_port %[2]d
	https_port %[3]d
	grace_period 1ns
	servers :%[2]d {
		trusted_proxies static 127.0.0.1/8 ::1
		trusted_proxies_strict
	}
}

http://localhost:%[2]d {
	@staff {
		header X-Staff-Key {env.%[4]s}
		header_regexp X-Staff-Key ^.{32,}$
	}
	handle @staff {
		request_header -X-Staff-Key
		request_header -*waitroom*
		reverse_proxy %[5]s
	}
	@office client_ip 203.0.113.0/24
	handle @office {
		request_header -*waitroom*
		reverse_proxy %[5]s
	}
	handle /healthz {
		respond 200
	}
	handle /readyz {
		request_header -*waitroom*
		reverse_proxy %[5]s
	}
	handle {
		waitroom {
			event %[6]d
			key k1 %[7]s
			watermark 0
		}
		reverse_proxy %[5]s
	}
}
`, adminPort, port, testenv.FreePort(t), keyEnv, backend, ev, testSecret), "caddyfile")
	if t.Failed() {
		t.FailNow()
	}
	url := func(path string) string { return fmt.Sprintf("http://localhost:%d%s", port, path) }
	cookieName := "waitroom_" + evs

	// passed checks that an answer came from the backend untouched by the
	// room, and that the backend saw none of the client's forged identity.
	passed := func(t *testing.T, res response) {
		t.Helper()
		require.Equal(t, http.StatusOK, res.StatusCode, res.body)
		assert.Empty(t, res.Header.Get(HeaderStatus))
		assert.Empty(t, res.Header.Get(HeaderToken))
		assert.Empty(t, res.Header.Values("Set-Cookie"))
		assert.Equal(t, map[string]any{
			"origin": true, "user": nil, "position": nil, "token": nil,
		}, res.json(t))
	}
	forged := []string{HeaderUser, "mallory", "X_Waitroom_Position", "1", HeaderToken, "forged"}
	waiting := func(t *testing.T, res response) {
		t.Helper()
		require.Equal(t, http.StatusOK, res.StatusCode, res.body)
		assert.Equal(t, "waiting", res.Header.Get(HeaderStatus))
		assert.Contains(t, res.Header.Get("Set-Cookie"), cookieName+"=")
		assert.Equal(t, "waiting", res.json(t)["status"])
	}

	t.Run("staff header passes", func(t *testing.T) {
		passed(t, newVisitor(t).get(url("/buy"), append([]string{"X-Staff-Key", staffKey}, forged...)...))
	})
	t.Run("no staff header waits", func(t *testing.T) {
		waiting(t, newVisitor(t).get(url("/buy")))
	})
	t.Run("wrong staff key waits", func(t *testing.T) {
		waiting(t, newVisitor(t).get(url("/buy"), "X-Staff-Key", staffKey+"x"))
	})
	t.Run("unset staff key lets no empty header through", func(t *testing.T) {
		t.Setenv(keyEnv, "")
		waiting(t, newVisitor(t).get(url("/buy"), "X-Staff-Key", ""))
	})
	t.Run("office client IP through a trusted proxy passes", func(t *testing.T) {
		passed(t, newVisitor(t).get(url("/buy"), append([]string{"X-Forwarded-For", "203.0.113.7"}, forged...)...))
	})
	t.Run("other client IP waits", func(t *testing.T) {
		waiting(t, newVisitor(t).get(url("/buy"), "X-Forwarded-For", "198.51.100.7"))
	})
	// The client sent an office address of its own; the proxy appended the
	// address it really came from.
	t.Run("client's own X-Forwarded-For names no office address", func(t *testing.T) {
		waiting(t, newVisitor(t).get(url("/buy"), "X-Forwarded-For", "203.0.113.7, 198.51.100.7"))
	})

	code, state, raw := adminCall(t, adminPort, http.MethodPost, "/waitroom/events/"+evs+"/sold_out", `{"sold_out": true}`)
	require.Equal(t, http.StatusOK, code, raw)
	require.Equal(t, true, state["sold_out"])

	t.Run("sold out turns visitors away", func(t *testing.T) {
		res := newVisitor(t).get(url("/buy"))
		assert.Equal(t, http.StatusGone, res.StatusCode)
		assert.Equal(t, "sold_out", res.Header.Get(HeaderStatus))
	})
	t.Run("healthz answers 200 while sold out", func(t *testing.T) {
		res := newVisitor(t).get(url("/healthz"))
		assert.Equal(t, http.StatusOK, res.StatusCode)
		assert.Empty(t, res.Header.Get(HeaderStatus))
		assert.Empty(t, res.Header.Values("Set-Cookie"))
		assert.Empty(t, res.body)
	})
	t.Run("readyz reaches the backend while sold out", func(t *testing.T) {
		passed(t, newVisitor(t).get(url("/readyz"), forged...))
	})
	t.Run("staff header passes while sold out", func(t *testing.T) {
		passed(t, newVisitor(t).get(url("/buy"), "X-Staff-Key", staffKey))
	})
}
