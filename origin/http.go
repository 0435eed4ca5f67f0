package origin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxBodyBytes is the largest request body accepted.
const MaxBodyBytes = 64 << 10

// apiError is the body of every error answer.
type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// The API's handlers, by resource: each a view of the server.
type (
	eventsAPI   struct{ *Server }
	holdsAPI    struct{ *Server }
	bookingsAPI struct{ *Server }
	// opsAPI: the admin routes, health and readiness.
	opsAPI struct{ *Server }
)

// Handler serves the origin's HTTP API (docs/api.md §5–§13; docs/openapi.yaml).
func (s *Server) Handler() http.Handler {
	events, holds, bookings, ops := eventsAPI{s}, holdsAPI{s}, bookingsAPI{s}, opsAPI{s}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/events", events.handleCreateEvent)
	mux.HandleFunc("GET /v1/events", events.handleListEvents)
	mux.HandleFunc("GET /v1/events/{id}", events.handleGetEvent)
	mux.HandleFunc("POST /v1/events/{id}/holds", holds.handleCreateHold)
	mux.HandleFunc("GET /v1/holds/{id}", holds.handleGetHold)
	mux.HandleFunc("DELETE /v1/holds/{id}", holds.handleDeleteHold)
	mux.HandleFunc("POST /v1/bookings", bookings.handleCreateBooking)
	mux.HandleFunc("GET /v1/bookings/{id}", bookings.handleGetBooking)
	mux.HandleFunc("POST /v1/bookings/{id}/cancellation", bookings.handleCancelBooking)
	mux.HandleFunc("POST /v1/webhooks/{provider}", bookings.handleWebhook)
	mux.HandleFunc("GET /v1/tickets/{file}", bookings.handleTicketPNG)
	mux.HandleFunc("GET /v1/admin/events/{id}/invariant", ops.handleInvariant)
	mux.HandleFunc("POST /v1/admin/events/{id}/rebuild", ops.handleRebuild)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{Registry: s.cfg.Registry}))
	mux.HandleFunc("GET /healthz", ops.handleHealthz)
	mux.HandleFunc("GET /readyz", ops.handleReadyz)
	return s.recoverer(jsonFallback(mux))
}

// NewHTTPServer wraps h with the timeouts a public server needs: slow
// clients cannot hold connections open.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// jsonFallback turns the mux's own answers (unknown route, wrong method)
// into JSON errors.
func jsonFallback(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		cw := &captureWriter{header: make(http.Header)}
		h.ServeHTTP(cw, r)
		switch cw.status {
		case http.StatusNotFound:
			writeError(w, http.StatusNotFound, "not_found", "no such route")
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", cw.header.Get("Allow"))
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed here")
		default:
			for k, v := range cw.header {
				w.Header()[k] = v
			}
			w.WriteHeader(cw.status)
			_, _ = w.Write(cw.body.Bytes())
		}
	})
}

type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *captureWriter) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return c.body.Write(b)
}

// recoverer answers a JSON 500 if a handler panics, instead of a dropped
// connection.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
				writeError(w, http.StatusInternalServerError, "internal", "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "could not encode the response")
		return
	}
	writeResponse(w, response{status: status, body: append(b, '\n')})
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeResponse(w, errorResponse(status, code, msg))
}

func writeResponse(w http.ResponseWriter, resp response) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if resp.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(resp.retryAfter))
	}
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body)
}

var (
	errTooLarge = errorResponse(http.StatusRequestEntityTooLarge, "request_too_large",
		fmt.Sprintf("the request body is larger than %d bytes", MaxBodyBytes))
	errUnavailable = unavailableResponse("a backing service is unavailable; retry shortly")
)

// bodyTooLarge answers 413 from the declared length alone, before anything
// else is looked at.
func bodyTooLarge(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength > MaxBodyBytes {
		writeResponse(w, errTooLarge)
		return true
	}
	return false
}

// readBody reads at most MaxBodyBytes of the body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *response) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, &errTooLarge
	case err != nil:
		resp := errorResponse(http.StatusBadRequest, "invalid_request", "the request body could not be read")
		return nil, &resp
	}
	return b, nil
}

// decodeStrict decodes exactly one JSON object with no unknown fields.
func decodeStrict(body []byte, v any) *response {
	bad := func(msg string) *response {
		r := errorResponse(http.StatusBadRequest, "invalid_request", msg)
		return &r
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return bad("the request body must be a JSON object")
	}
	if trimmed[0] != '{' {
		return bad("the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bad("invalid JSON: " + err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("invalid JSON: data after the object")
	}
	return nil
}

// pathID parses a positive integer id from the path; ok is false (and 404
// answered) otherwise.
func pathID(w http.ResponseWriter, r *http.Request, what string) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusNotFound, "not_found", "no such "+what)
		return 0, false
	}
	return id, true
}

func (s opsAPI) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s opsAPI) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := contextWithTimeout(r, 2*time.Second)
	defer cancel()
	if err := s.Ready(ctx); err != nil {
		writeResponse(w, unavailableResponse("not ready: "+err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// MaxIdempotencyKeyLen is the longest Idempotency-Key accepted.
const MaxIdempotencyKeyLen = 255

// validIdempotencyKey: 1 to MaxIdempotencyKeyLen characters of UTF-8
// (docs/api.md §8). The key is kept in a text column, which refuses
// anything but UTF-8: such a key could otherwise only ever be answered 503.
func validIdempotencyKey(key string) bool {
	return key != "" && utf8.ValidString(key) && utf8.RuneCountInString(key) <= MaxIdempotencyKeyLen
}
