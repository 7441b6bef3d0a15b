# bench/scenarios.sh: the scenarios besides `unpinned` (sourced
# by bench/run.sh, not run): pinned, redis-own-core, network, one-call and
# mholt; and those of quota leases: lease-network, lease-hot and
# lease-fleet. Each starts its own Caddy processes (one per system, under taskset
# where the scenario pins), measures them round-robin and stops them, so
# one scenario's processes never compete with another's. They share run.sh's
# redis-server, re-pinned per scenario. Results go into the S_* arrays,
# keyed "<scenario>|<system>|<variant>"; bench/report.sh prints them.

all_cpus="0-$(($(nproc) - 1))"

# ---------------------------------------------------------- instances

# An instance is one Caddy of one scenario: I_* arrays keyed by
# "<scenario>/<system>".
declare -A I_KIND I_ALG I_EVENTS I_WINDOW I_PORT I_PID I_REDIS I_CONF I_BIN I_EXPECT I_OPTS I_HOPTS
declare -A I_GRANTED I_USED # a redis instance's quota lease units, read as it stops (lease_units)
# inst_define <inst> <kind> <algorithm> <events> <window> <redis port> [caddyfile] [binary]
# (I_OPTS[<inst>]: more lines of a redis zone, e.g. "quota_lease off";
# I_HOPTS[<inst>]: of a memory handler, e.g. "headers none"; set after)
inst_define() {
	I_KIND[$1]=$2 I_ALG[$1]=$3 I_EVENTS[$1]=$4 I_WINDOW[$1]=$5 I_REDIS[$1]=$6
	I_CONF[$1]=${7:-bench/Caddyfile} I_BIN[$1]=${8:-$CADDY}
	I_EXPECT[$1]=200 I_OPTS[$1]="" I_HOPTS[$1]=""
	[[ $2 == error429 ]] && I_EXPECT[$1]=429
	return 0
}
inst_file() { echo "${1//\//__}"; } # a file name for an instance
inst_uses_redis() { [[ ${I_KIND[$1]} == redis || ${I_KIND[$1]} == ref ]]; }

# inst_start <inst> <cpus>: starts the instance's Caddy on those CPUs and
# checks that it answers what it should.
inst_start() {
	local inst=$1 cpus=$2 f port url status
	f=$(inst_file "$inst")
	free_port
	port=$REPLY
	env BENCH_PORT="$port" BENCH_SYSTEM="${I_KIND[$inst]}" BENCH_ALGORITHM="${I_ALG[$inst]}" \
		BENCH_EVENTS="${I_EVENTS[$inst]}" BENCH_WINDOW="${I_WINDOW[$inst]}" \
		BENCH_REDIS_URL="redis://127.0.0.1:${I_REDIS[$inst]:-0}/0" BENCH_REDIS_ADDR="127.0.0.1:${I_REDIS[$inst]:-0}" \
		BENCH_ZONE_OPTIONS="${I_OPTS[$inst]}" BENCH_HANDLER_OPTIONS="${I_HOPTS[$inst]}" XDG_CONFIG_HOME="$tmp/xdg" XDG_DATA_HOME="$tmp/xdg" \
		taskset -c "$cpus" "${I_BIN[$inst]}" run --config "${I_CONF[$inst]}" --adapter caddyfile >"$tmp/caddy-$f.log" 2>&1 &
	I_PID[$inst]=$!
	pids+=("${I_PID[$inst]}")
	I_PORT[$inst]=$port
	url="http://127.0.0.1:$port/"
	for _ in $(seq 150); do
		kill -0 "${I_PID[$inst]}" 2>/dev/null || die "caddy ($inst) exited: $(tail -20 "$tmp/caddy-$f.log")"
		status=$(http_status "$url")
		[[ $status != 000 ]] && break
		sleep 0.1
	done
	[[ $status != 000 ]] || die "caddy ($inst) does not answer on $url: $(tail -20 "$tmp/caddy-$f.log")"
	status=$(http_status "$url" -H 'X-Key: sanity')
	[[ $status == "${I_EXPECT[$inst]}" ]] || warn "$inst" "sanity: got $status, want ${I_EXPECT[$inst]}"
	if [[ (${I_KIND[$inst]} == memory || ${I_KIND[$inst]} == redis) && ${I_HOPTS[$inst]} != *"headers none"* ]]; then
		grep -qi '^ratelimit' "$tmp/headers" || warn "$inst" "sanity: no RateLimit headers (is Sluice in the path?)"
	fi
	log "bench: $inst: caddy pid ${I_PID[$inst]} on 127.0.0.1:$port, CPUs $cpus"
}

