// Package waitroom is the root of the waiting-room module. Importing it plugs
// the Caddy modules in, so that
//
//	xcaddy build --with github.com/waitroom/waitroom
//
// builds Caddy with the waitroom handler and its admin API. The admission
// core lives in the waitroom/ subpackage, the Caddy modules in caddymodule/.
package waitroom

import (
	// Registers http.handlers.waitroom and admin.api.waitroom.
	_ "github.com/waitroom/waitroom/caddymodule"
)
