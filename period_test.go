package sluice

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

func TestUnmarshalCaddyfilePeriod(t *testing.T) {
	h, err := parse(t, zoneBlock("key k", "events 100000", "period month", "time_zone Europe/Berlin"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Handler{Zones: map[string]*Zone{"z": {Key: "k", MaxEvents: 100000, Period: "month", TimeZone: "Europe/Berlin"}}}
	if got, want := toJSON(t, h), toJSON(t, want); got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	if got := toJSON(t, h.Zones["z"]); got != `{"key":"k","max_events":100000,"period":"month","time_zone":"Europe/Berlin"}` {
		t.Errorf("JSON %s", got)
	}
	for _, input := range []string{
		zoneBlock("key k", "events 5", "period day"),
		zoneBlock("key k", "events 5", "period week", "algorithm fixed_window", "time_zone America/New_York"),
		zoneBlock("key k", "events 5", "period year", "time_zone UTC"),
	} {
		if _, err := parse(t, input); err != nil {
			t.Errorf("%s: %v", input, err)
		}
	}
}

func TestUnmarshalCaddyfilePeriodErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string
		line  int
	}{
		{"bad period", zoneBlock("key k", "events 5", "period fortnight"), []string{"period", "fortnight"}, 5},
		{"period missing value", zoneBlock("key k", "events 5", "period"), []string{"period", "missing value"}, 5},
		{"bad time_zone", zoneBlock("key k", "events 5", "period day", "time_zone Mars/Olympus_Mons"), []string{"time_zone", "Mars/Olympus_Mons"}, 6},
		{"time_zone Local", zoneBlock("key k", "events 5", "period day", "time_zone Local"), []string{"time_zone", "Local"}, 6},
		{"time_zone missing value", zoneBlock("key k", "events 5", "period day", "time_zone"), []string{"time_zone", "missing value"}, 6},
		{"period with window", zoneBlock("key k", "events 5", "period day", "window 1h"), []string{"zone z", "period", "window"}, 7},
		{"period with sliding_window", zoneBlock("key k", "events 5", "period day", "algorithm sliding_window"), []string{"zone z", "period", "fixed_window", "sliding_window"}, 5},
		{"period with token_bucket", zoneBlock("key k", "events 5", "period month", "algorithm token_bucket"), []string{"zone z", "period", "token_bucket"}, 5},
		{"period with concurrency", zoneBlock("key k", "events 5", "period month", "algorithm concurrency"), []string{"zone z", "period", "concurrency"}, 5},
		{"time_zone without period", zoneBlock("key k", "events 5", "window 1h", "time_zone Europe/Berlin"), []string{"zone z", "time_zone", "period"}, 7},
		{"neither window nor period", zoneBlock("key k", "events 5"), []string{"zone z", "window", "period"}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseError(t, tt.input, tt.want, tt.line) })
	}
}

// TestZonePeriodJSON: the JSON config is checked as the Caddyfile is.
func TestZonePeriodJSON(t *testing.T) {
	for _, tt := range []struct {
		zone Zone
		want string // "" for none
	}{
		{Zone{Key: "k", MaxEvents: 5, Period: "day"}, ""},
		{Zone{Key: "k", MaxEvents: 5, Period: "days"}, "period"},
		{Zone{Key: "k", MaxEvents: 5, Period: "day", TimeZone: "Nowhere/Town"}, "time_zone"},
		{Zone{Key: "k", MaxEvents: 5, TimeZone: "UTC", Window: caddy.Duration(time.Hour)}, "time_zone"},
	} {
		z := tt.zone
		err := z.setup("j")
		if err == nil {
			err = z.validate()
		}
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: got %v, want an error naming %q", tt.zone, err, tt.want)
		}
		if err == nil && z.Algorithm != "fixed_window" {
			t.Errorf("period zone algorithm %q, want fixed_window", z.Algorithm)
		}
	}
}