# lease_units <inst> → "<granted> <used>": the quota lease units its zone
# was granted and used so far (its /bench-metrics), "– –" when it has none.
lease_units() {
	curl -s --max-time 5 "http://127.0.0.1:${I_PORT[$1]}/bench-metrics" | awk '
		/^caddy_rate_limit_quota_lease_units_total\{/ && /zone="bench"/ {
			if ($0 ~ /kind="granted"/) g = $NF; if ($0 ~ /kind="used"/) u = $NF }
		END { print (g == "" ? "–" : g), (u == "" ? "–" : u) }'
}

# inst_stop <inst>: stops its Caddy (and keeps its log for the raw outputs),
# reading a redis instance's quota lease units first (I_GRANTED, I_USED).
inst_stop() {
	local pid=${I_PID[$1]}
	if [[ ${I_KIND[$1]} == redis ]]; then read -r I_GRANTED[$1] I_USED[$1] < <(lease_units "$1"); fi
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	cp "$tmp/caddy-$(inst_file "$1").log" "$tmp/raw-caddy-$(inst_file "$1").txt" 2>/dev/null || true
}

# pin_redis <cpus>: every thread of our redis-server onto those CPUs.
pin_redis() {
	[[ -n $redis_pid ]] || return 0
	taskset -a -p -c "$1" "$redis_pid" >/dev/null || warn taskset "could not pin redis-server to CPUs $1"
}

# inst_measure <inst> <round> <variant> <connections> <keys> <wrk cpus>:
# one wrk run; "rps p50 p99 requests non2xx socket_errors caddy_ticks" to
# $runs_dir/s-<inst>.<variant>.wrk, the Redis deltas to ….redis.
inst_measure() {
	local inst=$1 round=$2 var=$3 conns=$4 keys=$5 cpus=$6 f out cpu0 cpu1 e0 e1 res rps p50 p99 req non se t=$THREADS
	f=$(inst_file "$inst")
	out=$tmp/wrk-s-$f-$var-$round.txt
	((t > conns)) && t=$conns
	printf '\n===== %s %s -c%s round %d =====\n' "$inst" "$var" "$conns" "$round" >>"$tmp/raw-wrk.txt"
	if [[ -n ${SCN_PREWARM:-} && $SCN_PREWARM != 0 ]]; then # the same traffic, unmeasured, just before: a hot key is measured hot
		BENCH_KEYS=$keys run_fg "$tmp/prewarm.txt" taskset -c "$cpus" wrk -t"$t" -c"$conns" -d"$SCN_PREWARM" \
			-s bench/keys.lua "http://127.0.0.1:${I_PORT[$inst]}/" || true
	fi
	if inst_uses_redis "$inst"; then redis_snapshot "$tmp/before"; fi
	e0=$(wc -l <"$tmp/caddy-$f.log")
	cpu0=$(proc_cpu_ticks "${I_PID[$inst]}")
	BENCH_KEYS=$keys run_fg "$out" taskset -c "$cpus" wrk -t"$t" -c"$conns" -d"${SCN_DURATION:-$DURATION}" --latency \
		-s bench/keys.lua "http://127.0.0.1:${I_PORT[$inst]}/" ||
		warn "$inst" "wrk ($var) failed in round $round: $(tail -3 "$out" | tr '\n' ' ')"
	cpu1=$(proc_cpu_ticks "${I_PID[$inst]}")
	e1=$(wc -l <"$tmp/caddy-$f.log")
	if inst_uses_redis "$inst"; then
		redis_snapshot "$tmp/after"
		redis_delta "$tmp/before" "$tmp/after" >>"$runs_dir/s-$f.$var.redis"
	fi
	kill -0 "${I_PID[$inst]}" 2>/dev/null || die "caddy ($inst) died: $(tail -20 "$tmp/caddy-$f.log")"
	if ((e1 > e0)); then warn "$inst" "Caddy logged errors ($var, round $round): $(summarize_errors "$tmp/caddy-$f.log" "$e0")"; fi
	res=$(parse_wrk "$out")
	echo "$res $((cpu1 - cpu0))" >>"$runs_dir/s-$f.$var.wrk"
	cat "$out" >>"$tmp/raw-wrk.txt"
	read -r rps p50 p99 req non se <<<"$res"
	log "$(printf 'bench: round %d/%d %-34s %-5s -c%-3s %9.0f req/s  p50 %6.2f ms  p99 %7.2f ms  non-2xx %d' \
		"$round" "$ROUNDS" "$inst" "$var" "$conns" "$rps" "$p50" "$p99" "$non")"
}

# Results: S_<measure>["<scenario>|<system>|<variant>"].
declare -A S_RPS S_P50 S_P99 S_REQ S_NON S_CCPU S_SCR S_SUPC S_RCPU
S_SYSTEMS=() # per scenario: "<scenario>|<system...>" (report order)
S_VARIANTS=() # per scenario: "<scenario>|<variant:conns:keys...>"

inst_aggregate() { # <inst> <variant>
	local inst=$1 var=$2 f w k ticks req non se scr cmds supc rcpu failed evals
	f=$(inst_file "$inst")
	w=$runs_dir/s-$f.$var.wrk
	k="${inst%%/*}|${inst#*/}|$var"
	[[ -f $w ]] || return 0
	S_RPS[$k]=$(col "$w" 1 | median) S_P50[$k]=$(col "$w" 2 | median) S_P99[$k]=$(col "$w" 3 | median)
	read -r req non se ticks < <(awk '{r += $4; n += $5; s += $6; t += $7} END {print r + 0, n + 0, s + 0, t + 0}' "$w")
	S_REQ[$k]=$req S_NON[$k]=$non
	S_CCPU[$k]=$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v r="$req" 'BEGIN {if (r > 0) printf "%.1f", t / hz * 1e6 / r; else print "–"}')
	S_SCR[$k]="–" S_SUPC[$k]="–" S_RCPU[$k]="–"
	if inst_uses_redis "$inst" && [[ -f $runs_dir/s-$f.$var.redis ]]; then
		read -r scr cmds supc rcpu failed evals < <(redis_per_request "$runs_dir/s-$f.$var.redis" "$req")
		S_SCR[$k]=$scr S_SUPC[$k]=$supc S_RCPU[$k]=$rcpu
		if ((failed > 0)); then warn "$inst" "$failed failed Redis calls ($var)"; fi
		if ((evals > 0)); then warn "$inst" "$evals EVAL calls ($var)"; fi
	fi
	if [[ ${I_EXPECT[$inst]} == 200 ]] && ((non > 0)); then warn "$inst" "$non non-2xx responses ($var)"; fi
	if [[ ${I_EXPECT[$inst]} != 200 ]] && ((req - non > 0)); then warn "$inst" "$((req - non)) 2xx responses, want all ${I_EXPECT[$inst]} ($var)"; fi
	if ((se > 0)); then warn "$inst" "$se socket errors ($var)"; fi
	if ((req == 0)); then warn "$inst" "no requests measured ($var)"; fi
}

