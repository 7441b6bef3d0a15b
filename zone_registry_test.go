package sluice

import (
	"testing"
	"time"

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
			regs, err := registerZones(loading, []*Zone{registryZone(zone, 8)}, &backend{})
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
				registry.Lock()
				delete(registry.byName, zone)
				registry.Unlock()
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
	regs, err := registerZones(config, zones, &backend{})
	if err != nil {
		t.Fatal(err)
	}
	return regs
}
