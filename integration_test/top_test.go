package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// topEntry is an entry of GET /rate_limit/zones/<zone>/top.
type topEntry struct {
	Key    string `json:"key"`
	Denied uint64 `json:"denied"`
}

// pkPattern finds the partition key in a RateLimit header field.
var pkPattern = regexp.MustCompile(`pk=:([A-Za-z0-9+/=]+):`)

// TestTopAcrossInstances runs two Caddy instances on one Redis: a noisy
// key denied on both, mostly from the deny cache, and a quieter one denied
// on one. GET …/top on one instance ranks the noisy key first with both
// instances' denials, once the other instance has flushed (within its
// flush interval; the test waits for the count, not for a time), and
// shows the key's hash (the RateLimit header's pk), not the key, as the
// handler has no log_key. The CLI prints the same ranking.
func TestTopAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	site := fmt.Sprintf(`	rate_limit {
%s		headers ietf pk
		zone top_api {
			key {http.request.header.X-Key}
			algorithm fixed_window
			events 2
			window 1h
		}
	}
	respond "ok" 200`, exactRedis(srv))
	a, b := startCaddy(t, caddyConfig{Site: site}), startCaddy(t, caddyConfig{Site: site})
	avoidHourBoundary(t)
	client := newClient(1)

	denied := map[string]uint64{}
	var noisyPK string
	send := func(c *caddyProc, key string, n int) {
		t.Helper()
		for range n {
			res := get(t, client, c.URL+"/", "X-Key", key)
			switch res.Status {
			case http.StatusTooManyRequests:
				denied[key]++
			case http.StatusOK:
			default:
				t.Fatalf("%s key %s: status %d", c.URL, key, res.Status)
			}
			if m := pkPattern.FindStringSubmatch(res.Header.Get("RateLimit")); key == "noisy" && m != nil {
				noisyPK = strings.TrimRight(m[1], "=")
			}
		}
	}
	send(a, "noisy", 40)
	send(b, "noisy", 30)
	send(a, "quiet", 10)
	if denied["noisy"] != 68 || denied["quiet"] != 8 || noisyPK == "" {
		t.Fatalf("denied %v, pk %q: want noisy 68, quiet 8 and a pk", denied, noisyPK)
	}

	top := func(c *caddyProc) []topEntry {
		t.Helper()
		resp, err := http.Get(c.AdminURL + "/rate_limit/zones/top_api/top?n=5")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var entries []topEntry
		if err := json.NewDecoder(resp.Body).Decode(&entries); resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("GET top: %d, %v", resp.StatusCode, err)
		}
		return entries
	}
	// b's 28 denials reach Redis with b's next flush; a adds its own as
	// they stand
	var entries []topEntry
	deadline := time.Now().Add(30 * time.Second)
	for {
		entries = top(a)
		if len(entries) > 0 && entries[0].Denied == denied["noisy"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("top on a: %+v, want noisy first with %d denials (both instances') within 30s", entries, denied["noisy"])
		}
		time.Sleep(100 * time.Millisecond) // a poll interval, not a wait for the flush
	}
	if len(entries) != 2 || entries[0].Key != noisyPK || entries[1].Denied != denied["quiet"] {
		t.Errorf("top on a: %+v, want [{%s %d} {<quiet's hash> %d}]", entries, noisyPK, denied["noisy"], denied["quiet"])
	}
	for _, e := range entries {
		if e.Key == "noisy" || e.Key == "quiet" {
			t.Errorf("top shows the raw key %q without log_key", e.Key)
		}
	}

	res := rateLimitCLI(t, "top", "top_api", "-n", "1", "--address", strings.TrimPrefix(a.AdminURL, "http://"))
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if res.Code != 0 || len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "RANK KEY DENIED" ||
		strings.Join(strings.Fields(lines[1]), " ") != fmt.Sprintf("1 %s %d", noisyPK, denied["noisy"]) {
		t.Errorf("caddy rate-limit top: exit %d, printed:\n%s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
}

// TestTopFlushedWhenCaddyStops: a Caddy that stops (POST /stop on its
// admin API) within its first flush interval adds its denials to Redis's
// top-offender sets before it exits: the zone was flushable from its
// first denial, and the last flush is waited for.
func TestTopFlushedWhenCaddyStops(t *testing.T) {
	srv := redistest.Start(t)
	site := fmt.Sprintf(`	rate_limit {
%s		log_key
		zone top_stop {
			key {http.request.header.X-Key}
			algorithm fixed_window
			events 1
			window 1h
		}
	}
	respond "ok" 200`, exactRedis(srv))
	c := startCaddy(t, caddyConfig{Site: site})
	avoidHourBoundary(t)
	client := newClient(1)
	for range 8 { // 1 admitted, 7 denied
		get(t, client, c.URL+"/", "X-Key", "leaver")
	}
	resp, err := http.Post(c.AdminURL+"/stop", "", nil)
	if err != nil {
		t.Fatalf("POST /stop: %v", err)
	}
	resp.Body.Close()
	sets := redisstore.TopSets{Client: srv.Client(t), Prefix: "sluice:", Zone: "top_stop"}
	for deadline := time.Now().Add(10 * time.Second); ; {
		got, err := sets.Read(context.Background(), time.Now())
		if err == nil && len(got) == 1 && got[0].Key == "leaver" && got[0].Count == 7 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("top sets in Redis after the stop: %+v, %v; want leaver with 7", got, err)
		}
		time.Sleep(50 * time.Millisecond) // a poll interval, not a wait for the flush
	}
}
