package sluice

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

func TestCaddyfileAdaptive(t *testing.T) {
	h, err := parse(t, `rate_limit {
	zone shed {
		key static
		algorithm adaptive
		events 200
		adaptive {
			min 8
			initial 40
			tolerance 2
		}
		priority {jwt.tier} critical normal bulk
		reserve 25%
		max_delay 100ms
		status 429
	}
	jwt {
		secret s
	}
}`)
	if err != nil {
		t.Fatal(err)
	}
	got := toJSON(t, h.Zones["shed"])
	want := `{"key":"static","algorithm":"adaptive","max_events":200,"max_delay":100000000,"adaptive":{"min":8,"initial":40,"tolerance":2},"priority":"{jwt.tier}","priority_classes":["critical","normal","bulk"],"reserve":0.25,"status":429}`
	if got != want {
		t.Errorf("zone JSON\n got %s\nwant %s", got, want)
	}
	// and back: the JSON decodes to the same zone
	var z Zone
	if err := json.Unmarshal([]byte(want), &z); err != nil {
		t.Fatalf("decoding the zone's JSON: %v", err)
	}
	if again := toJSON(t, &z); again != want {
		t.Errorf("JSON round trip\n got %s\nwant %s", again, want)
	}
}

func TestCaddyfileAdaptiveDefaults(t *testing.T) {
	h, err := parse(t, "rate_limit {\n\tzone shed {\n\t\tkey static\n\t\talgorithm adaptive\n\t\tevents 100\n\t}\n}")
	if err != nil {
		t.Fatal(err)
	}
	z := h.Zones["shed"]
	if err := z.checkLimit("shed"); err != nil {
		t.Fatal(err)
	}
	probe := *z
	_ = probe.setup("shed")
	cfg := probe.limiterConfig()
	if probe.Status != 503 || cfg.Classes != 1 || cfg.Reserve != 0.2 || cfg.Max != 100 {
		t.Errorf("defaults: status %d, %+v; want 503, one class, reserve 0.2, max 100", probe.Status, cfg)
	}
}