# scenario_http <scenario> <caddy cpus> <redis cpus> <wrk cpus> <redis port>
#   <variants "name:conns:keys ..."> <systems...>: starts one Caddy per
# system, warms each up, measures ROUNDS rounds round-robin over systems
# and variants, aggregates, stops them. Systems: bare, bare-headers,
# error429, redis-<alg>, memory-<alg>, ref-incr (the mholt scenario defines its own
# instances and calls scenario_measure).
scenario_http() {
	local scn=$1 ccpus=$2 rcpus=$3 wcpus=$4 rport=$5 variants=$6 sys alg insts=()
	shift 6
	for sys in "$@"; do
		alg=${sys#*-}
		case $sys in
		bare | bare-headers | error429) inst_define "$scn/$sys" "$sys" - - "$WINDOW" "" ;;
		redis-*-off) alg=${alg%-off} # quota_lease off: every decision a Redis call
			is_algorithm "$alg" || die "$scn: unknown system $sys"
			inst_define "$scn/$sys" redis "$alg" "$(events_for "$alg")" "$WINDOW" "$rport"
			I_OPTS[$scn/$sys]="quota_lease off" ;;
		redis-*) is_algorithm "$alg" || die "$scn: unknown system $sys"
			inst_define "$scn/$sys" redis "$alg" "$(events_for "$alg")" "$WINDOW" "$rport" ;;
		memory-*) is_algorithm "$alg" || die "$scn: unknown system $sys"
			inst_define "$scn/$sys" memory "$alg" "$(events_for "$alg")" "$WINDOW" "" ;;
		ref-incr) inst_define "$scn/$sys" ref - - "$WINDOW" "$rport" bench/Caddyfile.ref "$REF_CADDY" ;;
		*) die "$scn: unknown system $sys (want bare bare-headers error429 redis-<algorithm>[-off] memory-<algorithm> ref-incr)" ;;
		esac
		insts+=("$scn/$sys")
	done
	scenario_measure "$scn" "$ccpus" "$rcpus" "$wcpus" "$variants" "${insts[@]}"
}

# scenario_measure <scenario> <caddy cpus> <redis cpus> <wrk cpus> <variants> <instances...>
scenario_measure() {
	local scn=$1 ccpus=$2 rcpus=$3 wcpus=$4 variants=$5 inst v name conns keys n i round list=()
	shift 5
	log "bench: ===== scenario $scn: Caddy on CPUs $ccpus, Redis on $rcpus, wrk on $wcpus ====="
	pin_redis "$rcpus"
	for inst in "$@"; do inst_start "$inst" "$ccpus"; list+=("${inst#*/}"); done
	S_SYSTEMS+=("$scn|${list[*]}")
	S_VARIANTS+=("$scn|$variants")
	if [[ $WARMUP != 0 && -n $WARMUP ]]; then
		for inst in "$@"; do
			read -r name conns keys <<<"$(echo "${variants%% *}" | tr ':' ' ')"
			BENCH_KEYS=$keys run_fg "$tmp/warmup.txt" taskset -c "$wcpus" wrk -t1 -c"$conns" -d"$WARMUP" \
				-s bench/keys.lua "http://127.0.0.1:${I_PORT[$inst]}/" || true
		done
	fi
	n=$#
	local insts=("$@")
	for ((round = 1; round <= ROUNDS; round++)); do
		for v in $variants; do
			read -r name conns keys <<<"$(echo "$v" | tr ':' ' ')"
			for ((i = 0; i < n; i++)); do
				inst_measure "${insts[$(((i + round - 1) % n))]}" "$round" "$name" "$conns" "$keys" "$wcpus"
			done
		done
	done
	for inst in "$@"; do
		for v in $variants; do inst_aggregate "$inst" "${v%%:*}"; done
		inst_stop "$inst"
	done
	pin_redis "$all_cpus"
}

# ------------------------------------------------------------ scenarios

# The Redis systems of the pinned scenarios (sliding_log optional).
SCN_REDIS_SYSTEMS=${SCN_REDIS_SYSTEMS:-redis-fixed_window redis-sliding_window redis-token_bucket}

scenario_pinned() { # Caddy and Redis on CPU 0, wrk on CPU 1
	# shellcheck disable=SC2086
	scenario_http pinned 0 0 1 "$redis_port" "one:$CONNECTIONS:1 many:$CONNECTIONS:$KEYSPACE" \
		bare bare-headers error429 $SCN_REDIS_SYSTEMS $SCN_REF_SYSTEMS
}

scenario_redis_own_core() { # Caddy on CPU 0, Redis on CPU 1 beside wrk
	# shellcheck disable=SC2086
	scenario_http redis-own-core 0 1 1 "$redis_port" "one:$CONNECTIONS:1 many:$CONNECTIONS:$KEYSPACE" \
		bare bare-headers error429 $SCN_REDIS_SYSTEMS $SCN_REF_SYSTEMS
}

