package sluice

import (
	"context"
	"net/http"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// TestServerInfo: a shared client learns, from the real server it talks
// to, its name and version and whether decisions run as a Function, and
// logs it once.
func TestServerInfo(t *testing.T) {
	want := redistest.ServerVersion(t)
	tests := []struct {
		name      string
		extra     []string
		functions bool
	}{
		{"as it is", nil, want.Functions()},
	}
	if want.Functions() { // FUNCTION renamed away: EVALSHA
		tests = append(tests, struct {
			name      string
			extra     []string
			functions bool
		}{"without FUNCTION", []string{"--rename-command", "FUNCTION", ""}, false})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t, tt.extra...)
			client := srv.Client(t)
			core, logs := observer.New(zap.InfoLevel)
			s := &serverInfo{describer: redisstore.New(client, redisstore.Options{}), logger: zap.New(core), addrs: []string{srv.Addr}}
			for range 3 {
				d, err := s.describe(context.Background())
				if err != nil {
					t.Fatalf("describe: %v", err)
				}
				if d.Server != want.String() || d.Functions != tt.functions {
					t.Errorf("describe: got %+v, want server %q, functions %v", *d, want, tt.functions)
				}
			}
			entries := logs.FilterMessage("redis server answered").All()
			if len(entries) != 1 {
				t.Fatalf("log lines: got %d, want 1: %v", len(entries), logs.All())
			}
			fields := entries[0].ContextMap()
			decisions := map[bool]string{true: "function", false: "evalsha"}[tt.functions]
			if fields["server"] != want.String() || fields["functions"] != tt.functions || fields["decisions"] != decisions {
				t.Errorf("log fields: got %v, want server %q, functions %v, decisions %s", fields, want, tt.functions, decisions)
			}
		})
	}
}

// TestServerInfoLater: a server that is down at start is described when it
// answers, not before.
func TestServerInfoLater(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	client := srv.Client(t)
	core, logs := observer.New(zap.InfoLevel)
	s := &serverInfo{describer: redisstore.New(client, redisstore.Options{}), logger: zap.New(core), addrs: []string{srv.Addr}}
	if d, err := s.describe(context.Background()); err == nil {
		t.Fatalf("describe with the server down: got %+v, want an error", d)
	}
	srv.Restart(t)
	s.failedAt.Store(0) // no need to wait describeRetry
	d, err := s.describe(context.Background())
	if err != nil || d.Server != redistest.ServerVersion(t).String() {
		t.Fatalf("describe once up: got %+v, %v", d, err)
	}
	if n := logs.FilterMessage("redis server answered").Len(); n != 1 {
		t.Errorf("log lines: got %d, want 1", n)
	}
}

// TestAdminListsServer: the admin API's zone listing says which server
// answers a Redis-backed zone, and whether it runs Functions.
func TestAdminListsServer(t *testing.T) {
	srv := redistest.Start(t)
	want := redistest.ServerVersion(t)
	zone := uniqueZone("listed")
	h := newHandler(t, "rate_limit {\n\tredis {\n\t\turl redis://"+srv.Addr+"\n\t}\n\tzone "+zone+" {\n\t\tkey k\n\t\tevents 5\n\t\twindow 1m\n\t}\n}")
	if res := serveNext(t, h, respondWith(http.StatusOK)); res.next != 1 {
		t.Fatalf("request: got %d calls of next, want 1 (err %v)", res.next, res.err)
	}
	for _, info := range listZones() {
		if info.Name != zone {
			continue
		}
		if info.Backend != "redis" || info.Server != want.String() || info.Functions == nil || *info.Functions != want.Functions() {
			t.Errorf("zone %s: got backend %q, server %q, functions %v; want redis, %q, %v",
				zone, info.Backend, info.Server, info.Functions, want, want.Functions())
		}
		return
	}
	t.Fatalf("zone %s not listed", zone)
}
