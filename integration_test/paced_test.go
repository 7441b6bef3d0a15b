package integration_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// pacedResult is one request of a paced traffic: which URL it went to,
// what came back, and when it was sent and answered (µs of the wall
// clock, as admission reads them).
type pacedResult struct {
	target     int
	status     int
	err        error
	sent, recv int64
}

// pacedTraffic sends requests at a steady rate, the i-th at start +
// i/rate, to urls in turn, for d, from workers goroutines (a worker late
// for its slot sends at once, so the rate holds while the workers keep
// up), each request with the given headers (name, value pairs). It
// returns every request's result, in no particular order.
func pacedTraffic(client *http.Client, urls []string, rate float64, d time.Duration, workers int, headers ...string) []pacedResult {
	interval := time.Duration(float64(time.Second) / rate)
	total := int64(d / interval)
	var (
		next    atomic.Int64
		mu      sync.Mutex
		results = make([]pacedResult, 0, total)
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < total; i = next.Add(1) - 1 {
				time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
				target := int(i) % len(urls)
				sent := time.Now()
				resp, err := doGet(client, urls[target], headers...)
				recv := time.Now()
				mu.Lock()
				results = append(results, pacedResult{target: target, status: resp.Status, err: err,
					sent: sent.UnixMicro(), recv: recv.UnixMicro()})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return results
}
