package sluice

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

func registryZone(name string, events int64) *Zone {
	return &Zone{name: name, limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: events, Window: time.Second}}
}

// inForce returns the events of the registration in force for name, or 0.
func inForce(t *testing.T, name string) int64 {
	t.Helper()
	r, ok := lookupZone(name)
	if !ok {
		return 0
	}
	return r.zone.limit.Events
}

// TestRegistryPairs: registrations pair exactly with their withdrawal, so
// that a config that fails (its handler registered nothing) or is
// abandoned (its handlers withdraw what they registered) leaves the running
// config's zones in force.
func TestRegistryPairs(t *testing.T) {
	running, loading := prometheus.NewRegistry(), prometheus.NewRegistry()
	tests := []struct {
		name  string
		steps func(t *testing.T, zone string)
		want  int64 // events of the zone in force at the end; 0: none
	}{
		{"a failed registration withdraws nothing of the running config", func(t *testing.T, zone string) {
			mustRegister(t, running, registryZone(zone, 5))
			first := mustRegister(t, loading, registryZone(zone, 7))
			regs, err := registerZones(loading, []*Zone{registryZone(zone, 8)}, &stores{}, false, false)
			if err == nil {
				t.Fatal("one config gave a zone two limits without an error")
			}
			unregisterZones(regs)  // Caddy's Cleanup after the failed Provision
			unregisterZones(first) // and of the failed config's other handlers
		}, 5},
		{"an abandoned load leaves the running config in force", func(t *testing.T, zone string) {
			mustRegister(t, running, registryZone(zone, 5))
			unregisterZones(mustRegister(t, loading, registryZone(zone, 7)))
		}, 5},
		{"the newest config is in force", func(t *testing.T, zone string) {
			old := mustRegister(t, running, registryZone(zone, 5))
			mustRegister(t, loading, registryZone(zone, 7))
			unregisterZones(old) // the old config is cleaned up after the reload
		}, 7},
		{"the last withdrawal removes the zone", func(t *testing.T, zone string) {
			unregisterZones(mustRegister(t, running, registryZone(zone, 5)))
		}, 0},
		{"a second withdrawal of nothing changes nothing", func(t *testing.T, zone string) {
			mustRegister(t, running, registryZone(zone, 5))
			unregisterZones(nil)
			unregisterZones(nil)
		}, 5},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := "registry_test_" + string(rune('a'+i))
			t.Cleanup(func() {
				zoneRegistry.Lock()
				delete(zoneRegistry.byName, zone)
				zoneRegistry.Unlock()
			})
			tt.steps(t, zone)
			if got := inForce(t, zone); got != tt.want {
				t.Errorf("events of zone in force: got %d, want %d", got, tt.want)
			}
		})
	}
}

func mustRegister(t *testing.T, config *prometheus.Registry, zones ...*Zone) []*registration {
	t.Helper()
	regs, err := registerZones(config, zones, &stores{}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	return regs
}

// TestRegistryZonesAgree: two handlers of one config that declare one zone
// must agree on everything that decides what it counts; what each handler
// chooses for itself (key, cost, matchers) may differ. The error names the
// zone and what differs.
func TestRegistryZonesAgree(t *testing.T) {
	base := func() Zone {
		return Zone{Key: "k", Algorithm: "sliding_log", MaxEvents: 5, Window: caddy.Duration(time.Minute), quotaLease: 250 * time.Millisecond}
	}
	tests := []struct {
		name       string
		prevStatus []string // the first declaration's count_status
		edit       func(*Zone)
		want       []string // in the error; nil: the declarations agree
	}{
		{"alike", nil, func(*Zone) {}, nil},
		{"another key", nil, func(z *Zone) { z.Key = "{http.request.header.X-Key}" }, nil},
		{"another cost", nil, func(z *Zone) { z.Cost = "3" }, nil},
		{"the same statuses, spelled otherwise", []string{"4xx"}, func(z *Zone) { z.CountStatus = []string{"401", "4xx"} }, nil},
		// a quota lease is one instance's, of its own requests
		{"another quota_lease", nil, func(z *Zone) { z.QuotaLease, z.quotaLease = caddy.Duration(time.Second), time.Second }, nil},
		{"quota_lease off here only", nil, func(z *Zone) { z.QuotaLease, z.quotaLease = quotaLeaseOff, 0 }, nil},
		{"another algorithm", nil, func(z *Zone) { z.Algorithm = "fixed_window" }, []string{"algorithm fixed_window here, sliding_log in another"}},
		{"another limit", nil, func(z *Zone) { z.MaxEvents = 6 }, []string{"limit sliding_log 6 per 1m0s here"}},
		{"another window", nil, func(z *Zone) { z.Window = caddy.Duration(time.Hour) }, []string{"limit sliding_log 5 per 1h0m0s here"}},
		{"count_status here only", nil, func(z *Zone) { z.CountStatus = []string{"401"} }, []string{"count_status 401 here, none in another"}},
		{"another count_status", []string{"4xx"}, func(z *Zone) { z.CountStatus = []string{"401", "403"} }, []string{"count_status 401 403 here, 4xx in another"}},
		{"cost_from_response here only", nil, func(z *Zone) { z.CostFromResponse = "{http.response.header.X-Tokens}" },
			[]string{"cost_from_response {http.response.header.X-Tokens} here, none in another"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("agree_test_%d", i)
			prev, z := base(), base()
			prev.CountStatus = tt.prevStatus
			tt.edit(&z)
			err := declareTwice(t, name, &prev, &z)
			if tt.want == nil {
				if err != nil {
					t.Errorf("got error %v, want the declarations to agree", err)
				}
				return
			}
			if err == nil {
				t.Fatal("got no error, want the declarations to disagree")
			}
			for _, want := range append([]string{"zone " + name + ":"}, tt.want...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// declareTwice registers prev, then z, both named name, in one config, and
// returns what the second registration says; the registry forgets name
// when the test ends.
func declareTwice(t *testing.T, name string, prev, z *Zone) error {
	t.Helper()
	t.Cleanup(func() {
		zoneRegistry.Lock()
		delete(zoneRegistry.byName, name)
		zoneRegistry.Unlock()
	})
	for _, zone := range []*Zone{prev, z} {
		if err := zone.setup(name); err != nil {
			t.Fatal(err)
		}
	}
	config := prometheus.NewRegistry()
	mustRegister(t, config, prev)
	_, err := registerZones(config, []*Zone{z}, &stores{}, false, false)
	return err
}
