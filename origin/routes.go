package origin

import (
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the origin's HTTP API (docs/api.md §5–§13; docs/openapi.yaml)
// and the storefront's pages.
func (s *Server) Handler() http.Handler {
	events, holds, bookings, ops := eventsAPI{s}, holdsAPI{s}, bookingsAPI{s}, opsAPI{s}
	scans := scansAPI{s}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/events", events.handleCreateEvent)
	mux.HandleFunc("GET /v1/events", events.handleListEvents)
	mux.HandleFunc("GET /v1/events/{id}", events.handleGetEvent)
	mux.HandleFunc("GET /v1/events/{id}/seats", events.handleSeatMap)
	mux.HandleFunc("POST /v1/events/{id}/holds", holds.handleCreateHold)
	mux.HandleFunc("GET /v1/holds/{id}", holds.handleGetHold)
	mux.HandleFunc("DELETE /v1/holds/{id}", holds.handleDeleteHold)
	mux.HandleFunc("POST /v1/bookings", bookings.handleCreateBooking)
	mux.HandleFunc("GET /v1/bookings/{id}", bookings.handleGetBooking)
	mux.HandleFunc("POST /v1/bookings/{id}/cancellation", bookings.handleCancelBooking)
	mux.HandleFunc("POST /v1/webhooks/{provider}", bookings.handleWebhook)
	mux.HandleFunc("GET /v1/tickets/{file}", bookings.handleTicketPNG)
	mux.HandleFunc("POST /v1/scans", scans.handleScan)
	mux.HandleFunc("GET /v1/scans/keys", scans.handleKeys)
	mux.HandleFunc("GET /v1/scans/void", scans.handleVoidFeed)
	mux.HandleFunc("POST /v1/admin/gate-devices", scans.handleAddDevice)
	mux.HandleFunc("GET /v1/admin/gate-devices", scans.handleDevices)
	mux.HandleFunc("POST /v1/admin/gate-devices/{id}/revocation", scans.handleRevokeDevice)
	mux.HandleFunc("GET /v1/admin/events/{id}/invariant", ops.handleInvariant)
	mux.HandleFunc("POST /v1/admin/events/{id}/rebuild", ops.handleRebuild)
	mux.HandleFunc("GET /v1/admin/users/{id}/trail", ops.handleTrail)
	mux.HandleFunc("GET /v1/admin/outbox", ops.handleOutbox)
	mux.HandleFunc("POST /v1/admin/outbox/{id}/redelivery", ops.handleRedelivery)
	mux.HandleFunc("POST /v1/admin/bookings/{id}/resolution", bookings.handleResolution)
	mux.HandleFunc("GET /v1/admin/events/{id}/scans", scans.handleScanTotals)
	mux.HandleFunc("GET /healthz", ops.handleHealthz)
	mux.HandleFunc("GET /readyz", ops.handleReadyz)
	if !s.cfg.MetricsApart {
		mux.Handle("GET /metrics", s.metricsHandler())
	}
	s.shop.Register(mux) // the buyer's pages, at / (package storefront)
	return s.publisher.errors.count(s.recoverer(jsonFallback(mux)))
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

// MetricsHandler serves the origin's metrics (Prometheus text) at GET
// /metrics on an address of their own (Config.MetricsApart).
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metricsHandler())
	return mux
}

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{Registry: s.cfg.Registry})
}
