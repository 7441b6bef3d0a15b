// Command drill is the overload drill of load shedding: an upstream of
// fixed capacity (workers × service time, an unbounded queue: 16 × 30 ms
// is about 533 req/s), open-loop arrivals (a constant rate, whatever the
// answers) at multiples of that capacity, each client giving up after its
// deadline, a share of them critical (header X-Tier, which the Caddyfile
// maps to the class: `map`), through one or two Caddy processes built
// from ./cmd/caddy (with two, arrivals alternate between them; both share
// the upstream) with each limiter in turn: none, an adaptive zone, and
// static concurrency zones set right, too high and too low.
//
// Each limiter's run is a warm-up at 0.5× (not measured), then the
// phases back to back, the arrivals never pausing between them. Every
// request is counted in the second it was due; per limiter and phase,
// and per second, the drill reports the goodput (2xx answered within the
// deadline, per second, and as a share of the upstream's full capacity),
// the admitted requests' p99 (and the upstream's own: time queued and
// served in it), the critical requests served, the share of the served
// that were not critical, the shed rate (any other status), the requests
// with no answer within the deadline, and for the adaptive zone its limit
// and in flight (summed over the instances, read from the admin API every
// 250 ms). From that series it judges the adaptive zone against the
// drill's targets (targets.go), and plots its seconds as text (plot.go).
//
//	go build -o /tmp/caddy ./cmd/caddy
//	go run ./bench/drill -caddy /tmp/caddy
//	go run ./bench/drill -caddy /tmp/caddy -instances 2
//	go run ./bench/drill -caddy /tmp/caddy -limiters adaptive -phases 0.5,3,10 -steady 0
//
// It is a drill, not a test: it needs a quiet machine, and its numbers
// are what it measured on that machine.
package main

import (
	"cmp"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// config is what every limiter's run shares.
type config struct {
	caddy                  string
	workers, instances     int
	service                time.Duration
	halve                  string
	warmup, deadline, poll time.Duration
	critical, capacity     float64
	phases                 []phaseSpec
	steady                 time.Duration
	tolerance              string // the adaptive zone's; empty: the default
}

func main() {
	caddyBin := flag.String("caddy", "", "the Caddy binary (built from ./cmd/caddy); empty: build it into a temporary directory")
	workers := flag.Int("workers", 16, "the upstream's workers")
	service := flag.Duration("service", 30*time.Millisecond, "the upstream's time per request")
	halve := flag.String("halve", halveWorkers, "how a /2 phase halves the upstream's capacity: workers (half the workers stop: half the pods gone) or service (each request takes twice as long: its p99 alone is then 2× the unloaded one, so the p99 target is out of reach and reported)")
	phase := flag.Duration("phase", 8*time.Second, "how long each phase sends, unless it says (m@10s)")
	warmup := flag.Duration("warmup", 5*time.Second, "the warm-up at 0.5× before the first phase, not measured")
	deadline := flag.Duration("deadline", time.Second, "each client's deadline")
	critical := flag.Float64("critical", 0.2, "the share of critical requests")
	phases := flag.String("phases", "0.5,3,3/2,3@10s,10", "the phases: m[/2][@length], m a multiple of capacity, /2 the upstream's capacity halved during the phase")
	steady := flag.Duration("steady", 30*time.Second, "a steady 3× phase of this length after the first 3× phase, for the adaptive limiter only (its limit's coefficient of variation); 0: none")
	limiters := flag.String("limiters", "none,adaptive,static,static_high,static_low", "the limiters to run, in order")
	instances := flag.Int("instances", 1, "Caddy processes sharing the upstream, arrivals alternating between them (1 or 2)")
	pollEvery := flag.Duration("poll", 250*time.Millisecond, "how often the adaptive zone's limit and in flight are read")
	commitFlag := flag.String("commit", "", "the commit the report names (with -caddy built elsewhere); empty: this checkout's")
	tolerance := flag.String("tolerance", "", "the adaptive zone's tolerance (e.g. 1.3); empty: the default, 1.5")
	out := flag.String("out", "", "a directory to write the report (<date>-drill-<n>i.md) and every limiter's per-second series (.csv) to, besides stdout")
	flag.Parse()
	// the drill keeps every request's end in memory; a collection less
	// often leaves the CPU to the arrivals and to Caddy
	debug.SetGCPercent(400)
	if *instances < 1 || *instances > 2 {
		check(fmt.Errorf("-instances %d: want 1 or 2", *instances))
	}
	if *halve != halveService && *halve != halveWorkers {
		check(fmt.Errorf("-halve %q: want %s or %s", *halve, halveService, halveWorkers))
	}
	if *steady != 0 && (*steady < time.Second || *steady%time.Second != 0) {
		check(fmt.Errorf("-steady %v: want whole seconds, or 0", *steady))
	}

	if *caddyBin == "" {
		dir, err := os.MkdirTemp("", "drill")
		check(err)
		defer os.RemoveAll(dir)
		*caddyBin = filepath.Join(dir, "caddy")
		fmt.Fprintln(os.Stderr, "drill: building Caddy from ./cmd/caddy ...")
		build := exec.Command("go", "build", "-o", *caddyBin, "./cmd/caddy")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		check(build.Run())
	}
	c := config{
		caddy: *caddyBin, workers: *workers, instances: *instances, service: *service, halve: *halve,
		warmup: *warmup, deadline: *deadline, poll: *pollEvery, critical: *critical,
		capacity: float64(*workers) / service.Seconds(), phases: parsePhases(*phases, *phase), steady: *steady,
		tolerance: *tolerance,
	}
	names := strings.Split(*limiters, ",")
	for _, n := range names {
		zones(n, c.workers, c.instances, c.tolerance) // exits on an unknown name
	}

	began := time.Now().UTC()
	loadBefore := loadavg()
	runs := map[string]*runResult{}
	var order []*runResult
	for _, n := range names {
		r := run(c, n)
		runs[n] = r
		order = append(order, r)
	}
	loadAfter := loadavg()

	w := io.Writer(os.Stdout)
	var file *os.File
	stamp := began.Format("2006-01-02-150405")
	if *out != "" {
		check(os.MkdirAll(*out, 0o755))
		var err error
		file, err = os.Create(filepath.Join(*out, fmt.Sprintf("%s-drill-%di.md", stamp, c.instances)))
		check(err)
		w = io.MultiWriter(os.Stdout, file)
		writeCSV(filepath.Join(*out, fmt.Sprintf("%s-drill-%di.csv", stamp, c.instances)), order)
	}
	built := *commitFlag
	if built == "" {
		built = commit()
	}
	report(w, c, order, runs, began, loadBefore, loadAfter, *limiters, built)
	if file != nil {
		check(file.Close())
		fmt.Fprintf(os.Stderr, "drill: written to %s (per-second series of every limiter beside it, .csv)\n", file.Name())
	}
}

// run is one limiter's run: its upstream, its Caddy processes, the
// warm-up and the phases.
func run(c config, limiter string) *runResult {
	phases := c.phases
	if limiter == "adaptive" && c.steady > 0 {
		phases = withSteady(phases, c.steady)
	}
	s := newSchedule(c.warmup, phases)
	fmt.Fprintf(os.Stderr, "drill: %s on %d instance(s), %v\n", limiter, c.instances, s.end)

	up := newUpstream(c.workers, c.service, c.halve)
	srv := &http.Server{Handler: up}
	ln := listen()
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); up.close() }()

	var ins []*instance
	var urls []string
	for range c.instances {
		in := startCaddy(c.caddy, limiter, c.workers, c.instances, c.tolerance, ln.Addr().String())
		defer in.stop()
		ins = append(ins, in)
		urls = append(urls, in.url)
	}
	cl := newClient(urls)
	defer cl.close()

	start := time.Now().Add(100 * time.Millisecond)
	up.reset(start)
	var polls []poll
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		if limiter == "adaptive" {
			polls = pollAdaptive(ins, start, c.poll, stop)
		}
	}()
	results, lags := drive(cl, len(urls), s, c.capacity, c.critical, c.deadline, up, start)
	close(stop)
	<-polled
	return collect(limiter, s, results, lags, up.stamps(), polls)
}

