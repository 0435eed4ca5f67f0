package storefront

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/waitroom"
)

// The buyer is the queue token's subject: the account, or the anonymous
// visitor. The token stops working once the purchase revokes it (or it
// expires), so from the first page on the storefront also keeps the
// subject in a cookie of its own, signed with the buyer key: the bookings
// and tickets stay reachable with it alone. A browser that came back as
// someone else (a new anonymous arrival) keeps the subjects it had, the
// newest first, up to maxSubjects.

// BuyerCookie is the name of the storefront's buyer cookie.
const BuyerCookie = "storefront_buyer"

const (
	maxSubjects    = 4
	buyerCookieAge = 90 * 24 * time.Hour
)

// buyer is who the request is.
type buyer struct {
	// subjects are every identity the browser has been, the current first.
	subjects []string
	// ticket is the request's verified queue token, when it has one (of
	// the page's event, or of any event on the pages without one).
	ticket *waitroom.Ticket
}

func (b buyer) owns(user string) bool { return slices.Contains(b.subjects, user) }

// buyerOf reads the buyer of r, the token for event first (0: any token
// cookie), and refreshes the buyer cookie when the token names a subject
// it lacks.
func (s *Store) buyerOf(w http.ResponseWriter, r *http.Request, event int64) buyer {
	known := s.readBuyer(r)
	var b buyer
	if t, ok := s.tokenOf(r, event); ok {
		b.ticket = &t
	}
	b.subjects = known
	if b.ticket != nil && (len(known) == 0 || known[0] != b.ticket.Subject) {
		b.subjects = append([]string{b.ticket.Subject}, slices.DeleteFunc(slices.Clone(known), func(s string) bool {
			return s == b.ticket.Subject
		})...)
		if len(b.subjects) > maxSubjects {
			b.subjects = b.subjects[:maxSubjects]
		}
		s.writeBuyer(w, r, b.subjects)
	}
	return b
}

// tokenOf is the request's valid queue token for event; with event 0, the
// first valid token cookie of any event.
func (s *Store) tokenOf(r *http.Request, event int64) (waitroom.Ticket, bool) {
	if event > 0 {
		return s.cfg.Ticket(r, event)
	}
	for _, c := range r.Cookies() {
		id, ok := strings.CutPrefix(c.Name, waitroom.CookiePrefix)
		if !ok {
			continue
		}
		if ev, err := strconv.ParseInt(id, 10, 64); err == nil && ev > 0 {
			if t, ok := s.cfg.Ticket(r, ev); ok {
				return t, true
			}
		}
	}
	return waitroom.Ticket{}, false
}

// The cookie's value is base64url(subjects joined by newlines) "."
// base64url(HMAC-SHA256 of that first part).
func (s *Store) sign(payload string) string {
	m := hmac.New(sha256.New, s.cfg.BuyerKey)
	m.Write([]byte("storefront-buyer\x00" + payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s *Store) readBuyer(r *http.Request) []string {
	c, err := r.Cookie(BuyerCookie)
	if err != nil {
		return nil
	}
	payload, mac, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(s.sign(payload))) {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || len(raw) == 0 {
		return nil
	}
	subjects := strings.Split(string(raw), "\n")
	if len(subjects) > maxSubjects {
		subjects = subjects[:maxSubjects]
	}
	return subjects
}

func (s *Store) writeBuyer(w http.ResponseWriter, r *http.Request, subjects []string) {
	clean := slices.DeleteFunc(slices.Clone(subjects), func(s string) bool { return s == "" || strings.ContainsRune(s, '\n') })
	payload := base64.RawURLEncoding.EncodeToString([]byte(strings.Join(clean, "\n")))
	http.SetCookie(w, &http.Cookie{
		Name: BuyerCookie, Value: payload + "." + s.sign(payload), Path: "/",
		MaxAge: int(buyerCookieAge / time.Second), HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: isHTTPS(r),
	})
}

// isHTTPS: the request came over TLS, to the origin or to the proxy in
// front of it.
func isHTTPS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
