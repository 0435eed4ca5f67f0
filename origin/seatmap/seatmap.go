// Package seatmap is an event's reserved seating: sections (each with a
// price), rows and seats, the seat ids (<section>-<row>-<n>), and the choice
// of the best seats available; and general-admission sections inside the
// map, sold by quantity up to their capacity. It does no I/O: the ledger
// keeps the map, the inventory which seats are taken.
package seatmap

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Map is an event's seating, as created with the event ("seating").
type Map struct {
	Sections []Section `json:"sections"`
}

// Section is a block of rows sold at one price. Its rows are listed best
// first (nearest the stage or pitch). A general-admission section has a
// Capacity instead of rows: places sold by quantity, none named.
type Section struct {
	ID       string `json:"id"`
	Price    int64  `json:"price"`
	Rows     []Row  `json:"rows,omitempty"`
	Capacity int64  `json:"capacity,omitempty"`

	// noPrice and zeroCapacity remember, of a section read from JSON, a
	// price left out (which would sell its seats for nothing) and a
	// capacity given as 0, for Validate to refuse.
	noPrice, zeroCapacity bool
}

// UnmarshalJSONFrom reads a section within a request's body, with the
// body's rules (names match exactly, none unknown), so an error names the
// field by its whole path.
func (s *Section) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	var in struct {
		ID       string `json:"id"`
		Price    *int64 `json:"price"`
		Rows     []Row  `json:"rows"`
		Capacity *int64 `json:"capacity"`
	}
	if err := json.UnmarshalDecode(dec, &in, json.RejectUnknownMembers(true)); err != nil {
		return err
	}
	*s = Section{ID: in.ID, Rows: in.Rows, noPrice: in.Price == nil}
	if in.Price != nil {
		s.Price = *in.Price
	}
	if in.Capacity != nil {
		s.Capacity, s.zeroCapacity = *in.Capacity, *in.Capacity == 0
	}
	return nil
}

// UnmarshalJSON reads a section for encoding/json (the ledger's copy of
// the map), by the same rules.
func (s *Section) UnmarshalJSON(b []byte) error {
	return json.Unmarshal(b, s)
}

// GA reports whether the section is general admission.
func (s Section) GA() bool { return s.Capacity > 0 }

// Row is a row of Seats seats numbered 1..Seats, side by side in order.
type Row struct {
	ID    string `json:"id"`
	Seats int    `json:"seats"`
}

// Bounds of a map.
const (
	MaxSeats    = 200_000
	maxSeatsRow = 1_000
)

// part is a section or row id: it may not contain the '-' that joins a
// seat id.
var part = regexp.MustCompile(`^[A-Za-z0-9_]{1,16}$`)

