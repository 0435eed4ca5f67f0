package apitest

import "testing"

// The origin's document loads, is a valid OpenAPI document and routes.
func TestOriginDocumentLoads(t *testing.T) {
	if _, err := Origin(); err != nil {
		t.Fatal(err)
	}
}
