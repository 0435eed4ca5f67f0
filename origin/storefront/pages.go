package storefront

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/waitroom/waitroom/locale"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seatmap"
	"github.com/waitroom/waitroom/origin/seats"
)

// The events.

type eventsPage struct{ Events []eventItem }

type eventItem struct {
	ID              int64
	Name            string
	Price, Left     int64
	Currency        string
	Seated, SoldOut bool
	// Held: no seat is left, but these are held by buyers who have not
	// paid, and come back if they don't: not sold out.
	Held int64
}

func (s *Store) handleEvents(w http.ResponseWriter, r *http.Request) {
	s.buyerOf(w, r, 0)
	t := s.text(w, r)
	evs, err := s.cfg.Seats.Registry().LoadEvents(r.Context())
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
		return
	}
	var p eventsPage
	for _, ev := range evs {
		left, err := s.cfg.Seats.Recovery().Remaining(r.Context(), ev)
		if err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
			return
		}
		held, err := s.heldWhenNoneLeft(r.Context(), ev, left)
		if err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
			return
		}
		p.Events = append(p.Events, eventItem{ID: ev.ID, Name: ev.Name, Price: lowestPrice(ev.Event), Left: left,
			Currency: ev.Currency, Seated: ev.Seated(), SoldOut: left <= 0 && held == 0, Held: held})
	}
	s.render(w, r, http.StatusOK, "events", view{Text: t, Title: msg(t, "shop_events"), Data: p})
}

// heldWhenNoneLeft is how many seats live holds keep when none is left
// (0 otherwise, without asking): all held is not sold out, as the waiting
// room says too (api.md §12).
func (s *Store) heldWhenNoneLeft(ctx context.Context, ev *seats.Event, left int64) (int64, error) {
	if left > 0 {
		return 0, nil
	}
	return s.cfg.HeldSeats(ctx, ev, left)
}

// lowestPrice is what the cheapest ticket of the event costs.
func lowestPrice(e ledger.Event) int64 {
	if !e.Seated() {
		return e.Price
	}
	low := int64(-1)
	for _, s := range e.Seating.Sections {
		if low < 0 || s.Price < low {
			low = s.Price
		}
	}
	return low
}

// An event: its quantity, its seat map, its standing sections.

type eventPage struct {
	Event    ledger.Event
	Left     int64
	Held     int64 // see eventItem.Held
	Key      string
	Quantity int64
	MaxQty   []int64
	Sections []sectionView
	GA       []gaView
}

type sectionView struct {
	ID    string
	Price int64
	Rows  []rowView
	// Large sections are sold by best available only: their map would
	// weigh more than the page.
	Large bool
}

type rowView struct {
	ID    string
	Seats []seatView
}

type seatView struct {
	ID, State string
	N         int
	Chosen    bool
}

type gaView struct {
	ID                    string
	Price, Capacity, Free int64
}

// maxMapSeats is the most seats a section's map shows one by one.
const maxMapSeats = 600

func (s *Store) handleEvent(w http.ResponseWriter, r *http.Request) {
	ev, ok := s.event(w, r)
	if !ok {
		return
	}
	s.buyerOf(w, r, ev.ID)
	v := view{}
	if r.URL.Query().Has("released") {
		v.Text = s.text(w, r)
		v.Notice = msg(v.Text, "shop_released")
	}
	s.renderEvent(w, r, http.StatusOK, ev, v, nil, 1)
}

// event is the event of the path's {id}, or a page that says there is none.
func (s *Store) event(w http.ResponseWriter, r *http.Request) (*seats.Event, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		s.fail(w, r, http.StatusNotFound, "shop_err_not_found")
		return nil, false
	}
	ev, err := s.cfg.Seats.Registry().Event(r.Context(), id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, "shop_err_not_found")
		return nil, false
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
		return nil, false
	}
	return ev, true
}

