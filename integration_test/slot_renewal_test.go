package integration_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// inflightUpstream holds every request until release is closed, and
// records the most it held at once.
type inflightUpstream struct {
	*httptest.Server
	entered chan struct{}
	release chan struct{}
	once    sync.Once

	mu       sync.Mutex
	now, max int
}

func startInflightUpstream(t *testing.T) *inflightUpstream {
	t.Helper()
	u := &inflightUpstream{entered: make(chan struct{}, 64), release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.now++
		u.max = max(u.max, u.now)
		u.mu.Unlock()
		defer func() {
			u.mu.Lock()
			u.now--
			u.mu.Unlock()
		}()
		u.entered <- struct{}{}
		select {
		case <-u.release:
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte("upstream"))
	}))
	t.Cleanup(u.Close)
	t.Cleanup(u.releaseAll)
	return u
}

func (u *inflightUpstream) releaseAll() { u.once.Do(func() { close(u.release) }) }

func (u *inflightUpstream) most() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.max
}

// TestSlotOutlivesWindow: a concurrency zone of events 1 and window 1s
// in front of an upstream that answers after 3 s. While the first
// request runs, its slot is renewed: every request sent during those
// 3 s (every 100 ms, past three windows) is rejected, and the upstream
// never holds two at once; once the response is done the slot is free.
// On Redis and on the embedded store.
func TestSlotOutlivesWindow(t *testing.T) {
	srv := redistest.Start(t)
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			up := startInflightUpstream(t)
			store := ""
			if backend == "redis" {
				// a decision slowed by a busy machine must not fail open:
				// that would be a second request at the upstream
				store = redisBlock(srv, "key_prefix slot-"+backend+":", "timeout 2s") + "\t\tfailure_mode closed\n"
			}
			p := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s		zone slow {
			key one
			algorithm concurrency
			events 1
			window 1s
		}
	}
	reverse_proxy %s`, store, strings.TrimPrefix(up.URL, "http://"))})
			client := newClient(4)
			first := make(chan int, 1)
			go func() {
				resp, err := doGet(client, p.URL+"/")
				if err != nil {
					first <- -1
					return
				}
				first <- resp.Status
			}()
			<-up.entered
			// the load: a request every 100 ms for 3 s, three windows
			for start := time.Now(); time.Since(start) < 3*time.Second; time.Sleep(100 * time.Millisecond) {
				resp, err := doGet(client, p.URL+"/")
				if err != nil { // admitted: held by the upstream beside the first
					t.Fatalf("request %v after the first took its slot: %v; the upstream held %d at once, want 429 (the slot must outlive its 1s window while its request runs)",
						time.Since(start).Round(time.Millisecond), err, up.most())
				}
				if resp.Status != http.StatusTooManyRequests {
					t.Fatalf("request %v after the first took its slot: got status %d, want 429", time.Since(start).Round(time.Millisecond), resp.Status)
				}
			}
			up.releaseAll()
			if got := <-first; got != http.StatusOK {
				t.Errorf("first request: got status %d, want 200", got)
			}
			if got := up.most(); got != 1 {
				t.Errorf("requests at the upstream at once: got %d, want 1", got)
			}
			waitUntil(t, 5*time.Second, "the slot back after the response", func() (bool, string) {
				status := get(t, client, p.URL+"/").Status
				return status == http.StatusOK, fmt.Sprintf("status %d", status)
			})
		})
	}
}
