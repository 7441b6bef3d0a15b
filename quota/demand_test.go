package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// A lease is sized for what it can serve: a token_bucket's lease lives a
// slot (a twentieth of its window), not quota_lease, and a grant asks a
// zone only for what its lasting leases lack, whichever zone's lease ran
// out (a renewal, or a grant on the request path). A static key beside
// per-IP token_bucket keys at 10,000 requests a second: one IP; or 8 IPs
// in turn, 60 ms each, so that an IP's leases end while it rests and its
// next request asks on the request path. From the second second on, the
// static key's units out stay under twice what its demand uses in a
// lease's life (before: 4–20 times, a full lease at every grant), as do
// a lone IP's, all of whose requests are decided from leases.
func TestQuotaLeasesSizedForTheirLife(t *testing.T) {
	for _, ips := range []int{1, 8} {
		t.Run(fmt.Sprintf("%d IPs", ips), func(t *testing.T) {
			f := newLeaseFixture(t, DefaultKeys)
			static := leasing("static", 1_000_000_000)
			ip := algorithms.Request{Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1_000_000, Window: time.Second, Burst: 1_000_000},
				Cost: 1, Quota: algorithms.QuotaAsk{For: testLeaseFor}}
			const step = 100 * time.Microsecond // 10,000 a second
			perLife := func(r algorithms.Request) int64 { return int64(leaseLife(&r) / step) }
			for i := range 20_000 {
				f.clock.Advance(step)
				ip.Key = fmt.Sprintf("ip%d", i/600%ips)
				ds := f.allow(t, ip, static)
				if i < 10_000 {
					continue
				}
				if ips == 1 && !ds[0].Leased {
					t.Fatalf("request %d was not decided from leases: %+v", i, ds)
				}
				checked := []algorithms.Request{static}
				if ips == 1 {
					checked = append(checked, ip)
				}
				for _, r := range checked {
					if out := f.leftOf(r); out > 2*perLife(r) {
						t.Fatalf("request %d: %s holds %d units not yet used, over twice the %d its demand uses in a lease's life (%v)",
							i, r.Key, out, perLife(r), leaseLife(&r))
					}
				}
			}
		})
	}
}

// TestQuotaLeasesHotKeyLeasesFast: a key requested at 1,000 a second or
// more leases within 50 ms of its first request, its lease sized by the
// rate seen (4,000 requests after 200: at most 0.02 store calls a
// request); a key at a few hundred a second, and a client's burst that
// is over within fastDemandFor, are decided in the store until their
// demand has lasted demandWarmup.
func TestQuotaLeasesHotKeyLeasesFast(t *testing.T) {
	for _, tt := range []struct {
		name      string
		step      time.Duration
		firstFrom time.Duration // want the first leased answer no later (hot), or no sooner (not)
		hot       bool
	}{
		{"1,000 a second", time.Millisecond, 50 * time.Millisecond, true},
		{"4,000 a second", 250 * time.Microsecond, 50 * time.Millisecond, true},
		{"400 a second", 2500 * time.Microsecond, demandWarmup, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newLeaseFixture(t, DefaultKeys) // no round trip: each request at its step, as from concurrent clients
			r := leasing("hot", 1_000_000_000)
			start := f.clock.Now()
			var first time.Duration
			for i := range 4200 {
				if d := f.allow(t, r)[0]; d.Leased && first == 0 {
					first = f.clock.Now().Sub(start)
				}
				if i == 199 {
					f.store.requests.Store(0)
				}
				f.clock.Advance(tt.step)
			}
			if first == 0 {
				t.Fatal("no request was decided from a lease")
			}
			if tt.hot && first > tt.firstFrom || !tt.hot && first < tt.firstFrom {
				t.Errorf("first leased answer %v after the first request; want it %s %v", first, map[bool]string{true: "within", false: "no sooner than"}[tt.hot], tt.firstFrom)
			}
			calls := float64(f.store.requests.Load()) / 4000
			t.Logf("first leased answer after %v; %.4f store calls a request after the first 200", first, calls)
			if tt.hot && calls > 0.02 {
				t.Errorf("%.3f store calls a request after the first 200, want at most 0.02", calls)
			}
		})
	}

	t.Run("a burst", func(t *testing.T) {
		f := newLeaseFixture(t, DefaultKeys)
		r := leasing("burst", 1_000_000_000)
		start := f.clock.Now()
		for range 100 { // at once, then 100 a second
			f.allow(t, r)
		}
		for f.clock.Now().Sub(start) < demandWarmup-10*time.Millisecond {
			f.clock.Advance(10 * time.Millisecond)
			if d := f.allow(t, r)[0]; d.Leased || d.Quota.Units > 0 {
				t.Fatalf("%v after a burst of 100: leased %+v", f.clock.Now().Sub(start), d)
			}
		}
	})
}
