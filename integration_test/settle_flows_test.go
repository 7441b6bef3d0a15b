package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCountStatusAcrossInstances: three instances; successful logins do
// not count; then 300 concurrent login attempts of which every tenth fails
// upstream with 401: count_status 401 admits at most `events` failures,
// successes give their reservation back, and the quota left then takes
// exactly the rest: `events` failures in all.
func TestCountStatusAcrossInstances(t *testing.T) {
	f := startSettleFleet(t)
	const events, requests = 20, 300
	// twice the limit of successful logins, one after another: none counts
	for i := range 2 * events {
		if got := get(t, f.client, f.url(i, "/login")).Status; got != http.StatusOK {
			t.Fatalf("successful login %d: got status %d, want 200 (successes must not count)", i, got)
		}
	}
	var mu sync.Mutex
	byStatus := map[int]int{}
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			var headers []string
			if i%10 == 0 {
				headers = []string{"X-Fail", "1"}
			}
			resp, err := doGet(f.client, f.url(i, "/login"), headers...)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				byStatus[-1]++
				return
			}
			byStatus[resp.Status]++
		})
	}
	wg.Wait()
	failures, successes, denied := byStatus[http.StatusUnauthorized], byStatus[http.StatusOK], byStatus[http.StatusTooManyRequests]
	if failures+successes+denied != requests {
		t.Fatalf("got statuses %v, want only 401, 200 and 429", byStatus)
	}
	if failures > events {
		t.Errorf("got %d failed logins admitted, want at most %d", failures, events)
	}
	if successes == 0 {
		t.Errorf("got no successful login in the flood, want some")
	}
	t.Logf("flood: %v", byStatus)

	waitUntil(t, 10*time.Second, "every success refunded", func() (bool, string) {
		r, _ := keyRemaining(t, f.caddies[0].AdminURL, "logins", "login-key")
		return r == int64(events-failures), fmt.Sprintf("remaining %d, want %d", r, events-failures)
	})
	for extra := 0; ; extra++ {
		status := get(t, f.client, f.url(extra, "/login"), "X-Fail", "1").Status
		if status == http.StatusTooManyRequests {
			if got := failures + extra; got != events {
				t.Errorf("failed logins admitted in all: got %d, want %d", got, events)
			}
			break
		}
		if status != http.StatusUnauthorized || extra > events {
			t.Fatalf("extra failed login %d: got status %d, want 401 until %d in all, then 429", extra, status, events)
		}
	}
}