// renderEvent shows the event page; chosen and qty are the buyer's last
// choice, kept when a refused form comes back.
func (s *Store) renderEvent(w http.ResponseWriter, r *http.Request, status int, ev *seats.Event, v view, chosen []string, qty int64) {
	ctx := r.Context()
	if v.Text == (locale.Text{}) {
		v.Text = s.text(w, r)
	}
	left, err := s.cfg.Seats.Recovery().Remaining(ctx, ev)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
		return
	}
	held, err := s.heldWhenNoneLeft(ctx, ev, left)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
		return
	}
	p := eventPage{Event: ev.Event, Left: left, Held: held, Key: uuid.NewString(), Quantity: max(qty, 1)}
	for q := int64(1); q <= min(ev.MaxPerUser, 20); q++ {
		p.MaxQty = append(p.MaxQty, q)
	}
	if ev.Seated() {
		sv, err := s.cfg.Seats.SeatView(ctx, ev)
		if err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, "shop_err_unavailable")
			return
		}
		for _, sec := range ev.Seating.Sections {
			if sec.GA() {
				p.GA = append(p.GA, gaView{ID: sec.ID, Price: sec.Price, Capacity: sec.Capacity,
					Free: min(max(sv.Places(sec.ID), 0), sec.Capacity)})
				continue
			}
			rows := rowsOf(sec, sv, chosen)
			p.Sections = append(p.Sections, sectionView{ID: sec.ID, Price: sec.Price, Rows: rows, Large: rows == nil})
		}
	}
	v.Title, v.Data = ev.Name, p
	s.render(w, r, status, "event", v)
}

// rowsOf is the section's rows with each seat's state; nil for a section
// too large to show seat by seat.
func rowsOf(sec seatmap.Section, sv *seats.SeatView, chosen []string) []rowView {
	n := 0
	for _, row := range sec.Rows {
		n += row.Seats
	}
	if n > maxMapSeats {
		return nil
	}
	var rows []rowView
	for _, row := range sec.Rows {
		rv := rowView{ID: row.ID}
		for i := 1; i <= row.Seats; i++ {
			id := seatmap.SeatID(sec.ID, row.ID, i)
			rv.Seats = append(rv.Seats, seatView{ID: id, N: i, State: string(sv.State(id)), Chosen: slices.Contains(chosen, id)})
		}
		rows = append(rows, rv)
	}
	return rows
}

