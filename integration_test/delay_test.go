package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// delayRate, delayTurn and delayMax are the shaped zone of
// TestMaxDelayAcrossInstances: 10/s (a turn every 100ms), burst 1, max_delay 1s.
const (
	delayRate    = 10
	delayTurn    = time.Second / delayRate
	delayMax     = time.Second
	delayTimeout = time.Second // the Redis timeout
)

// delaySite is a site with the shaped zone and a slow one (a turn every
// 10s, max_delay 30s) for the clients that leave, on srv.
func delaySite(srv *redistest.Server) caddyConfig {
	return caddyConfig{Global: "\tmetrics", Site: `	rate_limit {
` + redisBlock(srv, "timeout "+delayTimeout.String()) + `		zone shaped {
			match {
				path /shaped
			}
			key static
			algorithm token_bucket
			events ` + strconv.Itoa(delayRate) + `
			window 1s
			burst 1
			max_delay ` + delayMax.String() + `
		}
		zone slow {
			match {
				path /slow
			}
			key static
			algorithm token_bucket
			events 1
			window 10s
			burst 1
			max_delay 30s
		}
	}
	respond "ok" 200`}
}

// shapedResult is one request of the burst: its status, Retry-After, and
// when it was sent and answered.
type shapedResult struct {
	status     int
	retryAfter string
	sent, done time.Time
	err        error
}

// TestMaxDelayAcrossInstances: three Caddy instances on one Redis, a token
// bucket of 10/s with burst 1 and max_delay 1s, 40 concurrent requests:
// the admitted ones (delayed or not) are passed on no faster than the
// bucket allows (the k-th no earlier than k turns after the burst began),
// so never more than its exact allowance over the elapsed time; none waits
// longer than max_delay plus the Redis timeout; the rest get 429 with
// Retry-After.
func TestMaxDelayAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	caddies := []*caddyProc{startCaddy(t, delaySite(srv)), startCaddy(t, delaySite(srv)), startCaddy(t, delaySite(srv))}
	client := newClient(40)
	const n = 40
	results := make([]shapedResult, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			r := &results[i]
			r.sent = time.Now()
			resp, err := doGet(client, caddies[i%len(caddies)].URL+"/shaped")
			r.done, r.err = time.Now(), err
			r.status, r.retryAfter = resp.Status, resp.Header.Get("Retry-After")
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var passed []time.Time
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Fatalf("request %d: %v", i, r.err)
		case r.status == http.StatusOK:
			passed = append(passed, r.done)
			if wait := r.done.Sub(r.sent); wait > delayMax+delayTimeout {
				t.Errorf("request %d waited %v, want at most max_delay + timeout = %v", i, wait, delayMax+delayTimeout)
			}
		case r.status == http.StatusTooManyRequests:
			if s, err := strconv.Atoi(r.retryAfter); err != nil || s < 1 {
				t.Errorf("request %d: Retry-After %q, want whole seconds ≥ 1", i, r.retryAfter)
			}
		default:
			t.Errorf("request %d: status %d, want 200 or 429", i, r.status)
		}
	}
	slices.SortFunc(passed, func(a, b time.Time) int { return a.Compare(b) })
	for k, done := range passed {
		if turn := start.Add(time.Duration(k) * delayTurn); done.Before(turn) {
			t.Errorf("admitted request %d answered %v after the start, before its earliest turn %v", k, done.Sub(start), time.Duration(k)*delayTurn)
		}
	}
	allowance := 1 + int(elapsed/delayTurn) // burst + refills over the elapsed time
	// the bucket and max_delay's worth of turns are open to any burst
	if got, low := len(passed), 1+int(delayMax/delayTurn); got > allowance || got < low {
		t.Errorf("admitted %d in %v, want from %d to the exact allowance %d", got, elapsed, low, allowance)
	}
	t.Logf("admitted %d of %d in %v (allowance %d), slowest admitted wait %v", len(passed), n, elapsed, allowance, slowest(results))
}

// slowest is the longest time an admitted request of results took.
func slowest(results []shapedResult) time.Duration {
	var s time.Duration
	for _, r := range results {
		if r.status == http.StatusOK {
			s = max(s, r.done.Sub(r.sent))
		}
	}
	return s
}

// TestMaxDelayClientsLeave: clients that disconnect while their requests
// wait for their turn (on each of three instances) stop the wait on the
// server: each instance counts its wait as abandoned in its metrics, and
// none passes the request on.
func TestMaxDelayClientsLeave(t *testing.T) {
	srv := redistest.Start(t)
	caddies := []*caddyProc{startCaddy(t, delaySite(srv)), startCaddy(t, delaySite(srv)), startCaddy(t, delaySite(srv))}
	client := newClient(4)
	if got := get(t, client, caddies[0].URL+"/slow").Status; got != http.StatusOK {
		t.Fatalf("first request: status %d, want 200", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, len(caddies))
	for _, c := range caddies { // their turns: 10s, 20s and 30s away
		go func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/slow", nil)
			if err != nil {
				errs <- err
				return
			}
			resp, err := client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				err = fmt.Errorf("status %d before the client left", resp.StatusCode)
			}
			errs <- err
		}()
	}
	for _, c := range caddies {
		waitMetric(t, c, `caddy_rate_limit_delay_seconds_count{zone="slow"}`, 1)
	}
	cancel()
	for range caddies {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("client: got %v, want its own cancellation", err)
		}
	}
	for i, c := range caddies {
		waitMetric(t, c, `caddy_rate_limit_delay_abandoned_total{zone="slow"}`, 1)
		if got := metricValue(t, c, `caddy_rate_limit_decisions_total{outcome="delayed",zone="slow"}`); got != 1 {
			t.Errorf("instance %d: delayed decisions: got %v, want 1", i, got)
		}
	}
}

// metricValue is the value of the series named (with its labels) in c's
// admin /metrics, or -1 when it is absent.
func metricValue(t *testing.T, c *caddyProc, series string) float64 {
	t.Helper()
	_, body := adminDo(t, http.MethodGet, c.AdminURL+"/metrics", "", nil)
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %q is no number", series, v)
			}
			return f
		}
	}
	return -1
}

// waitMetric polls c's /metrics until series reaches want, failing after
// 10s.
func waitMetric(t *testing.T, c *caddyProc, series string, want float64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := metricValue(t, c, series)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s of %s: got %v, want %v", series, c.URL, got, want)
		}
	}
}
