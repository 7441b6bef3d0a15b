package sluice

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestConcurrencyZoneSetup: the default window, and the policy member
// without w.
func TestConcurrencyZoneSetup(t *testing.T) {
	z := &Zone{Key: "k", Algorithm: "concurrency", MaxEvents: 10}
	if err := z.setup("inflight"); err != nil {
		t.Fatal(err)
	}
	if err := z.validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := z.limit.Window, time.Minute; got != want {
		t.Errorf("got window %v, want %v", got, want)
	}
	if got, want := z.policy, `"inflight";q=10;qu="concurrent-requests"`; got != want {
		t.Errorf("got policy %s, want %s", got, want)
	}
}

// TestQuotaLeaseResolution: the quota lease in force is the zone's own,
// else the handler's, else 250ms, at most the zone's window (a period
// zone: 10s); 0 when off, on the embedded store, in a zone that settles
// or waits, and in dry run.
func TestQuotaLeaseResolution(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name     string
		zone     Zone
		handler  time.Duration // the handler's quota_lease
		dryRun   bool          // the handler's
		embedded bool          // no redis block
		want     time.Duration
	}{
		{name: "default", zone: Zone{Window: dur(time.Minute)}, want: 250 * ms},
		{name: "default within a short window", zone: Zone{Window: dur(100 * ms)}, want: 100 * ms},
		{name: "the zone's own", zone: Zone{Window: dur(time.Minute), QuotaLease: dur(2 * time.Second)}, want: 2 * time.Second},
		{name: "the zone's own wins over the handler's", zone: Zone{Window: dur(time.Minute), QuotaLease: dur(30 * ms)}, handler: time.Second, want: 30 * ms},
		{name: "the handler's", zone: Zone{Window: dur(time.Minute)}, handler: 5 * time.Second, want: 5 * time.Second},
		{name: "the handler's within the zone's window", zone: Zone{Window: dur(400 * ms)}, handler: 5 * time.Second, want: 400 * ms},
		{name: "the handler's in a period zone", zone: Zone{Period: "day"}, handler: 10 * time.Second, want: 10 * time.Second},
		{name: "default in a period zone", zone: Zone{Period: "month"}, want: 250 * ms},
		{name: "off in the zone", zone: Zone{Window: dur(time.Minute), QuotaLease: quotaLeaseOff}, handler: time.Second, want: 0},
		{name: "off in the handler", zone: Zone{Window: dur(time.Minute)}, handler: -1, want: 0},
		{name: "the zone's own over the handler's off", zone: Zone{Window: dur(time.Minute), QuotaLease: dur(ms)}, handler: -1, want: ms},
		{name: "fixed_window", zone: Zone{Algorithm: "fixed_window", Window: dur(time.Second)}, want: 250 * ms},
		{name: "sliding_log", zone: Zone{Algorithm: "sliding_log", Window: dur(time.Second)}, want: 250 * ms},
		{name: "token_bucket", zone: Zone{Algorithm: "token_bucket", Window: dur(time.Second)}, want: 250 * ms},
		{name: "embedded store", zone: Zone{Window: dur(time.Minute), QuotaLease: dur(time.Second)}, embedded: true, want: 0},
		{name: "count_status", zone: Zone{Window: dur(time.Minute), QuotaLease: dur(time.Second), CountStatus: []string{"401"}}, want: 0},
		{name: "cost_from_response", zone: Zone{Window: dur(time.Minute), QuotaLease: dur(time.Second), CostFromResponse: "{http.response.header.X-Cost}"}, want: 0},
		{name: "concurrency", zone: Zone{Algorithm: "concurrency", QuotaLease: dur(time.Second)}, want: 0},
		{name: "max_delay", zone: Zone{Algorithm: "token_bucket", Window: dur(time.Minute), MaxDelay: dur(time.Second), QuotaLease: dur(time.Second)}, want: 0},
		{name: "the zone's dry_run", zone: Zone{Window: dur(time.Minute), QuotaLease: dur(time.Second), DryRun: true}, want: 0},
		{name: "the handler's dry_run", zone: Zone{Window: dur(time.Minute), QuotaLease: dur(time.Second)}, dryRun: true, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z := tt.zone
			z.Key, z.MaxEvents = "k", 10
			if err := z.setup("z"); err != nil {
				t.Fatal(err)
			}
			if err := z.validate(); err != nil {
				t.Fatal(err)
			}
			z.resolveQuotaLease(dur(tt.handler), tt.dryRun, tt.embedded)
			if got := z.quotaLease; got != tt.want {
				t.Errorf("quota lease in force: got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestQuotaLeaseValidate: a zone's own quota_lease is from 1ms to its
// window, at most 10s (a period zone: 10s), and the error names the
// option and the bound.
func TestQuotaLeaseValidate(t *testing.T) {
	tests := []struct {
		name string
		zone Zone
		want []string // substrings of the error; nil: valid
	}{
		{"1ms", Zone{Window: dur(time.Second), QuotaLease: dur(time.Millisecond)}, nil},
		{"the window", Zone{Window: dur(300 * time.Millisecond), QuotaLease: dur(300 * time.Millisecond)}, nil},
		{"10s", Zone{Window: dur(time.Hour), QuotaLease: dur(10 * time.Second)}, nil},
		{"off", Zone{Window: dur(time.Millisecond), QuotaLease: quotaLeaseOff}, nil},
		{"any negative is off", Zone{Window: dur(time.Second), QuotaLease: dur(-time.Hour)}, nil},
		{"period 10s", Zone{Period: "year", QuotaLease: dur(10 * time.Second)}, nil},
		{"under 1ms", Zone{Window: dur(time.Second), QuotaLease: dur(time.Microsecond)}, []string{"quota_lease", "from 1ms to 1s (the zone's window)", "got 1µs"}},
		{"above the window", Zone{Window: dur(300 * time.Millisecond), QuotaLease: dur(301 * time.Millisecond)}, []string{"quota_lease", "300ms (the zone's window)", "got 301ms"}},
		{"above 10s", Zone{Window: dur(time.Hour), QuotaLease: dur(11 * time.Second)}, []string{"quota_lease", "from 1ms to 10s,", "got 11s"}},
		{"period above 10s", Zone{Period: "day", QuotaLease: dur(time.Minute)}, []string{"quota_lease", "from 1ms to 10s,", "got 1m0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z := tt.zone
			z.Key, z.MaxEvents = "k", 10
			if err := z.setup("z"); err != nil {
				t.Fatal(err)
			}
			err := z.validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("validate: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("validate accepted it")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestQuotaLeaseProvisioned: a handler on Redis resolves each zone's
// quota lease at provision, its requests carry it (Quota.For; the units
// are the lease holder's to ask) and the admin API lists it; on the
// embedded store no zone leases.
func TestQuotaLeaseProvisioned(t *testing.T) {
	srv := redistest.Start(t)
	hot, own, off, settles := uniqueZone("hot"), uniqueZone("own"), uniqueZone("off"), uniqueZone("settles")
	zones := []string{
		zoneCfg(hot, "key static", "events 1000", "window 1m"),
		zoneCfg(own, "key static", "events 1000", "window 1m", "quota_lease 40ms"),
		zoneCfg(off, "key static", "events 1000", "window 1m", "quota_lease off"),
		zoneCfg(settles, "key static", "events 1000", "window 1m", "count_status 401"),
	}
	want := map[string]time.Duration{hot: 2 * time.Second, own: 40 * time.Millisecond, off: 0, settles: 0}
	h := newHandler(t, rateLimit(append([]string{block("redis", "url "+srv.URL()), "quota_lease 2s"}, zones...)...))
	repl := caddy.NewReplacer()
	for _, z := range h.zones {
		if got := z.quotaLease; got != want[z.name] {
			t.Errorf("zone %s: quota lease in force %v, want %v", z.name, got, want[z.name])
		}
		r := z.request(repl, z.storeKey("static"), h.DryRun)
		if got := r.Quota; got != (algorithms.QuotaAsk{For: want[z.name]}) {
			t.Errorf("zone %s: request's Quota %+v, want For %v and nothing else", z.name, got, want[z.name])
		}
	}
	listed := 0
	for _, info := range listZones() {
		if w, ok := want[info.Name]; ok {
			listed++
			if info.QuotaLease != w.Seconds() {
				t.Errorf("zone listing, %s: quota_lease %v, want %v", info.Name, info.QuotaLease, w.Seconds())
			}
		}
	}
	if listed != len(want) {
		t.Errorf("zone listing: %d of the %d zones", listed, len(want))
	}

	embedded := newHandler(t, rateLimit(append([]string{"quota_lease 2s"}, zones...)...))
	for _, z := range embedded.zones {
		if z.quotaLease != 0 {
			t.Errorf("embedded store, zone %s: quota lease in force %v, want 0", z.name, z.quotaLease)
		}
	}
}
