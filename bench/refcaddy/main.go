// Command refcaddy is bench/run.sh's reference for Sluice on Redis driven
// the way Sluice is driven: Caddy with the standard modules and one more
// handler, incr_expire, which runs the reference, the
// classic INCR+EXPIRE script, through go-redis once per HTTP request, with
// nothing batched and no header written. The redis-benchmark reference
// runs that script 16 deep in a Redis that never sleeps; this one pays
// what Sluice pays per call (a round trip, a wake of Caddy and of Redis).
//
//	incr_expire <host:port>   # key: the X-Key request header; window 60 s
//
// It is a measuring stick, not a rate limiter: it counts and admits all.
package main

import (
	"context"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/redis/go-redis/v9"
)

func init() {
	caddy.RegisterModule(IncrExpire{})
	httpcaddyfile.RegisterHandlerDirective("incr_expire", parseIncrExpire)
	httpcaddyfile.RegisterDirectiveOrder("incr_expire", httpcaddyfile.Before, "respond")
}

func main() {
	caddycmd.Main()
}

// incrExpire is the script of bench/run.sh's INCR_EXPIRE, with its window.
var incrExpire = redis.NewScript(`local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], 60) end return c`)

// IncrExpire runs incrExpire once per request on the Redis at Addr.
type IncrExpire struct {
	Addr   string `json:"addr"`
	client *redis.Client
}

func (IncrExpire) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.incr_expire",
		New: func() caddy.Module { return new(IncrExpire) },
	}
}

func (h *IncrExpire) Provision(caddy.Context) error {
	h.client = redis.NewClient(&redis.Options{Addr: h.Addr})
	return nil
}

func (h *IncrExpire) Cleanup() error { return h.client.Close() }

func (h *IncrExpire) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	key := "ref:" + r.Header.Get("X-Key")
	// Not cancelled with the request, as Sluice's calls are not: a client
	// gone mid-call is no error.
	ctx := context.WithoutCancel(r.Context())
	if err := incrExpire.Run(ctx, h.client, []string{key}).Err(); err != nil {
		return caddyhttp.Error(http.StatusServiceUnavailable, err)
	}
	return next.ServeHTTP(w, r)
}

func parseIncrExpire(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(IncrExpire)
	h.Next() // the directive
	if !h.Args(&m.Addr) {
		return nil, h.ArgErr()
	}
	return m, nil
}

var (
	_ caddyhttp.MiddlewareHandler = (*IncrExpire)(nil)
	_ caddy.Provisioner           = (*IncrExpire)(nil)
	_ caddy.CleanerUpper          = (*IncrExpire)(nil)
)
