package jsonbody

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type body struct {
	Set    *int64 `json:"set"`
	Reason string `json:"reason"`
}

func TestDecode(t *testing.T) {
	var ok body
	require.NoError(t, Decode([]byte(" {\"set\":5,\"reason\":\"caf\u00e9 \\\\u0000 \\u00e9\"}\n"), &ok))
	assert.Equal(t, int64(5), *ok.Set)
	assert.Equal(t, `café \u0000 é`, ok.Reason, "an escaped backslash then text is no NUL")

	for name, in := range map[string]string{
		"empty":             "",
		"spaces":            "  ",
		"not an object":     `[{"set":1}]`,
		"not UTF-8":         "{\"set\":5,\"reason\":\"\xff\xfe\"}",
		"a NUL escape":      `{"set":6,"reason":"a\u0000b"}`,
		"an unknown field":  `{"set":1,"raise_by":2}`,
		"two objects":       `{"set":1}{"set":2}`,
		"data after it":     `{"set":1} x`,
		"not JSON":          `{set:1}`,
		"a string for a n°": `{"set":"1"}`,
		"a name twice":      `{"set":1,"set":2}`,
		"a mis-cased name":  `{"Set":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			var v body
			err := Decode([]byte(in), &v)
			var inv *InvalidError
			require.ErrorAs(t, err, &inv)
			assert.NotEmpty(t, inv.Reason)
		})
	}
}

func TestRead(t *testing.T) {
	const limit = 64 << 10
	read := func(r *http.Request) ([]byte, error) { return Read(httptest.NewRecorder(), r, limit) }

	b, err := read(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"set":1}`)))
	require.NoError(t, err)
	assert.Equal(t, `{"set":1}`, string(b))

	exact := strings.Repeat(" ", limit-2) + "{}"
	b, err = read(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(exact)))
	require.NoError(t, err, "the limit itself is allowed")
	assert.Len(t, b, limit)

	// Declared too large: refused unread.
	r := httptest.NewRequest(http.MethodPost, "/", failingReader{})
	r.ContentLength = limit + 1
	_, err = read(r)
	assert.ErrorIs(t, err, ErrTooLarge)

	// Sent without a length (chunked), too large by what came.
	r = httptest.NewRequest(http.MethodPost, "/", io.MultiReader(strings.NewReader(`{"set":10}`), strings.NewReader(strings.Repeat(" ", 70000))))
	r.ContentLength = -1
	_, err = read(r)
	assert.ErrorIs(t, err, ErrTooLarge)

	// A body that breaks off.
	r = httptest.NewRequest(http.MethodPost, "/", failingReader{})
	r.ContentLength = -1
	_, err = read(r)
	var inv *InvalidError
	assert.ErrorAs(t, err, &inv)
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

type nested struct {
	Seats []struct {
		ID string `json:"id"`
	} `json:"seats"`
	Meta map[string]any `json:"meta"`
	body
}

func TestDecodeNames(t *testing.T) {
	for name, tc := range map[string]struct{ in, reason string }{
		"a name twice":                 {`{"set":1,"reason":"x","set":2}`, `"set" is given twice`},
		"a mis-cased name":             {`{"Set":1}`, `unknown field "Set": names are case-sensitive ("set")`},
		"a mis-cased embedded name":    {`{"REASON":"x"}`, `unknown field "REASON": names are case-sensitive ("reason")`},
		"a name twice in an array":     {`{"seats":[{"id":"a"},{"id":"b","id":"c"}]}`, `"seats[1].id" is given twice`},
		"a mis-cased name in an array": {`{"seats":[{"Id":"a"}]}`, `unknown field "seats[0].Id": names are case-sensitive ("seats[0].id")`},
		"a name twice in a map":        {`{"meta":{"a":{"b":1,"b":2}}}`, `"meta.a.b" is given twice`},
		"past int64":                   {`{"set":9223372036854775808}`, `"set" must be a whole number from -9223372036854775808 to 9223372036854775807 (got number 9223372036854775808)`},
		"a fraction":                   {`{"set":1.5}`, `"set" must be a whole number from -9223372036854775808 to 9223372036854775807 (got number 1.5)`},
		"a string for a number":        {`{"set":"1"}`, `"set" must be a whole number from -9223372036854775808 to 9223372036854775807 (got string)`},
		"a number for a string":        {`{"seats":[{"id":1}]}`, `"seats[0].id" must be a string (got number)`},
	} {
		t.Run(name, func(t *testing.T) {
			// Into body where the route's own fields are judged: encoding/json
			// names an embedded struct's field by its Go path.
			var v any = new(nested)
			if strings.Contains(tc.in, `"set"`) {
				v = new(body)
			}
			var inv *InvalidError
			require.ErrorAs(t, Decode([]byte(tc.in), v), &inv)
			assert.Equal(t, tc.reason, inv.Reason)
		})
	}

	var v nested
	require.NoError(t, Decode([]byte(`{"seats":[{"id":"a"},{"id":"b"}],"meta":{"A":1,"a":2},"set":3,"reason":"r"}`), &v),
		"the same name in separate objects, and a map's keys in any case, are fine")
	assert.Equal(t, int64(3), *v.Set)
	assert.Equal(t, "b", v.Seats[1].ID)
}
