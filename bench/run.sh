#!/usr/bin/env bash
# bench/run.sh: end-to-end cost of Sluice on loopback, in one run.
#
# Builds Caddy from ./cmd/caddy, starts its own redis-server and one Caddy
# per system (bench/Caddyfile), measures them with wrk round-robin (ROUNDS
# rounds, the median reported) at CONNECTIONS connections and, for bare and
# the Redis systems, at one connection (latency); records Redis commandstats
# and CPU deltas and Caddy's CPU per system; then measures the
# reference (the INCR+EXPIRE script) and Sluice's scripts alone with
# redis-benchmark, and the allocations of the decision path with a Go
# benchmark. That is the `unpinned` scenario; bench/scenarios.sh adds the
# layouts (SCENARIOS: pinned, redis-own-core, network, one-call, mholt) and
# those of quota leases (lease-network, lease-hot, lease-fleet).
# Prints a Markdown report, opening with the layouts' targets, then the
# quota leases', then the unpinned run's targets, and writes it to
# bench/results/<date>.md (raw outputs beside it).
# See bench/README.md for the systems and how to read the numbers.
#
# Settings (environment):
#   DURATION=10s       per wrk measurement
#   ROUNDS=2           round-robin rounds over the systems; the median is kept
#   WARMUP=2s          one unmeasured wrk run per system before round 1 (0: none)
#   THREADS=2 CONNECTIONS=32   wrk -t / -c
#   KEYSPACE=100000    random X-Key range (bare, error429, redis-*): many keys
#   MEMORY_KEYS=10000  X-Key range of the memory systems: live keys
#   LOG_KEYS=100 LOG_EVENTS=10000   memory-sliding_log: few keys, long logs
#   WINDOW=1m          window of every admitted system (flood: 1h)
#   PRODUCT_EVENTS=1000000000  events of sliding_window and token_bucket;
#                      1000000 for code that still caps events × window at 2^52
#   SYSTEMS="bare bare-headers error429 memory memory-sliding_window memory-sliding_log
#            memory-token_bucket redis-fixed_window redis-sliding_window
#            redis-sliding_log redis-token_bucket ref-incr flood"   (any subset)
#   C1=1               0 skips the wrk -c1 runs (bare, redis-* and ref-incr)
#   C1_BASELINE_US=    today's (Sluice on Redis − bare) p50 at -c1, in µs
#   MEMORY_ALGORITHM=fixed_window  FLOOD_ALGORITHM=fixed_window
#   REDIS_BENCH=1      0 skips the redis-benchmark part
#   RB_REQUESTS=200000 RB_CLIENTS=50 RB_PIPELINE=16 RB_KEYSPACE=100000
#                      redis-benchmark -n/-c/-P/-r
#   RB_ROUNDS=3        redis-benchmark runs per row (the median is reported)
#   GO_BENCH=1         0 skips the Go benchmark (allocations per request)
#   CADDY=<binary>     use this Caddy instead of building ./cmd/caddy
#   SCENARIOS="unpinned pinned redis-own-core network one-call mholt
#              lease-network lease-hot lease-fleet"
#                      which scenarios (bench/README.md);
#                      unpinned is the SYSTEMS run above
#   SCN_REDIS_SYSTEMS="redis-fixed_window redis-sliding_window redis-token_bucket"
#                      the Redis systems of pinned, redis-own-core, network
#   SCN_REF_SYSTEMS=ref-incr   the reference beside them there ("" for none)
#   NET_DELAY=250us    delayproxy's delay, each direction (network)
#   ONECALL_ALGORITHMS="fixed_window sliding_window token_bucket"
#   ONECALL_EVENTS=1000 ONECALL_WINDOW=1m   one-call: the limit of the capture
#   CALLGRIND=1 CALLGRIND_CALLS=20000   one-call: instructions under valgrind
#   MHOLT_VERSION=v0.1.0 MHOLT_CADDY=<binary> MHOLT_EVENTS=1000
#   MHOLT_WINDOW=1m MHOLT_KEYS=10000   the mholt scenario (many keys; its
#   MHOLT_ONE_EVENTS=10000000          one-key half: a limit per minute)
#   LEASE_ALGORITHMS="fixed_window sliding_window token_bucket"
#   LEASE_LAYOUTS="unpinned pinned redis-own-core" LEASE_DURATION=5s
#                      lease-network and lease-hot: one hot key, leases
#   FLEET_ALGORITHMS="fixed_window sliding_window token_bucket"
#   FLEET_EVENTS=20000 FLEET_WINDOW=10 FLEET_WINDOWS=2 FLEET_CONNECTIONS=32
#   FLEET_ZONE_OPTIONS=  lease-fleet: more zone lines, e.g. "quota_lease off"
#                      lease-fleet: three instances, one key at 3× its limit
#   GO=go              the go command
#   RESULTS_DIR=bench/results
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh # helpers; bench/report.sh: the references and the report

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
WARMUP=${WARMUP:-2s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-32}
KEYSPACE=${KEYSPACE:-100000}
MEMORY_KEYS=${MEMORY_KEYS:-10000}
LOG_KEYS=${LOG_KEYS:-100}
LOG_EVENTS=${LOG_EVENTS:-10000}
WINDOW=${WINDOW:-1m}
PRODUCT_EVENTS=${PRODUCT_EVENTS:-${HIGH_EVENTS_PRODUCT:-1000000000}}
SYSTEMS=${SYSTEMS:-bare bare-headers error429 memory memory-sliding_window memory-sliding_log memory-token_bucket redis-fixed_window redis-sliding_window redis-sliding_log redis-token_bucket ref-incr flood}
C1=${C1:-1}
C1_BASELINE_US=${C1_BASELINE_US:-}
MEMORY_ALGORITHM=${MEMORY_ALGORITHM:-fixed_window}
FLOOD_ALGORITHM=${FLOOD_ALGORITHM:-fixed_window}
REDIS_BENCH=${REDIS_BENCH:-1}
RB_REQUESTS=${RB_REQUESTS:-200000}
RB_CLIENTS=${RB_CLIENTS:-50}
RB_PIPELINE=${RB_PIPELINE:-16}
RB_ROUNDS=${RB_ROUNDS:-3}
RB_KEYSPACE=${RB_KEYSPACE:-100000}
GO_BENCH=${GO_BENCH:-1}
CADDY=${CADDY:-}
GO=${GO:-go}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
SCENARIOS=${SCENARIOS:-unpinned pinned redis-own-core network one-call mholt lease-network lease-hot lease-fleet}
NET_DELAY=${NET_DELAY:-250us}
ONECALL_ALGORITHMS=${ONECALL_ALGORITHMS:-fixed_window sliding_window token_bucket}
ONECALL_EVENTS=${ONECALL_EVENTS:-1000}
ONECALL_WINDOW=${ONECALL_WINDOW:-1m}
CALLGRIND=${CALLGRIND:-1}
CALLGRIND_CALLS=${CALLGRIND_CALLS:-20000}
MHOLT_VERSION=${MHOLT_VERSION:-v0.1.0} # the newest the Go module proxy serves
MHOLT_CADDY=${MHOLT_CADDY:-}
MHOLT_EVENTS=${MHOLT_EVENTS:-1000}
MHOLT_WINDOW=${MHOLT_WINDOW:-1m}
MHOLT_KEYS=${MHOLT_KEYS:-10000}
MHOLT_ONE_EVENTS=${MHOLT_ONE_EVENTS:-10000000}
CADDY_VERSION=${CADDY_VERSION:-v2.11.9}
XCADDY=${XCADDY:-github.com/caddyserver/xcaddy/cmd/xcaddy@v0.4.5}

