// Command caddy is Caddy with the standard modules and Sluice built in, so
// the repository builds and runs a rate-limited Caddy with no extra tool.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/sluicehq/caddy-sluice"
)

func main() {
	caddycmd.Main()
}
