package events

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// table is the shared table of signed events (written from the origin's
// own signer): every recipe gives each row its verdict.
const table = "../../testdata/signatures.json"

type signatures struct {
	Secret           string `json:"secret"`
	ToleranceSeconds int    `json:"tolerance_seconds"`
	Now              int64  `json:"now"`
	Cases            []struct {
		Name   string `json:"name"`
		Header string `json:"header"`
		Body   string `json:"body"`
		Valid  bool   `json:"valid"`
	} `json:"cases"`
}

func load(t *testing.T) signatures {
	t.Helper()
	raw, err := os.ReadFile(table)
	require.NoError(t, err)
	var s signatures
	require.NoError(t, json.Unmarshal(raw, &s))
	require.NotEmpty(t, s.Cases)
	return s
}

func TestSharedTable(t *testing.T) {
	s := load(t)
	for _, c := range s.Cases {
		t.Run(c.Name, func(t *testing.T) {
			err := Verify(c.Header, []byte(c.Body), []byte(s.Secret), time.Unix(s.Now, 0), time.Duration(s.ToleranceSeconds)*time.Second)
			assert.Equal(t, c.Valid, err == nil, "%v", err)
		})
	}
}

func TestHandler(t *testing.T) {
	s := load(t)
	c := s.Cases[0]
	var got []Event
	h := Handler([]byte(s.Secret), func(_ context.Context, ev Event) error {
		got = append(got, ev)
		return nil
	})
	// The table's signatures are of its own time: a fresh one is signed
	// here the way the origin signs.
	header := sign(s.Secret, time.Now().Unix(), c.Body)

	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/hooks/waitroom", strings.NewReader(c.Body))
	req.Header.Set(Header, header)
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusNoContent, rec.Code)
	require.Len(t, got, 1)
	assert.Equal(t, "booking.confirmed", got[0].Type)

	rec = httptest.NewRecorder()
	req = httptest.NewRequest(http.MethodPost, "/hooks/waitroom", strings.NewReader(c.Body))
	req.Header.Set(Header, c.Header) // the table's time is long past
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Len(t, got, 1)
}

func sign(secret string, t int64, body string) string {
	ts := strconv.FormatInt(t, 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + body))
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}