# A high limit, so the admitted path is measured: 10^9 a window, except
# sliding_log, which keeps one entry per event (events ≤ 10,000).
HIGH_EVENTS=1000000000
REDIS_RATE_MODULE=github.com/go-redis/redis_rate/v10@v10.0.1
# The reference: the classic fixed-window script.
INCR_EXPIRE="local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return c"

for scn in $SCENARIOS; do
	case $scn in
	unpinned | pinned | redis-own-core | network | one-call | mholt | lease-network | lease-hot | lease-fleet) ;;
	*) die "unknown scenario $scn (want unpinned pinned redis-own-core network one-call mholt lease-network lease-hot lease-fleet)" ;;
	esac
done
has_scenario() { [[ " $SCENARIOS " == *" $1 "* ]]; }
for tool in wrk redis-server redis-cli redis-benchmark curl awk taskset; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (apt-get install -y wrk redis-server curl)"
done

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
pids=()    # every long-running process we start (redis-server, caddy)
current="" # the wrk, redis-benchmark or go test running now
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- systems

declare -A KIND ALG EVENTS KEYS EXPECT PORT PID
define_system() { # name kind algorithm events keys expected-status
	KIND[$1]=$2 ALG[$1]=$3 EVENTS[$1]=$4 KEYS[$1]=$5 EXPECT[$1]=$6
}
events_for() { # algorithm → a limit high enough to admit everything
	case $1 in
	sliding_window | token_bucket) echo "$PRODUCT_EVENTS" ;;
	sliding_log) echo "$LOG_EVENTS" ;;
	*) echo "$HIGH_EVENTS" ;;
	esac
}
algorithms="fixed_window sliding_window sliding_log token_bucket"
is_algorithm() { [[ " $algorithms " == *" $1 "* ]]; }
systems=()
if has_scenario unpinned; then
	read -r -a systems <<<"$SYSTEMS"
	((${#systems[@]} > 0)) || die "SYSTEMS is empty"
fi
for sys in "${systems[@]}"; do
	alg=${sys#*-}
	case $sys in
	bare | bare-headers) define_system "$sys" "$sys" - - "$KEYSPACE" 200 ;;
	error429) define_system "$sys" error429 - - "$KEYSPACE" 429 ;;
	memory) define_system "$sys" memory "$MEMORY_ALGORITHM" "$(events_for "$MEMORY_ALGORITHM")" "$MEMORY_KEYS" 200 ;;
	memory-sliding_log) define_system "$sys" memory sliding_log "$LOG_EVENTS" "$LOG_KEYS" 200 ;;
	memory-*) is_algorithm "$alg" || die "unknown system $sys"
		define_system "$sys" memory "$alg" "$(events_for "$alg")" "$MEMORY_KEYS" 200 ;;
	redis-*) is_algorithm "$alg" || die "unknown system $sys"
		define_system "$sys" redis "$alg" "$(events_for "$alg")" "$KEYSPACE" 200 ;;
	ref-incr) define_system "$sys" ref - - "$KEYSPACE" 200 ;;
	flood) define_system "$sys" redis "$FLOOD_ALGORITHM" 1 1 429 ;;
	*) die "unknown system $sys (want bare bare-headers error429 memory memory-<algorithm> redis-<algorithm> ref-incr flood)" ;;
	esac
