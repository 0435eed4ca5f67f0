package outbox_test

import (
	"encoding/json"
	"flag"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/outbox"
)

var updateSignatures = flag.Bool("update-signatures", false,
	"rewrite the shared table of signed events, examples/backends/testdata/signatures.json")

const signatureTable = "../../examples/backends/testdata/signatures.json"

// sigTable is the table of signed booking events the verify recipes of
// examples/backends are tested against: each must give every row's verdict.
type sigTable struct {
	Comment          string   `json:"comment"`
	Secret           string   `json:"secret"`
	ToleranceSeconds int      `json:"tolerance_seconds"`
	Now              int64    `json:"now"`
	Cases            []sigRow `json:"cases"`
}

type sigRow struct {
	Name   string `json:"name"`
	Header string `json:"header"`
	Body   string `json:"body"`
	Valid  bool   `json:"valid"`
}

func buildSignatureTable() sigTable {
	const tableSecret = "whsec_recipes_0123456789abcdef"
	now := time.Unix(1_780_000_300, 0)
	body := `{"id":"evt_6f1c2b0e9d8a4c3b8e7f6a5d4c3b2a10","type":"booking.confirmed","created":1780000000,` +
		`"data":{"booking":"0f8fad5b-d9cb-469f-a165-70867728950e","event":42,"user":"ann","status":"confirmed",` +
		`"reason":"","quantity":2,"amount":180000,"currency":"inr","tickets":[]}}`
	unicode := `{"id":"evt_0a1b2c3d4e5f60718293a4b5c6d7e8f9","type":"ticket.admitted","created":1780000200,` +
		`"data":{"booking":"0f8fad5b-d9cb-469f-a165-70867728950e","event":42,"user":"zoë – 東京",` +
		`"ticket":{"code":"t1","seat":7,"seat_id":null},"gate":"north-3","scanned_at":"2026-05-28T20:30:00Z","offline":false}}`
	sign := func(secret string, t time.Time, b string) string { return outbox.Sign([]byte(secret), t, []byte(b)) }
	good := sign(tableSecret, now.Add(-10*time.Second), body)
	return sigTable{
		Comment: "Signed booking events (docs/api.md §17) and the verdict every verify recipe must give, " +
			"with secret, at now, tolerance_seconds either way. Written by go test ./origin/outbox -run TestSignatureTable -update-signatures.",
		Secret: tableSecret, ToleranceSeconds: 300, Now: now.Unix(),
		Cases: []sigRow{
			{Name: "valid", Header: good, Body: body, Valid: true},
			{Name: "valid, non-ASCII body (the raw bytes are signed)", Header: sign(tableSecret, now, unicode), Body: unicode, Valid: true},
			{Name: "valid, at the edge of the tolerance", Header: sign(tableSecret, now.Add(-300*time.Second), body), Body: body, Valid: true},
			{Name: "valid, one of two v1 (a secret being rotated)",
				Header: "t=" + strconv.FormatInt(now.Unix(), 10) + ",v1=" + sign("whsec_the_old_one_0123", now, body)[len("t=1780000300,v1="):] +
					",v1=" + sign(tableSecret, now, body)[len("t=1780000300,v1="):], Body: body, Valid: true},
			{Name: "wrong secret", Header: sign("whsec_another_site_0123", now, body), Body: body},
			{Name: "tampered body", Header: good, Body: body[:len(body)-2] + `,"amount":1}}`},
			{Name: "body re-encoded (whitespace)", Header: good, Body: body + "\n"},
			{Name: "old timestamp beyond the tolerance", Header: sign(tableSecret, now.Add(-301*time.Second), body), Body: body},
			{Name: "timestamp from the future beyond the tolerance", Header: sign(tableSecret, now.Add(301*time.Second), body), Body: body},
			{Name: "timestamp changed, signature kept", Header: "t=" + strconv.FormatInt(now.Unix(), 10) + good[len("t=1780000290"):], Body: body},
			{Name: "no v1", Header: "t=" + strconv.FormatInt(now.Unix(), 10), Body: body},
			{Name: "no header", Header: "", Body: body},
			{Name: "v1 not hex", Header: "t=" + strconv.FormatInt(now.Unix(), 10) + ",v1=zz", Body: body},
		},
	}
}

// TestSignatureTable: the shared table is what Sign makes, and Verify gives
// every row's verdict, as each recipe must.
func TestSignatureTable(t *testing.T) {
	want := buildSignatureTable()
	if *updateSignatures {
		b, err := json.MarshalIndent(want, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(signatureTable, append(b, '\n'), 0o644))
	}
	raw, err := os.ReadFile(signatureTable)
	require.NoError(t, err)
	var got sigTable
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, want, got, "the table is out of date: go test ./origin/outbox -run TestSignatureTable -update-signatures")
	for _, row := range got.Cases {
		err := outbox.Verify(row.Header, []byte(row.Body), []byte(got.Secret), time.Unix(got.Now, 0),
			time.Duration(got.ToleranceSeconds)*time.Second)
		assert.Equal(t, row.Valid, err == nil, "%s: %v", row.Name, err)
	}
}