func TestCaddyfileAdaptiveErrors(t *testing.T) {
	zone := func(lines ...string) string {
		return "rate_limit {\n\tzone shed {\n\t\tkey static\n" + "\t\t" + strings.Join(lines, "\n\t\t") + "\n\t}\n}"
	}
	tests := []struct {
		name, input, want string
	}{
		{"min above events", zone("algorithm adaptive", "events 10", "adaptive {", "min 20", "}"), "@7@zone shed: adaptive: min: want from 1 to events (10), got 20"},
		{"initial under min", zone("algorithm adaptive", "events 100", "adaptive {", "min 10", "initial 5", "}"), "@8@zone shed: adaptive: initial: want from min (10) to events (100), got 5"},
		{"initial above events", zone("algorithm adaptive", "events 10", "adaptive {", "initial 11", "}"), "@7@zone shed: adaptive: initial: want from min (4) to events (10), got 11"},
		{"tolerance 1", zone("algorithm adaptive", "events 10", "adaptive {", "tolerance 1", "}"), "@7@adaptive: tolerance: want a ratio above 1"},
		{"reserve over 90%", zone("algorithm adaptive", "events 10", "reserve 95%"), "@6@reserve: want a percent from 0% to 90%"},
		{"reserve negative", zone("algorithm adaptive", "events 10", "reserve -1%"), "@6@reserve: want a percent"},
		{"priority without classes", zone("algorithm adaptive", "events 10", "priority {jwt.tier}"), "@6@priority: want a placeholder and its classes"},
		{"priority repeated class", zone("algorithm adaptive", "events 10", "priority {jwt.tier} gold silver gold"), `@6@priority: class "gold" is listed twice`},
		{"adaptive block on another algorithm", zone("algorithm concurrency", "events 10", "adaptive {", "min 2", "}"), "@6@zone shed: adaptive: applies only to algorithm adaptive, not concurrency"},
		{"window", zone("algorithm adaptive", "events 10", "window 1m"), "@6@zone shed: window: not on an adaptive zone"},
		{"cost", zone("algorithm adaptive", "events 10", "cost 2"), "@6@zone shed: cost: not on an adaptive zone"},
		{"burst", zone("algorithm adaptive", "events 10", "burst 20"), "@6@zone shed: burst: not on an adaptive zone"},
		{"period", zone("algorithm adaptive", "events 10", "period day"), "@6@zone shed: period: not on an adaptive zone"},
		{"ban", zone("algorithm adaptive", "events 10", "ban 1m"), "@6@zone shed: ban: not on an adaptive zone"},
		{"overrides", zone("algorithm adaptive", "events 10", "overrides"), "@6@zone shed: overrides: not on an adaptive zone"},
		{"quota_lease", zone("algorithm adaptive", "events 10", "quota_lease 1s"), "@6@zone shed: quota_lease: not on an adaptive zone"},
		{"count_status", zone("algorithm adaptive", "events 10", "count_status 401"), "@6@zone shed: count_status: not on an adaptive zone"},
		{"cost_from_response", zone("algorithm adaptive", "events 10", "cost_from_response {http.response.header.X}"), "@6@zone shed: cost_from_response: not on an adaptive zone"},
		{"events placeholder", zone("algorithm adaptive", "events {http.request.header.N} 10"), "@5@zone shed: events: an adaptive zone's events is its limit's ceiling"},
		{"status on another algorithm", zone("algorithm concurrency", "events 10", "status 503"), "@6@zone shed: status: a zone's own status applies only to algorithm adaptive"},
		{"priority on a rate", zone("events 10", "window 1m", "priority {jwt.tier} a b"), "zone shed: priority and reserve apply only to algorithm adaptive and concurrency"},
		{"events missing", zone("algorithm adaptive"), "events missing (key, events and window (or period) are required)"},
		{"priority on concurrency with overrides", zone("algorithm concurrency", "events 10", "overrides", "priority {jwt.tier} a b"), "@7@zone shed: priority: not with overrides"},
		{"concurrency class without a share", zone("algorithm concurrency", "events 1", "priority {jwt.tier} a b", "reserve 50%"), `@7@zone shed: reserve: 50% of events 1 leaves class "b" no request in flight`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.input)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			want, at := tt.want, ""
			if rest, ok := strings.CutPrefix(want, "@"); ok { // "@6@msg": msg at Testfile:6
				line, msg, _ := strings.Cut(rest, "@")
				want, at = msg, ", at Testfile:"+line
			}
			if !strings.Contains(err.Error(), want) || !strings.HasSuffix(err.Error(), at) {
				t.Errorf("error %q\nwant it to contain %q and end %q", err, want, at)
			}
		})
	}
}

func TestJSONAdaptiveErrors(t *testing.T) {
	for _, tt := range []struct{ zone, want string }{
		{`{"key":"k","algorithm":"adaptive","max_events":10,"reserve":0.95}`, "reserve: want from 0% to 90%"},
		{`{"key":"k","algorithm":"adaptive","max_events":10,"adaptive":{"tolerance":0.5}}`, "adaptive: tolerance"},
		{`{"key":"k","algorithm":"adaptive","max_events":10,"priority":"{jwt.tier}"}`, "priority: want the classes"},
		{`{"key":"k","algorithm":"adaptive","max_events":10,"window":60000000000}`, "window: not on an adaptive zone"},
	} {
		var z Zone
		if err := json.Unmarshal([]byte(tt.zone), &z); err != nil {
			t.Fatal(err)
		}
		err := z.checkLimit("shed")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.zone, err, tt.want)
		}
	}
}

func TestClassOf(t *testing.T) {
	c := priorityClasses{placeholder: "{tier}", names: []string{"critical", "normal", "bulk"}}
	for value, want := range map[string]int{"critical": 0, "normal": 1, "bulk": 2, "": 2, "other": 2} {
		repl := caddy.NewReplacer()
		repl.Set("tier", value)
		if got := c.of(repl); got != want {
			t.Errorf("class of %q = %d, want %d", value, got, want)
		}
	}
}
