// Package jsonbody reads a request's JSON body the way docs/api.md §1 asks
// of every route that takes one, the origin's and the gateway admin API's
// alike: one JSON object of UTF-8 text, no NUL in its strings, no field the
// route does not know, nothing after it, and at most a route's limit of
// bytes. The callers turn its errors into their own answers (413, 400).
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"unicode/utf8"
)

// ErrTooLarge is a body over the limit, by its declared length or by the
// bytes that came.
var ErrTooLarge = errors.New("the request body is too large")

// InvalidError is a body that is not one JSON object the route takes; its
// text says why, for the client.
type InvalidError struct{ Reason string }

func (e *InvalidError) Error() string { return e.Reason }

func invalid(reason string) error { return &InvalidError{Reason: reason} }

// Read reads r's body, at most limit bytes of it. The declared length is
// judged first, so a body known to be too large is refused unread.
func Read(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, ErrTooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, ErrTooLarge
	case err != nil:
		return nil, invalid("the request body could not be read")
	}
	return b, nil
}

// Decode decodes body, exactly one JSON object, into v, refusing fields v
// does not have.
func Decode(body []byte, v any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return invalid("the request body must be a JSON object")
	}
	// JSON is UTF-8 (RFC 8259): decoding would turn a stray byte into
	// U+FFFD silently, and keep a \u0000 that PostgreSQL's text refuses
	// and that no name, reason or id needs.
	if !utf8.Valid(trimmed) {
		return invalid("the request body is not UTF-8")
	}
	if escapesNUL(trimmed) {
		return invalid("the request body holds a \\u0000 escape: NUL is not allowed in a string")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("invalid JSON: " + err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("invalid JSON: data after the object")
	}
	return nil
}

// escapesNUL reports whether a JSON text holds the escape \u0000. In JSON
// a backslash only ever starts a two-character escape, so skipping the
// character after each one keeps "\\u0000" (a backslash, then text) apart.
func escapesNUL(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if bytes.HasPrefix(b[i+1:], []byte("u0000")) {
			return true
		}
		i++
	}
	return false
}
