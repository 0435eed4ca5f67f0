package caddymodule

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// How the body of an answer of the handler's own goes out. It is built in
// a pooled buffer and written in one Write: Caddy's response writer takes
// bytes only, so a body built as a string was copied once more on its way
// out, and the waiting page (about 5 KB) is answered to every browser's
// poll: the page filled into a string and its copy as bytes were half of
// what Caddy allocated under that load (docs/scale.md).

// maxPooledBody is the largest buffer kept for reuse; a configured page
// may be far larger than the default ones, and is not worth holding on to.
const maxPooledBody = 64 << 10

var bodies = sync.Pool{New: func() any { return new([]byte) }}

func getBody() *[]byte {
	b := bodies.Get().(*[]byte)
	*b = (*b)[:0]
	return b
}

// putBody returns b to the pool once its answer is written: a Writer
// never keeps what it is given (io.Writer).
func putBody(b *[]byte) {
	if cap(*b) <= maxPooledBody {
		bodies.Put(b)
	}
}

func (h *Handler) render(w http.ResponseWriter, status int, t *template.Template, data any) error {
	b := getBody()
	defer putBody(b)
	if err := t.Execute((*appender)(b), data); err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("waitroom page %s: %w", t.Name(), err))
	}
	return writeHTML(w, status, *b)
}

// appender is an io.Writer onto a byte slice.
type appender []byte

func (a *appender) Write(p []byte) (int, error) {
	*a = append(*a, p...)
	return len(p), nil
}

func writeHTML(w http.ResponseWriter, status int, body []byte) error {
	return writeBody(w, status, "text/html; charset=utf-8", body)
}

// writeJSON writes v as json.Marshal does, and a newline.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b := getBody()
	defer putBody(b)
	if err := json.NewEncoder((*appender)(b)).Encode(v); err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	return writeBody(w, status, "application/json", *b)
}

// writeWaiting writes the waiting answer's JSON form.
func writeWaiting(w http.ResponseWriter, status int, body waitingBody) error {
	b := getBody()
	defer putBody(b)
	*b = body.appendJSON(*b)
	return writeBody(w, status, "application/json", *b)
}

// appendJSON appends b as json.Encoder writes it (tested): the fields in
// order, a newline after. Every poll of an API client is answered with
// it, and encoding/json's reflection was a fifth of the time the handler
// spent on such an answer (docs/scale.md). Only the token may
// need escaping, which encoding/json does when it has anything but plain
// printable ASCII; a signed one never has.
func (b *waitingBody) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"status":`...)
	dst = appendJSONString(dst, b.Status)
	dst = append(dst, `,"event":`...)
	dst = strconv.AppendInt(dst, b.Event, 10)
	dst = append(dst, `,"position":`...)
	dst = strconv.AppendInt(dst, b.Position, 10)
	dst = append(dst, `,"admitted_through":`...)
	dst = strconv.AppendInt(dst, b.AdmittedThrough, 10)
	dst = append(dst, `,"ahead":`...)
	dst = strconv.AppendInt(dst, b.Ahead, 10)
	dst = append(dst, `,"estimated_wait_seconds":`...)
	if b.EstimatedWaitSeconds == nil {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendInt(dst, *b.EstimatedWaitSeconds, 10)
	}
	dst = append(dst, `,"token":`...)
	dst = appendJSONString(dst, b.Token)
	dst = append(dst, `,"paused":`...)
	dst = strconv.AppendBool(dst, b.Paused)
	dst = append(dst, `,"all_held":`...)
	dst = strconv.AppendBool(dst, b.AllHeld)
	if b.MayReturn != 0 {
		dst = append(dst, `,"may_return":`...)
		dst = strconv.AppendInt(dst, b.MayReturn, 10)
	}
	if b.MayReturnWithinSeconds != 0 {
		dst = append(dst, `,"may_return_within_seconds":`...)
		dst = strconv.AppendInt(dst, b.MayReturnWithinSeconds, 10)
	}
	return append(dst, "}\n"...)
}

// appendJSONString appends s as encoding/json writes it.
func appendJSONString(dst []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// autoLength is the longest body whose Content-Length the server writes
// itself: net/http buffers that much of an HTTP/1.1 answer (HTTP/2 and
// HTTP/3 more) and, when the handler returns with all of it buffered,
// declares its length. Leaving the field to it keeps the handler's header
// one field shorter: a new arrival's JSON answer has nine fields with it,
// one more than a Go map keeps in its small form, and the ninth grew the
// header into a table, cloned as one at WriteHeader (docs/scale.md).
const autoLength = 2048

func writeBody(w http.ResponseWriter, status int, contentType string, body []byte) error {
	f := newFields(w.Header(), 2)
	f.set("Content-Type", contentType)
	if len(body) > autoLength {
		f.set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

// fields sets header fields of an answer under names already in canonical
// form, their values in one allocation, where Header.Set canonicalises
// every name and allocates every value: the waiting answer sets six fields
// on every poll. Each value is a slice of its own capacity, so a later Add
// to one field reallocates rather than writing over the next field's value.
type fields struct {
	hdr  http.Header
	vals []string
}

func newFields(hdr http.Header, n int) fields {
	return fields{hdr: hdr, vals: make([]string, 0, n)}
}

// set replaces the field name (canonical) with v.
func (f *fields) set(name, v string) {
	i := len(f.vals)
	f.vals = append(f.vals, v)
	f.hdr[name] = f.vals[i : i+1 : i+1]
}

// add appends v to the field name (canonical).
func (f *fields) add(name, v string) {
	if prev := f.hdr[name]; len(prev) > 0 {
		f.hdr[name] = append(prev, v)
		return
	}
	f.set(name, v)
}