func TestRegistryZonesAgreePeriod(t *testing.T) {
	base := func() Zone { return Zone{Key: "k", MaxEvents: 5, Period: "month", TimeZone: "Europe/Berlin"} }
	tests := []struct {
		name string
		edit func(*Zone)
		want string
	}{
		{"alike", func(*Zone) {}, ""},
		{"another period", func(z *Zone) { z.Period = "day" }, "period day here, month in another"},
		{"another time zone", func(z *Zone) { z.TimeZone = "America/New_York" }, "time_zone America/New_York here, Europe/Berlin in another"},
		{"a window", func(z *Zone) { z.Period, z.TimeZone, z.Window = "", "", caddy.Duration(30*24*time.Hour) }, "period none here, month in another"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev, z := base(), base()
			tt.edit(&z)
			err := declareTwice(t, fmt.Sprintf("agree_period_%d", i), &prev, &z)
			if tt.want == "" {
				if err != nil {
					t.Errorf("got %v, want agreement", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestServeHTTPPeriodHeaders: a day zone in a time zone admits its events,
// then denies until local midnight; w is today's length there, t and
// Retry-After the seconds until midnight.
func TestServeHTTPPeriodHeaders(t *testing.T) {
	zone := uniqueZone("period")
	const tz = "Pacific/Chatham" // +12:45 / +13:45: midnight is far from UTC's
	h := newHandler(t, rateLimit("headers ietf legacy",
		zoneCfg(zone, "key {http.request.remote.host}", "events 3", "period day", "time_zone "+tz)))
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		now := time.Now().In(loc)
		y, m, d := now.Date()
		midnight := time.Date(y, m, d+1, 0, 0, 0, 0, loc)
		today := midnight.Sub(time.Date(y, m, d, 0, 0, 0, 0, loc))
		left := midnight.Sub(now)
		res := serve(t, h, reqOpts{})
		if want := i < 3; res.allowed() != want {
			t.Fatalf("request %d: allowed %v (err %v), want %v", i+1, res.allowed(), res.err, want)
		}
		if got, want := res.header("RateLimit-Policy"), fmt.Sprintf(`"%s";q=3;w=%d`, zone, int64(today/time.Second)); got != want {
			t.Errorf("RateLimit-Policy = %q, want %q", got, want)
		}
		ms := parseRateLimit(t, res.header("RateLimit"))
		if len(ms) != 1 || ms[0].r != int64(max(0, 2-i)) || !near(ms[0].t, left) {
			t.Errorf("request %d: RateLimit = %q, want r=%d;t≈%v", i+1, res.header("RateLimit"), max(0, 2-i), left)
		}
		reset, _ := strconv.ParseInt(res.header("RateLimit-Reset"), 10, 64)
		if !near(reset, left) {
			t.Errorf("RateLimit-Reset = %d, want ≈%v", reset, left)
		}
		if i == 3 {
			wantDenied(t, res, http.StatusTooManyRequests)
			if got := retryAfter(t, res); !near(got, left) {
				t.Errorf("Retry-After = %d, want ≈%v", got, left)
			}
		}
	}
	// the admin API describes the zone with today's length
	found := false
	for _, info := range listZones() {
		if info.Name != zone {
			continue
		}
		found = true
		b, _ := json.Marshal(info)
		if info.Period != "day" || info.TimeZone != tz || info.Window < 23*3600 || info.Window > 25*3600 {
			t.Errorf("admin zone %s", b)
		}
	}
	if !found {
		t.Errorf("admin API: zone %s not listed", zone)
	}
}

// TestServeHTTPPeriodLimitPerRequest: a period zone whose events come
// from the request counts each request under its own limit in the period,
// and its policy shows that limit with the period's length.
func TestServeHTTPPeriodLimitPerRequest(t *testing.T) {
	zone := uniqueZone("period-plan")
	h := newHandler(t, rateLimit("headers ietf",
		zoneCfg(zone, "key k", "events {http.request.header.X-Limit} 1", "period day")))
	plan := reqOpts{headers: map[string]string{"X-Limit": "3"}}
	for i := range 4 {
		now := time.Now().UTC()
		y, m, d := now.Date()
		today := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).Sub(time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
		res := serve(t, h, plan)
		if want := i < 3; res.allowed() != want {
			t.Fatalf("request %d under limit 3: allowed %v (err %v), want %v", i+1, res.allowed(), res.err, want)
		}
		if got, want := res.header("RateLimit-Policy"), fmt.Sprintf(`"%s";q=3;w=%d`, zone, int64(today/time.Second)); got != want {
			t.Errorf("request %d: RateLimit-Policy = %q, want %q", i+1, got, want)
		}
	}
	if res := serve(t, h, reqOpts{}); res.allowed() {
		t.Errorf("request without X-Limit (fallback 1, 3 used): allowed, want denied")
	}
}

// near reports whether seconds is d rounded up, within a second.
func near[T int64 | int](seconds T, d time.Duration) bool {
	s := int64(seconds)
	want := int64((d + time.Second - 1) / time.Second)
	return s >= want-1 && s <= want+1
}

// TestPeriodStoreKey: a period zone's state is never at the key a
// fixed_window zone with a window uses for the same client, so that
// switching between them starts over instead of misreading; a zone with a
// window keeps its key.
func TestPeriodStoreKey(t *testing.T) {
	window := Zone{Key: "k", Algorithm: "fixed_window", MaxEvents: 5, Window: caddy.Duration(24 * time.Hour)}
	period := Zone{Key: "k", MaxEvents: 5, Period: "day"}
	// a day and a month start together on the 1st: a reload from one to
	// the other must not carry the day's count (and its expiry) over
	month := Zone{Key: "k", MaxEvents: 5, Period: "month"}
	berlin := Zone{Key: "k", MaxEvents: 5, Period: "day", TimeZone: "Europe/Berlin"}
	for _, z := range []*Zone{&window, &period, &month, &berlin} {
		if err := z.setup("keys"); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := window.storeKey("client"), period.storeKey("client"); a == b || !strings.HasSuffix(b, ":v2") {
		t.Errorf("window zone key %q, period zone key %q: want distinct keys, both fixed_window state (:v2)", a, b)
	}
	keys := map[string]string{}
	for name, z := range map[string]*Zone{"window": &window, "day UTC": &period, "month UTC": &month, "day Berlin": &berlin} {
		key := z.storeKey("client")
		if other, ok := keys[key]; ok {
			t.Errorf("zones %s and %s share the store key %q", name, other, key)
		}
		keys[key] = name
	}
}

// skewedDecide decides h's request keyed key as an instance whose clock is
// 3 days behind Redis's would: its period zone (the first) sends the
// boundaries around that clock, which do not hold Redis's now.
func skewedDecide(t *testing.T, h *Handler, key string) verdict {
	t.Helper()
	req, _ := benchRequest(key, "192.0.2.1")
	v, err := matchOf(h, req)
	if err != nil || len(v.reqs) == 0 {
		t.Fatalf("matching: %v, %d zones", err, len(v.reqs))
	}
	v.reqs[0].Limit.Periods = h.zones[0].limit.Calendar.PeriodsAt(time.Now().Add(-72 * time.Hour))
	v, err = h.backend.decide(req.Context(), v)
	if err != nil {
		t.Fatalf("skewed decision: %v, want failure_mode's answer", err)
	}
	return v
}

// TestServeHTTPClockSkew: Redis refusing a period zone's boundaries as
// clock skew fails only that instance's period decisions: failure_mode
// answers each (open: undecided; local: the local counters, which other
// zones' successes do not start over), counted under cause clock_skew and
// logged once per interval, never as a store failure. The breaker that
// every zone on that Redis shares stays closed, and the other zones, and
// the period zone itself at the right clock, go on deciding on Redis.
func TestServeHTTPClockSkew(t *testing.T) {
	srv := redistest.Start(t)
	redis := block("redis", "url "+srv.URL(), "timeout 1s")
	for _, mode := range []string{"open", "local"} {
		t.Run(mode, func(t *testing.T) {
			quota, other := uniqueZone("skew_day"), uniqueZone("skew_other")
			hq := newHandler(t, rateLimit(redis, "failure_mode "+mode,
				zoneCfg(quota, "key {http.request.header.X-Key}", "events 3", "period day")))
			ho := newHandler(t, rateLimit(redis, floodZone(other)))
			rb := hq.backend.(*redisBackend)
			core, logs := observer.New(zap.InfoLevel)
			rb.failure.log.logger = zap.New(core)
			clockSkews.reset()
			before := testutil.ToFloat64(rb.metrics.backendErrors.WithLabelValues(rb.label, "clock_skew"))

			const skewed = 20 // 4 times the breaker's threshold
			for i := range skewed {
				v := skewedDecide(t, hq, "tenant")
				switch admitted := v.ds != nil && !v.denied; {
				case mode == "open" && v.ds != nil:
					t.Fatalf("skewed request %d: decided %+v, want failure_mode open to pass it undecided", i+1, v.ds)
				case mode == "local" && (v.failed != failLocal || admitted != (i < 3)):
					t.Fatalf("skewed request %d: local %v, admitted %v; want the local counters, 3 admitted", i+1, v.failed == failLocal, admitted)
				}
				if i%5 == 0 { // another zone decides on Redis between them
					serveKey(t, ho, fmt.Sprintf("k%d", i))
				}
			}
			if rb.shared().breaker.IsOpen() {
				t.Fatal("the breaker opened on clock skew")
			}
			if got := testutil.ToFloat64(rb.metrics.backendErrors.WithLabelValues(rb.label, "clock_skew")) - before; got != skewed {
				t.Errorf("backend errors of cause clock_skew: %v, want %d", got, skewed)
			}
			if got := logs.FilterMessageSnippet("clock is off").Len(); got != 1 {
				t.Errorf("clock skew logged %d times in %d decisions, want once (rate-limited)", got, skewed)
			}
			if got := logs.FilterMessageSnippet("store failed").Len(); got != 0 {
				t.Errorf("clock skew logged as a store failure %d times", got)
			}
			if serveKey(t, ho, "fresh") || !serveKey(t, ho, "fresh") {
				t.Error("the other zone does not decide on Redis: want its second request denied")
			}
			res := serve(t, hq, reqOpts{headers: map[string]string{"X-Key": "tenant"}})
			if !res.allowed() || remaining(t, res, quota) != 2 {
				t.Errorf("the period zone at the right clock: allowed %v (err %v), r %q; want Redis's count, r=2", res.allowed(), res.err, res.header("RateLimit"))
			}
		})
	}
}

// TestServePeriodImpossibleCost: a cost above a period zone's events can
// never pass: it is refused with Retry-After of the rest of the period
// (here the UTC day), not 1 second, on the memory store and on Redis.
func TestServePeriodImpossibleCost(t *testing.T) {
	srv := redistest.Start(t)
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			zone := zoneCfg(uniqueZone("period-cost"), "key k", "events 10", "period day", "time_zone UTC", "cost {http.request.header.X-Cost}")
			cfg := rateLimit(zone)
			if store == "redis" {
				cfg = rateLimit(block("redis", "url "+srv.URL()), zone)
			}
			h := newHandler(t, cfg)
			before := time.Now().UTC()
			res := serve(t, h, reqOpts{headers: map[string]string{"X-Cost": "11"}})
			after := time.Now().UTC()
			midnight := func(t time.Time) int64 {
				return int64(math.Ceil(time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC).Sub(t).Seconds()))
			}
			retry, err := strconv.ParseInt(res.header("Retry-After"), 10, 64)
			if res.allowed() || err != nil || retry > midnight(before) || retry < midnight(after) {
				t.Errorf("cost 11 of 10 a day: allowed=%v Retry-After %q, want refused until midnight UTC (%d s)",
					res.allowed(), res.header("Retry-After"), midnight(after))
			}
		})
	}
}
