package redisstore

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// incrExpire is the classic fixed-window script, the reference Redis's
// cost per decision is stated against.
const incrExpire = "local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return c"

// BenchmarkRedisColdBatch measures what Redis spends per cold decision
// inside a batch: FCALLs of the decide Function, each deciding
// coldBatchSize one-zone requests on fresh random keys (all admitted,
// quota_lease on but the keys untracked, as a Caddy instance sends a
// key it sees for the first time; the warm rows draw them from warmKeys
// keys instead), built by encode as the batcher's are,
// one call per round trip; and, in the same run, the INCR+EXPIRE script
// by EVALSHA on random keys, pipelined 16 deep. One op is one decision.
// It reports Redis CPU, the time inside the calls and Redis commands per
// decision (commandstats, the calls themselves not counted).
//
// SLUICE_BENCH_REDIS=host:port runs against that server instead of one
// of its own (FUNCTION FLUSH and FLUSHALL are sent to it: never a shared
// one). With SLUICE_BENCH_CALLGRIND=<pid>:<dir>, that server runs under
// valgrind --tool=callgrind (its --callgrind-out-file in dir) and each
// sub-benchmark also reports the instructions per decision: see
// bench/cold-batch.sh.
//
// Run: go test -run '^$' -bench RedisColdBatch -benchtime 100000x ./redisstore
func BenchmarkRedisColdBatch(b *testing.B) {
	var client *redis.Client
	if addr := os.Getenv("SLUICE_BENCH_REDIS"); addr != "" {
		client = redis.NewClient(&redis.Options{Addr: addr})
		b.Cleanup(func() { _ = client.Close() })
	} else {
		client = redistest.Start(b).Client(b)
	}
	ctx := context.Background()
	if err := client.FunctionFlush(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	store := New(client, Options{})
	if err := store.Warm(ctx); err != nil {
		b.Fatal(err)
	}
	sha, err := client.ScriptLoad(ctx, incrExpire).Result()
	if err != nil {
		b.Fatal(err)
	}
	cg := newCallgrind(b)
	for _, warm := range []int{0, warmKeys} {
		for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.TokenBucket} {
			name := string(alg)
			if warm > 0 {
				name += "/warm"
			}
			b.Run(name, func(b *testing.B) {
				coldBench(b, client, cg, "fcall", 1, func(p redis.Pipeliner) int {
					c := encode(coldBatch(alg, warm))
					args := make([]any, 0, 3+len(c.keys)+len(c.args))
					args = append(args, "FCALL", code.FunctionName, len(c.keys))
					for _, k := range c.keys {
						args = append(args, k)
					}
					for _, a := range c.args {
						args = append(args, a)
					}
					p.Do(ctx, args...)
					return coldBatchSize
				})
			})
		}
	}
	b.Run("incr-expire-P16", func(b *testing.B) {
		coldBench(b, client, cg, "evalsha", 16, func(p redis.Pipeliner) int {
			p.EvalSha(ctx, sha, []string{"bench:incr:" + strconv.FormatUint(rand.Uint64(), 36)}, 60)
			return 1
		})
	})
}

// coldBatchSize is how many requests one call of BenchmarkRedisColdBatch
// decides: about what the batcher gathers under load.
const coldBatchSize = 14

// warmKeys is how many keys the warm rows of BenchmarkRedisColdBatch
// draw from: each key is decided again and again, its state read and
// written (keys a zone sees a few times a window; 10^5 decisions stay
// within their limit).
const warmKeys = 1000

// coldBatch is coldBatchSize consuming one-zone requests of alg on fresh
// random keys (a zone's store key shape), events 10^9 a minute; or with
// keys > 0 on keys drawn from that many, events 10^4 a minute (a token
// bucket then holds what its key took lately).
func coldBatch(alg algorithms.Algorithm, keys int) []*pending {
	batch := make([]*pending, coldBatchSize)
	limit := algorithms.Limit{Algorithm: alg, Events: 1_000_000_000, Window: time.Minute}
	if keys > 0 {
		limit.Events = 10_000
	}
	for i := range batch {
		var h [12]byte
		for j := range h {
			h[j] = byte(rand.Uint32())
		}
		if keys > 0 {
			clear(h[:])
			copy(h[:], strconv.Itoa(rand.IntN(keys)))
		}
		key := "sluice:bench:{" + base64.RawStdEncoding.EncodeToString(h[:]) + "}" + algorithms.StateSuffix(alg)
		quota := algorithms.QuotaAsk{For: 250 * time.Millisecond, Holder: "bench", Untracked: true}
		batch[i] = &pending{mode: modeConsume, reqs: []algorithms.Request{{Key: key, Limit: limit, Cost: 1, Quota: quota}}}
	}
	return batch
}

