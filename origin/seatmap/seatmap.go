// Package seatmap is an event's reserved seating: sections (each with a
// price), rows and seats, the seat ids (<section>-<row>-<n>), and the choice
// of the best seats available. It does no I/O: the ledger keeps the map, the
// inventory which seats are taken.
package seatmap

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Map is an event's seating, as created with the event ("seating").
type Map struct {
	Sections []Section `json:"sections"`
}

// Section is a block of rows sold at one price. Its rows are listed best
// first (nearest the stage or pitch).
type Section struct {
	ID    string `json:"id"`
	Price int64  `json:"price"`
	Rows  []Row  `json:"rows"`
}

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

// Validate checks the map: ids well formed and unique, every row with seats,
// at most MaxSeats in all.
func (m Map) Validate() error {
	if len(m.Sections) == 0 {
		return fmt.Errorf("seating needs at least one section")
	}
	total := 0
	sections := map[string]bool{}
	for _, s := range m.Sections {
		if !part.MatchString(s.ID) {
			return fmt.Errorf("section id %q: 1 to 16 letters, digits or _", s.ID)
		}
		if sections[s.ID] {
			return fmt.Errorf("section %s is listed twice", s.ID)
		}
		sections[s.ID] = true
		if s.Price < 0 {
			return fmt.Errorf("section %s: price must not be negative", s.ID)
		}
		if len(s.Rows) == 0 {
			return fmt.Errorf("section %s has no rows", s.ID)
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
			total += r.Seats
		}
	}
	if total > MaxSeats {
		return fmt.Errorf("seating has %d seats; at most %d", total, MaxSeats)
	}
	return nil
}

// Capacity is the number of seats.
func (m Map) Capacity() int64 {
	var n int64
	for _, s := range m.Sections {
		for _, r := range s.Rows {
			n += int64(r.Seats)
		}
	}
	return n
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
	// seat number a ticket carries.
	Ordinal int
}

// Seats lists every seat in map order (section, row, number).
func (m Map) Seats() []Seat {
	out := make([]Seat, 0, m.Capacity())
	for _, s := range m.Sections {
		for _, r := range s.Rows {
			for n := 1; n <= r.Seats; n++ {
				out = append(out, Seat{ID: SeatID(s.ID, r.ID, n), Section: s.ID, Row: r.ID, N: n, Ordinal: len(out) + 1})
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
