package origin

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/waitroom/waitroom/origin/seats"
)

// The seat map (docs/api.md §15), read far more often than it changes: each
// view of it (seats.Protocol.SeatView, read from Redis at most once a
// second) is rendered once, plain and gzipped, and every read until the
// next view is answered with those bytes. Shared caches may keep an answer
// seatMapMaxAge seconds: the map is advisory, the hold is the authority.

// seatMapMaxAge is the Cache-Control max-age of a seat map, in seconds.
const seatMapMaxAge = 1

type seatMapJSON struct {
	Sections []seatSectionJSON `json:"sections"`
}

type seatSectionJSON struct {
	ID    string `json:"id"`
	Price int64  `json:"price"`
	// Seats is never left out (API.md §10): a general-admission section's
	// is empty.
	Seats []seatJSONItem `json:"seats"`
	// Capacity and Free describe a general-admission section: its places,
	// and those neither held nor sold.
	Capacity *int64 `json:"capacity,omitempty"`
	Free     *int64 `json:"free,omitempty"`
}

type seatJSONItem struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// renderedSeatMap is one view's answer.
type renderedSeatMap struct {
	view       *seats.SeatView
	plain, gz  []byte
	contentLen string
	gzLen      string
}

// seatMaps keeps the rendering of each event's latest view.
type seatMaps struct {
	mu sync.Mutex
	by map[int64]*renderedSeatMap
	// flight shares a view's rendering among the reads that find it new:
	// a map of 200,000 seats takes a few hundred milliseconds to render,
	// and every read arriving meanwhile would render it again.
	flight singleflight.Group
}

func (m *seatMaps) latest(event int64) *renderedSeatMap {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.by[event]
}

func (m *seatMaps) rendered(ev *seats.Event, v *seats.SeatView) (*renderedSeatMap, error) {
	if r := m.latest(ev.ID); r != nil && r.view == v {
		return r, nil
	}
	r, err, _ := m.flight.Do(strconv.FormatInt(ev.ID, 10), func() (any, error) {
		if r := m.latest(ev.ID); r != nil && !r.view.At.Before(v.At) {
			return r, nil // this view, or a newer one, rendered meanwhile
		}
		r, err := renderSeatMap(ev, v)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.by == nil {
			m.by = make(map[int64]*renderedSeatMap)
		}
		if cur := m.by[ev.ID]; cur == nil || cur.view.At.Before(v.At) {
			m.by[ev.ID] = r
		}
		return r, nil
	})
	if err != nil {
		return nil, err
	}
	return r.(*renderedSeatMap), nil
}

// renderSeatMap renders view v of ev's seat map, plain and gzipped.
func renderSeatMap(ev *seats.Event, v *seats.SeatView) (*renderedSeatMap, error) {
	out := seatMapJSON{Sections: make([]seatSectionJSON, 0, len(ev.Seating.Sections))}
	index := make(map[string]int, len(ev.Seating.Sections))
	for _, s := range ev.Seating.Sections {
		sec := seatSectionJSON{ID: s.ID, Price: s.Price, Seats: []seatJSONItem{}}
		if s.GA() {
			capacity, free := s.Capacity, min(max(v.Places(s.ID), 0), s.Capacity)
			sec.Capacity, sec.Free = &capacity, &free
		}
		index[s.ID] = len(out.Sections)
		out.Sections = append(out.Sections, sec)
	}
	// One pass over the seats, in map order: each section's in its list.
	for _, seat := range ev.Seating.Seats() {
		sec := &out.Sections[index[seat.Section]]
		sec.Seats = append(sec.Seats, seatJSONItem{ID: seat.ID, Status: string(v.State(seat.ID))})
	}
	plain, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	plain = append(plain, '\n')
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	_, _ = zw.Write(plain)
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &renderedSeatMap{view: v, plain: plain, gz: gz.Bytes(),
		contentLen: strconv.Itoa(len(plain)), gzLen: strconv.Itoa(gz.Len())}, nil
}

// handleSeatMap serves GET /v1/events/{id}/seats: every seat of a
// reserved-seating event with its status (free, held, sold), and each
// general-admission section's places free. No token is asked for: the map
// is public, like the event.
func (s eventsAPI) handleSeatMap(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "event")
	if !ok {
		return
	}
	ev, err := s.seats.Registry().Event(r.Context(), id)
	if err != nil {
		lookupFailed(w, err, "event")
		return
	}
	if !ev.Seated() {
		writeError(w, http.StatusNotFound, "not_found", "the event is general admission: it has no seat map")
		return
	}
	v, err := s.seats.SeatView(r.Context(), ev)
	if err != nil {
		s.log.Warn("seat map not read", "event", id, "error", err)
		writeResponse(w, errUnavailable)
		return
	}
	m, err := s.seatMaps.rendered(ev, v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "could not encode the seat map")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "public, max-age="+strconv.Itoa(seatMapMaxAge))
	h.Set("Vary", "Accept-Encoding")
	body, n := m.plain, m.contentLen
	if acceptsGzip(r.Header.Values("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		body, n = m.gz, m.gzLen
	}
	h.Set("Content-Length", n)
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// acceptsGzip reports whether Accept-Encoding values accept gzip: named
// with a q above 0, or left unnamed where "*" has one. "gzip;q=0" refuses
// it (RFC 9110 §12.5.3), whatever "*" says.
func acceptsGzip(values []string) bool {
	gzipQ, starQ := -1.0, -1.0
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(item, ";")
			q := 1.0
			for p := range strings.SplitSeq(params, ";") {
				if k, val, _ := strings.Cut(strings.TrimSpace(p), "="); strings.EqualFold(strings.TrimSpace(k), "q") {
					var err error
					if q, err = strconv.ParseFloat(strings.TrimSpace(val), 64); err != nil {
						q = 0
					}
				}
			}
			switch name = strings.TrimSpace(name); {
			case strings.EqualFold(name, "gzip"), strings.EqualFold(name, "x-gzip"):
				gzipQ = max(gzipQ, q)
			case name == "*":
				starQ = max(starQ, q)
			}
		}
	}
	if gzipQ >= 0 {
		return gzipQ > 0
	}
	return starQ > 0
}

// SectionDrift is one section's seat drift in the invariant.
type SectionDrift = seats.SectionDrift
