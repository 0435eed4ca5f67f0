// Package jsonbody reads a request's JSON body the way docs/api.md §1 asks
// of every route that takes one, the origin's and the gateway admin API's
// alike: one JSON object of UTF-8 text, no NUL in its strings, no field the
// route does not know (names match exactly, not in another case), no name
// twice in an object, nothing after it, and at most a route's limit of
// bytes. The callers turn its errors into their own answers (413, 400).
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
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
// does not have, a field named in another case than v's, and a name given
// twice in one object.
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
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return invalid(wrongType(typeErr))
		}
		return invalid("invalid JSON: " + err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("invalid JSON: data after the object")
	}
	// encoding/json matches names regardless of case and lets the last of
	// a repeated name win: a "Raise_By" or a second "raise_by" would be
	// taken silently, whichever the sender meant.
	keys := json.NewDecoder(bytes.NewReader(trimmed))
	keys.UseNumber()
	if reason := checkNames(keys, reflect.TypeOf(v), ""); reason != "" {
		return invalid(reason)
	}
	return nil
}

// wrongType says which field held a value of the wrong type or range, and
// what it takes.
func wrongType(e *json.UnmarshalTypeError) string {
	t := e.Type
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var want string
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		shift := 64 - t.Bits()
		want = fmt.Sprintf("a whole number from %d to %d", int64(math.MinInt64)>>shift, int64(math.MaxInt64)>>shift)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = fmt.Sprintf("a whole number from 0 to %d", uint64(math.MaxUint64)>>(64-t.Bits()))
	case reflect.Float32, reflect.Float64:
		want = "a number"
	case reflect.String:
		want = "a string"
	case reflect.Bool:
		want = "true or false"
	case reflect.Slice, reflect.Array:
		want = "an array"
	case reflect.Struct, reflect.Map:
		want = "an object"
	default:
		return "invalid JSON: " + e.Error()
	}
	return fmt.Sprintf("%q must be %s (got %s)", e.Field, want, e.Value)
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// checkNames reads the next value from dec, a valid JSON text, and says
// what is wrong with its names: one repeated in an object, or one that
// matches a field of t only in another case. t is the Go type the value
// was decoded into, nil where it is not known (a map's values are checked
// for repeats alone).
func checkNames(dec *json.Decoder, t reflect.Type, path string) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType)) {
		t = nil
	}
	tok, err := dec.Token()
	if err != nil {
		return ""
	}
	switch tok {
	case json.Delim('{'):
		var fields map[string]reflect.Type
		var elem reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		} else if t != nil && t.Kind() == reflect.Map {
			elem = t.Elem()
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, _ := dec.Token()
			k, _ := kt.(string)
			name := path + k
			if seen[k] {
				return fmt.Sprintf("%q is given twice", name)
			}
			seen[k] = true
			ft := elem
			if fields != nil {
				var ok bool
				if ft, ok = fields[k]; !ok {
					for f := range fields {
						if strings.EqualFold(f, k) {
							return fmt.Sprintf("unknown field %q: names are case-sensitive (%q)", name, path+f)
						}
					}
				}
			}
			if reason := checkNames(dec, ft, name+"."); reason != "" {
				return reason
			}
		}
		_, _ = dec.Token()
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if reason := checkNames(dec, elem, fmt.Sprintf("%s[%d].", strings.TrimSuffix(path, "."), i)); reason != "" {
				return reason
			}
		}
		_, _ = dec.Token()
	}
	return ""
}

// jsonFields are the names encoding/json gives t's fields, with their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = ft
	}
	return out
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
