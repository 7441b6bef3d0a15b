package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// zones are the limiters' rate_limit blocks. Static limits are in flight
// at once per instance (the embedded store: each instance counts its
// own), the right one the upstream's workers over the instances. The
// adaptive zone's tolerance is the default unless tolerance is set.
func zones(limiter string, workers, instances int, tolerance string) string {
	static := func(events int) string {
		return fmt.Sprintf(`rate_limit {
		zone upstream {
			key static
			algorithm concurrency
			events %d
			priority {tier} critical bulk
			reserve 20%%
		}
	}`, max(events, 1))
	}
	right := workers / instances
	switch limiter {
	case "none":
		return ""
	case "adaptive":
		adaptive := ""
		if tolerance != "" {
			adaptive = "\n\t\t\tadaptive {\n\t\t\t\ttolerance " + tolerance + "\n\t\t\t}"
		}
		return `rate_limit {
		zone upstream {
			key static
			algorithm adaptive
			events 1000
			priority {tier} critical bulk
			reserve 20%
			max_delay 100ms` + adaptive + `
		}
	}`
	case "static":
		return static(right)
	case "static_high":
		return static(4 * right)
	case "static_low":
		return static(right / 4)
	}
	fmt.Fprintf(os.Stderr, "unknown limiter %q (want none, adaptive, static, static_high, static_low)\n", limiter)
	os.Exit(2)
	return ""
}

// staticEvents is a static limiter's limit per instance, for the report.
func staticEvents(limiter string, workers, instances int) int {
	right := workers / instances
	switch limiter {
	case "static":
		return max(right, 1)
	case "static_high":
		return max(4*right, 1)
	case "static_low":
		return max(right/4, 1)
	}
	return 0
}

// instance is one Caddy process of a run.
type instance struct {
	url   string
	admin int
	cmd   *exec.Cmd
	dir   string
}

// startCaddy starts a Caddy with limiter in front of the upstream at
// upAddr, and waits until it answers.
func startCaddy(bin, limiter string, workers, instances int, tolerance, upAddr string) *instance {
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
`, admin, port, zones(limiter, workers, instances, tolerance), upAddr)
	dir, err := os.MkdirTemp("", "drill-"+limiter)
	check(err)
	path := filepath.Join(dir, "Caddyfile")
	check(os.WriteFile(path, []byte(caddyfile), 0o600))
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	cmd.Stderr = os.Stderr
	check(cmd.Start())
	in := &instance{url: fmt.Sprintf("http://127.0.0.1:%d/", port), admin: admin, cmd: cmd, dir: dir}
	waitUp(in.url)
	return in
}

func (in *instance) stop() {
	_ = in.cmd.Process.Kill()
	_ = in.cmd.Wait()
	_ = os.RemoveAll(in.dir)
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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

// poll is one reading of the adaptive zone on every instance.
type poll struct {
	at       time.Duration // since the run's start
	limits   []int         // per instance
	inFlight []int
}

// pollAdaptive reads the adaptive zone's limit and in flight from each
// instance's admin API (GET /rate_limit/zones) every period until stop;
// a reading any instance did not answer is dropped.
func pollAdaptive(ins []*instance, start time.Time, period time.Duration, stop <-chan struct{}) []poll {
	client := &http.Client{Timeout: max(period, time.Second)} // a reading may come late under overload, not never
	var polls []poll
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return polls
		case <-t.C:
		}
		p := poll{at: time.Since(start), limits: make([]int, len(ins)), inFlight: make([]int, len(ins))}
		var wg sync.WaitGroup
		ok := make([]bool, len(ins))
		for i, in := range ins {
			wg.Go(func() { p.limits[i], p.inFlight[i], ok[i] = readAdaptive(client, in.admin) })
		}
		wg.Wait()
		all := true
		for _, o := range ok {
			all = all && o
		}
		if all {
			polls = append(polls, p)
		}
	}
}

func readAdaptive(client *http.Client, admin int) (limit, inFlight int, ok bool) {
	res, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/rate_limit/zones", admin))
	if err != nil {
		return 0, 0, false
	}
	defer res.Body.Close()
	var zones []struct {
		Adaptive *struct {
			Limit    int `json:"limit"`
			InFlight int `json:"in_flight"`
		} `json:"adaptive"`
	}
	if json.NewDecoder(res.Body).Decode(&zones) != nil {
		return 0, 0, false
	}
	for _, z := range zones {
		if z.Adaptive != nil {
			return z.Adaptive.Limit, z.Adaptive.InFlight, true
		}
	}
	return 0, 0, false
}

// listen is a listener on a free loopback port, for the upstream.
func listen() net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	return l
}
