package origin

import (
	"net/http"
	"strings"

	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/qrpng"
)

// ticketJSON is a ticket of <booking>.
type ticketJSON struct {
	Code    string `json:"code"`
	EventID int64  `json:"event_id"`
	// Seat is the seat number (general admission), or the reserved seat's
	// id (docs/api.md §15).
	Seat any `json:"seat"`
}

func ticketsJSON(ts []ledger.Ticket) []ticketJSON {
	out := make([]ticketJSON, len(ts))
	for i, t := range ts {
		out[i] = ticketJSON{Code: t.Code, EventID: t.EventID, Seat: t.Seat}
		if t.SeatID != "" {
			out[i].Seat = t.SeatID
		}
	}
	return out
}

// ticketPNGSize is the QR image's width and height in pixels.
const ticketPNGSize = 384

// handleTicketPNG serves GET /v1/tickets/{code}.png: the code as a QR image,
// for a valid ticket only. The code is the credential, so no queue token is
// asked for.
func (s bookingsAPI) handleTicketPNG(w http.ResponseWriter, r *http.Request) {
	code, ok := strings.CutSuffix(r.PathValue("file"), ".png")
	if !ok || s.cfg.Payments == nil {
		writeError(w, http.StatusNotFound, "not_found", "no such ticket")
		return
	}
	c, err := s.verifier.Verify(code, s.cfg.Clock())
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found", "no such ticket")
		return
	}
	valid, err := s.ledger.Bookings().TicketIsValid(r.Context(), c.BookingID, code)
	switch {
	case err != nil:
		writeResponse(w, errUnavailable)
		return
	case !valid:
		writeError(w, http.StatusNotFound, "not_found", "no such ticket (cancelled)")
		return
	}
	png, err := qrpng.Encode(code, ticketPNGSize)
	if err != nil {
		s.log.Error("ticket qr code", "error", err)
		writeError(w, http.StatusInternalServerError, "internal", "could not draw the ticket")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "image/png")
	h.Set("Cache-Control", "private, no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(png)
}
