package integration_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

func TestZZDebug(t *testing.T) {
	srv := redistest.Start(t)
	site := fmt.Sprintf(`	rate_limit {
%s		headers ietf legacy x
		zone api {
			key {http.request.header.X-Tenant}
			algorithm sliding_log
			events 2
			window 1m
		}
		zone other {
			key {http.request.header.X-Tenant}
			events 5
			window 1m
		}
	}
	respond "ok" 200`, redisBlock(srv))
	c := startCaddy(t, caddyConfig{Site: site})
	cl := newClient(1)
	for i := 0; i < 3; i++ {
		r := get(t, cl, c.URL+"/", "X-Tenant", "tenant-1")
		t.Logf("%d %v", r.Status, r.Header)
	}
	t.Log(scanKeys(t, srv.Client(t), "*"))
	t.Log(c.Log.String())
}