done
uses_redis() { [[ ${KIND[$1]} == redis || ${KIND[$1]} == ref ]]; }
# The -c1 systems: bare, Sluice on Redis (admitted) and ref-incr, for latency.
c1_systems=()
if [[ $C1 == 1 ]]; then
	for sys in "${systems[@]}"; do
		if [[ $sys == bare || $sys == redis-* || $sys == ref-incr ]]; then c1_systems+=("$sys"); fi
	done
fi
need_redis=0
for sys in "${systems[@]}"; do
	if uses_redis "$sys"; then need_redis=1; fi
done
if [[ $REDIS_BENCH == 1 ]]; then need_redis=1; fi
for scn in pinned redis-own-core network one-call lease-network lease-hot lease-fleet; do
	if has_scenario "$scn"; then need_redis=1; fi
done

# ------------------------------------------------------------------ build

if [[ -z $CADDY ]]; then
	log "bench: building Caddy from ./cmd/caddy"
	"$GO" build -o "$tmp/caddy" ./cmd/caddy || die "go build ./cmd/caddy failed"
	CADDY=$tmp/caddy
fi
[[ -x $CADDY ]] || die "$CADDY is not an executable"
# ref-incr's Caddy: bench/refcaddy, the INCR+EXPIRE script once per request.
SCN_REF_SYSTEMS=${SCN_REF_SYSTEMS-ref-incr}
REF_CADDY=""
if [[ " ${systems[*]} " == *" ref-incr "* ]] ||
	{ [[ -n $SCN_REF_SYSTEMS ]] && { has_scenario pinned || has_scenario redis-own-core || has_scenario network; }; }; then
	log "bench: building bench/refcaddy (the ref-incr system)"
	"$GO" build -o "$tmp/caddy-ref" ./bench/refcaddy || die "go build ./bench/refcaddy failed"
	REF_CADDY=$tmp/caddy-ref
