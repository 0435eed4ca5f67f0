package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

// The handler's own cost per request, without the network, the proxy or the
// upstream: what the gateway adds to a request in front of any backend.

var noop = caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })

func benchServe(b *testing.B, h *Handler, token string) {
	benchServeAs(b, h, token, "application/json")
}

// benchServeAs sends the token in the header to an API client (JSON), or
// in the cookie from a browser (HTML).
func benchServeAs(b *testing.B, h *Handler, token, accept string) {
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodGet, "http://tickets.test/buy", nil)
		r.Header.Set("Accept", accept)
		switch {
		case token == "":
		case accept == "application/json":
			r.Header.Set(HeaderToken, token)
		default:
			r.AddCookie(&http.Cookie{Name: h.cookieName, Value: token})
		}
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
		if err := h.ServeHTTP(newDiscardWriter(), r, noop); err != nil {
			b.Fatal(err)
		}
	}
}

// discardWriter takes an answer as Caddy's response writer does, in bytes
// only (it has no WriteString), and keeps none of it. Its header starts
// with Caddy's Server field and is cloned at WriteHeader, as net/http
// does, so the cost of a header grown past a small map shows.
type discardWriter struct{ header, sent http.Header }

func newDiscardWriter() *discardWriter {
	return &discardWriter{header: http.Header{"Server": {"Caddy"}}}
}

func (d *discardWriter) Header() http.Header { return d.header }
func (d *discardWriter) WriteHeader(int)     { d.sent = d.header.Clone() }
func (d *discardWriter) Write(p []byte) (int, error) {
	if d.sent == nil {
		d.WriteHeader(http.StatusOK)
	}
	return len(p), nil
}

func BenchmarkServeAdmitted(b *testing.B) {
	h := provision(b, &Handler{Watermark: 1 << 40})
	tok, err := h.keys.Issue("v_bench", h.Event, 7, h.ttl)
	if err != nil {
		b.Fatal(err)
	}
	benchServe(b, h, tok.Raw)
}

func BenchmarkServeWaiting(b *testing.B) {
	h := provision(b, &Handler{})
	tok, err := h.keys.Issue("v_bench", h.Event, 7, h.ttl)
	if err != nil {
		b.Fatal(err)
	}
	benchServe(b, h, tok.Raw)
}

func BenchmarkServeWaitingHTML(b *testing.B) {
	h := provision(b, &Handler{})
	tok, err := h.keys.Issue("v_bench", h.Event, 7, h.ttl)
	if err != nil {
		b.Fatal(err)
	}
	benchServeAs(b, h, tok.Raw, "text/html")
}

// BenchmarkServeWaitingHTMLAfterPurchase is a browser's waiting poll on a
// site with the buyer's pages: the receipt is looked for on every request
// (set beside BenchmarkServeWaitingHTML).
func BenchmarkServeWaitingHTMLAfterPurchase(b *testing.B) {
	h := provision(b, &Handler{AfterPurchase: []string{"/bookings/*", "/tickets"}})
	tok, err := h.keys.Issue("v_bench", h.Event, 7, h.ttl)
	if err != nil {
		b.Fatal(err)
	}
	benchServeAs(b, h, tok.Raw, "text/html")
}

func BenchmarkServeArrivalMemory(b *testing.B) {
	h := provision(b, &Handler{})
	benchServe(b, h, "")
}

// BenchmarkServeArrivalLeased is a new arrival as a fleet runs on sale day:
// positions from Redis, leased in blocks.
func BenchmarkServeArrivalLeased(b *testing.B) {
	url, ev := testenv.RedisURL(b), testenv.EventID()
	setUpEvent(b, url, ev)
	h := provision(b, &Handler{Event: ev, Store: url, Lease: 100})
	benchServe(b, h, "")
}

// BenchmarkBaseline is the request set-up alone, to subtract.
func BenchmarkBaseline(b *testing.B) {
	var h waitroom.Ticket
	_ = h
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodGet, "http://tickets.test/buy", nil)
		r.Header.Set("Accept", "application/json")
		r.Header.Set(HeaderToken, "x")
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
		_ = noop.ServeHTTP(newDiscardWriter(), r)
	}
}
