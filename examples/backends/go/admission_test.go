package admission_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/examples/backends/go"
	"github.com/waitroom/waitroom/waitroom"
)

// table is the shared token table every checker of queue tokens is held
// to: the gateway, the edge Worker and each backend recipe. The gateway's
// tests write it (go test ./caddymodule -run TestEdgeVerdictTable
// -update-verdicts).
const table = "../../../edge/cloudflare/testdata/verdicts.json"

type tokenTable struct {
	Now    int64  `json:"now_ms"`
	Keys   string `json:"keys"`
	Tokens []struct {
		Name     string `json:"name"`
		Event    int64  `json:"event"`
		Token    string `json:"token"`
		Valid    bool   `json:"valid"`
		PreQueue bool   `json:"pre_queue"`
		Subject  string `json:"subject"`
		Position int64  `json:"position"`
	} `json:"tokens"`
}

func TestMiddlewareFollowsTheSharedTable(t *testing.T) {
	raw, err := os.ReadFile(table)
	require.NoError(t, err)
	var tt tokenTable
	require.NoError(t, json.Unmarshal(raw, &tt))
	require.NotEmpty(t, tt.Tokens)
	keys, err := waitroom.ParseKeys(tt.Keys)
	require.NoError(t, err)
	now := time.UnixMilli(tt.Now)

	for _, row := range tt.Tokens {
		t.Run(row.Name, func(t *testing.T) {
			ks, err := waitroom.NewKeySet(func() time.Time { return now }, keys...)
			require.NoError(t, err)
			var seen waitroom.Ticket
			h := admission.Middleware(ks, row.Event, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen, _ = admission.FromContext(r.Context())
				_, _ = w.Write([]byte(strconv.FormatInt(seen.Position, 10)))
			}))
			req := httptest.NewRequest(http.MethodGet, "/checkout", nil)
			req.Header.Set(admission.Header, row.Token)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)

			if row.Valid && !row.PreQueue {
				assert.Equal(t, http.StatusOK, rec.Code)
				assert.Equal(t, row.Subject, seen.Subject)
				assert.Equal(t, row.Position, seen.Position)
				return
			}
			assert.Equal(t, http.StatusForbidden, rec.Code)
			assert.JSONEq(t, `{"error":"not_admitted","message":"this page is reached through the waiting room"}`, rec.Body.String())
		})
	}
}

func TestMiddlewareWithoutToken(t *testing.T) {
	ks, err := waitroom.NewKeySet(nil, waitroom.Key{ID: "k1", Secret: []byte("an-example-secret-of-at-least-32-bytes")})
	require.NoError(t, err)
	h := admission.Middleware(ks, 42, http.NotFoundHandler())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/checkout", nil))
	assert.Equal(t, http.StatusForbidden, rec.Code)
}

// A key set that failed to build (its error dropped) is refused where the
// middleware is made, not by a nil dereference at each request.
func TestMiddlewareWithoutKeySet(t *testing.T) {
	assert.PanicsWithValue(t, "admission: Middleware needs a key set (waitroom.NewKeySet)", func() {
		admission.Middleware(nil, 42, http.NotFoundHandler())
	})
}