fi
if has_scenario network || has_scenario lease-network; then
	log "bench: building bench/delayproxy"
	"$GO" build -o "$tmp/delayproxy" ./bench/delayproxy || die "go build ./bench/delayproxy failed"
fi

# ------------------------------------------------------------------ redis

redis_port="" redis_pid=""
if ((need_redis)); then
	free_port
	redis_port=$REPLY
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp" --logfile "$tmp/redis.log" &
	redis_pid=$!
	pids+=("$redis_pid")
	for _ in $(seq 100); do
		[[ $(rcli PING 2>/dev/null) == PONG ]] && break
		sleep 0.1
	done
	[[ $(rcli PING 2>/dev/null) == PONG ]] || die "redis-server did not start: $(tail -5 "$tmp/redis.log")"
	log "bench: redis-server on 127.0.0.1:$redis_port"
fi

# ------------------------------------------------------------------ caddy

# caddy_died <system>: exits with Caddy's log, and a hint when the config was
# refused for the 2^52 bound of code that predates events 10^9 a minute.
caddy_died() {
	local hint="" errors
	grep -q '2^52' "$tmp/caddy-$1.log" && hint=" (this code caps events × window: PRODUCT_EVENTS=1000000)"
	errors=$(grep '"level":"error"' "$tmp/caddy-$1.log" | tail -3)
	die "caddy ($1) exited$hint: ${errors:-$(tail -20 "$tmp/caddy-$1.log")}"
}

start_caddy() {
	local sys=$1 port url status i window=$WINDOW bin=$CADDY conf=bench/Caddyfile
	[[ $sys == flood ]] && window=1h # a denial cached for long: the flood path
	[[ ${KIND[$sys]} == ref ]] && bin=$REF_CADDY conf=bench/Caddyfile.ref
	free_port
	port=$REPLY
	env BENCH_PORT="$port" BENCH_SYSTEM="${KIND[$sys]}" BENCH_ALGORITHM="${ALG[$sys]}" \
		BENCH_EVENTS="${EVENTS[$sys]}" BENCH_WINDOW="$window" BENCH_REDIS_URL="redis://127.0.0.1:${redis_port:-0}/0" \
		BENCH_REDIS_ADDR="127.0.0.1:${redis_port:-0}" XDG_CONFIG_HOME="$tmp/xdg" XDG_DATA_HOME="$tmp/xdg" \
		"$bin" run --config "$conf" --adapter caddyfile >"$tmp/caddy-$sys.log" 2>&1 &
	PID[$sys]=$!
	pids+=("${PID[$sys]}")
	PORT[$sys]=$port
	url="http://127.0.0.1:$port/"
	for i in $(seq 150); do
		kill -0 "${PID[$sys]}" 2>/dev/null || caddy_died "$sys"
		status=$(http_status "$url")
		[[ $status != 000 ]] && break
		sleep 0.1
	done
	[[ $status != 000 ]] || die "caddy ($sys) does not answer on $url: $(tail -20 "$tmp/caddy-$sys.log")"

	# Sanity: the system answers what it is meant to, and Sluice is in the path.
	case $sys in
	flood)
		FLOOD_FROM=$(date +%s)
		http_status "$url" -H 'X-Key: 1' >/dev/null
		status=$(http_status "$url" -H 'X-Key: 1')
		[[ $status == 429 ]] || warn "$sys" "sanity: second request got $status, want 429"
		grep -qi '^retry-after:' "$tmp/headers" || warn "$sys" "sanity: no Retry-After on the 429"
		;;
	*)
		status=$(http_status "$url" -H 'X-Key: sanity')
		[[ $status == "${EXPECT[$sys]}" ]] || warn "$sys" "sanity: got $status, want ${EXPECT[$sys]}"
		if [[ ${KIND[$sys]} == memory || ${KIND[$sys]} == redis ]]; then
			grep -qi '^ratelimit' "$tmp/headers" || warn "$sys" "sanity: no RateLimit headers (is Sluice in the path?)"
		fi
		;;
	esac
	log "bench: $sys: caddy pid ${PID[$sys]} on 127.0.0.1:$port"
}

