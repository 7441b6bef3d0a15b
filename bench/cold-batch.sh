#!/usr/bin/env bash
# bench/cold-batch.sh: what Redis spends per cold decision inside a batch,
# in instructions (repeatable on a busy machine, where seconds are not):
# redisstore's BenchmarkRedisColdBatch (FCALLs of 14 one-zone requests on
# fresh random keys per algorithm, and the INCR+EXPIRE script by EVALSHA
# pipelined 16 deep) against a redis-server of its own run under
# valgrind --tool=callgrind. Prints the benchmark's lines: instructions,
# commands and Redis CPU per decision (the CPU is valgrind's, slowed
# down: compare instructions).
#
#   bash bench/cold-batch.sh                 # 20,000 decisions per row
#   N=50000 bash bench/cold-batch.sh
#   COUNT=3 bash bench/cold-batch.sh         # three runs of each row
#   KEEP=/tmp/cg bash bench/cold-batch.sh    # keep the dumps (callgrind_annotate)
#
# It needs go, redis-server, valgrind (apt-get install -y valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
N=${N:-20000}
COUNT=${COUNT:-1}
tmp=$(mktemp -d)
pids=() current=""
trap cleanup EXIT INT TERM
free_port
port=$REPLY
valgrind --tool=callgrind --callgrind-out-file="$tmp/callgrind.out.%p" \
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
	>"$tmp/valgrind.txt" 2>&1 &
pid=$!
pids+=("$pid")
for _ in $(seq 300); do
	[[ $(redis-cli -p "$port" PING 2>/dev/null | tr -d '\r') == PONG ]] && break
	sleep 0.1
done
[[ $(redis-cli -p "$port" PING 2>/dev/null | tr -d '\r') == PONG ]] || die "redis-server under valgrind did not start"
SLUICE_BENCH_REDIS=127.0.0.1:$port SLUICE_BENCH_CALLGRIND=$pid:$tmp \
	go test -run '^$' -bench RedisColdBatch -benchtime "${N}x" -count "$COUNT" ./redisstore |
	grep -E '^(Benchmark|ok|FAIL|---)'
if [[ -n ${KEEP:-} ]]; then mkdir -p "$KEEP" && cp "$tmp"/callgrind.out.* "$KEEP"/; fi