// handleHold takes an event page's form: a quantity, the seats chosen, the
// best available, or places of a standing section.
func (s *Store) handleHold(w http.ResponseWriter, r *http.Request) {
	ev, ok := s.event(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	t := s.text(w, r)
	b := s.buyerOf(w, r, ev.ID)
	f := r.PostForm
	chosen := f["seat"]
	qty, _ := strconv.ParseInt(f.Get("quantity"), 10, 64)
	again := func(status int, id string, data ...any) {
		s.renderEvent(w, r, status, ev, view{Text: t, Error: msg(t, id, data...)}, chosen, qty)
	}
	if b.ticket == nil {
		again(http.StatusUnauthorized, "shop_err_no_token")
		return
	}
	pos := b.ticket.Position
	if !s.cfg.Admitted(ctx, ev, pos) {
		if s.cfg.Paused(ev, pos) {
			again(http.StatusServiceUnavailable, "shop_err_paused")
			return
		}
		again(http.StatusForbidden, "shop_err_not_admitted")
		return
	}
	key := f.Get("key")
	if !validKey(key) {
		again(http.StatusBadRequest, "shop_err_form")
		return
	}
	req, best, bad := askOf(ev, f)
	if bad != "" {
		again(http.StatusBadRequest, bad, "Max", ev.MaxPerUser)
		return
	}
	req.Event, req.User, req.Position, req.Key = ev, b.ticket.Subject, pos, key
	req.Digest = holdDigest(req, best)
	req.Scope = holdScope(ev.ID, req.User, key)
	req.Render = func(h ledger.Hold) []byte { return s.cfg.RenderHold(h, ev.Event) }
	var res seats.Result
	if best {
		res = s.cfg.Seats.PlaceBest(ctx, req, req.Section)
	} else {
		res = s.cfg.Seats.Place(ctx, req)
	}
	if res.Claim != "" && res.Outcome != seats.Held {
		// The pages keep no answer under the key: a form sent again is
		// judged again.
		if err := s.cfg.Idempotency.AbandonClaim(detached(r), req.Scope, res.Claim); err != nil {
			s.log.Warn("storefront: idempotency claim not given up", "error", err)
		}
	}
	if ok := res.Outcome == seats.Held || res.Outcome == seats.Replayed || res.Outcome == seats.AlreadyHeld; ok && res.Hold.ID != "" {
		to := "/holds/" + res.Hold.ID
		if res.Outcome == seats.AlreadyHeld {
			// Another tab's hold, not this choice: its page says why.
			to += "?" + alreadyHeld + "=1"
		}
		seeOther(w, r, to)
		return
	}
	no := refusalOf(holdRefusals, res.Outcome)
	var data []any
	switch {
	case res.Outcome == seats.SoldOut && res.Remaining > 0:
		no.msg, data = "shop_err_only_left", []any{"Count", res.Remaining}
	case res.Outcome == seats.SeatsUnavailable:
		chosen = slices.DeleteFunc(chosen, func(id string) bool { return slices.Contains(res.Taken, id) })
		data = []any{"Seats", strings.Join(res.Taken, ", ")}
	}
	again(no.status, no.msg, data...)
}

// refusal is how a page answers an outcome it refuses: the status, and
// the message it shows.
type refusal struct {
	status int
	msg    string
}

// refusalOf is the refusal of outcome in table; an outcome the table
// lacks is a service that cannot answer now.
func refusalOf[O comparable](table map[O]refusal, outcome O) refusal {
	if r, ok := table[outcome]; ok {
		return r
	}
	return refusal{http.StatusServiceUnavailable, "shop_err_unavailable"}
}

// holdRefusals are the hold form's refusals (docs/api.md §16).
var holdRefusals = map[seats.Outcome]refusal{
	seats.SoldOut:          {http.StatusConflict, "shop_err_sold_out"},
	seats.SeatsUnavailable: {http.StatusConflict, "shop_err_seats_taken"},
	seats.KeyReused:        {http.StatusUnprocessableEntity, "shop_err_form"},
	seats.InProgress:       {http.StatusConflict, "shop_err_in_progress"},
}

// validKey: a form's idempotency key, as the page wrote it (a UUID).
func validKey(k string) bool {
	_, err := uuid.Parse(k)
	return err == nil && len(k) == 36
}

// askOf reads what the hold form asks for; bad is the message id of a
// form no page of this event could have sent.
func askOf(ev *seats.Event, f url.Values) (req seats.PlaceRequest, best bool, bad string) {
	const invalid = "shop_err_form"
	quantity := func() (int64, string) {
		q, err := strconv.ParseInt(strings.TrimSpace(f.Get("quantity")), 10, 64)
		switch {
		case err != nil || q < 1:
			return 0, invalid
		case q > ev.MaxPerUser:
			return 0, "shop_err_limit"
		}
		return q, ""
	}
	mode := f.Get("mode")
	if (mode == "quantity") == ev.Seated() {
		return req, false, invalid
	}
	switch mode {
	case "quantity":
		req.Quantity, bad = quantity()
	case "seats":
		ids := slices.Compact(slices.Sorted(slices.Values(f["seat"])))
		switch {
		case len(ids) == 0:
			return req, false, "shop_err_choose"
		case int64(len(ids)) > ev.MaxPerUser:
			return req, false, "shop_err_limit"
		}
		for _, id := range ids {
			if sec, _, _, ok := ev.Seating.Locate(id); !ok || sec.GA() {
				return req, false, invalid
			}
		}
		req.Seats, req.Quantity = ids, int64(len(ids))
	case "best", "section":
		id := f.Get("section")
		sec, ok := ev.Seating.Section(id)
		switch {
		case mode == "best" && id != "" && (!ok || sec.GA()):
			return req, false, invalid
		case mode == "section" && (!ok || !sec.GA()):
			return req, false, invalid
		}
		req.Section, best = id, mode == "best"
		req.Quantity, bad = quantity()
	default:
		return req, false, invalid
	}
	return req, best, bad
}