func report(w io.Writer, c config, runs []*runResult, byName map[string]*runResult, began time.Time, before, after, limiters, built string) {
	fmt.Fprintf(w, "# Overload drill, %s, %d instance(s)\n\n", began.Format("2006-01-02 15:04 MST"), c.instances)
	fmt.Fprintf(w, "- commit %s; %s\n", built, goVersion())
	fmt.Fprintf(w, "- upstream: %d workers × %v = %.0f req/s, unbounded queue; a halved phase %s; each client's deadline %v; %.0f%% critical\n",
		c.workers, c.service, c.capacity, map[string]string{halveService: "doubles its time per request", halveWorkers: "stops half its workers"}[c.halve], c.deadline, c.critical*100)
	fmt.Fprintf(w, "- %d Caddy process(es)%s; limiters %s (static limits per instance: %d, %d, %d); adaptive: `reserve 20%%`, `max_delay 100ms`, tolerance %s, events 1000\n",
		c.instances, map[bool]string{true: ", arrivals alternating between them", false: ""}[c.instances > 1], limiters,
		staticEvents("static", c.workers, c.instances), staticEvents("static_high", c.workers, c.instances), staticEvents("static_low", c.workers, c.instances), cmp.Or(c.tolerance, "1.5 (the default)"))
	var ps []string
	for _, p := range c.phases {
		ps = append(ps, fmt.Sprintf("%s %v", p.name, p.dur))
	}
	steady := "none"
	if c.steady > 0 {
		steady = fmt.Sprintf("3× for %v after the first 3×, adaptive only", c.steady)
	}
	fmt.Fprintf(w, "- a %v warm-up at 0.5× (not measured), then %s; steady phase: %s\n", c.warmup, strings.Join(ps, ", "), steady)
	fmt.Fprintf(w, "- load average before: %s; after: %s (other work on the machine skews every number)\n\n", before, after)

	fmt.Fprintln(w, "## Per limiter and phase")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Goodput: 2xx answered within the deadline; of cap: over the full capacity; p99: admitted (2xx) requests, as the client saw them; upstream p99: their time in the upstream (queue and service); critical: of the critical requests, those served; bulk ok: of the served, those not critical; shed: any other status; timeout: no answer within the deadline; limit (cv) and in flight: the adaptive zone's, summed over the instances; late: how late the drill sent a request, at most (more than a few ms: the machine was too busy to drive the drill).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| limiter | phase | sent/s | goodput/s | of cap | p99 ms | upstream p99 ms | critical | bulk ok | shed | timeout | limit (cv) | in flight | late ms |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range runs {
		for i, p := range r.sched.phases {
			s := r.phase[i]
			limit, inFlight := "–", "–"
			if !math.IsNaN(s.limit) {
				limit = fmt.Sprintf("%.0f (%.0f%%)", s.limit, s.limitCV*100)
				inFlight = fmt.Sprintf("%.0f", s.inFlight)
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %.0f%% | %s | %s | %s | %s | %.1f%% | %.1f%% | %s | %s | %.0f |\n",
				r.limiter, p.name, float64(s.sent)/s.secs, s.goodput, s.goodput/c.capacity*100, num(s.p99, "%.0f"), num(s.upP99, "%.0f"),
				num(s.critPct, "%.1f%%"), num(s.bulkPct, "%.1f%%"), s.shedPct, s.toutPct, limit, inFlight, ms(s.lag))
		}
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "## Targets (adaptive, %d instance(s))\n\n", c.instances)
	printTargets(w, evaluate(byName, c.capacity))
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A recovery is the first second from which the bar holds %d seconds in a row (or to the phase's end), counted from the phase's start; 0 s: it never left. Every figure is this run's, on this machine.\n\n", holdSeconds)

	a := byName["adaptive"]
	if a == nil {
		return
	}
	fmt.Fprintf(w, "## The adaptive zone, per second\n\n")
	printSeries(w, a)
	fmt.Fprintln(w)
	unloaded := math.NaN()
	if ro := rolesOf(a.sched.phases); ro.low >= 0 {
		unloaded = a.phase[ro.low].p99
	}
	fmt.Fprintln(w, "```text")
	plot(w, a, c.capacity, p99Factor*unloaded)
	fmt.Fprintln(w, "```")
}

