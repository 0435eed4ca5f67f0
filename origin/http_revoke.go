package origin

import (
	"encoding/json"
	"net/http"

	"github.com/waitroom/waitroom/origin/ledger"
)

// CommandHeader carries a command to the gateway in front of the origin,
// which acts on it and takes it off the answer (docs/api.md §3).
const CommandHeader = "X-Waitroom-Command"

// CommandRevoke ends the admission of the request's queue token.
const CommandRevoke = "revoke"

// revokeWhenConfirmed asks the gateway to end the buyer's admission on an
// answer that shows them their booking confirmed: they have bought, and
// their slot goes back to the queue. Sent on every such answer (a replay, a
// later GET), not only the first: the gateway may have missed one, and a
// second revocation changes nothing.
func revokeWhenConfirmed(h http.Header, bookingStatus string) {
	if bookingStatus == ledger.BookingConfirmed {
		h.Set(CommandHeader, CommandRevoke)
	}
}

// bookingStatusOf is the status of the booking a 2xx answer carries, ""
// when it carries none.
func bookingStatusOf(resp response) string {
	if resp.status < 200 || resp.status > 299 {
		return ""
	}
	var b struct {
		BookingID string `json:"booking_id"`
		Status    string `json:"status"`
	}
	if json.Unmarshal(resp.body, &b) != nil || b.BookingID == "" {
		return ""
	}
	return b.Status
}
