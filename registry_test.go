package sluice

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestDeclaredForgetsUnloadedConfigs: a config's zone limits are dropped
// when it is unloaded, so reloads do not accumulate them.
func TestDeclaredForgetsUnloadedConfigs(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	z := &Zone{name: "registry_test", limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Second}}
	if err := declare(ctx, z); err != nil {
		t.Fatal(err)
	}
	other := *z
	other.limit.Events = 2
	if err := declare(ctx, &other); err == nil {
		t.Error("one config gave a zone two limits without an error")
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		declared.Lock()
		_, held := declared.byConfig[ctx.GetMetricsRegistry()]
		declared.Unlock()
		if !held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the unloaded config's zones are still held")
		}
		time.Sleep(time.Millisecond)
	}
}