# -------------------------------------------------------------------- wrk

wrk_run() { # system duration outfile [connections]
	local c=${4:-$CONNECTIONS} t=$THREADS
	((t > c)) && t=$c
	BENCH_KEYS=${KEYS[$1]} run_fg "$3" wrk -t"$t" -c"$c" -d"$2" --latency \
		-s bench/keys.lua "http://127.0.0.1:${PORT[$1]}/"
}

# measure <system> <round> <tag> <connections>: one wrk run; appends
# "rps p50 p99 requests non2xx socket_errors caddy_ticks" to
# $runs_dir/<system>.<tag>.wrk and the Redis deltas to <system>.<tag>.redis.
runs_dir=$tmp/runs
mkdir -p "$runs_dir"
measure() {
	local sys=$1 round=$2 tag=$3 conns=$4 out="$tmp/wrk-$1-$3-$2.txt" cpu0 cpu1 errlines0 errlines1 res rps p50 p99 req non se
	printf '\n===== %s -c%s round %d =====\n' "$sys" "$conns" "$round" >>"$tmp/raw-wrk.txt"
	if uses_redis "$sys"; then redis_snapshot "$tmp/before"; fi
	errlines0=$(wc -l <"$tmp/caddy-$sys.log")
	cpu0=$(proc_cpu_ticks "${PID[$sys]}")
	wrk_run "$sys" "$DURATION" "$out" "$conns" || warn "$sys" "wrk -c$conns failed in round $round: $(tail -3 "$out" | tr '\n' ' ')"
	cpu1=$(proc_cpu_ticks "${PID[$sys]}")
	errlines1=$(wc -l <"$tmp/caddy-$sys.log")
	if uses_redis "$sys"; then
		redis_snapshot "$tmp/after"
		redis_delta "$tmp/before" "$tmp/after" >>"$runs_dir/$sys.$tag.redis"
	fi
	kill -0 "${PID[$sys]}" 2>/dev/null || die "caddy ($sys) died: $(tail -20 "$tmp/caddy-$sys.log")"
	if ((errlines1 > errlines0)); then
		warn "$sys" "Caddy logged errors in round $round (-c$conns): $(summarize_errors "$tmp/caddy-$sys.log" "$errlines0")"
	fi
	res=$(parse_wrk "$out")
	echo "$res $((cpu1 - cpu0))" >>"$runs_dir/$sys.$tag.wrk"
	cat "$out" >>"$tmp/raw-wrk.txt"
	read -r rps p50 p99 req non se <<<"$res"
	log "$(printf 'bench: round %d/%d %-22s -c%-3s %9.0f req/s  p50 %6.2f ms  p99 %7.2f ms  non-2xx %d  socket errors %d' \
		"$round" "$ROUNDS" "$sys" "$conns" "$rps" "$p50" "$p99" "$non" "$se")"
}

for sys in "${systems[@]}"; do start_caddy "$sys"; done

if [[ $WARMUP != 0 && -n $WARMUP ]]; then
	for sys in "${systems[@]}"; do
		log "bench: warm-up $sys ($WARMUP)"
		wrk_run "$sys" "$WARMUP" "$tmp/warmup.txt" || true
	done
fi

