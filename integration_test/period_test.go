package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestPeriodDay: a real Caddy on Redis with `period day` in a time zone far
// from UTC admits exactly events a local day; its headers say w = today's
// length there, t = the seconds to local midnight, and a rejection's
// Retry-After waits until then. Its Redis state expires at local midnight,
// and the admin API describes the zone with its period.
func TestPeriodDay(t *testing.T) {
	const tz, events = "Asia/Kathmandu", 4 // +05:45
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	site := fmt.Sprintf("\thandle /period {\n\t\trate_limit {\n%s\t\t\theaders ietf legacy\n"+
		"\t\t\tzone daily {\n\t\t\t\tkey static\n\t\t\t\tevents %d\n\t\t\t\tperiod day\n\t\t\t\ttime_zone %s\n\t\t\t}\n"+
		"\t\t}\n\t\trespond \"ok\" 200\n\t}\n\trespond \"no route\" 404\n", exactRedis(srv), events, tz)
	caddy := startCaddy(t, caddyConfig{Site: site})
	client := newClient(1)

	untilMidnight := func() (today, left time.Duration) {
		now := time.Now().In(loc)
		y, m, d := now.Date()
		midnight := time.Date(y, m, d+1, 0, 0, 0, 0, loc)
		return midnight.Sub(time.Date(y, m, d, 0, 0, 0, 0, loc)), midnight.Sub(now)
	}
	near := func(seconds int64, d time.Duration) bool {
		want := int64((d + time.Second - 1) / time.Second)
		return seconds >= want-1 && seconds <= want+1
	}
	for i := range events + 2 {
		today, left := untilMidnight()
		resp := get(t, client, caddy.URL+"/period")
		wantStatus := http.StatusOK
		if i >= events {
			wantStatus = http.StatusTooManyRequests
		}
		if resp.Status != wantStatus {
			t.Fatalf("request %d: status %d, want %d (headers %v)", i+1, resp.Status, wantStatus, resp.Header)
		}
		if got, want := resp.Header.Get("RateLimit-Policy"), fmt.Sprintf(`"daily";q=%d;w=%d`, events, int64(today/time.Second)); got != want {
			t.Errorf("request %d: RateLimit-Policy %q, want %q", i+1, got, want)
		}
		state := resp.Header.Get("RateLimit")
		var r, tt int64
		if _, err := fmt.Sscanf(state, `"daily";r=%d;t=%d`, &r, &tt); err != nil || r != int64(max(0, events-1-i)) || !near(tt, left) {
			t.Errorf("request %d: RateLimit %q, want r=%d;t≈%v", i+1, state, max(0, events-1-i), left)
		}
		if reset, err := strconv.ParseInt(resp.Header.Get("RateLimit-Reset"), 10, 64); err != nil || !near(reset, left) {
			t.Errorf("request %d: RateLimit-Reset %q, want ≈%v", i+1, resp.Header.Get("RateLimit-Reset"), left)
		}
		if wantStatus == http.StatusTooManyRequests {
			if ra, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64); err != nil || !near(ra, left) {
				t.Errorf("request %d: Retry-After %q, want ≈%v (until local midnight)", i+1, resp.Header.Get("Retry-After"), left)
			}
		}
	}

	// the state lives until local midnight
	rdb := srv.Client(t)
	keys, err := rdb.Keys(context.Background(), "*daily*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("Redis keys of zone daily: %v, %v; want one", keys, err)
	}
	ttl, err := rdb.PTTL(context.Background(), keys[0]).Result()
	if _, left := untilMidnight(); err != nil || ttl > left+time.Second || ttl < left-2*time.Second {
		t.Errorf("state %s expires in %v (%v), want ≈%v", keys[0], ttl, err, left)
	}

	status, body := adminDo(t, http.MethodGet, caddy.AdminURL+"/rate_limit/zones", "", nil)
	var zones []map[string]any
	if err := json.Unmarshal([]byte(body), &zones); status != http.StatusOK || err != nil {
		t.Fatalf("admin zones: %d %q %v", status, body, err)
	}
	today, _ := untilMidnight()
	for _, z := range zones {
		if z["name"] == "daily" {
			if z["period"] != "day" || z["time_zone"] != tz || z["algorithm"] != "fixed_window" || z["window"] != today.Seconds() {
				t.Errorf("admin zone %v, want period day, time_zone %s, window %v", z, tz, today.Seconds())
			}
			return
		}
	}
	t.Errorf("admin zones %s: no zone daily", strings.TrimSpace(body))
}
