package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/waitroom/lottery"
)

// published is what GET /waitroom/events/{id}/lottery answers after a draw
// over these entrants with the seed 00 01 … 1f.
func published(t *testing.T, base int64, entrants ...string) string {
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i)
	}
	list := lottery.Sorted(entrants)
	if list == nil {
		list = []string{} // as the route publishes a draw of nobody
	}
	b, err := json.Marshal(map[string]any{
		"event": 42, "opens_at": "2030-01-31T10:00:00Z", "drawn": true,
		"commitment": lottery.Commitment(seed), "seed": hex.EncodeToString(seed),
		"entrants": list, "algorithm": lottery.Algorithm, "base": base,
	})
	require.NoError(t, err)
	return string(b)
}

func TestVerify(t *testing.T) {
	doc := published(t, 10, "alice", "bob", "carol", "dave", "erin", "frank")
	file := filepath.Join(t.TempDir(), "lottery.json")
	require.NoError(t, os.WriteFile(file, []byte(doc), 0o600))
	// The order of the package's known-answer test, from position 11 on.
	all := "dave\t11\nbob\t12\ncarol\t13\nalice\t14\nerin\t15\nfrank\t16\n"

	for _, c := range []struct {
		name       string
		args       []string
		stdin      string
		code       int
		out, inErr string
	}{
		{name: "file", args: []string{file}, out: all},
		{name: "stdin", stdin: doc, out: all},
		{name: "dash is stdin", args: []string{"-"}, stdin: doc, out: all},
		{name: "one entrant", args: []string{"-id", "carol", file}, out: "carol\t13\n"},
		{name: "matching commitment", args: []string{"-commitment", "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd", file}, out: all},
		{name: "other commitment", args: []string{"-commitment", lottery.Commitment([]byte("another seed")), file}, code: 1, inErr: "not the one given"},
		// Hex is the same in either case, and a copied one may carry spaces.
		{name: "commitment in capitals", args: []string{"-commitment", " 630DCD2966C4336691125448BBB25B4FF412A49C732DB2C8ABC1B8581BD710DD\n", file}, out: all},
		// A commitment mistyped is the user's slip, not a draw that fails.
		{name: "commitment cut short", args: []string{"-commitment", "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710d", file}, code: 2, inErr: "-commitment: want the 64 hex digits of a SHA-256"},
		{name: "commitment not hex", args: []string{"-commitment", "the hex I saved", file}, code: 2, inErr: "-commitment: want the 64 hex digits of a SHA-256"},
		{name: "not an entrant", args: []string{"-id", "mallory", file}, code: 1, inErr: `"mallory" is not among the 6 entrants`},
		{name: "seed swapped", stdin: strings.Replace(doc, `"seed":"00`, `"seed":"ff`, 1), code: 1, inErr: "does not match the commitment"},
		{name: "other algorithm", stdin: strings.Replace(doc, "waitroom-lottery-v1", "v0", 1), code: 1, inErr: "unknown lottery algorithm"},
		{name: "before the draw", stdin: `{"event":42,"commitment":"ab","drawn":false}`, code: 1, inErr: "has not been made yet"},
		{name: "not json", stdin: "nope", code: 1, inErr: "reading the lottery"},
		// What curl saves when the gateway cannot be reached.
		{name: "empty", stdin: "", code: 1, inErr: "reading the lottery: the input is empty"},
		{name: "the route's error", stdin: `{"error":"not_found","message":"event 43 has no scheduled opening (opens_at)"}`, code: 1,
			inErr: "not a draw but an error answer: not_found: event 43 has no scheduled opening (opens_at)"},
		{name: "caddy's error", stdin: `{"error":"unknown route"}`, code: 1, inErr: "not a draw but an error answer: unknown route"},
		{name: "no commitment", stdin: `{}`, code: 1, inErr: "not a draw: it has no commitment"},
		// A list cut out of the file is not an empty draw: the route
		// publishes [] for one.
		{name: "no entrants list", stdin: strings.Replace(doc, `"entrants":["alice","bob","carol","dave","erin","frank"],`, "", 1), code: 1, inErr: "not a draw: it has no list of entrants"},
		{name: "entrants null", stdin: strings.Replace(doc, `["alice","bob","carol","dave","erin","frank"]`, "null", 1), code: 1, inErr: "not a draw: it has no list of entrants"},
		{name: "a draw of nobody", stdin: published(t, 0), out: ""},
		{name: "negative base", stdin: strings.Replace(doc, `"base":10`, `"base":-3`, 1), code: 1, inErr: "base -3 is negative"},
		{name: "two documents", stdin: doc + doc, code: 1, inErr: "reading the lottery: data after the draw"},
		{name: "missing file", args: []string{filepath.Join(t.TempDir(), "none.json")}, code: 2, inErr: "no such file"},
		{name: "two files", args: []string{file, file}, code: 2, inErr: "usage"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(c.args, strings.NewReader(c.stdin), &out, &errOut)
			assert.Equal(t, c.code, code, errOut.String())
			if c.code == 0 {
				assert.Equal(t, c.out, out.String())
			}
			assert.Contains(t, errOut.String(), c.inErr)
		})
	}
}
