package apitest

import (
	"bytes"
	"encoding/json"
)

// jsonDecode decodes as kin-openapi does: numbers as float64.
func jsonDecode(raw []byte, v any) error {
	return json.NewDecoder(bytes.NewReader(raw)).Decode(v)
}