// coldBench runs b.N decisions of call (which queues one call in p and
// returns how many decisions it makes), depth calls per round trip, on
// an empty keyspace after a warm-up, and reports what Redis spent on
// each: CPU, time inside the stat command's calls, commands run by them,
// and with callgrind instructions.
func coldBench(b *testing.B, client *redis.Client, cg *callgrind, stat string, depth int, call func(redis.Pipeliner) int) {
	ctx := context.Background()
	run := func(n int) {
		for done := 0; done < n; {
			p := client.Pipeline()
			for range depth {
				done += call(p)
			}
			cmds, err := p.Exec(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range cmds {
				if c.Err() != nil {
					b.Fatal(c.Err())
				}
			}
		}
	}
	if err := client.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	run(2000) // warm-up: the Function's memos, Lua's heap
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cg.zero(b)
	cpu0 := redisCPU(b, client)
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	ir, inCall := cg.dump(b, stat)
	n := float64(b.N)
	b.ReportMetric(float64(redisCPU(b, client)-cpu0)/n, "redis-cpu-ns/op")
	stats := redistest.ReadInfo(b, client, "commandstats")
	b.ReportMetric(float64(stats.Stat("cmdstat_"+stat, "usec"))*1000/n, "script-ns/op")
	var commands int64
	for _, name := range []string{"get", "set", "exists", "setrange", "incr", "expire", "time", "hgetall", "hmget", "mget", "hset", "pexpire", "pttl", "del", "publish"} {
		commands += stats.Stat("cmdstat_"+name, "calls")
	}
	b.ReportMetric(float64(commands)/n, "commands/op")
	if ir > 0 {
		b.ReportMetric(float64(ir)/n, "instructions/op")
		b.ReportMetric(float64(inCall)/n, "in-call-instructions/op")
	}
}

// callgrind drives the redis-server SLUICE_BENCH_CALLGRIND names, if any.
type callgrind struct {
	pid, dir string
	n        int
}

func newCallgrind(b *testing.B) *callgrind {
	v := os.Getenv("SLUICE_BENCH_CALLGRIND")
	if v == "" {
		return nil
	}
	pid, dir, ok := strings.Cut(v, ":")
	if !ok {
		b.Fatalf("SLUICE_BENCH_CALLGRIND=%q, want <pid>:<dir>", v)
	}
	return &callgrind{pid: pid, dir: dir}
}

// zero zeroes the server's counters.
func (c *callgrind) zero(b *testing.B) {
	if c == nil {
		return
	}
	if out, err := exec.Command("callgrind_control", "-z", c.pid).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control -z: %v: %s", err, out)
	}
}

// callgrindCommands are the functions of Redis that run a stat
// command: what a call costs without its I/O, which varies with how
// busy the machine keeps the event loop.
var callgrindCommands = map[string]string{"fcall": "fcallCommand", "evalsha": "evalShaCommand"}

// dump dumps the counters since zero and returns the instructions, in
// all and inside the stat command's calls (callgrind_annotate).
func (c *callgrind) dump(b *testing.B, stat string) (all, inCall int64) {
	if c == nil {
		return 0, 0
	}
	c.n++
	mark := fmt.Sprintf("cold%d-%d", c.n, time.Now().UnixNano())
	if out, err := exec.Command("callgrind_control", "-d", mark, c.pid).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control -d: %v: %s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(c.dir, "callgrind.out.*"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(data), mark) {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "summary: "); ok {
				all, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
		}
		out, err := exec.Command("callgrind_annotate", "--inclusive=yes", "--threshold=100", f).Output()
		if err != nil {
			b.Fatalf("callgrind_annotate: %v", err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, ":"+callgrindCommands[stat]+" ") {
				inCall, _ = strconv.ParseInt(strings.ReplaceAll(strings.Fields(line)[0], ",", ""), 10, 64)
				break
			}
		}
		return all, inCall
	}
	b.Fatalf("no callgrind dump named %s in %s", mark, c.dir)
	return 0, 0
}
