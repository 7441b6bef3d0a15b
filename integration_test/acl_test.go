package integration_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestBanLiftWithoutChannelRights: Caddy on Redis as an ACL user without
// the reset channel (resetchannels, Redis 7's default for a new user).
// The failed subscription is logged at start and shown by the gauge; a
// ban lift is still done, answered 200 with a warning naming the
// channel's rule (the CLI prints it, and exits 0), and logged; once the
// user gets the channel, a retry subscribes and resets answer 204 again.
func TestBanLiftWithoutChannelRights(t *testing.T) {
	srv := redistest.Start(t)
	if v := redistest.ServerVersion(t); v.Name == "redis" && (v.Major < 6 || (v.Major == 6 && v.Minor < 2)) {
		t.Skipf("%s has no ACL channel rules (Redis 6.2 added them): every user may use every channel", v)
	}
	ctx := context.Background()
	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "nochan", "reset", "on", ">pw", "~*", "+@all", "resetchannels").Err(); err != nil {
		t.Fatal(err)
	}
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: `	rate_limit {
` + exactRedis(srv, "username nochan", "password pw") + `		zone acl_ban {
			key {http.request.header.X-Key}
			algorithm fixed_window
			events 1
			window 1h
			ban 1h
		}
	}
	respond "ok" 200`})
	admin := strings.TrimPrefix(caddy.AdminURL, "http://")
	gauge := `caddy_rate_limit_reset_subscription_live{redis="` + srv.Addr + `"} `
	waitFor(t, "the failed subscription in the log", func() bool {
		log := caddy.Log.String()
		return strings.Contains(log, "redis reset subscription failed") && strings.Contains(log, "&sluice:reset")
	})
	if _, body := adminDo(t, http.MethodGet, caddy.AdminURL+"/metrics", "", nil); !strings.Contains(body, gauge+"0") {
		t.Errorf("/metrics lacks %q", gauge+"0")
	}

	client := newClient(1)
	keyURL := caddy.AdminURL + "/rate_limit/zones/acl_ban/keys/k"
	if got := statuses(t, client, caddy.URL+"/", 3, "X-Key", "k"); got[0] != 200 || got[1] != 429 || got[2] != 429 {
		t.Fatalf("before the lift: %v, want 200 then banned", got)
	}
	status, body := adminDo(t, http.MethodDelete, keyURL, "", nil)
	if status != http.StatusOK || !strings.Contains(body, `"reset":true`) || !strings.Contains(body, "&sluice:reset") {
		t.Errorf("DELETE: %d %s, want 200 with reset true and a warning naming &sluice:reset", status, body)
	}
	waitFor(t, "the log to say that the reset was not announced", func() bool {
		return strings.Contains(caddy.Log.String(), "key reset, but not announced")
	})
	if got := get(t, client, caddy.URL+"/", "X-Key", "k"); got.Status != 200 {
		t.Errorf("after the lift: %d, want 200", got.Status)
	}

	res := rateLimitCLI(t, "reset", "acl_ban", "k", "--address", admin)
	if res.Code != 0 || !strings.Contains(res.Stdout, "starts over") || !strings.Contains(res.Stdout, "warning:") || !strings.Contains(res.Stdout, "&sluice:reset") {
		t.Errorf("CLI reset: exit %d, printed %q, stderr %s; want exit 0, the reset and the warning", res.Code, res.Stdout, res.Stderr)
	}

	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "nochan", "&sluice:reset").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the subscription once the channel is granted", func() bool {
		_, body := adminDo(t, http.MethodGet, caddy.AdminURL+"/metrics", "", nil)
		return strings.Contains(body, gauge+"1")
	})
	waitFor(t, "the log to say that the subscription is up", func() bool {
		return strings.Contains(caddy.Log.String(), "redis reset subscription up")
	})
	if status, body := adminDo(t, http.MethodDelete, keyURL, "", nil); status != http.StatusNoContent {
		t.Errorf("DELETE with the channel: %d %s, want 204", status, body)
	}
}

// waitFor polls cond until it holds, failing t after a minute and a half
// (the subscription's retries back off to one a minute).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: timed out", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
