#!/usr/bin/env bash
# bench/run.sh: end-to-end throughput of Sluice on loopback, in one run.
#
# Builds Caddy from ./cmd/caddy, starts its own redis-server and one Caddy
# per system (bench/Caddyfile), measures them with wrk round-robin (ROUNDS
# rounds, the median reported), records Redis commandstats and CPU deltas
# per system, then measures the decide script itself with redis-benchmark
# (and go-redis/redis_rate's GCRA script for comparison). Prints a Markdown
# report and writes it to bench/results/<date>.md (raw outputs beside it).
# See bench/README.md for the systems and how to read the numbers.
#
# Settings (environment):
#   DURATION=10s       per wrk measurement
#   ROUNDS=2           round-robin rounds over the systems; the median is kept
#   WARMUP=2s          one unmeasured wrk run per system before round 1 (0: none)
#   THREADS=2 CONNECTIONS=32   wrk -t / -c
#   KEYSPACE=1000000000        random X-Key range for the admitted paths
#   SYSTEMS="bare error429 memory redis-fixed_window redis-sliding_window
#            redis-sliding_log redis-token_bucket flood"   (any subset)
#   MEMORY_ALGORITHM=fixed_window  FLOOD_ALGORITHM=fixed_window
#   REDIS_BENCH=1      0 skips the redis-benchmark part
#   RB_REQUESTS=200000 RB_CLIENTS=50 RB_PIPELINE=16   redis-benchmark -n/-c/-P
#   CADDY=<binary>     use this Caddy instead of building ./cmd/caddy
#   GO=go              the go command
#   RESULTS_DIR=bench/results
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
WARMUP=${WARMUP:-2s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-32}
KEYSPACE=${KEYSPACE:-1000000000}
SYSTEMS=${SYSTEMS:-bare error429 memory redis-fixed_window redis-sliding_window redis-sliding_log redis-token_bucket flood}
MEMORY_ALGORITHM=${MEMORY_ALGORITHM:-fixed_window}
FLOOD_ALGORITHM=${FLOOD_ALGORITHM:-fixed_window}
REDIS_BENCH=${REDIS_BENCH:-1}
RB_REQUESTS=${RB_REQUESTS:-200000}
RB_CLIENTS=${RB_CLIENTS:-50}
RB_PIPELINE=${RB_PIPELINE:-16}
CADDY=${CADDY:-}
GO=${GO:-go}
RESULTS_DIR=${RESULTS_DIR:-bench/results}

# A high limit, so the admitted path is measured. sliding_window and
# token_bucket count in events × window µs, which must stay below 2^52:
# 1e6 per hour fits (3.6e15), 1e9 does not.
HIGH_EVENTS=1000000000
HIGH_EVENTS_PRODUCT=1000000
REDIS_RATE_MODULE=github.com/go-redis/redis_rate/v10@v10.0.1

log() { printf '%s\n' "$*" >&2; }
die() { log "bench: $*"; exit 1; }

for tool in wrk redis-server redis-cli redis-benchmark curl awk; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (apt-get install -y wrk redis-server curl)"
done

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
pids=()     # every long-running process we start (redis-server, caddy)
current=""  # the wrk or redis-benchmark running now
cleanup() {
	local pid
	if [[ -n $current ]]; then kill "$current" 2>/dev/null || true; fi
	for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
	for pid in ${pids[@]+"${pids[@]}"} $current; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run_fg <outfile> <cmd...>: runs a client in the background and waits, so
# a signal reaches the trap (and the client is killed) at once.
run_fg() {
	local out=$1 rc=0
	shift
	"$@" >"$out" 2>&1 &
	current=$!
	wait "$current" || rc=$?
	current=""
	return "$rc"
}

# free_port sets REPLY to a loopback port nobody listens on and we have not
# handed out yet.
used_ports=" "
free_port() {
	local p
	while :; do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
		[[ $used_ports == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			used_ports+="$p "
			REPLY=$p
			return
		fi
	done
}

# ---------------------------------------------------------------- systems

declare -A KIND ALG EVENTS KEYS EXPECT PORT PID
define_system() { # name kind algorithm events keys expected-status
	KIND[$1]=$2 ALG[$1]=$3 EVENTS[$1]=$4 KEYS[$1]=$5 EXPECT[$1]=$6
}
events_for() { # algorithm → a limit high enough to admit everything
	case $1 in
	sliding_window | token_bucket) echo "$HIGH_EVENTS_PRODUCT" ;;
	*) echo "$HIGH_EVENTS" ;;
	esac
}
read -r -a systems <<<"$SYSTEMS"
((${#systems[@]} > 0)) || die "SYSTEMS is empty"
for sys in "${systems[@]}"; do
	case $sys in
	bare) define_system "$sys" bare - - "$KEYSPACE" 200 ;;
	error429) define_system "$sys" error429 - - "$KEYSPACE" 429 ;;
	memory) define_system "$sys" memory "$MEMORY_ALGORITHM" "$(events_for "$MEMORY_ALGORITHM")" "$KEYSPACE" 200 ;;
	redis-fixed_window | redis-sliding_window | redis-sliding_log | redis-token_bucket)
		define_system "$sys" redis "${sys#redis-}" "$(events_for "${sys#redis-}")" "$KEYSPACE" 200 ;;
	flood) define_system "$sys" redis "$FLOOD_ALGORITHM" 1 1 429 ;;
	*) die "unknown system $sys (want bare error429 memory redis-<algorithm> flood)" ;;
	esac