// printSeries is r's per-second table.
func printSeries(w io.Writer, r *runResult) {
	fmt.Fprintln(w, "| s | phase | sent | goodput | shed | timeout | p99 ms | upstream p99 ms | critical | limit | in flight | sender late ms |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	t := 0
	for i, p := range r.sched.phases {
		for k := range r.buckets[i] {
			s := statsOf(r.buckets[i][k : k+1])
			fmt.Fprintf(w, "| %d | %s | %d | %d | %.1f%% | %.1f%% | %s | %s | %s | %s | %s | %.0f |\n", t, p.name, s.sent, s.ok, s.shedPct, s.toutPct,
				num(s.p99, "%.0f"), num(s.upP99, "%.0f"), num(s.critPct, "%.1f%%"), num(s.limit, "%.1f"), num(s.inFlight, "%.1f"), ms(r.buckets[i][k].lag))
			t++
		}
	}
}

// writeCSV writes every run's per-second series.
func writeCSV(path string, runs []*runResult) {
	f, err := os.Create(path)
	check(err)
	cw := csv.NewWriter(f)
	_ = cw.Write([]string{"limiter", "phase", "second", "sent", "goodput", "shed", "timeout", "critical", "critical_served", "p99_ms", "upstream_p99_ms", "limit", "in_flight", "sender_late_ms"})
	for _, r := range runs {
		for i, p := range r.sched.phases {
			for k := range r.buckets[i] {
				s := statsOf(r.buckets[i][k : k+1])
				_ = cw.Write([]string{r.limiter, p.name, strconv.Itoa(k), strconv.Itoa(s.sent), strconv.Itoa(s.ok), strconv.Itoa(s.shed),
					strconv.Itoa(s.tout), strconv.Itoa(s.crit), strconv.Itoa(s.critOK), num(s.p99, "%.1f"), num(s.upP99, "%.1f"),
					num(s.limit, "%.2f"), num(s.inFlight, "%.2f"), fmt.Sprintf("%.1f", ms(r.buckets[i][k].lag))})
			}
		}
	}
	cw.Flush()
	check(cw.Error())
	check(f.Close())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// num formats x, or "–" for NaN.
func num(x float64, format string) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf(format, x)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// commit is the checkout's short commit, marked when files outside
// bench/ have changes (the Caddy built from it may not be the commit's).
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--", ".", ":!bench").Output(); err == nil && len(st) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

func goVersion() string {
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "go unknown"
	}
	return strings.TrimSpace(string(out))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "drill:", err)
		os.Exit(1)
	}
}