// TestCostFromResponseAcrossInstances: 100 concurrent requests over three
// instances report random token counts; each reserves 50 and settles at
// what it reported, so the zone is charged the sum reported. A report above
// the limit leaves a debt that the next request waits out.
func TestCostFromResponseAcrossInstances(t *testing.T) {
	f := startSettleFleet(t)
	const requests, events = 100, 10000
	var mu sync.Mutex
	var sum int64
	var failed []string
	var wg sync.WaitGroup
	for i := range requests {
		tokens := rand.Int64N(101)
		sum += tokens
		wg.Go(func() {
			resp, err := doGet(f.client, f.url(i, "/sum?tokens="+strconv.FormatInt(tokens, 10)))
			if err != nil || resp.Status != http.StatusOK {
				mu.Lock()
				defer mu.Unlock()
				failed = append(failed, fmt.Sprintf("request %d: status %d, err %v", i, resp.Status, err))
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("got failures, want every request admitted: %v", failed)
	}
	waitUntil(t, 10*time.Second, "the sum reported charged", func() (bool, string) {
		r, _ := keyRemaining(t, f.caddies[1].AdminURL, "usage", "usage-key")
		return r == events-sum, fmt.Sprintf("remaining %d, want %d - %d", r, events, sum)
	})

	// token_bucket 100/h, cost 10 reserved, 150 reported: level 150 of 100
	resp := get(t, f.client, f.url(0, "/debt?tokens=150"))
	if got, want := resp.Header.Get("RateLimit"), `"debt";r=90;`; resp.Status != http.StatusOK || !strings.HasPrefix(got, want) {
		t.Fatalf("debt request: got %d with RateLimit %q, want 200 with %s… (the state before settling)", resp.Status, got, want)
	}
	waitUntil(t, 10*time.Second, "the debt settled", func() (bool, string) {
		r, _ := keyRemaining(t, f.caddies[0].AdminURL, "debt", "debt-key")
		return r == 0, fmt.Sprintf("remaining %d, want 0", r)
	})
	next := get(t, f.client, f.url(1, "/debt?tokens=1"))
	if next.Status != http.StatusTooManyRequests {
		t.Fatalf("after the debt: got status %d, want 429", next.Status)
	}
	// 150 + 10 - 100 = 60 tokens must drain at 100/h: 36 minutes
	retry, err := strconv.Atoi(next.Header.Get("Retry-After"))
	if err != nil || retry < 2159 || retry > 2160 {
		t.Errorf("Retry-After after the debt: got %q, want 2160 (36 min)", next.Header.Get("Retry-After"))
	}
	if got := next.Header.Get("RateLimit"); !strings.HasPrefix(got, `"debt";r=0;`) {
		t.Errorf("RateLimit after the debt: got %q, want r=0", got)
	}
}

// holdRequests sends n requests for path through caddies in turn, each held
// by the upstream; they report their statuses on the returned channel.
func holdRequests(ctx context.Context, f *settleFleet, path string, n int, instance func(i int) int) <-chan int {
	statuses := make(chan int, n)
	for i := range n {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url(instance(i), path), nil)
			resp, err := f.client.Do(req)
			if err != nil {
				statuses <- -1
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	return statuses
}

// TestConcurrencyAcrossInstances: events 5 over three instances: exactly 5
// in flight, the 6th rejected everywhere; slots come back when responses
// end, at once when clients disconnect, and after the window when their
// Caddy is killed.
func TestConcurrencyAcrossInstances(t *testing.T) {
	f := startSettleFleet(t)
	spread := func(i int) int { return i % 2 } // instance 2 is killed below

	held := holdRequests(context.Background(), f, "/hold", 5, spread)
	f.upstream.waitEntered(t, "/hold", 5)
	for i := range f.caddies {
		resp := get(t, f.client, f.url(i, "/hold"))
		if resp.Status != http.StatusTooManyRequests {
			t.Fatalf("6th request via instance %d: got status %d, want 429", i, resp.Status)
		}
		if got, want := resp.Header.Get("RateLimit-Policy"), `"inflight";q=5;qu="concurrent-requests"`; got != want {
			t.Errorf("RateLimit-Policy: got %s, want %s", got, want)
		}
		if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"inflight";r=0;`) {
			t.Errorf("RateLimit: got %s, want r=0", got)
		}
	}
	if got, want := zcard(t, f.rdb, "inflight"), int64(5); got != want {
		t.Errorf("slots in Redis: got %d, want %d", got, want)
	}
	if _, inUse := keyRemaining(t, f.caddies[2].AdminURL, "inflight", "hold-key"); inUse != 5 {
		t.Errorf("admin in_use: got %d, want 5", inUse)
	}

	t.Run("client disconnects", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		gone := holdRequests(ctx, f, "/dc", 5, spread)
		f.upstream.waitEntered(t, "/dc", 5)
		if got, want := zcard(t, f.rdb, "dc"), int64(5); got != want {
			t.Fatalf("slots before the disconnect: got %d, want %d", got, want)
		}
		cancel()
		for range 5 {
			<-gone
		}
		waitUntil(t, 5*time.Second, "slots of gone clients back", func() (bool, string) {
			n := zcard(t, f.rdb, "dc")
			return n == 0, fmt.Sprintf("%d slots", n)
		})
	})

	t.Run("caddy killed", func(t *testing.T) {
		victim := f.caddies[2]
		before := time.Now()
		_ = holdRequests(context.Background(), f, "/crash", 5, func(int) int { return 2 })
		f.upstream.waitEntered(t, "/crash", 5)
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if got := get(t, f.client, f.url(0, "/crash")).Status; got != http.StatusTooManyRequests {
			t.Fatalf("right after the kill: got status %d, want 429 (the slots outlive their Caddy)", got)
		}
		waitUntil(t, 3*crashWindow, "slots of the killed Caddy expired", func() (bool, string) {
			_, inUse := keyRemaining(t, f.caddies[0].AdminURL, "crash", "crash-key")
			return inUse == 0, fmt.Sprintf("in_use %d", inUse)
		})
		if freed := time.Since(before); freed < crashWindow-10*time.Millisecond {
			t.Errorf("slots freed %v after they were taken, want after the window %v", freed, crashWindow)
		}
	})

	f.upstream.releaseAll()
	for range 5 {
		if got := <-held; got != http.StatusOK {
			t.Errorf("held request: got status %d, want 200", got)
		}
	}
	waitUntil(t, 5*time.Second, "every slot back", func() (bool, string) {
		n := zcard(t, f.rdb, "inflight")
		return n == 0, fmt.Sprintf("%d slots", n)
	})
}
