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
