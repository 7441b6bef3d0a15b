package sluice

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestRedisLogger: go-redis's lines reach the zap logger leveled, without
// go-redis's prefix, the component apart, at most one per kind per
// interval, the next one saying how many it stands for.
func TestRedisLogger(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := newRedisLogger(func() *zap.Logger { return zap.New(core) })
	ctx := context.Background()
	dial := "redis: connection pool: failed to dial after %d attempts: %v"
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	for range 100 {
		l.Printf(ctx, dial, 1, refused)
	}
	l.Printf(ctx, "sentinel: new master=%q addr=%q", "mymaster", "10.0.0.6:6379")
	l.Printf(ctx, "autopipeline: recovered full-duplex write panic: %v\n%s", "boom", "stack")
	tests := []struct {
		msg       string
		level     zapcore.Level
		component string
	}{
		{"failed to dial after 1 attempts: dial tcp 127.0.0.1:1: connect: connection refused", zapcore.WarnLevel, "connection pool"},
		{`new master="mymaster" addr="10.0.0.6:6379"`, zapcore.InfoLevel, "sentinel"},
		{"recovered full-duplex write panic: boom\nstack", zapcore.ErrorLevel, "autopipeline"},
	}
	all := logs.All()
	if len(all) != len(tests) {
		t.Fatalf("lines: got %d, want %d (one per kind): %v", len(all), len(tests), all)
	}
	for i, tt := range tests {
		got := all[i]
		if got.Message != tt.msg || got.Level != tt.level {
			t.Errorf("line %d: got %v %q, want %v %q", i, got.Level, got.Message, tt.level, tt.msg)
		}
		if c := got.ContextMap()["component"]; c != tt.component {
			t.Errorf("line %d: component %v, want %q", i, c, tt.component)
		}
	}
	l.printfAt(time.Now().Add(logInterval), dial, 1, refused)
	last := logs.All()[len(logs.All())-1]
	if got, want := last.ContextMap()["lines"], int64(100); got != want {
		t.Errorf("the next dial line's lines: got %v, want %v (the 99 held back and itself)", got, want)
	}
}
