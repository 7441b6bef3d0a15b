# bench/lib.sh: helpers of bench/run.sh (sourced, not run). They use the
# globals run.sh sets: tmp (scratch dir), redis_port, pids, current.

log() { printf '%s\n' "$*" >&2; }
die() { log "bench: $*"; exit 1; }

# cleanup stops every process we started (by pid) and removes $tmp.
cleanup() {
	local pid
	if [[ -n $current ]]; then kill "$current" 2>/dev/null || true; fi
	for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
	for pid in ${pids[@]+"${pids[@]}"} $current; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$tmp"
}

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
# handed out yet, below the ephemeral range (ip_local_port_range, usually
# from 32768): a port some client's connection holds cannot be listened on.
used_ports=" "
port_hi=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
((port_hi > 12000)) || port_hi=32768
free_port() {
	local p
	while :; do
		p=$((10000 + (RANDOM * 32768 + RANDOM) % (port_hi - 10000)))
		[[ $used_ports == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			used_ports+="$p "
			REPLY=$p
			return
		fi
	done
}

# warn <system> <message>: recorded for the report's Warnings section.
declare -A WARN NWARN
warn() {
	local msg=${2:0:300}
	WARN[$1]+="${WARN[$1]:+; }$msg"
	NWARN[$1]=$((${NWARN[$1]:-0} + 1))
	log "bench: WARNING: $1: $msg"
}

# ------------------------------------------------------------------ redis

rcli() { redis-cli -h 127.0.0.1 -p "$redis_port" "$@" | tr -d '\r'; }

# redis_cpu: used_cpu_sys + used_cpu_user of the redis-server, in seconds.
redis_cpu() { rcli INFO cpu | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f\n", s}'; }

# redis_snapshot <file>: "<command> <calls> <usec> <failed+rejected>" per
# command, and "__cpu <used_cpu_sys+used_cpu_user seconds>".
redis_snapshot() {
	{
		rcli INFO commandstats | awk -F'[:,=]' '/^cmdstat_/ {
			n = $1; sub(/^cmdstat_/, "", n); print n, $3, $5, $9 + $11 }'
		printf '__cpu %s 0 0\n' "$(redis_cpu)"
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

# The commands that are script calls: Sluice may call EVALSHA (EVAL on a
# cache miss) or, with Redis Functions, FCALL; all count as round trips.
SCRIPT_CMDS='^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)$'

# redis_per_request <redis deltas file> <requests> → "scripts/req cmds/req
# script-µs/call redis-cpu-µs/req failed eval-calls"
redis_per_request() {
	awk -v r="$2" -v re="$SCRIPT_CMDS" '
		$1 == "__cpu" {cpu += $2; next}
		{all += $2; failed += $4}
		$1 ~ re {scr += $2; su += $3}
		$1 == "eval" {evc += $2}
		END {
			if (r <= 0) r = 1
			printf "%.3f %.3f %s %.1f %d %d\n", scr / r, all / r,
				(scr > 0 ? sprintf("%.2f", su / scr) : "–"), cpu * 1e6 / r, failed, evc }' "$1"
}

# ------------------------------------------------------------------ caddy

proc_cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

http_status() { # url [curl args...] → status code, headers in $tmp/headers
	local url=$1
	shift
	curl -s -o /dev/null -D "$tmp/headers" -w '%{http_code}' --max-time 5 "$@" "$url" || true
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

# ------------------------------------------------------------ arithmetic

median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# median_known: the median of the numbers read, with 2 decimals, "–" (not
# measured) left out; "–" when none is left.
median_known() {
	local v
	v=$(grep -v '^–$' || true)
	if [[ -z $v ]]; then echo –; else printf '%.2f\n' "$(median <<<"$v")"; fi
}
col() { awk -v c="$2" '{print $c}' "$1"; }

# ratio <a> <b> → a/b with 2 decimals, or – when either is missing.
ratio() {
	awk -v a="${1:-}" -v b="${2:-}" 'BEGIN {
		if (a == "" || a == "–" || b == "" || b == "–" || b + 0 <= 0) print "–"; else printf "%.2f", a / b }'
}
# minus <a> <b> [decimals] → a − b with its sign, or – when either is missing.
minus() {
	awk -v a="${1:-}" -v b="${2:-}" -v d="${3:-1}" 'BEGIN {
		if (a == "" || a == "–" || b == "" || b == "–") print "–"; else printf "%+.*f", d, a - b }'
}
# cmp <value> <op> <target> → yes, no, or – (value missing); op is le or ge.
cmp() {
	awk -v v="${1:-}" -v op="$2" -v t="$3" 'BEGIN {
		if (v == "" || v == "–") {print "–"; exit}
		ok = (op == "le") ? (v + 0 <= t + 0) : (v + 0 >= t + 0); print (ok ? "yes" : "no") }'
}
# all_met <verdict...> → yes when all are yes, no (k/n met) when some are
# not, – when none was measured.
all_met() {
	local v n=0 yes=0
	for v in "$@"; do
		[[ $v == – ]] && continue
		n=$((n + 1))
		[[ $v == yes ]] && yes=$((yes + 1))
	done
	if ((n == 0)); then echo "–"; elif ((yes == n)); then echo "yes"; else echo "**no** ($yes/$n met)"; fi
}
