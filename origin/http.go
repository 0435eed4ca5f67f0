package origin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/waitroom/waitroom/internal/jsonbody"
)

// MaxBodyBytes is the largest request body accepted.
const MaxBodyBytes = 64 << 10

// apiError is the body of every error answer.
type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// response is an answer of the API: a status and a JSON body.
type response struct {
	status int
	body   []byte
	// outcome labels the request metrics.
	outcome string
	// retryAfter, in seconds, for 503s.
	retryAfter int
}

func errorBody(code, msg string) []byte {
	b, _ := json.Marshal(apiError{Error: code, Message: msg})
	return append(b, '\n')
}

func errorResponse(status int, code, msg string) response {
	return response{status: status, body: errorBody(code, msg), outcome: code}
}

func unavailableResponse(msg string) response {
	r := errorResponse(http.StatusServiceUnavailable, "unavailable", msg)
	r.retryAfter = 1
	return r
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "could not encode the response")
		return
	}
	writeResponse(w, response{status: status, body: append(b, '\n')})
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeResponse(w, errorResponse(status, code, msg))
}

func writeResponse(w http.ResponseWriter, resp response) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if resp.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(resp.retryAfter))
	}
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body)
}

var (
	errTooLarge = errorResponse(http.StatusRequestEntityTooLarge, "request_too_large",
		fmt.Sprintf("the request body is larger than %d bytes", MaxBodyBytes))
	errUnavailable = unavailableResponse("a backing service is unavailable; retry shortly")
)

// bodyTooLarge answers 413 from the declared length alone, before anything
// else is looked at.
func bodyTooLarge(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength > MaxBodyBytes {
		writeResponse(w, errTooLarge)
		return true
	}
	return false
}

// noBodyTooLarge is bodyTooLarge for a route that takes no body: a body
// sent without a declared length (chunked) is read through, at most
// MaxBodyBytes of it, so that one over the limit is 413 as well, before the
// route does anything (docs/api.md: a body over 64 KiB is 413
// request_too_large). A body sent anyway must be an empty object: any field
// in it is unknown, and anything else is not JSON, both 400 as on every
// other route.
func noBodyTooLarge(w http.ResponseWriter, r *http.Request) bool {
	if bodyTooLarge(w, r) {
		return true
	}
	body, resp := readBody(w, r)
	if resp == nil && len(bytes.TrimSpace(body)) > 0 {
		resp = decodeStrict(body, &struct{}{})
	}
	if resp != nil {
		writeResponse(w, *resp)
		return true
	}
	return false
}

// readBody reads at most MaxBodyBytes of the body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *response) {
	b, err := jsonbody.Read(w, r, MaxBodyBytes)
	return b, bodyRefused(err)
}

// decodeStrict decodes exactly one JSON object with no unknown fields, of
// UTF-8 text without a NUL: the ledger's text columns refuse anything else
// (ledger.IsText), which would otherwise be a 503 instead of this 400.
func decodeStrict(body []byte, v any) *response {
	return bodyRefused(jsonbody.Decode(body, v))
}

// bodyRefused is the answer to a body jsonbody refused, nil for none.
func bodyRefused(err error) *response {
	var invalid *jsonbody.InvalidError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jsonbody.ErrTooLarge):
		return &errTooLarge
	case errors.As(err, &invalid):
		resp := errorResponse(http.StatusBadRequest, "invalid_request", invalid.Reason)
		return &resp
	default:
		resp := errorResponse(http.StatusBadRequest, "invalid_request", "the request body could not be read")
		return &resp
	}
}

// pathID parses a positive integer id from the path; ok is false (and 404
// answered) otherwise.
func pathID(w http.ResponseWriter, r *http.Request, what string) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusNotFound, "not_found", "no such "+what)
		return 0, false
	}
	return id, true
}

// MaxIdempotencyKeyLen is the longest Idempotency-Key accepted.
const MaxIdempotencyKeyLen = 255

// validIdempotencyKey: 1 to MaxIdempotencyKeyLen characters of UTF-8
// (docs/api.md §8). The key is kept in a text column, which refuses
// anything but UTF-8: such a key could otherwise only ever be answered 503.
func validIdempotencyKey(key string) bool {
	return key != "" && utf8.ValidString(key) && utf8.RuneCountInString(key) <= MaxIdempotencyKeyLen
}
