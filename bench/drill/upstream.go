package main

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Ways to halve the upstream's capacity.
const (
	halveService = "service" // every request takes twice as long
	halveWorkers = "workers" // half the workers stop taking requests
)

// upstream is a server of fixed capacity: workers take requests from an
// unbounded queue, each for service; a request whose client left is
// still served, as a real upstream does. Halved, its capacity is half:
// each request takes twice as long (halveService), or half the workers
// stop taking requests (halveWorkers, as if half the pods were gone).
// It records how long each request spent in it (queue and service), by
// when it arrived.
type upstream struct {
	queue   chan chan struct{}
	service time.Duration
	mode    string
	halved  atomic.Bool
	gate    atomic.Pointer[chan struct{}] // open while halved (halveWorkers): the idle half waits on it
	stop    chan struct{}

	mu    sync.Mutex
	start time.Time
	times []stamp // each request's arrival (since start) and time in the upstream
}

// stamp is one request's time in the upstream.
type stamp struct{ at, took time.Duration }

func newUpstream(workers int, service time.Duration, mode string) *upstream {
	u := &upstream{queue: make(chan chan struct{}, 1<<20), service: service, mode: mode, stop: make(chan struct{})}
	for i := range workers {
		idle := i >= workers/2 // these stop while halved (halveWorkers)
		go func() {
			for {
				if g := u.gate.Load(); idle && g != nil {
					select {
					case <-*g:
					case <-u.stop:
						return
					}
				}
				select {
				case done := <-u.queue:
					d := u.service
					if u.mode == halveService && u.halved.Load() {
						d *= 2
					}
					time.Sleep(d)
					close(done)
				case <-u.stop:
					return
				}
			}
		}()
	}
	return u
}

// setHalved halves the capacity, or restores it.
func (u *upstream) setHalved(h bool) {
	if u.halved.Swap(h) == h {
		return
	}
	if u.mode != halveWorkers {
		return
	}
	if h {
		g := make(chan struct{})
		u.gate.Store(&g)
	} else if g := u.gate.Swap(nil); g != nil {
		close(*g)
	}
}

// close stops the workers (a backlog left by an overload is dropped).
func (u *upstream) close() {
	u.setHalved(false)
	close(u.stop)
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	done := make(chan struct{})
	u.queue <- done
	select {
	case <-done:
		took := time.Since(arrived)
		u.mu.Lock()
		u.times = append(u.times, stamp{at: arrived.Sub(u.start), took: took})
		u.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	case <-r.Context().Done():
	}
}

// reset forgets the requests answered so far (Caddy's check that it is
// up), and counts from start.
func (u *upstream) reset(start time.Time) {
	u.mu.Lock()
	u.start, u.times = start, nil
	u.mu.Unlock()
}

// stamps are the requests answered so far.
func (u *upstream) stamps() []stamp {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]stamp(nil), u.times...)
}
