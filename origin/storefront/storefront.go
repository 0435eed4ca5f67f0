// Package storefront is the buyer's side of the origin in a browser: the
// events, an event's seats, the hold, the payment, the bookings and their
// tickets, as html/template pages with embedded assets. The pages work
// without JavaScript (forms, POST-redirect-GET, meta refresh); the little
// script there is makes the hold's countdown tick, writes times in the
// buyer's own time zone, watches a declined payment that may still go
// through, looks at a booking waiting on its payment in place of reloading
// it (the meta refresh is for browsers without the script), keeps a form
// from being sent twice, and loads the hold's page again when Back
// restores it from the browser's cache.
//
// It calls the seat protocol and the booking flow directly, as the JSON
// API does, never the origin's own HTTP. Creating a hold needs the queue
// token the gateway admitted; the bookings and tickets need only the
// buyer, whom the storefront's own signed cookie remembers after the
// token is revoked or expires.
package storefront

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/waitroom/waitroom/locale"
	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seats"
	"github.com/waitroom/waitroom/waitroom"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Config is what the origin gives the storefront. The functions are the
// origin's own checks, so the pages judge a buyer exactly as the API does.
type Config struct {
	Seats       *seats.Protocol
	Ledger      *ledger.Ledger
	Idempotency *idem.Store
	// Bookings is nil when no payment provider is configured: the pages
	// then sell nothing, and say so.
	Bookings *booking.Service
	// Provider is the payment provider's name (payment.NameFakepay, …).
	Provider string
	// Ticket verifies the request's queue token for an event.
	Ticket func(r *http.Request, event int64) (waitroom.Ticket, bool)
	// Admitted is the hold's admission check.
	Admitted func(ctx context.Context, ev *seats.Event, position int64) bool
	// HeldSeats is how many seats of the event live holds keep that are
	// not sold, with remaining left to sell: the origin's figure, the one
	// it publishes to the gateways.
	HeldSeats func(ctx context.Context, ev *seats.Event, remaining int64) (int64, error)
	// Paused reports whether a buyer at position would be admitted but
	// for a pause of the sale.
	Paused func(ev *seats.Event, position int64) bool
	// RenderHold is a new hold's answer as the API gives it, kept in the
	// hold's ledger row.
	RenderHold func(ledger.Hold, ledger.Event) []byte
	// Confirmed marks an answer that shows the buyer a confirmed booking
	// (the gateway then ends their admission).
	Confirmed func(h http.Header, bookingStatus string)
	// BuyerKey signs the buyer cookie (at least 32 bytes).
	BuyerKey []byte
	// Clock; default time.Now.
	Clock func() time.Time
	// Logger; default discards.
	Logger *slog.Logger
}

// MinBuyerKeyLen is the shortest buyer cookie key accepted.
const MinBuyerKeyLen = 32

// Store serves the pages.
type Store struct {
	cfg     Config
	log     *slog.Logger
	catalog *locale.Catalog
	pages   map[string]*pageTemplate
	cop     *http.CrossOriginProtection
}

// New parses the templates and loads the message catalogs.
func New(cfg Config) (*Store, error) {
	if len(cfg.BuyerKey) < MinBuyerKeyLen {
		return nil, fmt.Errorf("storefront: the buyer key must be at least %d bytes", MinBuyerKeyLen)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cat, err := locale.Load("")
	if err != nil {
		return nil, fmt.Errorf("storefront: %w", err)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("storefront: %w", err)
	}
	s := &Store{cfg: cfg, log: cfg.Logger, catalog: cat, pages: pages, cop: http.NewCrossOriginProtection()}
	s.cop.SetDenyHandler(http.HandlerFunc(s.crossSite))
	return s, nil
}

// Register adds the pages' routes to mux. Only these paths are the
// storefront's: the rest of mux keeps its own answers.
func (s *Store) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", s.handleEvents)
	mux.HandleFunc("GET /events/{id}", s.handleEvent)
	mux.Handle("POST /events/{id}/holds", s.post(s.handleHold))
	mux.HandleFunc("GET /holds/{id}", s.handleHoldPage)
	mux.HandleFunc("GET /holds/{id}/release", s.handleReleaseAsk)
	mux.Handle("POST /holds/{id}/release", s.post(s.handleRelease))
	mux.Handle("POST /holds/{id}/booking", s.post(s.handlePay))
	mux.HandleFunc("GET /bookings/{id}", s.handleBooking)
	mux.HandleFunc("GET /bookings/{id}/cancellation", s.handleCancelAsk)
	mux.Handle("POST /bookings/{id}/cancellation", s.post(s.handleCancel))
	mux.HandleFunc("GET /tickets", s.handleMyTickets)
	assets, _ := fs.Sub(assetFS, "assets")
	files := http.StripPrefix("/assets/", http.FileServerFS(assets))
	asset := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	}
	mux.HandleFunc("GET /assets/{file}", asset)
	// The pages name their icon; a browser still asks for /favicon.ico
	// where nothing names one (a ticket's QR code opened alone), and a
	// 404 there is noise in every log.
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		r = r.Clone(r.Context())
		r.URL.Path, r.URL.RawPath = "/assets/icon.svg", ""
		asset(w, r)
	})
}

// maxFormBytes bounds a form's body: the largest is a seat choice.
const maxFormBytes = 16 << 10

// post guards a form's handler: cross-site posts are refused (the standard
// library's check of Sec-Fetch-Site and Origin), the body is bounded.
func (s *Store) post(h http.HandlerFunc) http.Handler {
	return s.cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			s.fail(w, r, http.StatusBadRequest, "shop_err_form")
			return
		}
		h(w, r)
	}))
}

func (s *Store) crossSite(w http.ResponseWriter, r *http.Request) {
	s.fail(w, r, http.StatusForbidden, "shop_err_cross_site")
}

func (s *Store) now() time.Time { return s.cfg.Clock().UTC().Truncate(time.Millisecond) }