// gaPart is a general-admission section's id: it names no seat, so it may
// contain '-' ("GA-East"), though not begin with one.
var gaPart = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]{0,31}$`)

// Validate checks the map: ids well formed and unique, every row with seats,
// a general-admission section with a capacity and no rows, at most MaxSeats
// seats and places in all.
func (m Map) Validate() error {
	if len(m.Sections) == 0 {
		return fmt.Errorf("seating needs at least one section")
	}
	var total int64
	sections := map[string]bool{}
	for _, s := range m.Sections {
		if sections[s.ID] {
			return fmt.Errorf("section %s is listed twice", s.ID)
		}
		sections[s.ID] = true
		if s.noPrice {
			return fmt.Errorf("section %s: price is required (per seat, in the currency's smallest unit)", s.ID)
		}
		if s.Price < 0 {
			return fmt.Errorf("section %s: price must not be negative", s.ID)
		}
		if s.Capacity != 0 || s.zeroCapacity || (len(s.Rows) == 0 && strings.Contains(s.ID, "-")) {
			if !gaPart.MatchString(s.ID) {
				return fmt.Errorf("general-admission section id %q: 1 to 32 letters, digits, _ or -, not beginning with -", s.ID)
			}
			if len(s.Rows) > 0 {
				return fmt.Errorf("section %s: give rows (reserved seats) or a capacity (general admission), not both", s.ID)
			}
			if s.Capacity < 1 || s.Capacity > MaxSeats {
				return fmt.Errorf("general-admission section %s: capacity must be from 1 to %d", s.ID, MaxSeats)
			}
			total += s.Capacity
			continue
		}
		if !part.MatchString(s.ID) {
			return fmt.Errorf("section id %q: 1 to 16 letters, digits or _ (a general-admission section, with a capacity, may also have -)", s.ID)
		}
		if len(s.Rows) == 0 {
			return fmt.Errorf("section %s has no rows (or a capacity, for general admission)", s.ID)
		}
		rows := map[string]bool{}
		for _, r := range s.Rows {
			if !part.MatchString(r.ID) {
				return fmt.Errorf("section %s: row id %q: 1 to 16 letters, digits or _", s.ID, r.ID)
			}
			if rows[r.ID] {
				return fmt.Errorf("section %s: row %s is listed twice", s.ID, r.ID)
			}
			rows[r.ID] = true
			if r.Seats < 1 || r.Seats > maxSeatsRow {
				return fmt.Errorf("section %s row %s: seats must be from 1 to %d", s.ID, r.ID, maxSeatsRow)
			}
			total += int64(r.Seats)
		}
	}
	if total > MaxSeats {
		return fmt.Errorf("seating has %d seats and places; at most %d", total, MaxSeats)
	}
	for _, s := range m.Sections {
		// A seat id as a general-admission section's would make the seat
		// one no hold could name.
		if seat, _, _, ok := m.Locate(s.ID); ok && s.GA() {
			return fmt.Errorf("general-admission section %s has the id of a seat of section %s", s.ID, seat.ID)
		}
	}
	return nil
}

// Capacity is the number of reserved seats plus the capacities of the
// general-admission sections.
func (m Map) Capacity() int64 {
	var n int64
	for _, s := range m.Sections {
		n += s.size()
	}
	return n
}

// size is the section's number of seats, or its capacity.
func (s Section) size() int64 {
	if s.GA() {
		return s.Capacity
	}
	var n int64
	for _, r := range s.Rows {
		n += int64(r.Seats)
	}
	return n
}

// HasGA reports whether the map has a general-admission section.
func (m Map) HasGA() bool {
	for _, s := range m.Sections {
		if s.GA() {
			return true
		}
	}
	return false
}

// Places is a general-admission section's share of the map's numbering:
// its places are numbered First..First+Capacity-1, after the seats and
// places of the sections before it.
type Places struct {
	Section  string
	First    int64
	Capacity int64
}

// Places lists the general-admission sections in map order.
func (m Map) Places() []Places {
	var out []Places
	next := int64(1)
	for _, s := range m.Sections {
		if s.GA() {
			out = append(out, Places{Section: s.ID, First: next, Capacity: s.Capacity})
		}
		next += s.size()
	}
	return out
}

// PlaceLabel is how a ticket names place n (1..capacity) of
// general-admission section: "GA-East/17". The '/' cannot occur in a seat
// id, nor in a section id, so no label is another's.
func PlaceLabel(section string, n int64) string {
	return section + "/" + strconv.FormatInt(n, 10)
}

// MinPrice is the lowest section price.
func (m Map) MinPrice() int64 {
	p := int64(-1)
	for _, s := range m.Sections {
		if p < 0 || s.Price < p {
			p = s.Price
		}
	}
	return max(p, 0)
}

// SeatID is the id of seat n of row in section.
func SeatID(section, row string, n int) string {
	return section + "-" + row + "-" + strconv.Itoa(n)
}

// Seat is one seat of a map.
type Seat struct {
	ID      string
	Section string
	Row     string
	// N is the seat's number in its row, from 1.
	N int
	// Ordinal numbers every seat of the map from 1, in map order: the
	// seat number a ticket carries. A general-admission section's places
	// take their numbers in that order too (Places).
	Ordinal int
}

// Seats lists every reserved seat in map order (section, row, number).
func (m Map) Seats() []Seat {
	out := make([]Seat, 0, m.Capacity())
	next := 1
	for _, s := range m.Sections {
		if s.GA() {
			next += int(s.Capacity)
			continue
		}
		for _, r := range s.Rows {
			for n := 1; n <= r.Seats; n++ {
				out = append(out, Seat{ID: SeatID(s.ID, r.ID, n), Section: s.ID, Row: r.ID, N: n, Ordinal: next})
				next++
			}
		}
	}
	return out
}

// Section returns the section with id.
func (m Map) Section(id string) (Section, bool) {
	for _, s := range m.Sections {
		if s.ID == id {
			return s, true
		}
	}
	return Section{}, false
}

// Locate finds a seat by id: its section and its place there.
func (m Map) Locate(id string) (section Section, row, n int, ok bool) {
	sec, rest, ok1 := strings.Cut(id, "-")
	rowID, num, ok2 := strings.Cut(rest, "-")
	if !ok1 || !ok2 {
		return Section{}, 0, 0, false
	}
	s, ok := m.Section(sec)
	if !ok {
		return Section{}, 0, 0, false
	}
	v, err := strconv.Atoi(num)
	if err != nil || strconv.Itoa(v) != num {
		return Section{}, 0, 0, false
	}
	for i, r := range s.Rows {
		if r.ID == rowID && v >= 1 && v <= r.Seats {
			return s, i, v, true
		}
	}
	return Section{}, 0, 0, false
}

// Price is the sum of the seats' section prices; false when a seat is not
// on the map.
func (m Map) Price(ids []string) (int64, bool) {
	var sum int64
	for _, id := range ids {
		s, _, _, ok := m.Locate(id)
		if !ok {
			return 0, false
		}
		sum += s.Price
	}
	return sum, true
}