done
uses_redis() { [[ ${KIND[$1]} == redis ]]; }
need_redis=0
for sys in "${systems[@]}"; do
	if uses_redis "$sys"; then need_redis=1; fi
done
if [[ $REDIS_BENCH == 1 ]]; then need_redis=1; fi

# ------------------------------------------------------------------ build

if [[ -z $CADDY ]]; then
	log "bench: building Caddy from ./cmd/caddy"
	"$GO" build -o "$tmp/caddy" ./cmd/caddy || die "go build ./cmd/caddy failed"
	CADDY=$tmp/caddy
fi
[[ -x $CADDY ]] || die "$CADDY is not an executable"

# ------------------------------------------------------------------ redis

redis_port=""
rcli() { redis-cli -h 127.0.0.1 -p "$redis_port" "$@" | tr -d '\r'; }
if ((need_redis)); then
	free_port
	redis_port=$REPLY
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp" --logfile "$tmp/redis.log" &
	pids+=($!)
	for _ in $(seq 100); do
		[[ $(rcli PING 2>/dev/null) == PONG ]] && break
		sleep 0.1
	done
	[[ $(rcli PING 2>/dev/null) == PONG ]] || die "redis-server did not start: $(tail -5 "$tmp/redis.log")"
	log "bench: redis-server on 127.0.0.1:$redis_port"
fi

# redis_snapshot <file>: "<command> <calls> <usec> <failed+rejected>" per
# command, and "__cpu <used_cpu_sys+used_cpu_user seconds>".
redis_snapshot() {
	{
		rcli INFO commandstats | awk -F'[:,=]' '/^cmdstat_/ {
			n = $1; sub(/^cmdstat_/, "", n); print n, $3, $5, $9 + $11 }'
		rcli INFO cpu | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "__cpu %.6f 0 0\n", s}'
	} >"$1"
}
# redis_delta <before> <after>: the same lines, after − before; our own
# INFO calls left out.
redis_delta() {
	awk 'NR == FNR {c[$1] = $2; u[$1] = $3; f[$1] = $4; next}
		$1 == "info" {next}
		{ dc = $2 - c[$1]; du = $3 - u[$1]; df = $4 - f[$1]
		  if ($1 == "__cpu") printf "__cpu %.6f 0 0\n", dc
		  else if (dc > 0) print $1, dc, du, df }' "$1" "$2"
}

# ------------------------------------------------------------------ caddy

proc_cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

http_status() { # url [curl args...] → status code, headers in $tmp/headers
	local url=$1
	shift
	curl -s -o /dev/null -D "$tmp/headers" -w '%{http_code}' --max-time 5 "$@" "$url" || true
}

declare -A WARN NWARN
warn() { # system message
	local msg=${2:0:300}
	WARN[$1]+="${WARN[$1]:+; }$msg"
	NWARN[$1]=$((${NWARN[$1]:-0} + 1))
	log "bench: WARNING: $1: $msg"
}

