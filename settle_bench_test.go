package sluice

import (
	"fmt"
	"testing"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// settlingZones is a rate_limit with a concurrency zone and a count_status
// zone that admit everything the benchmarks send (every response is 200,
// so count_status refunds each one), plus the given store block.
func settlingZones(store string) string {
	return fmt.Sprintf(`rate_limit {
	%s
	zone %s {
		key {http.vars.client_ip}
		algorithm concurrency
		events 1000000
	}
	zone %s {
		key {http.request.header.X-Key}
		algorithm fixed_window
		events 1000000000
		window 1h
		count_status 401
	}
}`, store, uniqueZone("bench_lease"), uniqueZone("bench_status"))
}

// BenchmarkServeHTTPSettling measures a request that settles after its
// response (a lease and a refund), settlement included: each iteration
// waits for the background settlement, so ns/op is the full cost.
func BenchmarkServeHTTPSettling(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		benchServe(b, newHandler(b, settlingZones("")))
		settling.Wait()
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		benchServe(b, newHandler(b, settlingZones("redis {\n\t\turl "+srv.URL()+"\n\t\ttimeout 1s\n\t}")))
		settling.Wait()
	})
}
