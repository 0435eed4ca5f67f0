// Package jsonbody reads a request's JSON body the way docs/api.md §1 asks
// of every route that takes one, the origin's and the gateway admin API's
// alike: one JSON object of UTF-8 text, no NUL in its strings, no field the
// route does not know (names match exactly, not in another case), no name
// twice in an object, nothing after it, and at most a route's limit of
// bytes. The callers turn its errors into their own answers (413, 400).
package jsonbody

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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
	// encoding/json/v2's rules: names match exactly (v1 matched them in any
	// case), a name given twice is refused (v1 kept the last, whichever the
	// sender meant), and nothing may follow the value.
	if err := json.Unmarshal(trimmed, v, json.RejectUnknownMembers(true)); err != nil {
		return invalid(reason(err, v))
	}
	return nil
}

// reason says, for the client, what is wrong with a body json.Unmarshal
// refused, naming the field by its path (seats[1].id).
func reason(err error, v any) string {
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		if errors.Is(syn.Err, jsontext.ErrDuplicateName) {
			return fmt.Sprintf("%q is given twice", path(syn.JSONPointer))
		}
		return fmt.Sprintf("invalid JSON at byte %d: %v", syn.ByteOffset, syn.Err)
	}
	var sem *json.SemanticError
	if !errors.As(err, &sem) {
		return "invalid JSON: " + err.Error()
	}
	name := path(sem.JSONPointer)
	if errors.Is(sem.Err, json.ErrUnknownName) {
		if own := ownName(sem.GoType, sem.JSONPointer.LastToken()); own != "" {
			own = path(sem.JSONPointer.Parent().AppendToken(own))
			return fmt.Sprintf("unknown field %q: names are case-sensitive (%q)", name, own)
		}
		return fmt.Sprintf("unknown field %q", name)
	}
	if sem.GoType == nil || name == "" {
		return "invalid JSON: " + err.Error()
	}
	got := sem.JSONKind.String()
	if sem.JSONKind == '0' && len(sem.JSONValue) > 0 {
		got += " " + string(sem.JSONValue)
	}
	t := sem.GoType
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
		return fmt.Sprintf("%q: %v", name, sem.Err)
	}
	return fmt.Sprintf("%q must be %s (got %s)", name, want, got)
}

// path writes a JSON pointer (/seats/1/id) as the field's path in the
// body (seats[1].id).
func path(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.ParseUint(tok, 10, 0); err == nil && b.Len() > 0 {
			fmt.Fprintf(&b, "[%s]", tok)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// ownName is the name of t's field that name spells in another case, ""
// for none; t is the struct the unknown name was met in.
func ownName(t reflect.Type, name string) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return ""
	}
	for f := range t.Fields() {
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-", !f.IsExported() && !f.Anonymous:
			continue
		case f.Anonymous && tag == "":
			if own := ownName(f.Type, name); own != "" {
				return own
			}
			continue
		case tag == "":
			tag = f.Name
		}
		if strings.EqualFold(tag, name) {
			return tag
		}
	}
	return ""
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
