// Command drill is the overload drill of load shedding: an upstream of
// fixed capacity (workers × service time, an unbounded queue: 16 × 30 ms
// is about 533 req/s), open-loop arrivals (a constant rate, whatever the
// answers) at multiples of that capacity, each client giving up after its
// deadline, a share of them critical (header X-Tier, which the Caddyfile
// maps to the class: `map`), through a Caddy built from ./cmd/caddy with
// each limiter in turn: none, an adaptive zone, and static concurrency
// zones set right, too high and too low. Per limiter and phase it prints
// the goodput (2xx answered within the deadline, per second, and as a
// share of the upstream's full capacity), the admitted requests' p99, the
// share of critical requests served, the share of the served that were
// not critical (bulk ok), the shed rate (any other status), the requests
// that had no answer within the deadline, and for the adaptive zone its
// limit (mean and coefficient of variation, read from the admin API every
// 250 ms).
//
//	go build -o /tmp/caddy ./cmd/caddy
//	go run ./bench/drill -caddy /tmp/caddy
//	go run ./bench/drill -caddy /tmp/caddy -phase 10s -limiters adaptive,static
//
// It is a drill, not a test: it needs a quiet machine, and its numbers
// are what it measured on that machine.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	caddyBin := flag.String("caddy", "", "the Caddy binary (built from ./cmd/caddy); empty: build it into a temporary directory")
	workers := flag.Int("workers", 16, "the upstream's workers")
	service := flag.Duration("service", 30*time.Millisecond, "the upstream's time per request")
	phase := flag.Duration("phase", 8*time.Second, "how long each phase sends")
	warmup := flag.Duration("warmup", 5*time.Second, "the warm-up at 0.5× before the first phase, not measured")
	deadline := flag.Duration("deadline", time.Second, "each client's deadline")
	critical := flag.Float64("critical", 0.2, "the share of critical requests")
	phases := flag.String("phases", "0.5,3,3/2,3,10", "the phases: multiples of capacity; m/2 halves the upstream's capacity during the phase")
	limiters := flag.String("limiters", "none,adaptive,static,static_high,static_low", "the limiters to run, in order")
	flag.Parse()

	if *caddyBin == "" {
		dir, err := os.MkdirTemp("", "drill")
		check(err)
		defer os.RemoveAll(dir)
		*caddyBin = filepath.Join(dir, "caddy")
		fmt.Fprintln(os.Stderr, "building Caddy from ./cmd/caddy ...")
		build := exec.Command("go", "build", "-o", *caddyBin, "./cmd/caddy")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		check(build.Run())
	}
	capacity := float64(*workers) / service.Seconds()
	fmt.Printf("upstream: %d workers × %v = %.0f req/s; deadline %v; %.0f%% critical; phases of %v after a %v warm-up\n\n",
		*workers, *service, capacity, *deadline, *critical*100, *phase, *warmup)
	fmt.Printf("%-12s %-7s %9s %9s %8s %9s %9s %9s %8s %8s %14s\n",
		"limiter", "phase", "sent/s", "goodput", "of cap", "p99 ms", "critical", "bulk ok", "shed", "timeout", "limit (cv)")
	for _, name := range strings.Split(*limiters, ",") {
		run(drillConfig{
			limiter: name, caddy: *caddyBin, workers: *workers, service: *service, phase: *phase, warmup: *warmup,
			deadline: *deadline, critical: *critical, phases: parsePhases(*phases), capacity: capacity,
		})
	}
}

type drillConfig struct {
	limiter, caddy     string
	workers            int
	service            time.Duration
	phase, warmup      time.Duration
	deadline           time.Duration
	critical, capacity float64
	phases             []phaseSpec
}

type phaseSpec struct {
	name   string
	times  float64 // of capacity
	halved bool    // the upstream at half its capacity
}

func parsePhases(s string) []phaseSpec {
	var out []phaseSpec
	for _, p := range strings.Split(s, ",") {
		spec := phaseSpec{name: p + "×"}
		if m, ok := strings.CutSuffix(p, "/2"); ok {
			p, spec.halved, spec.name = m, true, m+"× half"
		}
		f, err := strconv.ParseFloat(p, 64)
		check(err)
		spec.times = f
		out = append(out, spec)
	}
	return out
}

// zones are the limiters' rate_limit blocks; static limits are in
// flight at once, the right one the upstream's workers.
func zones(limiter string, workers int) string {
	static := func(events int) string {
		return fmt.Sprintf(`rate_limit {
		zone upstream {
			key static
			algorithm concurrency
			events %d
			priority {tier} critical bulk
			reserve 20%%
		}
	}`, events)
	}
	switch limiter {
	case "none":
		return ""
	case "adaptive":
		return `rate_limit {
		zone upstream {
			key static
			algorithm adaptive
			events 1000
			priority {tier} critical bulk
			reserve 20%
			max_delay 100ms
		}
	}`
	case "static":
		return static(workers)
	case "static_high":
		return static(4 * workers)
	case "static_low":
		return static(max(workers/4, 1))
	}
	fmt.Fprintf(os.Stderr, "unknown limiter %q (want none, adaptive, static, static_high, static_low)\n", limiter)
	os.Exit(2)
	return ""
}

// upstream is a server of fixed capacity: workers take requests from an
// unbounded queue, each for service (doubled while halved); a request
// whose client left is still served, as a real upstream does.
type upstream struct {
	queue   chan chan struct{}
	halved  atomic.Bool
	service time.Duration
}

