// Command caddy is Caddy with its standard modules and the waitroom module,
// built with plain `go build` (no xcaddy needed).
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/waitroom/waitroom/caddymodule"
)

func main() {
	caddycmd.Main()
}
