package sluice

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestRejectionLog: rejections are logged at info, one sampled line per
// zone per interval naming the zone, and the key only with log_key.
func TestRejectionLog(t *testing.T) {
	for _, logKey := range []bool{false, true} {
		name := "without log_key"
		options := ""
		if logKey {
			name, options = "with log_key", "\n\tlog_key"
		}
		t.Run(name, func(t *testing.T) {
			h := newHandler(t, "rate_limit {"+options+`
	zone z {
		key {http.request.header.X-Key}
		events 1
		window 1m
	}
}`)
			core, logs := observer.New(zapcore.InfoLevel)
			h.logger = zap.New(core)
			secret := "secret-key-" + name // the in-memory store outlives the handler
			o := reqOpts{headers: map[string]string{"X-Key": secret}}
			for i := range 4 {
				if got, want := serve(t, h, o).allowed(), i == 0; got != want {
					t.Fatalf("request %d: got allowed %v, want %v", i, got, want)
				}
			}
			lines := logs.FilterMessage("rate limit exceeded").All()
			if got, want := len(lines), 1; got != want {
				t.Fatalf("rejection log lines: got %d, want %d (one per interval): %v", got, want, logs.All())
			}
			fields := lines[0].ContextMap()
			if got, want := fields["zone"], "z"; got != want {
				t.Errorf("zone: got %v, want %v", got, want)
			}
			if got, want := fields["requests"], int64(1); got != want {
				t.Errorf("requests: got %v, want %v", got, want)
			}
			key, hasKey := fields["key"]
			if hasKey != logKey || (logKey && key != secret) {
				t.Errorf("key: got %v (present %v), want it only with log_key", key, hasKey)
			}
		})
	}
}

// TestBanLog: a ban's trip is logged as a ban, at info, naming the zone
// and the ban's length, the key only with log_key; the requests the ban
// then rejects start no other ban line.
func TestBanLog(t *testing.T) {
	for _, logKey := range []bool{false, true} {
		name := "without log_key"
		options := ""
		if logKey {
			name, options = "with log_key", "\n\tlog_key"
		}
		t.Run(name, func(t *testing.T) {
			zone := uniqueZone("banlog")
			h := newHandler(t, "rate_limit {"+options+`
	zone `+zone+` {
		key {http.request.header.X-Key}
		events 1
		window 1m
		ban 90s
	}
}`)
			core, logs := observer.New(zapcore.InfoLevel)
			h.logger = zap.New(core)
			secret := "secret-key-" + zone
			o := reqOpts{headers: map[string]string{"X-Key": secret}}
			for i := range 4 {
				if got, want := serve(t, h, o).allowed(), i == 0; got != want {
					t.Fatalf("request %d: got allowed %v, want %v", i, got, want)
				}
			}
			lines := logs.FilterMessage("rate limit ban started").All()
			if got, want := len(lines), 1; got != want {
				t.Fatalf("ban lines: got %d, want %d (the trip's): %v", got, want, logs.All())
			}
			fields := lines[0].ContextMap()
			if got, want := fields["zone"], zone; got != want {
				t.Errorf("zone: got %v, want %v", got, want)
			}
			if got, want := fields["ban_seconds"], 90.0; got != want {
				t.Errorf("ban_seconds: got %v, want %v", got, want)
			}
			if got, want := fields["bans"], int64(1); got != want {
				t.Errorf("bans: got %v, want %v", got, want)
			}
			key, hasKey := fields["key"]
			if hasKey != logKey || (logKey && key != secret) {
				t.Errorf("key: got %v (present %v), want it only with log_key", key, hasKey)
			}
		})
	}
}
