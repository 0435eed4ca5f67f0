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

func writeBody(w http.ResponseWriter, status int, contentType string, body []byte) error {
	hdr := w.Header()
	hdr.Set("Content-Type", contentType)
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}