start_caddy() {
	local sys=$1 port url status i
	free_port
	port=$REPLY
	env BENCH_PORT="$port" BENCH_SYSTEM="${KIND[$sys]}" BENCH_ALGORITHM="${ALG[$sys]}" \
		BENCH_EVENTS="${EVENTS[$sys]}" BENCH_REDIS_URL="redis://127.0.0.1:${redis_port:-0}/0" \
		XDG_CONFIG_HOME="$tmp/xdg" XDG_DATA_HOME="$tmp/xdg" \
		"$CADDY" run --config bench/Caddyfile --adapter caddyfile >"$tmp/caddy-$sys.log" 2>&1 &
	PID[$sys]=$!
	pids+=("${PID[$sys]}")
	PORT[$sys]=$port
	url="http://127.0.0.1:$port/"
	for i in $(seq 150); do
		kill -0 "${PID[$sys]}" 2>/dev/null || die "caddy ($sys) exited: $(tail -20 "$tmp/caddy-$sys.log")"
		status=$(http_status "$url")
		[[ $status != 000 ]] && break
		sleep 0.1
	done
	[[ $status != 000 ]] || die "caddy ($sys) does not answer on $url: $(tail -20 "$tmp/caddy-$sys.log")"

	# Sanity: the system answers what it is meant to, and Sluice is in the path.
	case $sys in
	flood)
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

# parse_wrk <file> → "rps p50ms p99ms requests non2xx socket_errors"
parse_wrk() {
	awk 'function ms(v) {
			if (v ~ /us$/) return v / 1000
			if (v ~ /ms$/) return v + 0
			if (v ~ /m$/) return v * 60000
			if (v ~ /s$/) return v * 1000
			return v + 0 }
		$1 == "50%" {p50 = ms($2)}
		$1 == "99%" {p99 = ms($2)}
		/ requests in / {req = $1}
		/Non-2xx or 3xx responses:/ {non = $NF}
		/Socket errors:/ {gsub(/,/, ""); se = $4 + $6 + $8 + $10}
		/^Requests\/sec:/ {rps = $2}
		END {printf "%s %s %s %d %d %d\n", rps + 0, p50 + 0, p99 + 0, req, non, se}' "$1"
}

wrk_run() { # system duration outfile
	BENCH_KEYS=${KEYS[$1]} run_fg "$3" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$2" --latency \
		-s bench/keys.lua "http://127.0.0.1:${PORT[$1]}/"
}