func newUpstream(workers int, service time.Duration) *upstream {
	u := &upstream{queue: make(chan chan struct{}, 1<<20), service: service}
	for range workers {
		go func() {
			for done := range u.queue {
				d := u.service
				if u.halved.Load() {
					d *= 2
				}
				time.Sleep(d)
				close(done)
			}
		}()
	}
	return u
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	done := make(chan struct{})
	u.queue <- done
	select {
	case <-done:
		w.WriteHeader(http.StatusOK)
	case <-r.Context().Done():
	}
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// result is one request's end.
type result struct {
	critical bool
	status   int // 0: no answer within the deadline
	latency  time.Duration
}

func run(c drillConfig) {
	up := newUpstream(c.workers, c.service)
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	upSrv := &http.Server{Handler: up}
	go upSrv.Serve(upLn)
	defer upSrv.Close()

	port, admin := freePort(), freePort()
	caddyfile := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	log {
		level ERROR
	}
}
:%d {
	bind 127.0.0.1
	map {http.request.header.X-Tier} {tier} {
		critical critical
		default  bulk
	}
	%s
	reverse_proxy %s {
		transport http {
			keepalive_idle_conns_per_host 1024
		}
	}
}
`, admin, port, zones(c.limiter, c.workers), upLn.Addr())
	dir, err := os.MkdirTemp("", "drill-"+c.limiter)
	check(err)
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "Caddyfile")
	check(os.WriteFile(path, []byte(caddyfile), 0o600))
	cmd := exec.Command(c.caddy, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Stderr = os.Stderr
	check(cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	waitUp(url)

	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 8192, MaxIdleConnsPerHost: 8192, IdleConnTimeout: time.Minute}}
	send(client, url, c, c.capacity*0.5, c.warmup, nil) // warm-up: not measured
	for _, p := range c.phases {
		up.halved.Store(p.halved)
		var limits []float64
		stop := make(chan struct{})
		var polled sync.WaitGroup
		if c.limiter == "adaptive" {
			polled.Go(func() { limits = pollLimit(admin, stop) })
		}
		var results []result
		send(client, url, c, c.capacity*p.times, c.phase, &results)
		close(stop)
		polled.Wait()
		report(c, p, results, limits)
	}
	up.halved.Store(false)
	fmt.Println()
}

// send sends open-loop arrivals at rate for d, each with the client's
// deadline, and waits for their ends, which it adds to results.
func send(client *http.Client, url string, c drillConfig, rate float64, d time.Duration, results *[]result) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	n := int(d.Seconds() * rate)
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		critical := float64(i%100) < c.critical*100
		wg.Go(func() {
			r := one(client, url, critical, c.deadline)
			if results != nil {
				mu.Lock()
				*results = append(*results, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

func one(client *http.Client, url string, critical bool, deadline time.Duration) result {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if critical {
		req.Header.Set("X-Tier", "critical")
	}
	start := time.Now()
	res, err := client.Do(req)
	if err != nil {
		return result{critical: critical}
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if ctx.Err() != nil {
		return result{critical: critical}
	}
	return result{critical: critical, status: res.StatusCode, latency: time.Since(start)}
}

// pollLimit reads the adaptive zone's limit from the admin API every
// 250 ms until stop.
func pollLimit(admin int, stop <-chan struct{}) []float64 {
	var limits []float64
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return limits
		case <-t.C:
		}
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/rate_limit/zones", admin))
		if err != nil {
			continue
		}
		var zones []struct {
			Adaptive *struct {
				Limit int `json:"limit"`
			} `json:"adaptive"`
		}
		_ = json.NewDecoder(res.Body).Decode(&zones)
		res.Body.Close()
		for _, z := range zones {
			if z.Adaptive != nil {
				limits = append(limits, float64(z.Adaptive.Limit))
			}
		}
	}
}

func report(c drillConfig, p phaseSpec, results []result, limits []float64) {
	var ok, shed, timeouts, crit, critOK int
	var lat []time.Duration
	for _, r := range results {
		switch {
		case r.status >= 200 && r.status < 300:
			ok++
			lat = append(lat, r.latency)
		case r.status == 0:
			timeouts++
		default:
			shed++
		}
		if r.critical {
			crit++
			if r.status >= 200 && r.status < 300 {
				critOK++
			}
		}
	}
	secs := c.phase.Seconds()
	p99 := "-"
	if len(lat) > 0 {
		slices.Sort(lat)
		p99 = fmt.Sprintf("%.0f", float64(lat[min(len(lat)-1, len(lat)*99/100)])/float64(time.Millisecond))
	}
	limit := "-"
	if len(limits) > 0 {
		mean, cv := meanCV(limits)
		limit = fmt.Sprintf("%.0f (%.0f%%)", mean, cv*100)
	}
	n := max(len(results), 1)
	fmt.Printf("%-12s %-7s %9.0f %9.0f %7.0f%% %9s %8.1f%% %8.1f%% %7.1f%% %7.1f%% %14s\n",
		c.limiter, p.name, float64(len(results))/secs, float64(ok)/secs, float64(ok)/secs/c.capacity*100, p99,
		float64(critOK)/float64(max(crit, 1))*100, float64(ok-critOK)/float64(max(ok, 1))*100,
		float64(shed)/float64(n)*100, float64(timeouts)/float64(n)*100, limit)
}

func meanCV(xs []float64) (mean, cv float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	if mean == 0 {
		return 0, 0
	}
	return mean, math.Sqrt(v/float64(len(xs))) / mean
}

func waitUp(url string) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if res, err := http.Get(url); err == nil {
			res.Body.Close()
			return
		}
	}
	fmt.Fprintln(os.Stderr, "Caddy did not answer within 30 s")
	os.Exit(1)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "drill:", err)
		os.Exit(1)
	}
}
