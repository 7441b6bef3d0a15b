package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// settleUpstream is the upstream of the settle tests: /login answers 401
// to requests with X-Fail: 1 and 200 to others; /sum and /debt report the
// query's tokens in X-Usage-Tokens; /hold, /dc and /crash hold each request
// until release is closed or the request goes away.
type settleUpstream struct {
	*httptest.Server
	entered chan string // the path of each held request, as it arrives
	release chan struct{}
	once    sync.Once
	held    atomic.Int64 // requests held now
}

func startSettleUpstream(t *testing.T) *settleUpstream {
	t.Helper()
	u := &settleUpstream{entered: make(chan string, 64), release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	t.Cleanup(u.releaseAll) // first: the held requests end before Close waits for them
	return u
}

func (u *settleUpstream) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/login":
		if r.Header.Get("X-Fail") == "1" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	case "/sum", "/debt":
		w.Header().Set("X-Usage-Tokens", r.URL.Query().Get("tokens"))
	default:
		u.held.Add(1)
		defer u.held.Add(-1)
		u.entered <- r.URL.Path
		select {
		case <-u.release:
		case <-r.Context().Done():
		}
	}
	_, _ = w.Write([]byte("upstream"))
}

// releaseAll ends every held request, now and later.
func (u *settleUpstream) releaseAll() { u.once.Do(func() { close(u.release) }) }

// waitEntered waits until n held requests of path reached the upstream.
func (u *settleUpstream) waitEntered(t *testing.T, path string, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for n > 0 {
		select {
		case p := <-u.entered:
			if p != path {
				t.Fatalf("held request for %s, want %s", p, path)
			}
			n--
		case <-timeout:
			t.Fatalf("%d requests for %s still not at the upstream after 30s", n, path)
		}
	}
}

// crashWindow is the slot lifetime of the crash zone: how long the slots
// of a killed Caddy stay held.
const crashWindow = 3 * time.Second

// settleSite is the site of the settle tests, proxying to upstream.
func settleSite(srv *redistest.Server, upstream string) string {
	return fmt.Sprintf(`	rate_limit {
%s		failure_mode closed
		zone logins {
			match {
				path /login
			}
			key login-key
			algorithm sliding_log
			events 20
			window 10m
			count_status 401
		}
		zone usage {
			match {
				path /sum
			}
			key usage-key
			algorithm sliding_log
			events 10000
			window 1h
			cost 50
			cost_from_response {http.response.header.X-Usage-Tokens}
		}
		zone debt {
			match {
				path /debt
			}
			key debt-key
			algorithm token_bucket
			events 100
			window 1h
			cost 10
			cost_from_response {http.response.header.X-Usage-Tokens}
		}
		zone inflight {
			match {
				path /hold
			}
			key hold-key
			algorithm concurrency
			events 5
		}
		zone dc {
			match {
				path /dc
			}
			key dc-key
			algorithm concurrency
			events 5
		}
		zone crash {
			match {
				path /crash
			}
			key crash-key
			algorithm concurrency
			events 5
			window %s
		}
	}
	reverse_proxy %s`, redisBlock(srv, "timeout 5s"), crashWindow, strings.TrimPrefix(upstream, "http://"))
}

// waitUntil polls cond until it holds, failing after timeout with what and
// cond's last report.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("%s: not after %v (last: %s)", what, timeout, last)
}

// keyRemaining reads a key's remaining quota through the admin API.
func keyRemaining(t *testing.T, adminURL, zone, key string) (remaining, inUse int64) {
	t.Helper()
	status, body := adminDo(t, http.MethodGet, adminURL+"/rate_limit/zones/"+zone+"/keys/"+key, "", nil)
	if status != http.StatusOK {
		t.Fatalf("admin GET key: got status %d (%s), want 200", status, body)
	}
	var state struct {
		Remaining int64  `json:"remaining"`
		InUse     *int64 `json:"in_use"`
	}
	if err := json.Unmarshal([]byte(body), &state); err != nil {
		t.Fatalf("admin key state %q: %v", body, err)
	}
	if state.InUse != nil {
		inUse = *state.InUse
	}
	return state.Remaining, inUse
}

// zcard is the number of concurrency slots in the one key of zone.
func zcard(t *testing.T, rdb *redis.Client, zone string) int64 {
	t.Helper()
	keys := scanKeys(t, rdb, "sluice:"+zone+":*")
	if len(keys) == 0 {
		return 0
	}
	if len(keys) != 1 {
		t.Fatalf("zone %s: got keys %q, want one", zone, keys)
	}
	n, err := rdb.ZCard(context.Background(), keys[0]).Result()
	if err != nil {
		t.Fatalf("ZCARD %s: %v", keys[0], err)
	}
	return n
}

// settleFleet is three Caddy instances on one Redis and one upstream.
type settleFleet struct {
	srv      *redistest.Server
	rdb      *redis.Client
	upstream *settleUpstream
	caddies  []*caddyProc
	client   *http.Client
}

func startSettleFleet(t *testing.T) *settleFleet {
	t.Helper()
	f := &settleFleet{srv: redistest.Start(t), upstream: startSettleUpstream(t), client: newClient(64)}
	f.rdb = f.srv.Client(t)
	site := settleSite(f.srv, f.upstream.URL)
	for range 3 {
		f.caddies = append(f.caddies, startCaddy(t, caddyConfig{Site: site}))
	}
	return f
}

func (f *settleFleet) url(i int, path string) string { return f.caddies[i%len(f.caddies)].URL + path }