# summarize_errors <log> <lines to skip>: the new error lines, grouped by
# msg and error, e.g. `3× "rate limit store failed…": "context canceled"`.
summarize_errors() {
	tail -n +"$(($2 + 1))" "$1" | awk '{
			m = ""; e = ""
			if (match($0, /"msg":"[^"]*"/)) m = substr($0, RSTART + 6, RLENGTH - 6)
			if (match($0, /"error":"[^"]*"/)) e = ": " substr($0, RSTART + 8, RLENGTH - 8)
			k = (m == "" ? substr($0, 1, 120) : m e); n[k]++
		}
		END {for (k in n) printf "%s%d× %s", (s++ ? "; " : ""), n[k], k}'
}

runs_dir=$tmp/runs
mkdir -p "$runs_dir"
measure() { # system round
	local sys=$1 round=$2 out="$tmp/wrk-$1-$2.txt" cpu0 cpu1 errlines0 errlines1 res rps p50 p99 req non se
	if uses_redis "$sys"; then redis_snapshot "$tmp/before"; fi
	errlines0=$(wc -l <"$tmp/caddy-$sys.log")
	cpu0=$(proc_cpu_ticks "${PID[$sys]}")
	wrk_run "$sys" "$DURATION" "$out" || warn "$sys" "wrk failed in round $round: $(tail -3 "$out" | tr '\n' ' ')"
	cpu1=$(proc_cpu_ticks "${PID[$sys]}")
	errlines1=$(wc -l <"$tmp/caddy-$sys.log")
	if uses_redis "$sys"; then
		redis_snapshot "$tmp/after"
		redis_delta "$tmp/before" "$tmp/after" >>"$runs_dir/$sys.redis"
	fi
	kill -0 "${PID[$sys]}" 2>/dev/null || die "caddy ($sys) died: $(tail -20 "$tmp/caddy-$sys.log")"
	if ((errlines1 > errlines0)); then
		warn "$sys" "Caddy logged errors in round $round: $(summarize_errors "$tmp/caddy-$sys.log" "$errlines0")"
	fi
	res=$(parse_wrk "$out")
	echo "$res $((cpu1 - cpu0))" >>"$runs_dir/$sys.wrk"
	cat "$out" >>"$tmp/raw-wrk.txt"
	read -r rps p50 p99 req non se <<<"$res"
	log "$(printf 'bench: round %d/%d %-22s %9.0f req/s  p50 %6.2f ms  p99 %7.2f ms  non-2xx %d  socket errors %d' \
		"$round" "$ROUNDS" "$sys" "$rps" "$p50" "$p99" "$non" "$se")"
}

for sys in "${systems[@]}"; do start_caddy "$sys"; done

if [[ $WARMUP != 0 && -n $WARMUP ]]; then
	for sys in "${systems[@]}"; do
		log "bench: warm-up $sys ($WARMUP)"
		wrk_run "$sys" "$WARMUP" "$tmp/warmup.txt" || true
	done
fi

n=${#systems[@]}
for ((round = 1; round <= ROUNDS; round++)); do
	for ((i = 0; i < n; i++)); do # each round starts one system later
		sys=${systems[$(((i + round - 1) % n))]}
		printf '\n===== %s round %d =====\n' "$sys" "$round" >>"$tmp/raw-wrk.txt"
		measure "$sys" "$round"
	done
done

# ------------------------------------------------------------ aggregation

clk_tck=$(getconf CLK_TCK)
median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
col() { awk -v c="$2" '{print $c}' "$1"; }

declare -A RPS
rows=""
for sys in "${systems[@]}"; do
	f=$runs_dir/$sys.wrk
	RPS[$sys]=$(col "$f" 1 | median)
done
ratio() { # a b → a/b with 2 decimals, or – when b is missing
	[[ -n ${2:-} ]] && awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "–"}' || echo "–"
}
for sys in "${systems[@]}"; do
	f=$runs_dir/$sys.wrk
	p50=$(col "$f" 2 | median)
	p99=$(col "$f" 3 | median)
	read -r req non se ticks < <(awk '{r += $4; n += $5; s += $6; t += $7} END {print r + 0, n + 0, s + 0, t + 0}' "$f")
	vs_bare=$(ratio "${RPS[$sys]}" "${RPS[bare]:-}")
	vs_429="–"
	[[ $sys == flood || $sys == error429 ]] && vs_429=$(ratio "${RPS[$sys]}" "${RPS[error429]:-}")
	caddy_cpu=$(awk -v t="$ticks" -v hz="$clk_tck" -v r="$req" 'BEGIN {if (r > 0) printf "%.1f", t / hz * 1e6 / r; else print "–"}')

	scripts="–" cmds="–" upc="–" rcpu="–"
	if uses_redis "$sys"; then
		read -r scripts cmds upc rcpu failed eval_calls < <(awk -v r="$req" '
			$1 == "__cpu" {cpu += $2; next}
			{all += $2; failed += $4}
			$1 ~ /^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)$/ {scr += $2}
			$1 == "evalsha" {ec += $2; eu += $3}
			$1 == "eval" {evc += $2}
			END {
				if (r <= 0) r = 1
				printf "%.3f %.3f %s %.1f %d %d\n", scr / r, all / r,
					(ec > 0 ? sprintf("%.2f", eu / ec) : "–"), cpu * 1e6 / r, failed, evc }' "$runs_dir/$sys.redis")
		if ((failed > 0)); then warn "$sys" "$failed failed or rejected Redis calls"; fi
		if ((eval_calls > 0)); then warn "$sys" "$eval_calls EVAL calls (script cache misses?)"; fi
	fi
	if [[ ${EXPECT[$sys]} == 200 ]]; then
		if ((non > 0)); then warn "$sys" "$non non-2xx responses on the admitted path"; fi
	elif ((req - non > 0)); then
		warn "$sys" "$((req - non)) 2xx responses, want all ${EXPECT[$sys]}"
	fi
	if ((se > 0)); then warn "$sys" "$se socket errors"; fi
	if ((req == 0)); then warn "$sys" "no requests measured"; fi
	status=ok
	if [[ -n ${NWARN[$sys]:-} ]]; then status="⚠ ${NWARN[$sys]} warning(s)"; fi
	rows+=$(printf '| %s | %.0f | %s | %s | %.2f | %.2f | %s | %s | %s | %s | %s | %d | %s |' \
		"$sys" "${RPS[$sys]}" "$vs_bare" "$vs_429" "$p50" "$p99" "$caddy_cpu" \
		"$scripts" "$cmds" "$upc" "$rcpu" "$non" "$status")$'\n'
done

# Per-command detail, per HTTP request, for the Redis systems.
details=""
for sys in "${systems[@]}"; do
	uses_redis "$sys" || continue
	req=$(awk '{r += $4} END {print r + 0}' "$runs_dir/$sys.wrk")
	line=$(awk -v r="$req" '$1 != "__cpu" {c[$1] += $2; u[$1] += $3}
		END {if (r <= 0) r = 1
			for (k in c) printf "%s %.3f/req (%.2f µs/call)\n", k, c[k] / r, (c[k] > 0 ? u[k] / c[k] : 0)}' \
		"$runs_dir/$sys.redis" | sort | awk '{s = s (NR > 1 ? ", " : "") $0} END {print (NR ? s : "no Redis commands")}')
	details+="- \`$sys\`: $line"$'\n'
done

# ------------------------------------------------------- redis-benchmark

rb_rows=""
rb_run() { # label statcmd pipeline cmd... → sets RB_RPS, RB_UPC
	local label=$1 stat=$2 pipe=$3 out="$tmp/rb.txt" rps upc failed
	shift 3
	# redis-benchmark's random numbers repeat from run to run: "P@" in a
	# key becomes P<pipeline>, so each run starts on keys nobody touched.
	local args=("${@//P@/P$pipe}")
	rcli CONFIG RESETSTAT >/dev/null
	if ! run_fg "$out" redis-benchmark -h 127.0.0.1 -p "$redis_port" -n "$RB_REQUESTS" -c "$RB_CLIENTS" \
		-P "$pipe" -r 1000000000 --csv "${args[@]}"; then
		warn redis-benchmark "$label -P $pipe failed: $(tail -2 "$out" | tr '\n' ' ')"
	fi
	{ printf '\n===== %s -P %s =====\n' "$label" "$pipe"; cat "$out"; rcli INFO commandstats; } >>"$tmp/raw-redis-benchmark.txt"
	rps=$(awk -F'"' 'NR == 2 {print $4 + 0}' "$out")
	upc=$(rcli INFO commandstats | awk -F'[:,=]' -v c="cmdstat_$stat" '$1 == c && $3 > 0 {printf "%.2f", $5 / $3}')
	failed=$(rcli INFO commandstats | awk -F'[:,=]' -v c="cmdstat_$stat" '$1 == c {print $9 + $11}')
	if ((${failed:-0} > 0)); then warn redis-benchmark "$label -P $pipe: $failed failed calls"; fi
	if [[ -z $upc ]]; then warn redis-benchmark "$label -P $pipe: no $stat calls recorded"; fi
	RB_RPS=${rps:-0} RB_UPC=${upc:-–}
}
rb_case() { # label statcmd cmd...
	local label=$1 stat=$2 a_rps a_upc b_rps b_upc
	shift 2
	log "bench: redis-benchmark $label"
	rb_run "$label" "$stat" "$RB_PIPELINE" "$@"
	a_rps=$RB_RPS a_upc=$RB_UPC
	rb_run "$label" "$stat" 1 "$@"
	b_rps=$RB_RPS b_upc=$RB_UPC
	rb_rows+=$(printf '| %s | %.0f | %s | %.0f | %s |' "$label" "$a_rps" "$a_upc" "$b_rps" "$b_upc")$'\n'
}

redis_rate_note=""
if [[ $REDIS_BENCH == 1 ]]; then
	decide_src=$(cd luascripts && cat prelude.lua fixed_window.lua sliding_window.lua sliding_log.lua token_bucket.lua decide.lua)
	decide_sha=$(rcli SCRIPT LOAD "$decide_src")
	empty_sha=$(rcli SCRIPT LOAD "return 1")
	[[ $decide_sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD of the decide script failed: $decide_sha"
	H=3600000000 # one hour in µs
	rb_case 'empty script, `EVAL "return 1" 0`' eval EVAL "return 1" 0
	rb_case 'empty script, EVALSHA' evalsha EVALSHA "$empty_sha" 0
	for alg in fixed_window sliding_window sliding_log token_bucket; do
		ev=$(events_for "$alg")
		rb_case "decide $alg, admitted, random key" evalsha \
			EVALSHA "$decide_sha" 1 "bench:$alg:P@:__rand_int__" "" 1 "$alg" "$ev" "$H" "$ev" 1 0
	done
	rb_case "decide $FLOOD_ALGORITHM, denied, one key (events 1)" evalsha \
		EVALSHA "$decide_sha" 1 "bench:flood" "" 1 "$FLOOD_ALGORITHM" 1 "$H" 1 1 0

	# go-redis/redis_rate's GCRA (AllowN): KEYS[1] = key; ARGV = burst,
	# rate, period in seconds, cost. Extracted from the module cache at run
	# time; never copied into this repository.
	rr_dir=$(cd "$tmp" && "$GO" mod download -json "$REDIS_RATE_MODULE" 2>/dev/null |
		awk -F'"' '$2 == "Dir" {print $4}') || true
	rr_src=""
	if [[ -n $rr_dir && -f $rr_dir/lua.go ]]; then
		rr_src=$(awk '/^var allowN = redis\.NewScript\(`/ {on = 1; next} on && /^`\)/ {exit} on {print}' "$rr_dir/lua.go")
	fi
	rr_sha=""
	[[ $rr_src == *'redis.call("GET"'* ]] && rr_sha=$(rcli SCRIPT LOAD "$rr_src" 2>/dev/null || true)
	if [[ $rr_sha =~ ^[0-9a-f]{40}$ ]]; then
		rb_case "redis_rate v10 GCRA (allowN), admitted, random key" evalsha \
			EVALSHA "$rr_sha" 1 "bench:redis_rate:P@:__rand_int__" "$HIGH_EVENTS_PRODUCT" "$HIGH_EVENTS_PRODUCT" 3600 1
	else
		redis_rate_note="redis_rate: unavailable"
		log "bench: $redis_rate_note"
	fi
fi

# ----------------------------------------------------------------- report

stamp=$(date +%Y-%m-%d-%H%M%S)
cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
redis_version=$(redis-server --version | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^v=/) print substr($i, 3)}')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git status --porcelain -- . ':!bench' 2>/dev/null) ]] && commit+=" (with uncommitted changes)"
flagged=""
for k in "${!WARN[@]}"; do flagged+="- **$k**: ${WARN[$k]}"$'\n'; done

report=$(
	cat <<EOF
# Sluice benchmark, $(date '+%Y-%m-%d %H:%M:%S %Z')

- machine: $(nproc) cores, ${cpu_model:-unknown CPU}; $(uname -sr)
- redis-server $redis_version; $("$GO" version | sed 's/^go version //'); $("$CADDY" version | awk '{print "Caddy " $1}'); $(wrk --version 2>&1 | head -1 | awk '{print "wrk " $2}')
- commit $commit
- wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, ${ROUNDS} round(s) round-robin (median shown), warm-up $WARMUP; random X-Key from 1..$KEYSPACE (flood: one key)
- everything on 127.0.0.1: wrk, Caddy and Redis share the machine's cores
- load average before the run: $load_start; after: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews every number)

## HTTP (wrk)

| system | req/s | × bare | × error429 | p50 ms | p99 ms | Caddy CPU µs/req | Redis scripts/req | Redis cmds/req | EVALSHA µs/call | Redis CPU µs/req | non-2xx | status |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|
${rows%$'\n'}

Redis cmds/req counts every command in \`INFO commandstats\`, including the
ones a script runs (Redis 7 counts those too); scripts/req counts only
EVAL/EVALSHA, i.e. round trips. EVALSHA µs/call includes the commands the
script runs. Per command, per HTTP request:

${details%$'\n'}

## Redis scripts alone (redis-benchmark -n $RB_REQUESTS -c $RB_CLIENTS -r 1e9)

| script | req/s -P $RB_PIPELINE | µs/call -P $RB_PIPELINE | req/s -P 1 | µs/call -P 1 |
|---|---:|---:|---:|---:|
${rb_rows%$'\n'}
${redis_rate_note:+
$redis_rate_note
}
## Warnings

${flagged:-none}
EOF
)

mkdir -p "$RESULTS_DIR"
printf '%s\n' "$report" >"$RESULTS_DIR/$stamp.md"
raw=$RESULTS_DIR/$stamp-raw
mkdir -p "$raw"
cp "$tmp"/raw-*.txt "$raw/" 2>/dev/null || true
for sys in "${systems[@]}"; do cp "$tmp/caddy-$sys.log" "$raw/" 2>/dev/null || true; done
if [[ -f $tmp/redis.log ]]; then cp "$tmp/redis.log" "$raw/"; fi

printf '%s\n' "$report"
log ""
log "bench: written to $RESULTS_DIR/$stamp.md (raw outputs in $raw/)"
if [[ -n $flagged ]]; then
	log "bench: THIS RUN HAD ERRORS OR WARNINGS: see \"Warnings\" above"
fi
