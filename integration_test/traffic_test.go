package integration_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The one traffic generator of the drills: workers that send requests as a
// plan says, all starting at once, and count what comes back.

// trafficPlan says what a traffic sends.
type trafficPlan struct {
	// workers is how many goroutines send, one request at a time each.
	workers int
	// maxTime ends the traffic; 0: only stop and target end it.
	maxTime time.Duration
	// target is the URL and X-Key value ("" sends no X-Key) of a worker's
	// n-th request (n = 0, 1, ...); ok false ends that worker.
	target func(worker, n int) (url, key string, ok bool)
	// batch, above 1, groups the requests by index n*workers+worker into
	// batches of that many: stop and maxTime then wait for every request
	// of the batches begun, so that each key of a batch gets all of its
	// requests.
	batch int
	// slow counts the requests that take at least this long (they paid a
	// timeout); 0 counts none.
	slow time.Duration
}

// traffic is requests being sent as a plan says.
type traffic struct {
	plan     trafficPlan
	sent     atomic.Int64 // requests that came back, answered or not
	stopping chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
	start    time.Time

	mu     sync.Mutex
	begun  int  // requests begun, by index: the highest index + 1
	ending bool // stop or maxTime came: only begun batches go on
	res    trafficResult
}

// trafficResult is what came back.
type trafficResult struct {
	byStatus map[int]int
	admitted map[string]int // 200s per key
	answered map[string]int // answered requests per key
	errs     int            // transport errors
	firstErr error
	bad      int      // 5xx statuses and transport errors
	firstBad []string // the first few
	slowest  time.Duration
	slow     int           // requests that took at least plan.slow
	took     time.Duration // from the start until the last worker ended
	sent     int64         // requests that came back
}

// startTraffic starts plan's workers, sending with client.
func startTraffic(client *http.Client, plan trafficPlan) *traffic {
	tr := &traffic{plan: plan, stopping: make(chan struct{}), res: trafficResult{
		byStatus: map[int]int{}, admitted: map[string]int{}, answered: map[string]int{},
	}}
	var deadline time.Time
	if plan.maxTime > 0 {
		deadline = time.Now().Add(plan.maxTime)
	}
	begin := make(chan struct{})
	for w := range plan.workers {
		tr.done.Go(func() {
			<-begin
			for n := 0; tr.next(w, n, deadline); n++ {
				url, key, ok := plan.target(w, n)
				if !ok {
					return
				}
				var headers []string
				if key != "" {
					headers = []string{"X-Key", key}
				}
				start := time.Now()
				resp, err := doGet(client, url, headers...)
				if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) {
					// sent on a connection as the server closed it (a reload
					// closes the old server's idle ones, a connection just
					// accepted among them): reset or ended before any
					// response, and resent, as clients do; a Caddy that is
					// gone refuses the resend too
					resp, err = doGet(client, url, headers...)
				}
				tr.record(key, resp, time.Since(start), err)
			}
		})
	}
	tr.start = time.Now()
	close(begin)
	return tr
}

// next reports whether worker may send its n-th request.
func (tr *traffic) next(worker, n int, deadline time.Time) bool {
	ending := !deadline.IsZero() && !time.Now().Before(deadline)
	select {
	case <-tr.stopping:
		ending = true
	default:
	}
	if tr.plan.batch <= 1 {
		return !ending
	}
	i := n*tr.plan.workers + worker
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.ending = tr.ending || ending; tr.ending {
		return tr.begun > 0 && i/tr.plan.batch <= (tr.begun-1)/tr.plan.batch
	}
	tr.begun = max(tr.begun, i+1)
	return true
}

func (tr *traffic) record(key string, resp response, took time.Duration, err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	defer tr.sent.Add(1)
	r := &tr.res
	r.slowest = max(r.slowest, took)
	if tr.plan.slow > 0 && took >= tr.plan.slow {
		r.slow++
	}
	if err != nil || resp.Status >= 500 {
		if r.bad++; len(r.firstBad) < 10 {
			r.firstBad = append(r.firstBad, fmt.Sprintf("key %.40q: status %d, err %v: %.200s", key, resp.Status, err, resp.Body))
		}
	}
	if err != nil {
		if r.errs++; r.errs == 1 {
			r.firstErr = err
		}
		return
	}
	r.byStatus[resp.Status]++
	r.answered[key]++
	if resp.Status == http.StatusOK {
		r.admitted[key]++
	}
}

// waitSent polls until at least n requests came back, for up to limit.
func (tr *traffic) waitSent(t *testing.T, n int64, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); tr.sent.Load() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("traffic: %d requests came back within %v, want %d", tr.sent.Load(), limit, n)
		}
	}
}

// wait waits until the workers end by themselves and returns the result.
func (tr *traffic) wait() trafficResult {
	tr.done.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.res.took == 0 {
		tr.res.took = time.Since(tr.start)
	}
	tr.res.sent = tr.sent.Load()
	return tr.res
}

// stop ends the traffic (the begun batches finish) and returns the result;
// it is safe to call twice.
func (tr *traffic) stop() trafficResult {
	tr.stopOnce.Do(func() { close(tr.stopping) })
	return tr.wait()
}

// check logs the result and fails t on transport errors and on any status
// outside allowed.
func (r trafficResult) check(t *testing.T, what string, allowed ...int) {
	t.Helper()
	t.Logf("%s: %d requests, statuses %v, transport errors %d, slowest %v, %d slow", what, r.sent, r.byStatus, r.errs, r.slowest, r.slow)
	if r.errs > 0 {
		t.Errorf("%s: %d transport errors, first: %v", what, r.errs, r.firstErr)
	}
	for status, n := range r.byStatus {
		if !slices.Contains(allowed, status) {
			t.Errorf("%s: got status %d %d times, want only %v", what, status, n, allowed)
		}
	}
}

// onePerWorker is the target of a burst: each worker sends one request,
// to urls in turn, with X-Key key(worker) ("" for none).
func onePerWorker(urls []string, key func(worker int) string) func(worker, n int) (string, string, bool) {
	return func(w, n int) (string, string, bool) {
		return urls[w%len(urls)] + "/", key(w), n == 0
	}
}
