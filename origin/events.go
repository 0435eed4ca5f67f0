package origin

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seatmap"
)

// Defaults and bounds of event creation.
const (
	DefaultOverflowPct    = 2
	DefaultHoldTTLSeconds = 600
	DefaultMaxPerUser     = 4
	maxCapacity           = 10_000_000
	maxHoldTTLSeconds     = 7 * 24 * 3600
	maxNameLen            = 200
	maxPerUserLimit       = 10_000
)

// overflowReserve is pct of capacity rounded up, so any pct > 0 keeps at
// least one seat; it never takes the last sellable seat.
func overflowReserve(capacity, pct int64) int64 {
	r := (capacity*pct + 99) / 100
	return min(r, capacity-1)
}

var currencyCode = regexp.MustCompile(`^[a-z]{3}$`)

// createEventRequest is the body of POST /v1/events. Pointers tell a field
// left out (default) from one set to 0 (overflow_pct 0 means no reserve).
type createEventRequest struct {
	ID             *int64  `json:"id"`
	Name           *string `json:"name"`
	Capacity       *int64  `json:"capacity"`
	Price          *int64  `json:"price"`
	Currency       *string `json:"currency"`
	HoldTTLSeconds *int64  `json:"hold_ttl_seconds"`
	MaxPerUser     *int64  `json:"max_per_user"`
	OverflowPct    *int64  `json:"overflow_pct"`
	// Seating makes the event reserved seating (docs/api.md §15):
	// capacity is then its number of seats, and price, when left out, its
	// lowest section price.
	Seating *seatmap.Map `json:"seating"`
}

// errInvalid is a request that is well-formed JSON but not acceptable.
type errInvalid struct{ msg string }

func (e errInvalid) Error() string { return e.msg }

func invalidf(format string, args ...any) error { return errInvalid{fmt.Sprintf(format, args...)} }

func (r createEventRequest) event(now time.Time) (ledger.Event, error) {
	e := ledger.Event{
		OverflowPct:    DefaultOverflowPct,
		HoldTTLSeconds: DefaultHoldTTLSeconds,
		MaxPerUser:     DefaultMaxPerUser,
		CreatedAt:      now,
	}
	if r.ID != nil {
		if *r.ID <= 0 {
			return e, invalidf("id must be a positive integer")
		}
		e.ID = *r.ID
	}
	if r.Name == nil || strings.TrimSpace(*r.Name) == "" {
		return e, invalidf("name is required")
	}
	if utf8.RuneCountInString(*r.Name) > maxNameLen {
		return e, invalidf("name is longer than %d characters", maxNameLen)
	}
	e.Name = *r.Name
	if r.Seating != nil {
		if err := r.Seating.Validate(); err != nil {
			return e, invalidf("seating: %v", err)
		}
		seats := r.Seating.Capacity()
		if r.Capacity != nil && *r.Capacity != seats {
			return e, invalidf("capacity %d is not the seating's %d seats", *r.Capacity, seats)
		}
		if r.OverflowPct != nil && *r.OverflowPct != 0 {
			return e, invalidf("an event with reserved seating keeps no overflow reserve: overflow_pct must be 0")
		}
		r.Capacity, r.OverflowPct = &seats, new(int64)
		if r.Price == nil {
			p := r.Seating.MinPrice()
			r.Price = &p
		}
		e.Seating = r.Seating
	}
	if r.Capacity == nil || *r.Capacity < 1 || *r.Capacity > maxCapacity {
		return e, invalidf("capacity must be an integer from 1 to %d", maxCapacity)
	}
	e.Capacity = *r.Capacity
	if r.Price == nil || *r.Price < 0 {
		return e, invalidf("price is required: a non-negative integer in the currency's smallest unit")
	}
	e.Price = *r.Price
	if r.Currency == nil || !currencyCode.MatchString(strings.ToLower(*r.Currency)) {
		return e, invalidf("currency must be a three-letter ISO 4217 code")
	}
	e.Currency = strings.ToLower(*r.Currency)
	if r.HoldTTLSeconds != nil {
		if *r.HoldTTLSeconds < 1 || *r.HoldTTLSeconds > maxHoldTTLSeconds {
			return e, invalidf("hold_ttl_seconds must be from 1 to %d", maxHoldTTLSeconds)
		}
		e.HoldTTLSeconds = *r.HoldTTLSeconds
	}
	if r.MaxPerUser != nil {
		if *r.MaxPerUser < 1 || *r.MaxPerUser > maxPerUserLimit {
			return e, invalidf("max_per_user must be from 1 to %d", maxPerUserLimit)
		}
		e.MaxPerUser = *r.MaxPerUser
	}
	if r.OverflowPct != nil {
		if *r.OverflowPct < 0 || *r.OverflowPct > 100 {
			return e, invalidf("overflow_pct must be from 0 to 100")
		}
		e.OverflowPct = *r.OverflowPct
	}
	e.OverflowReserve = overflowReserve(e.Capacity, e.OverflowPct)
	e.Sellable = e.Capacity - e.OverflowReserve
	if price, qty := e.Price, e.MaxPerUser; qty > 0 && price > (1<<62)/qty {
		return e, invalidf("price is too large")
	}
	if e.Seating != nil {
		for _, s := range e.Seating.Sections {
			if s.Price > (1<<62)/e.MaxPerUser {
				return e, invalidf("section %s: price is too large", s.ID)
			}
		}
	}
	return e, nil
}

// eventJSON is <event> of docs/api.md §6.
type eventJSON struct {
	ID              int64  `json:"id"`
	Name            string `json:"name"`
	Capacity        int64  `json:"capacity"`
	Sellable        int64  `json:"sellable"`
	Remaining       int64  `json:"remaining"`
	Price           int64  `json:"price"`
	Currency        string `json:"currency"`
	HoldTTLSeconds  int64  `json:"hold_ttl_seconds"`
	MaxPerUser      int64  `json:"max_per_user"`
	SoldOut         bool   `json:"sold_out"`
	OverflowPct     int64  `json:"overflow_pct"`
	OverflowReserve int64  `json:"overflow_reserve"`
	// Seating is the seat map of a reserved-seating event.
	Seating *seatmap.Map `json:"seating,omitempty"`
}

func eventBody(e ledger.Event, remaining int64) eventJSON {
	return eventJSON{
		ID: e.ID, Name: e.Name, Capacity: e.Capacity, Sellable: e.Sellable, Remaining: remaining,
		Price: e.Price, Currency: e.Currency, HoldTTLSeconds: e.HoldTTLSeconds, MaxPerUser: e.MaxPerUser,
		SoldOut: remaining <= 0, OverflowPct: e.OverflowPct, OverflowReserve: e.OverflowReserve, Seating: e.Seating,
	}
}