# Each round measures every system at CONNECTIONS, then the -c1 systems,
# each list starting one system later than in the previous round.
n=${#systems[@]} n1=${#c1_systems[@]}
for ((round = 1; round <= ROUNDS; round++)); do
	for ((i = 0; i < n; i++)); do
		measure "${systems[$(((i + round - 1) % n))]}" "$round" main "$CONNECTIONS"
	done
	for ((i = 0; i < n1; i++)); do
		measure "${c1_systems[$(((i + round - 1) % n1))]}" "$round" c1 1
	done
done

# ------------------------------------------------------------ aggregation

clk_tck=$(getconf CLK_TCK)
# Per system (main runs): RPS P50 P99 REQ CCPU (Caddy CPU µs/req); Redis
# systems also SCR (script calls/req) CMDS SUPC (script µs/call) RCPU
# (Redis CPU µs/req). C1P50 C1P99 C1RPS C1SCR: the same at one connection.
declare -A RPS P50 P99 REQ NON CCPU SCR CMDS SUPC RCPU C1P50 C1P99 C1RPS C1SCR
# aggregate <system> <tag>: the medians and sums over the rounds into AG_*.
aggregate() {
	local f=$runs_dir/$1.$2.wrk ticks
	AG_RPS=$(col "$f" 1 | median) AG_P50=$(col "$f" 2 | median) AG_P99=$(col "$f" 3 | median)
	read -r AG_REQ AG_NON AG_SE ticks < <(awk '{r += $4; n += $5; s += $6; t += $7} END {print r + 0, n + 0, s + 0, t + 0}' "$f")
	AG_CCPU=$(awk -v t="$ticks" -v hz="$clk_tck" -v r="$AG_REQ" 'BEGIN {if (r > 0) printf "%.1f", t / hz * 1e6 / r; else print "–"}')
	AG_SCR="–" AG_CMDS="–" AG_SUPC="–" AG_RCPU="–" AG_FAILED=0 AG_EVAL=0
	if uses_redis "$1"; then
		read -r AG_SCR AG_CMDS AG_SUPC AG_RCPU AG_FAILED AG_EVAL < <(redis_per_request "$runs_dir/$1.$2.redis" "$AG_REQ")
	fi
}
# new_windows <system>: the 2xx a denying system may answer: for flood
# (events 1 per epoch-aligned hour, its one event taken by the sanity
# check), the first request of each hour begun since then; else none.
new_windows() {
	if [[ $1 == flood ]]; then echo $(($(date +%s) / 3600 - FLOOD_FROM / 3600)); else echo 0; fi
}
check_outcomes() { # system: warnings for wrong statuses and failures
	local sys=$1
	if ((AG_FAILED > 0)); then warn "$sys" "$AG_FAILED failed or rejected Redis calls"; fi
	if ((AG_EVAL > 0)); then warn "$sys" "$AG_EVAL EVAL calls (script cache misses?)"; fi
	if [[ ${EXPECT[$sys]} == 200 ]]; then
		if ((AG_NON > 0)); then warn "$sys" "$AG_NON non-2xx responses on the admitted path"; fi
	elif ((AG_REQ - AG_NON > $(new_windows "$sys"))); then
		warn "$sys" "$((AG_REQ - AG_NON)) 2xx responses, want all ${EXPECT[$sys]}"
	fi
	if ((AG_SE > 0)); then warn "$sys" "$AG_SE socket errors"; fi
	if ((AG_REQ == 0)); then warn "$sys" "no requests measured"; fi
}
for sys in "${systems[@]}"; do
	aggregate "$sys" main
	check_outcomes "$sys"
	RPS[$sys]=$AG_RPS P50[$sys]=$AG_P50 P99[$sys]=$AG_P99 REQ[$sys]=$AG_REQ NON[$sys]=$AG_NON
	CCPU[$sys]=$AG_CCPU SCR[$sys]=$AG_SCR CMDS[$sys]=$AG_CMDS SUPC[$sys]=$AG_SUPC RCPU[$sys]=$AG_RCPU
done
for sys in ${c1_systems[@]+"${c1_systems[@]}"}; do
	aggregate "$sys" c1
	check_outcomes "$sys"
	C1RPS[$sys]=$AG_RPS C1P50[$sys]=$AG_P50 C1P99[$sys]=$AG_P99 C1SCR[$sys]=$AG_SCR
done

# ------------------------------------------------- the other scenarios

# shellcheck source=bench/report.sh
source bench/report.sh
# shellcheck source=bench/scenarios.sh
source bench/scenarios.sh
for scn in $SCENARIOS; do
	case $scn in
	pinned) scenario_pinned ;;
	redis-own-core) scenario_redis_own_core ;;
	network) scenario_network ;;
	one-call) scenario_one_call ;;
	mholt) scenario_mholt ;;
	lease-network) scenario_lease_network ;;
	lease-hot) scenario_lease_hot ;;
	lease-fleet) scenario_lease_fleet ;;
	esac
done

# ---------------------------------------------------- references, report

if [[ $REDIS_BENCH == 1 ]]; then redis_benchmarks; fi
if [[ $GO_BENCH == 1 ]]; then go_benchmark; fi
write_report
