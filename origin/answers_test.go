package origin

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/waitroom/waitroom/origin/booking"
	"github.com/waitroom/waitroom/origin/idem"
	"github.com/waitroom/waitroom/origin/ledger"
	"github.com/waitroom/waitroom/origin/seats"
)

// Every outcome of the protocol packages has its answer in the one table.
func TestEveryOutcomeHasAnAnswer(t *testing.T) {
	for o := seats.Held; o <= seats.Unavailable; o++ {
		assert.Contains(t, holdAnswers, o, "hold outcome %d", o)
	}
	for o := booking.Created; o <= booking.Unavailable; o++ {
		assert.Contains(t, bookingAnswers, o, "booking outcome %d", o)
	}
}

func TestHoldAnswer(t *testing.T) {
	ev := ledger.Event{ID: 7, Price: 100, Currency: "eur"}
	row := ledger.Hold{ID: "h", UserID: "ann", Quantity: 2, Status: ledger.StatusPending, Response: []byte("{\"first\":1}\n")}
	tests := []struct {
		name   string
		res    seats.Result
		status int
		code   string
	}{
		{"held", seats.Result{Outcome: seats.Held, Hold: row}, http.StatusCreated, "held"},
		{"replayed from the ledger", seats.Result{Outcome: seats.Replayed, Hold: row}, http.StatusCreated, "replayed"},
		{"replayed from the key's record", seats.Result{Outcome: seats.Replayed, Stored: &idem.StoredResponse{Status: 409, Body: []byte("{}")}}, 409, "replayed"},
		{"already held", seats.Result{Outcome: seats.AlreadyHeld, Hold: row}, http.StatusOK, "already_held"},
		{"sold out", seats.Result{Outcome: seats.SoldOut}, http.StatusConflict, "sold_out"},
		{"fewer left", seats.Result{Outcome: seats.SoldOut, Remaining: 1}, http.StatusConflict, "sold_out"},
		{"key reused", seats.Result{Outcome: seats.KeyReused}, http.StatusUnprocessableEntity, "idempotency_key_reused"},
		{"in progress", seats.Result{Outcome: seats.InProgress}, http.StatusConflict, "request_in_progress"},
		{"unavailable", seats.Result{Outcome: seats.Unavailable, Reason: seats.ReasonNotRecorded}, http.StatusServiceUnavailable, "unavailable"},
		{"unknown", seats.Result{}, http.StatusServiceUnavailable, "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := holdAnswer(ev, tt.res)
			assert.Equal(t, tt.status, got.status)
			assert.Equal(t, tt.code, got.outcome)
			assert.NotEmpty(t, got.body)
			if tt.status == http.StatusServiceUnavailable {
				assert.Positive(t, got.retryAfter)
			}
		})
	}
	assert.Equal(t, row.Response, holdAnswer(ev, seats.Result{Outcome: seats.Held, Hold: row}).body, "a new hold answers its row's body")
	assert.Contains(t, string(holdAnswer(ev, seats.Result{Outcome: seats.SoldOut, Remaining: 1}).body), "only 1 seats")
}
