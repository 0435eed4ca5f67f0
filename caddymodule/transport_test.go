package caddymodule

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The token's cookie is written as http.Cookie would write it.
func TestTokenCookieMatchesHTTPCookie(t *testing.T) {
	tests := []struct {
		name   string
		ttl    time.Duration
		secure bool
	}{
		{"plain HTTP", 30 * time.Minute, false},
		{"secure", 30 * time.Minute, true},
		{"odd lifetime", 90*time.Second + 500*time.Millisecond, false},
		{"under a second", 500 * time.Millisecond, true},
	}
	token := "eyJhbGciOiJIUzI1NiJ9.eyJldnQiOjQyfQ.c2lnbmF0dXJlLV8"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := (&http.Cookie{
				Name: "waitroom_42", Value: token, Path: "/", MaxAge: int(tc.ttl / time.Second),
				HttpOnly: true, Secure: tc.secure, SameSite: http.SameSiteLaxMode,
			}).String()
			assert.Equal(t, want, "waitroom_42="+token+cookieSuffix(tc.ttl, tc.secure))
		})
	}
}
