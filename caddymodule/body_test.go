package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The waiting answer's JSON is written by hand; it must be what
// encoding/json writes for the same body, byte for byte.
func TestWaitingBodyIsEncodingJSON(t *testing.T) {
	seconds := int64(240)
	zero := int64(0)
	for _, c := range []struct {
		name string
		body waitingBody
	}{
		{"unknown estimate", waitingBody{Status: StatusWaiting, Event: 42, Position: 12400, AdmittedThrough: 5000, Ahead: 7399, Token: "eyJh.eyJl.sig-_"}},
		{"estimate", waitingBody{Status: StatusWaiting, Event: 42, Position: 7, Ahead: 0, EstimatedWaitSeconds: &seconds, Token: "t"}},
		{"estimate zero", waitingBody{Status: StatusWaiting, Event: 1, Position: 1, EstimatedWaitSeconds: &zero}},
		{"paused", waitingBody{Status: StatusWaiting, Event: 1, Position: 2, Paused: true}},
		{"all held", waitingBody{Status: StatusWaiting, Event: 1, Position: 9, AllHeld: true, MayReturn: 12, MayReturnWithinSeconds: 600}},
		{"all held, none back", waitingBody{Status: StatusWaiting, Event: 1, Position: 9, AllHeld: true}},
		{"negative", waitingBody{Status: StatusWaiting, Event: -1, Position: -2, AdmittedThrough: -3, Ahead: -4}},
		{"escaped token", waitingBody{Status: StatusWaiting, Event: 1, Position: 1, Token: "a\"b\\c<d>&e\x01f\u00e9g\u2028h\x7f\xff"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var want bytes.Buffer
			require.NoError(t, json.NewEncoder(&want).Encode(c.body))
			assert.Equal(t, want.String(), string(c.body.appendJSON(nil)))
		})
	}
}

// The waiting answer leaves Content-Length to the server when its body is
// small: on the wire every answer declares it all the same, and none is
// chunked.
func TestJSONAnswerLengthOnTheWire(t *testing.T) {
	h := provision(t, &Handler{})
	tok, _ := join(t, h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
		if err := h.ServeHTTP(w, r, noop); err != nil {
			t.Error(err)
		}
	}))
	defer srv.Close()
	for _, c := range []struct {
		name   string
		header map[string]string
		status string
	}{
		{"arrival", map[string]string{"Accept": "application/json"}, StatusWaiting},
		{"waiting", map[string]string{"Accept": "application/json", HeaderToken: tok}, StatusWaiting},
		// The client asks for its encoding itself, so Go's transport
		// leaves the answer as it came.
		{"html", map[string]string{"Accept": "text/html", "Accept-Encoding": "identity"}, StatusWaiting},
		{"html gzipped", map[string]string{"Accept": "text/html", "Accept-Encoding": "gzip"}, StatusWaiting},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/buy", nil)
			require.NoError(t, err)
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			res, err := srv.Client().Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			require.NoError(t, res.Body.Close())
			assert.Equal(t, c.status, res.Header.Get(HeaderStatus))
			assert.Empty(t, res.TransferEncoding)
			assert.Equal(t, strconv.Itoa(len(body)), res.Header.Get("Content-Length"))
			assert.Equal(t, int64(len(body)), res.ContentLength)
		})
	}
}
