package caddymodule

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// TestJoinRateBehindTrustedProxies: behind trusted_proxies without
// trusted_proxies_strict, Caddy names the leftmost X-Forwarded-For address,
// one the client wrote itself, so each spoofed address is a fresh client of
// join_rate; the gateway warns of it when it starts. With strict, the
// address the balancer appended is the client, whatever the client wrote.
func TestJoinRateBehindTrustedProxies(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			if testing.Short() {
				t.Skip("runs Caddy")
			}
			logFile := filepath.Join(t.TempDir(), "caddy.log")
			strictOpt := ""
			if strict {
				strictOpt = "trusted_proxies_strict"
			}
			port := testenv.FreePort(t)
			tc := caddytest.NewTester(t)
			tc.InitServer(fmt.Sprintf(`{
	skip_install_trust
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1ns
	log {
		output file %s {
			roll_disabled
		}
		level WARN
	}
	servers {
		trusted_proxies static 127.0.0.0/8 ::1/128
		%s
	}
}

http://localhost:%d {
	waitroom {
		event %d
		key k1 %s
		join_rate 1 1m
	}
	respond "origin"
}
`, adminPort, port, port+1, logFile, strictOpt, port, testenv.EventID(), testSecret), "caddyfile")
			if t.Failed() {
				t.FailNow()
			}

			// The balancer appends the address it saw (203.0.113.9) to what
			// the client sent, a new address each time.
			codes := make([]int, 3)
			for i := range codes {
				req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://localhost:%d/buy", port), nil)
				require.NoError(t, err)
				req.Header.Set("Accept", "application/json")
				req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d, 203.0.113.9", i+1))
				res, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				res.Body.Close()
				codes[i] = res.StatusCode
			}
			logged, err := os.ReadFile(logFile)
			require.NoError(t, err)
			warned := strings.Contains(string(logged), "join_rate counts the leftmost X-Forwarded-For")
			if strict {
				assert.Equal(t, []int{http.StatusOK, http.StatusTooManyRequests, http.StatusTooManyRequests}, codes,
					"strict: one client however many addresses it writes")
				assert.False(t, warned, "%s", logged)
			} else {
				assert.Equal(t, []int{http.StatusOK, http.StatusOK, http.StatusOK}, codes,
					"not strict: each written address is a new client")
				assert.True(t, warned, "the gateway warns of it at start; log: %s", logged)
			}
		})
	}
}