# network: Redis behind bench/delayproxy (NET_DELAY each way), unpinned.
PROXY_PORT="" PROXY_PID="" NET_RTT_DIRECT="" NET_RTT_PROXY=""
scenario_network() {
	start_delayproxy
	# shellcheck disable=SC2086
	scenario_http network "$all_cpus" "$all_cpus" "$all_cpus" "$PROXY_PORT" \
		"c$CONNECTIONS:$CONNECTIONS:$KEYSPACE c1:1:$KEYSPACE" bare $SCN_REDIS_SYSTEMS $SCN_REF_SYSTEMS
	stop_delayproxy
}
# start_delayproxy: bench/delayproxy in front of our Redis, on PROXY_PORT,
# and one round trip through it measured (NET_RTT_PROXY, NET_RTT_DIRECT).
start_delayproxy() {
	free_port
	PROXY_PORT=$REPLY
	"$tmp/delayproxy" -listen "127.0.0.1:$PROXY_PORT" -upstream "127.0.0.1:$redis_port" -delay "$NET_DELAY" \
		>>"$tmp/raw-delayproxy.txt" 2>&1 &
	PROXY_PID=$!
	pids+=("$PROXY_PID")
	for _ in $(seq 50); do
		[[ $(redis-cli -h 127.0.0.1 -p "$PROXY_PORT" PING 2>/dev/null | tr -d '\r') == PONG ]] && break
		sleep 0.1
	done
	# One round trip, measured: PING at one connection, direct and proxied.
	NET_RTT_DIRECT=$(ping_rtt "$redis_port") NET_RTT_PROXY=$(ping_rtt "$PROXY_PORT")
	log "bench: delayproxy on 127.0.0.1:$PROXY_PORT ($NET_DELAY each way): PING round trip ${NET_RTT_PROXY} µs (direct ${NET_RTT_DIRECT} µs)"
}
stop_delayproxy() {
	kill "$PROXY_PID" 2>/dev/null || true
	wait "$PROXY_PID" 2>/dev/null || true
}
ping_rtt() { # port → µs per PING at one connection, not pipelined
	redis-benchmark -h 127.0.0.1 -p "$1" -t ping_mbulk -c 1 -n 2000 --csv 2>/dev/null |
		awk -F'"' 'NR == 2 && $4 > 0 {printf "%.0f", 1e6 / $4}'
}

