package origin

import (
	"net/http"
)

// Starting answers while the origin waits for PostgreSQL and Redis at start
// (cmd/origin): the process is alive (/healthz 200, so an orchestrator does
// not restart it for waiting), not ready (/readyz 503), and every other
// route is 503 unavailable with Retry-After, as when a backing service goes
// away later. waiting says what it still waits for.
func Starting(waiting func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "starting"})
			return
		}
		writeResponse(w, unavailableResponse("starting: waiting for "+waiting()))
	})
}
