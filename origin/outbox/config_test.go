package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/waitroom/waitroom/internal/confcheck"
	"github.com/waitroom/waitroom/origin/outbox"
)

// TestEventsURL: a URL that parses but could never take an event is refused
// when the deliverer is made, not found out as every event given up on.
func TestEventsURL(t *testing.T) {
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"https://site.example/hooks", true},
		{"http://127.0.0.1:8080/hooks?src=waitroom", true},
		{"https://user:pass@site.example:443/hooks", true},
		{"site.example/hooks", false},
		{"ftp://site.example/hooks", false},
		{"https:///hooks", false},
		{"http://:80/hooks", false},
		{"https://site.example/hooks ", false},
		{"https://site.example/my hooks", false},
		{"https://site.example:99999/hooks", false},
		{"https://site.example:0/hooks", false},
	} {
		err := confcheck.HTTPURL(tt.url)
		assert.Equal(t, tt.ok, err == nil, "%q: %v", tt.url, err)
		_, err = outbox.New(outbox.Config{URL: tt.url, Secret: secret}, nil)
		assert.Equal(t, tt.ok, err == nil, "New with %q: %v", tt.url, err)
	}
}
