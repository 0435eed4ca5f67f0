// Package caddymodule plugs the waiting room into Caddy: the HTTP handler
// http.handlers.waitroom (Caddyfile directive waitroom), its admin API
// admin.api.waitroom, the waiting and sold-out pages, and the
// caddy_waitroom_* metrics.
//
// Build it into Caddy with xcaddy (`xcaddy build --with
// github.com/waitroom/waitroom`) or use cmd/caddy.
package caddymodule