# mholt: mholt/caddy-ratelimit (its own Caddy, built with xcaddy) against
# Sluice's embedded store per algorithm, both at a realistic limit.
MHOLT_NOTE=""
scenario_mholt() {
	local alg insts=()
	if [[ -z $MHOLT_CADDY ]]; then
		MHOLT_CADDY=$RESULTS_DIR/.cache/caddy-mholt-$MHOLT_VERSION-$CADDY_VERSION
		[[ $MHOLT_CADDY == /* ]] || MHOLT_CADDY=$PWD/$MHOLT_CADDY
		if [[ ! -x $MHOLT_CADDY ]]; then
			log "bench: building Caddy $CADDY_VERSION with mholt/caddy-ratelimit@$MHOLT_VERSION (xcaddy; cached in $MHOLT_CADDY)"
			mkdir -p "$RESULTS_DIR/.cache"
			if ! (cd "$tmp" && run_fg "$tmp/raw-xcaddy-mholt.txt" "$GO" run "$XCADDY" build "$CADDY_VERSION" \
				--with "github.com/mholt/caddy-ratelimit@$MHOLT_VERSION" --output "$MHOLT_CADDY.tmp"); then
				warn mholt "xcaddy build failed: $(tail -3 "$tmp/raw-xcaddy-mholt.txt" | tr '\n' ' ')"
				MHOLT_NOTE="mholt/caddy-ratelimit: the xcaddy build failed, not measured."
				return
			fi
			mv "$MHOLT_CADDY.tmp" "$MHOLT_CADDY"
		fi
	fi
	# Sluice's Caddy built as mholt's is (xcaddy, its flags and module
	# versions), so that the two binaries differ by their rate limiter
	local sluice=$tmp/caddy-sluice-xcaddy
	if ! (export GOPROXY="$("$GO" env GOPROXY | cut -d, -f1)|off" GOFLAGS=-buildvcs=false # as scripts/xcaddy-check.sh
		run_fg "$tmp/raw-xcaddy-sluice.txt" "$GO" run "$XCADDY" build "$CADDY_VERSION" \
			--with "github.com/sluicehq/caddy-sluice=$PWD" --output "$sluice"); then
		warn mholt "xcaddy build of Sluice failed, ./cmd/caddy's measured: $(tail -3 "$tmp/raw-xcaddy-sluice.txt" | tr '\n' ' ')"
		sluice=$CADDY
	else
		log "bench: mholt: Sluice's Caddy built with xcaddy, as mholt's"
	fi
	inst_define mholt/bare bare - - "$WINDOW" "" bench/Caddyfile "$sluice"
	inst_define mholt/bare-headers bare-headers - - "$WINDOW" "" bench/Caddyfile "$sluice"
	insts+=(mholt/bare mholt/bare-headers)
	inst_define mholt/mholt mholt - "$MHOLT_EVENTS" "$MHOLT_WINDOW" "" bench/Caddyfile.mholt "$MHOLT_CADDY"
	insts+=(mholt/mholt)
	for alg in fixed_window sliding_window token_bucket; do
		# like for like: mholt writes no header field on an admission
		inst_define "mholt/memory-$alg" memory "$alg" "$MHOLT_EVENTS" "$MHOLT_WINDOW" "" bench/Caddyfile "$sluice"
		I_HOPTS[mholt/memory-$alg]="headers none"
		insts+=("mholt/memory-$alg")
	done
	inst_define mholt/memory-headers memory fixed_window "$MHOLT_EVENTS" "$MHOLT_WINDOW" "" bench/Caddyfile "$sluice"
	insts+=(mholt/memory-headers) # fixed_window with the default header fields
	scenario_measure mholt "$all_cpus" "$all_cpus" "$all_cpus" "main:$CONNECTIONS:$MHOLT_KEYS" "${insts[@]}"
	# one key, all admitted: mholt keeps a ring of events entries per key,
	# so its limit here is MHOLT_ONE_EVENTS a minute, for one key only
	insts=()
	inst_define mholt-one/bare bare - - "$WINDOW" "" bench/Caddyfile "$sluice"
	inst_define mholt-one/mholt mholt - "$MHOLT_ONE_EVENTS" 1m "" bench/Caddyfile.mholt "$MHOLT_CADDY"
	inst_define mholt-one/memory-fixed_window memory fixed_window "$MHOLT_ONE_EVENTS" 1m "" bench/Caddyfile "$sluice"
	I_HOPTS[mholt-one/memory-fixed_window]="headers none"
	inst_define mholt-one/memory-headers memory fixed_window "$MHOLT_ONE_EVENTS" 1m "" bench/Caddyfile "$sluice"
	scenario_measure mholt-one "$all_cpus" "$all_cpus" "$all_cpus" "main:$CONNECTIONS:1" \
		mholt-one/bare mholt-one/mholt mholt-one/memory-fixed_window mholt-one/memory-headers
}

# ------------------------------------------------------------ one-call

# one-call: the decide code with the exact arguments Sluice sends for one
# request, captured from a running Caddy with MONITOR (so the bench follows
# the code), replayed by redis-benchmark on random keys at -P RB_PIPELINE,
# against the INCR+EXPIRE script; and, with valgrind, instructions per call.
declare -A OC_UPC OC_CPU OC_RPS OC_IR OC_CMD
OC_REF_UPC="" OC_REF_CPU="" OC_REF_RPS="" OC_REF_IR="" OC_NOTE=""

# capture_call <inst>: sets OC_ARGS to the script call (FCALL/EVALSHA and
# its arguments) Sluice sent for one request.
capture_call() {
	local inst=$1 mon mpid line tok
	mon=$tmp/monitor-$(inst_file "$1").txt
	redis-cli -h 127.0.0.1 -p "$redis_port" MONITOR >"$mon" 2>&1 &
	mpid=$!
	sleep 0.3
	http_status "http://127.0.0.1:${I_PORT[$inst]}/" -H 'X-Key: one-call-capture' >/dev/null
	sleep 0.3
	kill "$mpid" 2>/dev/null || true
	wait "$mpid" 2>/dev/null || true
	cat "$mon" >>"$tmp/raw-monitor.txt"
	line=$(grep -iE '\] "(fcall|fcall_ro|evalsha|evalsha_ro)" ' "$mon" | grep -v '\[0 lua\]' | tail -1)
	OC_ARGS=()
	[[ -n $line ]] || return 1
	# MONITOR quotes each argument ("…", with \" \\ \xNN \n escapes).
	while IFS= read -r tok; do
		tok=${tok//\\\"/\"}
		printf -v tok '%b' "$tok"
		OC_ARGS+=("$tok")
	done < <(printf '%s\n' "${line#*] }" | awk '{
		s = $0; out = ""; inq = 0
		for (i = 1; i <= length(s); i++) {
			c = substr(s, i, 1)
			if (!inq) { if (c == "\"") { inq = 1; out = "" }; continue }
			if (c == "\\") { out = out c substr(s, i + 1, 1); i++; continue }
			if (c == "\"") { print out; inq = 0; continue }
			out = out c
		} }')
	((${#OC_ARGS[@]} >= 3))
}

# randomize_keys: OC_ARGS with each key made random per call (P@ becomes
# the pipeline depth: each run starts on fresh keys), prefix and suffix kept.
randomize_keys() {
	local nk=${OC_ARGS[2]} i k
	[[ $nk =~ ^[0-9]+$ ]] || return 1
	for ((i = 3; i < 3 + nk; i++)); do
		k=${OC_ARGS[$i]}
		if [[ $k == *'{'* ]]; then k="${k%%\{*}{P@:__rand_int__:${k#*\{}"; else k="$k:P@:__rand_int__"; fi
		OC_ARGS[i]=$k
	done
}

scenario_one_call() {
	local alg inst sha stat
	sha=$(rcli SCRIPT LOAD "$INCR_EXPIRE")
	[[ $sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD of the INCR+EXPIRE script failed: $sha"
	log "bench: ===== scenario one-call: redis-benchmark -P $RB_PIPELINE, random keys ====="
	rb_run "INCR+EXPIRE" evalsha "$RB_PIPELINE" EVALSHA "$sha" 1 "bench:oc-incr:P@:__rand_int__" 60
	OC_REF_UPC=$RB_UPC OC_REF_CPU=$RB_CPU OC_REF_RPS=$RB_RPS
	if [[ -z $REF_CPU ]]; then REF_CPU=$RB_CPU REF_UPC=$RB_UPC; fi
	cg_start
	if ((cg_on)); then OC_REF_IR=$(cg_measure evalsha EVALSHA "$sha" 1 "bench:cg-incr:P@:__rand_int__" 60); fi
	for alg in $ONECALL_ALGORITHMS; do
		inst=one-call/redis-$alg
		inst_define "$inst" redis "$alg" "$ONECALL_EVENTS" "$ONECALL_WINDOW" "$redis_port"
		inst_start "$inst" "$all_cpus"
		if ! capture_call "$inst"; then
			warn "$inst" "no FCALL or EVALSHA seen by MONITOR for one request"
			inst_stop "$inst"
			continue
		fi
		inst_stop "$inst"
		randomize_keys || { warn "$inst" "cannot read the key count of: ${OC_ARGS[*]:0:4}"; continue; }
		stat=${OC_ARGS[0],,}
		OC_CMD[$alg]=$(printf '%q ' "${OC_ARGS[@]}")
		log "bench: one-call $alg: ${OC_CMD[$alg]}"
		rb_run "one-call $alg" "$stat" "$RB_PIPELINE" "${OC_ARGS[@]}"
		OC_UPC[$alg]=$RB_UPC OC_CPU[$alg]=$RB_CPU OC_RPS[$alg]=$RB_RPS
		if ((cg_on)); then
			if [[ $stat == fcall* ]] && cg_copy_functions; then
				OC_IR[$alg]=$(cg_measure "$stat" "${OC_ARGS[@]}")
			else
				OC_NOTE+="callgrind: $alg is an $stat call, not measured under valgrind (its script is not loaded there). "
			fi
		fi
	done
	cg_stop
}

# callgrind: a second redis-server under valgrind; instructions per call
# are repeatable where seconds are not. CALLGRIND=0 skips it.
cg_on=0 cg_port="" cg_pid="" cg_n=0
cg_start() {
	[[ $CALLGRIND == 1 ]] || return 0
	if ! command -v valgrind >/dev/null || ! command -v callgrind_control >/dev/null; then
		OC_NOTE+="callgrind: valgrind is not installed (apt-get install -y valgrind), not measured. "
		return 0
	fi
	free_port
	cg_port=$REPLY
	valgrind --tool=callgrind --callgrind-out-file="$tmp/callgrind.out.%p" \
		redis-server --port "$cg_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
		>"$tmp/raw-callgrind-redis.txt" 2>&1 &
	cg_pid=$!
	pids+=("$cg_pid")
	for _ in $(seq 300); do
		[[ $(redis-cli -h 127.0.0.1 -p "$cg_port" PING 2>/dev/null | tr -d '\r') == PONG ]] && break
		sleep 0.1
	done
	if [[ $(redis-cli -h 127.0.0.1 -p "$cg_port" PING 2>/dev/null | tr -d '\r') != PONG ]]; then
		warn callgrind "redis-server under valgrind did not start"
		return 0
	fi
	redis-cli -h 127.0.0.1 -p "$cg_port" SCRIPT LOAD "$INCR_EXPIRE" >/dev/null
	cg_on=1
}
cg_stop() {
	[[ -n $cg_pid ]] || return 0
	kill "$cg_pid" 2>/dev/null || true
	wait "$cg_pid" 2>/dev/null || true
	cg_on=0
}
# cg_copy_functions: the Function libraries of our Redis into the valgrind
# one (FUNCTION DUMP, less redis-cli's newline, then RESTORE), once.
cg_copied=0
cg_copy_functions() {
	local out
	((cg_copied)) && return 0
	redis-cli -h 127.0.0.1 -p "$cg_port" FUNCTION FLUSH >/dev/null 2>&1
	out=$(redis-cli -h 127.0.0.1 -p "$redis_port" --raw FUNCTION DUMP | head -c -1 |
		redis-cli -h 127.0.0.1 -p "$cg_port" -x FUNCTION RESTORE 2>&1 | tr -d '\r')
	if [[ $out != OK ]]; then
		warn callgrind "FUNCTION RESTORE under valgrind: $out"
		return 1
	fi
	cg_copied=1
}
# cg_measure <statcmd> <cmd...> → instructions per call (warm-up, then
# CALLGRIND_CALLS calls at -P RB_PIPELINE between a zero and a dump). Each
# row starts on an empty keyspace (FLUSHALL keeps the scripts and
# Functions): the keys of the rows before would make a later row pay for
# growing the key table (token_bucket, measured third, counted ~10% more).
cg_measure() {
	local stat=$1 calls failed dump ir
	shift
	local args=("${@//P@/P${RB_PIPELINE}cg}")
	redis-cli -h 127.0.0.1 -p "$cg_port" FLUSHALL >/dev/null
	redis-benchmark -h 127.0.0.1 -p "$cg_port" -n 2000 -c 4 -P "$RB_PIPELINE" -r "$RB_KEYSPACE" "${args[@]}" >/dev/null 2>&1
	redis-cli -h 127.0.0.1 -p "$cg_port" CONFIG RESETSTAT >/dev/null
	callgrind_control -z "$cg_pid" >/dev/null 2>&1
	touch "$tmp/cg-mark"
	sleep 1 # so the dump is newer than the mark at the file system's resolution
	redis-benchmark -h 127.0.0.1 -p "$cg_port" -n "$CALLGRIND_CALLS" -c 4 -P "$RB_PIPELINE" -r "$RB_KEYSPACE" "${args[@]}" >/dev/null 2>&1
	cg_n=$((cg_n + 1))
	callgrind_control -d "cut$cg_n" "$cg_pid" >/dev/null 2>&1
	read -r calls failed < <(redis-cli -h 127.0.0.1 -p "$cg_port" INFO commandstats | tr -d '\r' |
		awk -F'[:,=]' -v c="cmdstat_$stat" '$1 == c {n = $3; f = $9 + $11} END {print n + 0, f + 0}')
	if ((failed > 0)); then
		warn callgrind "$* : $failed of $calls calls failed under valgrind"
		echo "–"
		return
	fi
	sleep 0.5
	dump=$(find "$tmp" -maxdepth 1 -name 'callgrind.out.*' -newer "$tmp/cg-mark" 2>/dev/null | head -1)
	ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$dump" 2>/dev/null)
	awk -v ir="${ir:-}" -v n="${calls:-0}" 'BEGIN {if (ir != "" && n > 0) printf "%.0f", ir / n; else print "–"}'
}

# ------------------------------------------------------------ quota leases

# One hot key (X-Key "1" on every request, a limit nobody reaches), decided
# from quota leases (on by default) against the embedded store and against
# `quota_lease off`; and three instances sharing one hot key over its limit.
LEASE_ALGORITHMS=${LEASE_ALGORITHMS:-fixed_window sliding_window token_bucket}
LEASE_LAYOUTS=${LEASE_LAYOUTS:-unpinned pinned redis-own-core}
LEASE_DURATION=${LEASE_DURATION:-5s}
# LEASE_PREWARM: each measured run of lease-network and lease-hot follows
# this much of the same traffic, unmeasured, so that the key is hot when
# measured: a key leases once its demand has lasted 500 ms (its first
# requests go to Redis), and between one system's rounds the others run,
# long enough for its demand to go cold. 0 for none.
LEASE_PREWARM=${LEASE_PREWARM:-1s}

# layout_cpus <layout> → "<caddy cpus> <redis cpus> <wrk cpus>"
layout_cpus() {
	case $1 in
	unpinned) echo "$all_cpus $all_cpus $all_cpus" ;;
	pinned) echo "0 0 1" ;;
	redis-own-core) echo "0 1 1" ;;
	*) die "unknown LEASE_LAYOUTS entry $1 (want unpinned pinned redis-own-core)" ;;
	esac
}

# lease-network: one hot key behind bench/delayproxy at one connection:
# with leases no request waits for Redis, so p50 and p99 should be bare's
# (target: at most bare + 50 µs); redis-fixed_window-off, every decision
# a round trip, shows what the leases save.
LEASE_RTT=""
scenario_lease_network() {
	local SCN_DURATION=$LEASE_DURATION SCN_PREWARM=$LEASE_PREWARM alg systems=(bare) rtt=$NET_RTT_PROXY direct=$NET_RTT_DIRECT
	for alg in $LEASE_ALGORITHMS; do systems+=("redis-$alg"); done
	systems+=(redis-fixed_window-off)
	start_delayproxy
	LEASE_RTT=$NET_RTT_PROXY
	scenario_http lease-network "$all_cpus" "$all_cpus" "$all_cpus" "$PROXY_PORT" "c1:1:1" "${systems[@]}"
	stop_delayproxy
	NET_RTT_PROXY=$rtt NET_RTT_DIRECT=$direct # the network scenario's, for its table
}

# lease-hot: one hot key, all admitted, at CONNECTIONS connections, in each
# of LEASE_LAYOUTS: per algorithm the embedded store, Sluice on Redis with
# leases and with quota_lease off (targets: leases ≥ 0.95× the embedded
# store, ≤ 0.01 script calls per decision).
scenario_lease_hot() {
	local SCN_DURATION=$LEASE_DURATION SCN_PREWARM=$LEASE_PREWARM layout alg cpus systems
	for layout in $LEASE_LAYOUTS; do
		read -r -a cpus <<<"$(layout_cpus "$layout")"
		systems=(bare)
		for alg in $LEASE_ALGORITHMS; do systems+=("memory-$alg" "redis-$alg" "redis-$alg-off"); done
		scenario_http "lease-hot-$layout" "${cpus[0]}" "${cpus[1]}" "${cpus[2]}" "$redis_port" \
			"one:$CONNECTIONS:1" "${systems[@]}"
	done
}

# lease-fleet: three Caddy instances on one Redis, one hot key offered
# about three times its limit (each instance a wrk of its own, paced by
# BENCH_DELAY_MS), for FLEET_WINDOWS windows from a window's edge, on a
# fresh key per algorithm. FLEET_EVENTS is sized so that a sliding_window
# slot (a twentieth of the window) holds 1,000. Reported: script calls per
# decision and the share of what the algorithm allows that was admitted
# (targets: fixed_window and sliding_window ≤ 0.05 and ≥ 95%;
# token_bucket reported: an overloaded bucket is empty, nothing to lease).
FLEET_ALGORITHMS=${FLEET_ALGORITHMS:-fixed_window sliding_window token_bucket}
FLEET_EVENTS=${FLEET_EVENTS:-20000}
FLEET_WINDOW=${FLEET_WINDOW:-10} # seconds
FLEET_WINDOWS=${FLEET_WINDOWS:-2}
FLEET_CONNECTIONS=${FLEET_CONNECTIONS:-32} # per instance
FLEET_ZONE_OPTIONS=${FLEET_ZONE_OPTIONS:-} # e.g. "quota_lease off": the same without leases
declare -A FL_REQ FL_ADM FL_ALLOWED FL_RPS FL_SCR FL_RCPU FL_DELAY FL_NON FL_GRANTED FL_USED
fleet_ran=0
scenario_lease_fleet() {
	local alg i inst insts out delay now edge t0 t1 dur=$((FLEET_WINDOW * FLEET_WINDOWS)) wpids req non rps res
	local fleet=$runs_dir/fleet
	# each instance gets a third of three times the limit: the limit's
	# rate, over FLEET_CONNECTIONS connections, each waiting delay ms
	# after each answer (a millisecond less, about what an answer takes
	# under this load: wrk waits after the answer, not from the send)
	delay=$(awk -v c="$FLEET_CONNECTIONS" -v e="$FLEET_EVENTS" -v w="$FLEET_WINDOW" 'BEGIN {d = c * 1000 * w / e - 1; printf "%d", (d < 1 ? 1 : d + 0.5)}')
	log "bench: ===== scenario lease-fleet: 3 instances, one key, events $FLEET_EVENTS per ${FLEET_WINDOW}s, ${FLEET_WINDOWS} windows, wrk -c$FLEET_CONNECTIONS each, $delay ms between requests per connection ====="
	pin_redis "$all_cpus"
	for alg in $FLEET_ALGORITHMS; do
		is_algorithm "$alg" || die "lease-fleet: unknown algorithm $alg"
		insts=()
		for i in 1 2 3; do
			inst="lease-fleet/redis-$alg-$i"
			inst_define "$inst" redis "$alg" "$FLEET_EVENTS" "${FLEET_WINDOW}s" "$redis_port"
			I_OPTS[$inst]=$FLEET_ZONE_OPTIONS
			inst_start "$inst" "$all_cpus"
			insts+=("$inst")
		done
		# start on a window's edge: fixed windows are aligned to the epoch
		now=$(date +%s%N)
		edge=$(((now / (FLEET_WINDOW * 1000000000) + 1) * FLEET_WINDOW * 1000000000))
		sleep "$(awk -v n="$((edge - now))" 'BEGIN {printf "%.3f", n / 1e9}')"
		redis_snapshot "$tmp/before"
		t0=$(date +%s%N)
		wpids=()
		for inst in "${insts[@]}"; do
			out=$tmp/wrk-fleet-$(inst_file "$inst").txt
			BENCH_KEYS=1 BENCH_KEY_PREFIX="fleet-$alg-$edge-" BENCH_DELAY_MS=$delay \
				wrk -t1 -c"$FLEET_CONNECTIONS" -d"${dur}s" --latency -s bench/keys.lua \
				"http://127.0.0.1:${I_PORT[$inst]}/" >"$out" 2>&1 &
			wpids+=($!)
			pids+=($!)
		done
		for i in "${wpids[@]}"; do wait "$i" || warn lease-fleet "wrk ($alg) failed"; done
		t1=$(date +%s%N)
		redis_snapshot "$tmp/after"
		redis_delta "$tmp/before" "$tmp/after" >"$fleet.$alg.redis"
		req=0 non=0 rps=0
		for inst in "${insts[@]}"; do
			out=$tmp/wrk-fleet-$(inst_file "$inst").txt
			{ printf '\n===== %s (lease-fleet) =====\n' "$inst"; cat "$out"; } >>"$tmp/raw-wrk.txt"
			read -r -a res <<<"$(parse_wrk "$out")"
			req=$((req + res[3])) non=$((non + res[4])) rps=$(awk -v a="$rps" -v b="${res[0]}" 'BEGIN {print a + b}')
			if ((res[5] > 0)); then warn "$inst" "${res[5]} socket errors (lease-fleet)"; fi
			inst_stop "$inst"
		done
		FL_REQ[$alg]=$req FL_NON[$alg]=$non FL_ADM[$alg]=$((req - non)) FL_RPS[$alg]=$rps FL_DELAY[$alg]=$delay
		FL_GRANTED[$alg]=0 FL_USED[$alg]=0
		for inst in "${insts[@]}"; do
			[[ ${I_GRANTED[$inst]} == – ]] && continue
			FL_GRANTED[$alg]=$(awk -v a="${FL_GRANTED[$alg]}" -v b="${I_GRANTED[$inst]}" 'BEGIN {print a + b}')
			FL_USED[$alg]=$(awk -v a="${FL_USED[$alg]}" -v b="${I_USED[$inst]}" 'BEGIN {print a + b}')
		done
		FL_ALLOWED[$alg]=$(fleet_allowed "$alg" "$t0" "$t1" "$req")
		read -r FL_SCR[$alg] _ _ FL_RCPU[$alg] _ _ < <(redis_per_request "$fleet.$alg.redis" "$req")
		log "$(printf 'bench: lease-fleet %-15s %6.0f req/s offered (limit %s/s), %d decisions, %d admitted of %d allowed, %s script calls/decision' \
			"$alg" "$rps" "$((FLEET_EVENTS / FLEET_WINDOW))" "$req" "${FL_ADM[$alg]}" "${FL_ALLOWED[$alg]}" "${FL_SCR[$alg]}")"
	done
	fleet_ran=1
}

# fleet_allowed <algorithm> <start ns> <end ns> <requests> → the most the
# algorithm admits of requests offered evenly from start to end, on a
# fresh key, each admitted at once if it fits (the demand takes freed
# units at once). fixed_window: per epoch-aligned window, the smaller of
# events and what was offered in it (the run starts near an edge, but wrk
# takes a moment to start). sliding_log: the same with windows from the
# start (each batch admitted leaves a window later). sliding_window: its
# own count, run over the offered stream in steps of a fiftieth of a slot
# (slots of window/20 aligned to the epoch, each counted until its end +
# window: a batch leaves up to a slot more than a window later, so a run
# of whole windows from an edge admits at most events per window, where
# sliding_log's windows from the start would count what is offered after
# the last one too). token_bucket: its full bucket, then its rate, never
# more than was offered.
fleet_allowed() {
	awk -v alg="$1" -v t0="$2" -v t1="$3" -v req="$4" -v e="$FLEET_EVENTS" -v w="$FLEET_WINDOW" 'BEGIN {
		t0 /= 1e9; t1 /= 1e9; d = t1 - t0; if (d <= 0) {print 0; exit}
		r = req / d
		if (alg == "token_bucket") { a = e + e * d / w; printf "%d", (a < req ? a : req); exit }
		if (alg == "sliding_window") {
			# in µs from the start of the slot holding t0 (mawk: int() stays under 2^31)
			l = int((w * 1e6 + 19) / 20); from = (t0 * 1e6) % l; to = from + d * 1e6; step = l / 50
			a = 0; total = 0; first = 0
			for (t = from; t < to; t += step) {
				s = int(t / l)
				for (; first < s && (first + 1) * l + w * 1e6 <= t; first++) total -= c[first]
				o = r * ((t + step < to ? t + step : to) - t) / 1e6
				x = e - total; if (o < x) x = o
				if (x > 0) { c[s] += x; total += x; a += x }
			}
			printf "%d", a + 0.5; exit
		}
		origin = (alg == "fixed_window") ? 0 : t0
		a = 0
		for (k = int((t0 - origin) / w); origin + k * w < t1; k++) {
			lo = origin + k * w; hi = lo + w
			if (lo < t0) lo = t0
			if (hi > t1) hi = t1
			o = r * (hi - lo); a += (o < e ? o : e)
		}
		printf "%d", a }'
}
