# bench/report.sh: the second half of bench/run.sh (sourced, not run): the
# references measured after the HTTP runs (redis-benchmark, Go benchmark)
# and the Markdown report. Uses run.sh's globals and bench/lib.sh.

# ------------------------------------------------------- redis-benchmark

rb_rows=""
redis_rate_note=""
REF_CPU="" REF_CPU1="" REF_UPC="" # the INCR+EXPIRE reference, -P RB_PIPELINE and -P 1

# rb_run <label> <statcmd> <pipeline> <cmd...> → RB_RPS, RB_UPC (µs/call in
# the script, usec_per_call), RB_CPU (Redis CPU µs per call: used_cpu
# delta over the calls, network and parsing included): each the median of
# RB_ROUNDS runs, since one run moves by a third on a shared machine.
rb_run() {
	local label=$1 stat=$2 pipe=$3 round runs=$tmp/rb-runs.txt
	shift 3
	: >"$runs"
	for ((round = 1; round <= RB_ROUNDS; round++)); do
		rb_run_once "$label" "$stat" "$pipe" "r$round" "$@" >>"$runs"
	done
	RB_RPS=$(col "$runs" 1 | median) RB_UPC=$(col "$runs" 2 | median_known) RB_CPU=$(col "$runs" 3 | median_known)
}

# rb_run_once <label> <statcmd> <pipeline> <run> <cmd...> → "rps µs/call
# cpu-µs/call" of one redis-benchmark run.
rb_run_once() {
	local label=$1 stat=$2 pipe=$3 run=$4 out="$tmp/rb.txt" rps upc failed calls cpu0 cpu1
	shift 4
	# redis-benchmark's random numbers repeat from run to run: "P@" in a
	# key becomes P<pipeline><run>, so each run starts on keys nobody touched.
	# And on an empty keyspace (FLUSHALL keeps scripts and Functions): the
	# keys earlier rows left would have a later row pay for growing
	# Redis's tables.
	local args=("${@//P@/P$pipe$run}")
	rcli FLUSHALL >/dev/null
	rcli CONFIG RESETSTAT >/dev/null
	cpu0=$(redis_cpu)
	if ! run_fg "$out" redis-benchmark -h 127.0.0.1 -p "$redis_port" -n "$RB_REQUESTS" -c "$RB_CLIENTS" \
		-P "$pipe" -r "$RB_KEYSPACE" --csv "${args[@]}"; then
		warn redis-benchmark "$label -P $pipe failed: $(tail -2 "$out" | tr '\n' ' ')"
	fi
	cpu1=$(redis_cpu)
	rcli INFO commandstats >"$tmp/rb-stats.txt"
	{ printf '\n===== %s -P %s %s =====\n' "$label" "$pipe" "$run"; cat "$out" "$tmp/rb-stats.txt"; } >>"$tmp/raw-redis-benchmark.txt"
	rps=$(awk -F'"' 'NR == 2 {print $4 + 0}' "$out")
	read -r calls upc failed < <(awk -F'[:,=]' -v c="cmdstat_$stat" '$1 == c {n = $3; u = $5; f = $9 + $11}
		END {printf "%d %s %d\n", n, (n > 0 ? sprintf("%.2f", u / n) : "–"), f}' "$tmp/rb-stats.txt")
	if ((failed > 0)); then warn redis-benchmark "$label -P $pipe: $failed failed calls"; fi
	if ((calls == 0)); then warn redis-benchmark "$label -P $pipe: no $stat calls recorded"; fi
	echo "${rps:-0} $upc $(awk -v a="$cpu0" -v b="$cpu1" -v n="$calls" 'BEGIN {if (n > 0) printf "%.2f", (b - a) * 1e6 / n; else print "–"}')"
}

# rb_case <label> <statcmd> <cmd...>: one row, at -P RB_PIPELINE and -P 1.
rb_case() {
	local label=$1 stat=$2 a_rps a_upc a_cpu
	shift 2
	log "bench: redis-benchmark $label"
	rb_run "$label" "$stat" "$RB_PIPELINE" "$@"
	a_rps=$RB_RPS a_upc=$RB_UPC a_cpu=$RB_CPU
	rb_run "$label" "$stat" 1 "$@"
	rb_rows+=$(printf '| %s | %.0f | %s | %s | %.0f | %s | %s |' \
		"$label" "$a_rps" "$a_upc" "$a_cpu" "$RB_RPS" "$RB_UPC" "$RB_CPU")$'\n'
	RB_CASE_CPU=$a_cpu RB_CASE_CPU1=$RB_CPU RB_CASE_UPC=$a_upc
}

# decide_cases: Sluice's decide code as luascripts/ composes it, loaded as
# a Function library of its own (as Sluice does; FCALL runs only the
# decision) and called with one request per call: the batch dispatcher's
# argument is the request's one string, its fields separated by spaces:
# mode, now and zone count, then per zone algorithm, events, window, burst,
# cost, dry run, slot, max_delay. Then BATCH requests a call, as Caddy
# sends them under load (a request string the same as the one before is
# sent as ""), each on a key of its own: batch_note has their Redis CPU
# per decision, against the reference's per call.
BATCH=14
batch_note=""
decide_cases() {
	local files=(prelude fixed_window sliding_window sliding_log token_bucket concurrency request decide quota_lease call) f src out alg ev
	local M=60000000 H=3600000000 # one minute, one hour in µs
	for f in "${files[@]}"; do
		[[ -f luascripts/$f.lua ]] || { redis_rate_note+="decide code: luascripts/$f.lua is gone, not measured alone. "; return; }
	done
	src=$(printf '#!lua name=sluice_bench\n%s\nredis.register_function("sluice_bench_decide", decide_batch)\n' \
		"$(cd luascripts && cat "${files[@]/%/.lua}")")
	out=$(rcli FUNCTION LOAD REPLACE "$src")
	[[ $out == sluice_bench ]] || { warn redis-benchmark "FUNCTION LOAD of the decide code failed: $out"; return; }
	for alg in $algorithms; do
		ev=$(events_for "$alg")
		rb_case "decide $alg (FCALL), admitted, random key" fcall \
			FCALL sluice_bench_decide 1 "bench:$alg:P@:__rand_int__" "1  1 $alg $ev $M $ev 1 0  0"
	done
	rb_case "decide $FLOOD_ALGORITHM (FCALL), denied, one key (events 1)" fcall \
		FCALL sluice_bench_decide 1 "bench:flood" "1  1 $FLOOD_ALGORITHM 1 $H 1 1 0  0"
	local keys repeats i per per1
	for alg in $algorithms; do
		ev=$(events_for "$alg") keys=() repeats=()
		for ((i = 1; i <= BATCH; i++)); do keys+=("bench:$alg:b$i:P@:__rand_int__"); done
		for ((i = 2; i <= BATCH; i++)); do repeats+=(""); done
		RB_REQUESTS=$((RB_REQUESTS / BATCH)) rb_case "decide $alg (FCALL), $BATCH admitted a call, random keys" fcall \
			FCALL sluice_bench_decide "$BATCH" "${keys[@]}" "1  1 $alg $ev $M $ev 1 0  0" "${repeats[@]}"
		per=$(ratio "$RB_CASE_CPU" "$BATCH") per1=$(ratio "$RB_CASE_CPU1" "$BATCH")
		batch_note+="$alg $per µs ($(ratio "$per" "$REF_CPU")×) and $per1 µs ($(ratio "$per1" "$REF_CPU")×), "
	done
	batch_note="In calls of $BATCH, Redis CPU per decision at -P $RB_PIPELINE and at -P 1, against the reference's per call at -P $RB_PIPELINE (${REF_CPU:-–} µs): ${batch_note%, }."
}

# redis_rate_case: go-redis/redis_rate's GCRA (AllowN): KEYS[1] = key;
# ARGV = burst, rate, period in seconds, cost. Extracted from the module
# cache at run time; never copied into this repository.
redis_rate_case() {
	local dir src="" sha=""
	dir=$(cd "$tmp" && "$GO" mod download -json "$REDIS_RATE_MODULE" 2>/dev/null |
		awk -F'"' '$2 == "Dir" {print $4}') || true
	if [[ -n $dir && -f $dir/lua.go ]]; then
		src=$(awk '/^var allowN = redis\.NewScript\(`/ {on = 1; next} on && /^`\)/ {exit} on {print}' "$dir/lua.go")
	fi
	[[ $src == *'redis.call("GET"'* ]] && sha=$(rcli SCRIPT LOAD "$src" 2>/dev/null || true)
	if [[ $sha =~ ^[0-9a-f]{40}$ ]]; then
		rb_case "redis_rate v10 GCRA (allowN), admitted, random key" evalsha \
			EVALSHA "$sha" 1 "bench:redis_rate:P@:__rand_int__" 1000000 1000000 60 1
	else
		redis_rate_note+="redis_rate: unavailable. "
		log "bench: redis_rate: unavailable"
	fi
}

redis_benchmarks() {
	local incr_sha empty_sha
	incr_sha=$(rcli SCRIPT LOAD "$INCR_EXPIRE")
	empty_sha=$(rcli SCRIPT LOAD "return 1")
	[[ $incr_sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD of the INCR+EXPIRE script failed: $incr_sha"
	# The reference first: the denominator of the Redis CPU ratio.
	rb_case "**INCR+EXPIRE (reference)**, random key" evalsha EVALSHA "$incr_sha" 1 "bench:incr:P@:__rand_int__" 60
	REF_CPU=$RB_CASE_CPU REF_CPU1=$RB_CASE_CPU1 REF_UPC=$RB_CASE_UPC
	rb_case 'empty script, `EVAL "return 1" 0`' eval EVAL "return 1" 0
	rb_case 'empty script, EVALSHA' evalsha EVALSHA "$empty_sha" 0
	decide_cases
	redis_rate_case
}

# ------------------------------------------------------------ Go benchmark

ALLOCS="" GO_NS="" go_rows=""
GO_BENCH_NAME='BenchmarkServeHTTP/memory/two_zones'
# go_benchmark: the embedded store's decision path in Go, the whole
# ServeHTTP: two zones (the allocations target: allocs/op does not depend
# on machine load), and BenchmarkServeHTTPKeys (10^4 live keys, sliding_log
# at a large limit). go_rows: "| name | ns/op | B/op | allocs/op |" lines.
go_benchmark() {
	local out=$tmp/raw-go-bench.txt
	log "bench: go test -bench 'BenchmarkServeHTTP(Keys)?/memory'"
	if ! run_fg "$out" "$GO" test -run '^$' -bench '^BenchmarkServeHTTP(Keys)?$/^memory/' -benchmem -count 1 .; then
		warn go-bench "go test -bench failed: $(tail -3 "$out" | tr '\n' ' ')"
		return
	fi
	go_rows=$(awk '$1 ~ /^Benchmark/ && $4 == "ns/op" {
		n = $1; sub(/-[0-9]+$/, "", n); b = "–"; a = "–"
		for (i = 5; i < NF; i++) { if ($(i + 1) == "B/op") b = $i; if ($(i + 1) == "allocs/op") a = $i }
		printf "| `%s` | %s | %s | %s |\n", n, $3, b, a }' "$out")
	read -r GO_NS ALLOCS < <(awk -v want="$GO_BENCH_NAME" '{n = $1; sub(/-[0-9]+$/, "", n)}
		n == want { for (i = 2; i <= NF; i++) { if ($(i + 1) == "ns/op") ns = $i; if ($(i + 1) == "allocs/op") a = $i } }
		END {print (ns == "" ? "–" : ns), (a == "" ? "–" : a)}' "$out")
	[[ $ALLOCS != – ]] || warn go-bench "no allocs/op in the output of $GO_BENCH_NAME"
	give_back_benchmark
}

# give_back_benchmark: the give-backs of 20,000 and 65,536 quota leases
# ending at once (BenchmarkGiveBackBurst): the longest of their calls in
# Redis, the longest another client's PING waited, the whole burst.
# give_back_rows: "| leases | call ms | PING ms | burst ms |" lines.
give_back_rows=""
give_back_benchmark() {
	local out=$tmp/raw-go-bench-give-back.txt
	log "bench: go test -bench BenchmarkGiveBackBurst ./redisstore"
	if ! run_fg "$out" "$GO" test -run '^$' -bench '^BenchmarkGiveBackBurst$' -benchtime 1x -count 1 ./redisstore; then
		warn go-bench "BenchmarkGiveBackBurst failed: $(tail -3 "$out" | tr '\n' ' ')"
		return
	fi
	give_back_rows=$(awk '$1 ~ /^BenchmarkGiveBackBurst\// {
		n = $1; sub(/^BenchmarkGiveBackBurst\//, "", n); sub(/-[0-9]+$/, "", n); c = "–"; p = "–"; a = "–"
		for (i = 3; i < NF; i++) { if ($(i + 1) == "call-max-ms") c = $i; if ($(i + 1) == "ping-max-ms") p = $i; if ($(i + 1) == "all-ms") a = $i }
		printf "| %s | %s | %s | %s |\n", n, c, p, a }' "$out")
}

# ------------------------------------------------------------------ tables

redis_admitted=() # the redis-<algorithm> systems measured
memory_plain=()   # the memory systems at MEMORY_KEYS keys
for sys in "${systems[@]}"; do
	[[ $sys == redis-* ]] && redis_admitted+=("$sys")
	[[ ${KIND[$sys]} == memory && $sys != memory-sliding_log ]] && memory_plain+=("$sys")
done
alg_of() { if [[ $1 == memory ]]; then echo "$MEMORY_ALGORITHM"; else echo "${1#*-}"; fi; }

http_table() {
	local sys vs_429 status
	echo "| system | keys | req/s | × bare | × error429 | p50 ms | p99 ms | Caddy CPU µs/req | Redis scripts/req | Redis cmds/req | script µs/call | Redis CPU µs/req | non-2xx | status |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
	for sys in "${systems[@]}"; do
		vs_429="–"
		[[ $sys == flood || $sys == error429 ]] && vs_429=$(ratio "${RPS[$sys]}" "${RPS[error429]:-}")
		status=ok
		if [[ -n ${NWARN[$sys]:-} ]]; then status="⚠ ${NWARN[$sys]} warning(s)"; fi
		printf '| %s | %s | %.0f | %s | %s | %.2f | %.2f | %s | %s | %s | %s | %s | %d | %s |\n' \
			"$sys" "${KEYS[$sys]}" "${RPS[$sys]}" "$(ratio "${RPS[$sys]}" "${RPS[bare]:-}")" "$vs_429" \
			"${P50[$sys]}" "${P99[$sys]}" "${CCPU[$sys]}" "${SCR[$sys]}" "${CMDS[$sys]}" "${SUPC[$sys]}" \
			"${RCPU[$sys]}" "${NON[$sys]}" "$status"
	done
}

# cost_table: what one request costs Caddy (over bare, or over error429 for
# the flood) and Redis, and the throughput one core running both would give.
cost_table() {
	local sys ref delta onecore
	echo "| system | Caddy CPU µs/req | Δ Caddy CPU µs/req | Redis CPU µs/req | one core (Caddy + Redis) × bare |"
	echo "|---|---:|---:|---:|---:|"
	for sys in "${systems[@]}"; do
		ref=bare
		[[ $sys == flood ]] && ref=error429
		delta=$(minus "${CCPU[$sys]}" "${CCPU[$ref]:-}")
		[[ $sys == bare ]] && delta="–"
		[[ $delta != – ]] && delta="$delta vs $ref"
		onecore=$(one_core "$sys")
		printf '| %s | %s | %s | %s | %s |\n' "$sys" "${CCPU[$sys]}" "$delta" "${RCPU[$sys]}" "$onecore"
	done
}
# one_core <system>: bare's Caddy CPU per request over this system's Caddy
# + Redis CPU per request: its throughput × bare if both shared one core.
one_core() {
	local r=${RCPU[$1]}
	[[ $r == – ]] && r=0
	awk -v b="${CCPU[bare]:-}" -v c="${CCPU[$1]}" -v r="$r" 'BEGIN {
		if (b == "" || b == "–" || c == "–" || c + r <= 0) print "–"; else printf "%.2f", b / (c + r) }'
}

# redis_table: the many-keys scenario, per Redis system.
redis_table() {
	local sys
	echo "| system | keys | decisions | script calls/decision | Redis CPU µs/decision | × INCR+EXPIRE -P $RB_PIPELINE (${REF_CPU:-–} µs/call) | script µs/call |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	for sys in "${systems[@]}"; do
		uses_redis "$sys" || continue
		printf '| %s | %s | %d | %s | %s | %s | %s |\n' "$sys" "${KEYS[$sys]}" "${REQ[$sys]}" "${SCR[$sys]}" \
			"${RCPU[$sys]}" "$(ratio "${RCPU[$sys]}" "$REF_CPU")" "${SUPC[$sys]}"
	done
}

c1_table() {
	local sys
	echo "| system | req/s | p50 ms | p99 ms | p50 − bare p50 µs | script calls/decision |"
	echo "|---|---:|---:|---:|---:|---:|"
	for sys in ${c1_systems[@]+"${c1_systems[@]}"}; do
		printf '| %s | %.0f | %.3f | %.3f | %s | %s |\n' "$sys" "${C1RPS[$sys]}" "${C1P50[$sys]}" "${C1P99[$sys]}" \
			"$(c1_delta "$sys")" "${C1SCR[$sys]}"
	done
}
c1_delta() { # system → its -c1 p50 minus bare's, in µs
	[[ $1 == bare ]] && { echo "–"; return; }
	awk -v a="${C1P50[$1]:-}" -v b="${C1P50[bare]:-}" 'BEGIN {if (a == "" || b == "") print "–"; else printf "%+.0f", (a - b) * 1000}'
}

# per_command: every Redis command per HTTP request, for the Redis systems.
per_command() {
	local sys line
	for sys in "${systems[@]}"; do
		uses_redis "$sys" || continue
		line=$(awk -v r="${REQ[$sys]}" '$1 != "__cpu" {c[$1] += $2; u[$1] += $3}
			END {if (r <= 0) r = 1
				for (k in c) printf "%s %.3f/req (%.2f µs/call)\n", k, c[k] / r, (c[k] > 0 ? u[k] / c[k] : 0)}' \
			"$runs_dir/$sys.main.redis" | sort | awk '{s = s (NR > 1 ? ", " : "") $0} END {print (NR ? s : "no Redis commands")}')
		echo "- \`$sys\`: $line"
	done
}

# ----------------------------------------------------------------- targets

# Each target_* prints one row of the unpinned run's targets table:
# | measure | value | target | met? |, the value listed per algorithm.

dash() { if [[ -n $1 ]]; then echo "${1%; }"; else echo "–"; fi; } # "a; b; " → "a; b", "" → –

target_redis_cpu() {
	local sys v="" m=() x
	for sys in redis-fixed_window redis-token_bucket; do
		[[ -n ${RCPU[$sys]:-} ]] || continue
		x=$(ratio "${RCPU[$sys]}" "$REF_CPU")
		v+="${sys#redis-} ${x}× (${RCPU[$sys]} µs); "
		m+=("$(cmp "$x" le 1.3)")
	done
	echo "| Redis CPU per decision, many keys ($KEYSPACE), fixed_window and token_bucket | ${v}reference ${REF_CPU:-–} µs/call | ≤ 1.3× the INCR+EXPIRE script's \`-P $RB_PIPELINE\` Redis CPU per call | $(all_met ${m[@]+"${m[@]}"}) |"
}

target_script_calls() {
	local sys v="" m=()
	for sys in ${redis_admitted[@]+"${redis_admitted[@]}"}; do
		v+="${sys#redis-} ${SCR[$sys]}; "
		m+=("$(cmp "${SCR[$sys]}" le 0.25)")
	done
	echo "| script calls per decision under load ($CONNECTIONS connections) | $(dash "$v") | ≤ 0.25 | $(all_met ${m[@]+"${m[@]}"}) |"
}

target_caddy_cpu() {
	local sys v="bare ${CCPU[bare]:-–} µs; " m=() d
	for sys in ${redis_admitted[@]+"${redis_admitted[@]}"}; do
		d=$(minus "${CCPU[$sys]}" "${CCPU[bare]:-}")
		v+="${sys#redis-} $d; "
		m+=("$(cmp "$d" le 8)")
	done
	echo "| Caddy CPU per admitted request on Redis | $(dash "$v") | bare + 8 µs | $(all_met ${m[@]+"${m[@]}"}) |"
}

target_throughput() {
	local sys v="" m=() x
	for sys in ${redis_admitted[@]+"${redis_admitted[@]}"}; do
		x=$(one_core "$sys")
		v+="${sys#redis-} ${x}× (wrk $(ratio "${RPS[$sys]}" "${RPS[bare]:-}")×); "
		m+=("$(cmp "$x" ge 0.6)")
	done
	echo "| throughput, Redis, all admitted (Caddy and Redis on one core: bare Caddy CPU ÷ Caddy + Redis CPU) | $(dash "$v") | ≥ 0.6× bare | $(all_met ${m[@]+"${m[@]}"}) |"
}

target_p99() {
	local sys v="bare ${P99[bare]:-–} ms; " m=() d
	for sys in ${redis_admitted[@]+"${redis_admitted[@]}"}; do
		d=$(minus "${P99[$sys]}" "${P99[bare]:-}" 2)
		v+="${sys#redis-} ${P99[$sys]} ms ($d); "
		m+=("$(cmp "$d" le 1)")
	done
	echo "| p99, Redis, all admitted | $(dash "$v") | ≤ bare p99 + 1 ms | $(all_met ${m[@]+"${m[@]}"}) |"
}

target_c1() {
	local sys v="bare p50 ${C1P50[bare]:-–} ms; " m=() d met="? (set C1_BASELINE_US)"
	for sys in ${c1_systems[@]+"${c1_systems[@]}"}; do
		[[ $sys == bare ]] && continue
		d=$(c1_delta "$sys")
		v+="${sys#redis-} $d µs; "
		if [[ -n $C1_BASELINE_US ]]; then m+=("$(cmp "$d" le "$C1_BASELINE_US")"); fi
	done
	if [[ -n $C1_BASELINE_US ]]; then met=$(all_met ${m[@]+"${m[@]}"}); fi
	echo "| latency at one connection (\`wrk -c1\`), Redis: p50 over bare's | $(dash "$v") | ≤ today's (${C1_BASELINE_US:-?} µs; batching must not wait) | $met |"
}

target_memory() {
	local sys v="" m=() x
	for sys in ${memory_plain[@]+"${memory_plain[@]}"}; do
		x=$(ratio "${RPS[$sys]}" "${RPS[bare]:-}")
		v+="$(alg_of "$sys") ${x}×; "
		m+=("$(cmp "$x" ge 0.95)")
	done
	echo "| embedded store, 10^4 live keys ($MEMORY_KEYS) | $(dash "$v") | ≥ 0.95× bare | $(all_met ${m[@]+"${m[@]}"}) |"
}

target_sliding_log() {
	local x=–
	if [[ -n ${RPS[memory-sliding_log]:-} && -n ${RPS[memory]:-} ]]; then x=$(ratio "${RPS[memory-sliding_log]}" "${RPS[memory]}"); fi
	echo "| embedded sliding_log, large limit (events $LOG_EVENTS, $LOG_KEYS keys) | ${x}× \`memory\` ($MEMORY_ALGORITHM) | ≥ 0.9× embedded fixed_window | $(all_met "$(cmp "$x" ge 0.9)") |"
}

target_flood() {
	local x=–
	if [[ -n ${RPS[flood]:-} ]]; then x=$(ratio "${RPS[flood]}" "${RPS[error429]:-}"); fi
	echo "| flood (one key over its limit) | ${x}× \`error 429\` | ≥ 0.9× | $(all_met "$(cmp "$x" ge 0.9)") |"
}

target_allocs() {
	echo "| allocations per request, two zones, embedded (\`$GO_BENCH_NAME\`) | ${ALLOCS:-–} (${GO_NS:-–} ns/op) | ≤ 6 | $(all_met "$(cmp "${ALLOCS:-}" le 6)") |"
}

targets_table() {
	echo "| measure | value | target | met? |"
	echo "|---|---|---|---|"
	target_redis_cpu
	target_script_calls
	target_caddy_cpu
	target_throughput
	target_p99
	target_c1
	target_memory
	target_sliding_log
	target_flood
	target_allocs
}

# ----------------------------------------------------------------- report

write_report() {
	local stamp cpu_model redis_version commit flagged="" k report raw sys
	stamp=$(date +%Y-%m-%d-%H%M%S)
	cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
	redis_version=$(redis-server --version | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^v=/) print substr($i, 3)}')
	commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
	[[ -n $(git status --porcelain -- . ':!bench' 2>/dev/null) ]] && commit+=" (with uncommitted changes)"
	for k in "${!WARN[@]}"; do flagged+="- **$k**: ${WARN[$k]}"$'\n'; done
	report=$(report_body "$commit" "$cpu_model" "$redis_version" "$flagged")

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
}

report_body() { # commit cpu-model redis-version warnings
	cat <<EOF
# Sluice benchmark, $(date '+%Y-%m-%d %H:%M:%S %Z')

- machine: $(nproc) cores, ${2:-unknown CPU}; $(uname -sr)
- redis-server $3; $("$GO" version | sed 's/^go version //'); $("$CADDY" version | awk '{print "Caddy " $1}'); $(wrk --version 2>&1 | head -1 | awk '{print "wrk " $2}')
- commit $1
- scenarios: $SCENARIOS
- wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency (and -t1 -c1 for bare, redis-* and ref-incr), ${ROUNDS} round(s) round-robin (median shown), warm-up $WARMUP; random X-Key from 1..keys (flood: one key)
- limits: events $HIGH_EVENTS (sliding_window, token_bucket: $PRODUCT_EVENTS; sliding_log: $LOG_EVENTS) per $WINDOW; flood: events 1 per 1h
- everything on 127.0.0.1; unpinned, wrk, Caddy and Redis share the machine's cores (pinned scenarios: see their titles)
- load average before the run: $load_start; after: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews every number)

$(layouts_report)

$(leases_report)

EOF
	if has_scenario unpinned; then unpinned_report; fi
	if [[ -n $rb_rows ]]; then rb_section; fi
	if [[ $GO_BENCH == 1 ]]; then go_section; fi
	cat <<EOF
## Warnings

${4:-none}
EOF
}

rb_section() {
	cat <<EOF
## Redis scripts alone (redis-benchmark -n $RB_REQUESTS -c $RB_CLIENTS -r $RB_KEYSPACE)

| script | req/s -P $RB_PIPELINE | µs/call -P $RB_PIPELINE | Redis CPU µs/call -P $RB_PIPELINE | req/s -P 1 | µs/call -P 1 | Redis CPU µs/call -P 1 |
|---|---:|---:|---:|---:|---:|---:|
${rb_rows%$'\n'}
${batch_note:+
$batch_note
}${redis_rate_note:+
$redis_rate_note
}
EOF
}

go_section() {
	cat <<EOF
## Go benchmark

\`go test -run '^\$' -bench '^BenchmarkServeHTTP(Keys)?\$/^memory/' -benchmem .\`

| benchmark | ns/op | B/op | allocs/op |
|---|---:|---:|---:|
${go_rows:-| – | – | – | – |}

Quota lease give-backs ending at once (\`BenchmarkGiveBackBurst\`, calls of
at most 256 give-backs, decisions queued before them): the longest call in
Redis's SLOWLOG (what a decision may wait behind), the longest another
client's PING waited as the benchmark saw it (its own scheduling and GC
included), and the whole burst.

| leases ending at once | longest call ms | longest PING wait ms | burst ms |
|---:|---:|---:|---:|
${give_back_rows:-| – | – | – | – |}

EOF
}

unpinned_report() { # the unpinned scenario (SYSTEMS): its tables
	cat <<EOF
## Unpinned: targets

$(targets_table)

## Unpinned: HTTP (wrk -c$CONNECTIONS)

$(http_table)

Redis cmds/req counts every command in \`INFO commandstats\`, including the
ones a script runs (Redis 7 counts those too); scripts/req counts only script
calls (EVAL, EVALSHA, FCALL and their _ro forms), i.e. round trips. Per
command, per HTTP request:

$(per_command)

## Unpinned: cost per request

$(cost_table)

## Unpinned: Redis per decision, many keys

$(redis_table)

## Unpinned: latency at one connection (wrk -t1 -c1)

$(c1_table)

EOF
}

# ------------------------------------------------- the layouts' report

# The scenarios of bench/scenarios.sh: S_* keyed "<scenario>|<system>|<variant>".
sk() { echo "$1|$2|$3"; }
sv() { # <array name> <scenario> <system> <variant> → the value or –
	local -n a=$1
	local k="$2|$3|$4"
	echo "${a[$k]:-–}"
}
met() { case $1 in yes) echo met ;; no) echo "**missed**" ;; *) echo "–" ;; esac; }
# met_all <verdict...>: met when all are yes, missed (k/n) otherwise.
met_all() {
	local x
	x=$(all_met "$@")
	case $x in yes) echo met ;; –) echo "–" ;; *) echo "**missed** (${x#*(}" ;; esac
}
scn_systems() { # scenario → its systems
	local e
	for e in ${S_SYSTEMS[@]+"${S_SYSTEMS[@]}"}; do [[ ${e%%|*} == "$1" ]] && echo "${e#*|}"; done
}
scn_variants() { # scenario → "name:conns:keys ..."
	local e
	for e in ${S_VARIANTS[@]+"${S_VARIANTS[@]}"}; do [[ ${e%%|*} == "$1" ]] && echo "${e#*|}"; done
}
scn_ran() { [[ -n $(scn_systems "$1") ]]; }
sub() { awk -v a="${1:-}" -v b="${2:-}" 'BEGIN {if (a == "" || a == "–" || b == "" || b == "–") print "–"; else printf "%.1f", a - b}'; }

# scn_table <scenario>: one row per system and variant.
scn_table() {
	local scn=$1 v name conns keys sys r rcpu
	echo "| system | variant | conns | keys | req/s | × bare | Caddy CPU µs/req | Δ vs bare | Redis CPU µs/decision | × INCR+EXPIRE -P $RB_PIPELINE | calls/decision | script µs/call | p50 ms | p99 ms | Δ p99 vs bare ms |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for v in $(scn_variants "$scn"); do
		IFS=: read -r name conns keys <<<"$v"
		for sys in $(scn_systems "$scn"); do
			r=$(sv S_RPS "$scn" "$sys" "$name")
			[[ $r == – ]] && continue
			rcpu=$(sv S_RCPU "$scn" "$sys" "$name")
			printf '| %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$sys" "$name" "$conns" "$keys" "$r" \
				"$(ratio "$r" "$(sv S_RPS "$scn" bare "$name")")" "$(sv S_CCPU "$scn" "$sys" "$name")" \
				"$(minus "$(sv S_CCPU "$scn" "$sys" "$name")" "$(sv S_CCPU "$scn" bare "$name")")" \
				"$rcpu" "$(ratio "$rcpu" "$REF_CPU")" "$(sv S_SCR "$scn" "$sys" "$name")" "$(sv S_SUPC "$scn" "$sys" "$name")" \
				"$(sv S_P50 "$scn" "$sys" "$name")" "$(sv S_P99 "$scn" "$sys" "$name")" \
				"$(minus "$(sv S_P99 "$scn" "$sys" "$name")" "$(sv S_P99 "$scn" bare "$name")" 2)"
		done
	done
}

net_rtt_us() { # the round trip the network target allows: measured PING through the proxy, else 2 × NET_DELAY
	if [[ -n $NET_RTT_PROXY ]]; then echo "$NET_RTT_PROXY"; else
		awk -v d="$NET_DELAY" 'BEGIN {v = d + 0; if (d ~ /us$|µs$/) v = v; else if (d ~ /ms$/) v *= 1000; else if (d ~ /s$/) v *= 1e6; print 2 * v}'
	fi
}

network_table() {
	local sys r p50 bare50 rtt
	scn_ran network || return 0
	rtt=$(net_rtt_us)
	bare50=$(sv S_P50 network bare c1)
	echo "One round trip through the proxy (PING, one connection): ${NET_RTT_PROXY:-–} µs (direct: ${NET_RTT_DIRECT:-–} µs; delay $NET_DELAY each way). At one connection:"
	echo
	echo "| system | req/s | p50 ms | p99 ms | p50 − bare p50 µs | bare p50 + round trip + 100 µs, ms | calls/decision |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	for sys in $(scn_systems network); do
		r=$(sv S_RPS network "$sys" c1)
		[[ $r == – ]] && continue
		p50=$(sv S_P50 network "$sys" c1)
		printf '| %s | %.0f | %s | %s | %s | %s | %s |\n' "$sys" "$r" "$p50" "$(sv S_P99 network "$sys" c1)" \
			"$(awk -v a="$p50" -v b="$bare50" 'BEGIN {if (b == "–") print "–"; else printf "%+.0f", (a - b) * 1000}')" \
			"$(awk -v b="$bare50" -v t="$rtt" 'BEGIN {if (b == "–") print "–"; else printf "%.3f", b + (t + 100) / 1000}')" \
			"$(sv S_SCR network "$sys" c1)"
	done
}

one_call_table() {
	local alg
	has_scenario one-call || return 0
	echo "redis-benchmark -n $RB_REQUESTS -c $RB_CLIENTS -P $RB_PIPELINE -r $RB_KEYSPACE (random keys); instructions: callgrind, $CALLGRIND_CALLS calls at -P $RB_PIPELINE on a redis-server under valgrind. The calls are the ones Sluice sent for one request (limit $ONECALL_EVENTS per $ONECALL_WINDOW), captured with MONITOR, keys made random."
	echo
	echo "| code | calls/s | µs/call (usec_per_call) | × INCR+EXPIRE | Redis CPU µs/call | instructions/call | × INCR+EXPIRE |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	printf '| INCR+EXPIRE script (reference) | %.0f | %s | 1.00 | %s | %s | %s |\n' "${OC_REF_RPS:-0}" "${OC_REF_UPC:-–}" "${OC_REF_CPU:-–}" \
		"${OC_REF_IR:-–}" "$( [[ -n $OC_REF_IR && $OC_REF_IR != – ]] && echo 1.00 || echo –)"
	for alg in $ONECALL_ALGORITHMS; do
		printf '| decide %s | %.0f | %s | %s | %s | %s | %s |\n' "$alg" "${OC_RPS[$alg]:-0}" "${OC_UPC[$alg]:-–}" \
			"$(ratio "${OC_UPC[$alg]:-}" "$OC_REF_UPC")" "${OC_CPU[$alg]:-–}" "${OC_IR[$alg]:-–}" "$(ratio "${OC_IR[$alg]:-}" "$OC_REF_IR")"
	done
	echo
	echo "The calls (P@ is the pipeline depth, each run on fresh keys):"
	echo
	for alg in $ONECALL_ALGORITHMS; do
		[[ -n ${OC_CMD[$alg]:-} ]] && echo "- $alg: \`${OC_CMD[$alg]% }\`"
	done
	[[ -n $OC_NOTE ]] && { echo; echo "$OC_NOTE"; }
	return 0
}

mholt_table() {
	scn_ran mholt || { [[ -n $MHOLT_NOTE ]] && echo "$MHOLT_NOTE"; return 0; }
	echo "mholt/caddy-ratelimit $MHOLT_VERSION (Caddy $CADDY_VERSION, xcaddy) and Sluice's embedded store, all admitted, wrk -c$CONNECTIONS, nothing pinned; the \`memory-<algorithm>\` rows with \`headers none\` (mholt writes no header field on an admission), \`memory-headers\` fixed_window with the default fields. Medians of $ROUNDS alternating rounds."
	echo
	mholt_rows mholt "many keys: events $MHOLT_EVENTS per $MHOLT_WINDOW over $MHOLT_KEYS random keys"
	echo
	mholt_rows mholt-one "one key: events $MHOLT_ONE_EVENTS per minute"
}

# mholt_rows <scenario> <title>: its systems against its bare and mholt.
mholt_rows() {
	local scn=$1 sys r m
	m=$(sv S_RPS "$scn" mholt main)
	echo "$2"
	echo
	echo "| system | req/s | × bare | × mholt | Caddy CPU µs/req | Δ vs bare | Δ vs mholt | p50 ms | p99 ms | non-2xx |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for sys in $(scn_systems "$scn"); do
		r=$(sv S_RPS "$scn" "$sys" main)
		[[ $r == – ]] && continue
		printf '| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$sys" "$r" "$(ratio "$r" "$(sv S_RPS "$scn" bare main)")" \
			"$(ratio "$r" "$m")" "$(sv S_CCPU "$scn" "$sys" main)" \
			"$(minus "$(sv S_CCPU "$scn" "$sys" main)" "$(sv S_CCPU "$scn" bare main)")" \
			"$(minus "$(sv S_CCPU "$scn" "$sys" main)" "$(sv S_CCPU "$scn" mholt main)")" \
			"$(sv S_P50 "$scn" "$sys" main)" "$(sv S_P99 "$scn" "$sys" main)" "$(sv S_NON "$scn" "$sys" main)"
	done
}

# A target row ends with the figures of the reference systems, as
# information (the targets are judged on the redis-* systems alone):
# ref-incr, the INCR+EXPIRE script once per request, driven like Sluice,
# and bare-headers, bare sending the header fields Sluice sends.
ref_label="ref-incr, the INCR+EXPIRE script once per request"
hdr_label="bare-headers, bare sending the five header fields"
# sys_note <label> <text>: "(label: text)", or nothing when text has no figure.
sys_note() {
	[[ $2 == *[0-9]* ]] && echo "($1: ${2%, })"
	return 0
}
ref_note() { sys_note "$ref_label" "$1"; }
# rps_note <scenario> <system> <label> <variants...>: its × bare per variant.
rps_note() {
	local scn=$1 sys=$2 label=$3 var t=""
	shift 3
	for var in "$@"; do
		t+="$var $(ratio "$(sv S_RPS "$scn" "$sys" "$var")" "$(sv S_RPS "$scn" bare "$var")")×, "
	done
	sys_note "$label" "$t"
}

# layout_targets: | target | scenario | measured | met? |, one row per
# target of the layouts that this run measured something for.
layout_targets() {
	local scn sys alg v m x d var
	echo "| target | scenario | measured | met? |"
	echo "|---|---|---|---|"
	for scn in pinned redis-own-core; do
		scn_ran "$scn" || continue
		local min=0.5
		[[ $scn == redis-own-core ]] && min=0.75
		v="" m=()
		for var in one many; do
			for sys in $(scn_systems "$scn"); do
				[[ $sys == redis-* && $sys != redis-sliding_log ]] || continue
				x=$(ratio "$(sv S_RPS "$scn" "$sys" "$var")" "$(sv S_RPS "$scn" bare "$var")")
				v+="${sys#redis-} ($var key$([[ $var == many ]] && echo s)) ${x}×; "
				m+=("$(cmp "$x" ge "$min")")
			done
		done
		v+="$(rps_note "$scn" ref-incr "$ref_label" one many) $(rps_note "$scn" bare-headers "$hdr_label" one many)"
		echo "| Sluice on Redis ≥ ${min}× bare, all admitted, every algorithm but sliding_log | $scn | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
		v="bare $(sv S_CCPU "$scn" bare many) µs; " m=()
		for sys in $(scn_systems "$scn"); do
			[[ $sys == redis-* && $sys != redis-sliding_log ]] || continue
			x=$(ratio "$(sv S_CCPU "$scn" "$sys" many)" "$(sv S_CCPU "$scn" bare many)")
			v+="${sys#redis-} $(sv S_CCPU "$scn" "$sys" many) µs = ${x}×; "
			m+=("$(cmp "$x" le 1.3)")
		done
		v+="$(ref_note "$(ratio "$(sv S_CCPU "$scn" ref-incr many)" "$(sv S_CCPU "$scn" bare many)")×")"
		v+=" $(sys_note "$hdr_label" "$(ratio "$(sv S_CCPU "$scn" bare-headers many)" "$(sv S_CCPU "$scn" bare many)")×")"
		echo "| Caddy CPU per request, $KEYSPACE keys ≤ 1.3× bare's | $scn | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
		if [[ $scn == pinned ]]; then
			v="bare $(sv S_P99 pinned bare one) ms; " m=()
			for var in one many; do
				for sys in $(scn_systems pinned); do
					[[ $sys == redis-* ]] || continue
					d=$(minus "$(sv S_P99 pinned "$sys" "$var")" "$(sv S_P99 pinned bare "$var")" 2)
					v+="${sys#redis-} ($var) $d ms; "
					m+=("$(cmp "$d" le 2)")
				done
			done
			echo "| p99 ≤ bare + 2 ms | pinned | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
		fi
		v="" m=()
		for sys in $(scn_systems "$scn"); do
			[[ $sys == redis-* && $sys != redis-sliding_log ]] || continue
			x=$(ratio "$(sv S_RCPU "$scn" "$sys" many)" "$REF_CPU")
			v+="${sys#redis-} $(sv S_RCPU "$scn" "$sys" many) µs = ${x}×; "
			m+=("$(cmp "$x" le "$([[ $sys == redis-fixed_window ]] && echo 1.2 || echo 1.5)")")
		done
		v+=$(ref_note "$(sv S_RCPU "$scn" ref-incr many) µs = $(ratio "$(sv S_RCPU "$scn" ref-incr many)" "$REF_CPU")×")
		echo "| Redis CPU per decision, $KEYSPACE keys ≤ 1.2× (fixed_window), ≤ 1.5× (the others) the INCR+EXPIRE script's \`-P $RB_PIPELINE\` Redis CPU per call (${REF_CPU:-–} µs) | $scn | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
	done
	if has_scenario unpinned && ((${#redis_admitted[@]} > 0)); then
		v="" m=()
		for sys in "${redis_admitted[@]}"; do
			[[ $sys == redis-sliding_log ]] && continue
			x=$(ratio "${RPS[$sys]}" "${RPS[bare]:-}")
			v+="${sys#redis-} ${x}×; "
			m+=("$(cmp "$x" ge 0.65)")
		done
		v+="$(ref_note "$(ratio "${RPS[ref-incr]:-}" "${RPS[bare]:-}")×") $(sys_note "$hdr_label" "$(ratio "${RPS[bare-headers]:-}" "${RPS[bare]:-}")×")"
		echo "| Sluice on Redis ≥ 0.65× bare (every algorithm but sliding_log) | unpinned | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
		v="bare ${CCPU[bare]:-–} µs; " m=()
		for sys in "${redis_admitted[@]}"; do
			d=$(minus "${CCPU[$sys]}" "${CCPU[bare]:-}")
			v+="${sys#redis-} $d; "
			m+=("$(cmp "$d" le 12)")
		done
		v+="$(ref_note "$(minus "${CCPU[ref-incr]:-}" "${CCPU[bare]:-}")") $(sys_note "$hdr_label" "$(minus "${CCPU[bare-headers]:-}" "${CCPU[bare]:-}")")"
		echo "| Caddy CPU per request ≤ bare + 12 µs | unpinned | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
	fi
	if has_scenario one-call; then
		v="" m=()
		for alg in $ONECALL_ALGORITHMS; do
			local lim=2
			[[ $alg == token_bucket ]] && lim=3
			x=$(ratio "${OC_UPC[$alg]:-}" "$OC_REF_UPC")
			v+="$alg ${OC_UPC[$alg]:-–} µs = ${x}× (≤ $lim); "
			[[ $alg == sliding_log ]] || m+=("$(cmp "$x" le "$lim")")
		done
		echo "| one request per call, µs per call: fixed_window, sliding_window ≤ 2×, token_bucket ≤ 3× the INCR+EXPIRE script's (${OC_REF_UPC:-–} µs) | one-call | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
		v="" m=()
		for alg in $ONECALL_ALGORITHMS; do
			local lim=2
			[[ $alg == token_bucket ]] && lim=3
			x=$(ratio "${OC_IR[$alg]:-}" "$OC_REF_IR")
			v+="$alg ${OC_IR[$alg]:-–} = ${x}×; "
			[[ $alg == sliding_log ]] || m+=("$(cmp "$x" le "$lim")")
		done
		echo "| the same in instructions (callgrind) | one-call | reference ${OC_REF_IR:-–}; $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
	fi
	if scn_ran network; then
		v="" m=()
		for sys in $(scn_systems network); do
			[[ $sys == redis-* ]] || continue
			x=$(sv S_SCR network "$sys" "c$CONNECTIONS")
			v+="${sys#redis-} $x; "
			m+=("$(cmp "$x" le 0.1)")
		done
		echo "| behind the delaying proxy, $CONNECTIONS connections: ≤ 0.1 calls per decision | network | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
		local rtt bare50
		rtt=$(net_rtt_us) bare50=$(sv S_P50 network bare c1)
		v="bare p50 $bare50 ms, round trip $rtt µs; " m=()
		for sys in $(scn_systems network); do
			[[ $sys == redis-* ]] || continue
			x=$(awk -v a="$(sv S_P50 network "$sys" c1)" -v b="$bare50" -v t="$rtt" 'BEGIN {if (a == "–" || b == "–") print "–"; else printf "%.0f", (a - b) * 1000 - t}')
			v+="${sys#redis-} p50 $(sv S_P50 network "$sys" c1) ms (bare + round trip ${x:+$x} µs); "
			m+=("$(cmp "$x" le 100)")
		done
		v+=$(ref_note "bare + round trip $(awk -v a="$(sv S_P50 network ref-incr c1)" -v b="$bare50" -v t="$rtt" 'BEGIN {if (a == "–" || b == "–") print "–"; else printf "%.0f", (a - b) * 1000 - t}') µs")
		echo "| behind the proxy, one connection: latency (p50) ≤ bare + one round trip + 100 µs | network | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
	fi
	if ((${#memory_plain[@]} > 0)); then
		v="" m=()
		for sys in "${memory_plain[@]}"; do
			x=$(ratio "${RPS[$sys]}" "${RPS[bare]:-}")
			v+="$(alg_of "$sys") ${x}×; "
			m+=("$(cmp "$x" ge 0.95)")
		done
		v+=$(sys_note "$hdr_label" "$(ratio "${RPS[bare-headers]:-}" "${RPS[bare]:-}")× bare")
		echo "| embedded store ≥ 0.95× bare, every algorithm | unpinned | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
	fi
	if scn_ran mholt; then
		local scn
		v="" m=()
		for sys in $(scn_systems mholt); do
			[[ $sys == memory-* ]] || continue
			x=$(ratio "$(sv S_RPS mholt "$sys" main)" "$(sv S_RPS mholt bare main)")
			v+="${sys#memory-} ${x}×; "
			m+=("$(cmp "$x" ge 0.95)")
		done
		echo "| embedded store ≥ 0.95× bare, every algorithm (events $MHOLT_EVENTS/$MHOLT_WINDOW) | mholt | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
		v="" m=()
		for scn in mholt mholt-one; do
			for sys in $(scn_systems "$scn"); do
				[[ $sys == memory-* && $sys != memory-headers ]] || continue
				x=$(sv S_CCPU "$scn" "$sys" main)
				v+="$scn ${sys#memory-} $x µs against $(sv S_CCPU "$scn" mholt main); "
				m+=("$(cmp "$x" le "$(sv S_CCPU "$scn" mholt main)")")
			done
		done
		v+="the default fields' own cost: bare-headers − bare $(minus "$(sv S_CCPU mholt bare-headers main)" "$(sv S_CCPU mholt bare main)") µs, memory-headers − memory-fixed_window $(minus "$(sv S_CCPU mholt memory-headers main)" "$(sv S_CCPU mholt memory-fixed_window main)") µs"
		echo "| embedded store (headers none): Caddy CPU per request ≤ mholt/caddy-ratelimit's, many keys and one key | mholt | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
	fi
	if [[ -n ${RPS[flood]:-} ]]; then
		x=$(ratio "${RPS[flood]}" "${RPS[error429]:-}")
		echo "| flood ≥ 0.9× \`error 429\`, ~0 Redis calls | unpinned | ${x}× error429, ${SCR[flood]} calls per request | $(met "$(cmp "$x" ge 0.9)") |"
	fi
}

layouts_report() {
	local any=0 scn
	for scn in pinned redis-own-core network one-call mholt; do has_scenario "$scn" && any=1; done
	((any)) || return 0
	cat <<EOF2
## Targets of the layouts

$(layout_targets)

EOF2
	if scn_ran pinned; then
		printf '## Pinned: Caddy and Redis on CPU 0, wrk on CPU 1\n\n%s\n\n' "$(scn_table pinned)"
	fi
	if scn_ran redis-own-core; then
		printf '## Redis on a core of its own: Caddy on CPU 0, Redis and wrk on CPU 1\n\n%s\n\n' "$(scn_table redis-own-core)"
	fi
	if scn_ran network; then
		printf '## Network: Redis behind bench/delayproxy (%s each way), nothing pinned\n\n%s\n\n%s\n\n' "$NET_DELAY" "$(scn_table network)" "$(network_table)"
	fi
	if has_scenario one-call; then
		printf '## One request per call\n\n%s\n\n' "$(one_call_table)"
	fi
	if has_scenario mholt; then
		printf '## mholt/caddy-ratelimit and the embedded store\n\n%s\n\n' "$(mholt_table)"
	fi
}

# ------------------------------------------------ the quota leases' report

# The lease scenarios of bench/scenarios.sh: lease-network and
# lease-hot-<layout> in the S_* arrays, lease-fleet in FL_*.
lease_hot_ran() {
	local layout
	for layout in $LEASE_LAYOUTS; do scn_ran "lease-hot-$layout" && return 0; done
	return 1
}
us_over() { # <ms> <ms> → (a − b) in µs, signed, or –
	awk -v a="${1:-}" -v b="${2:-}" 'BEGIN {if (a == "" || a == "–" || b == "" || b == "–") print "–"; else printf "%+.0f", (a - b) * 1000}'
}
share() { # <admitted> <allowed> → admitted/allowed with 3 decimals, or –
	awk -v a="${1:-}" -v b="${2:-}" 'BEGIN {if (a == "" || b == "" || b + 0 <= 0) print "–"; else printf "%.3f", a / b}'
}

# lease_targets: | target | scenario | measured | met? |, one row per
# target of quota leases that this run measured something for.
lease_targets() {
	local scn sys alg layout v m m2 d50 d99 b50 b99 x c
	echo "| target | scenario | measured | met? |"
	echo "|---|---|---|---|"
	if scn_ran lease-network; then
		b50=$(sv S_P50 lease-network bare c1) b99=$(sv S_P99 lease-network bare c1)
		v="bare p50 $b50 ms, p99 $b99 ms; " m=()
		for sys in $(scn_systems lease-network); do
			[[ $sys == redis-* && $sys != *-off ]] || continue
			d50=$(us_over "$(sv S_P50 lease-network "$sys" c1)" "$b50") d99=$(us_over "$(sv S_P99 lease-network "$sys" c1)" "$b99")
			v+="${sys#redis-} p50 $d50 µs, p99 $d99 µs, $(sv S_SCR lease-network "$sys" c1) calls/decision; "
			m+=("$(cmp "$d50" le 50)" "$(cmp "$d99" le 50)")
		done
		v+=$(sys_note "quota_lease off, fixed_window, round trip ${LEASE_RTT:-–} µs" \
			"p50 $(us_over "$(sv S_P50 lease-network redis-fixed_window-off c1)" "$b50") µs, p99 $(us_over "$(sv S_P99 lease-network redis-fixed_window-off c1)" "$b99") µs")
		echo "| one hot key behind the delaying proxy, one connection: p50 and p99 ≤ bare + 50 µs | lease-network | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
	fi
	for layout in $LEASE_LAYOUTS; do
		scn=lease-hot-$layout
		scn_ran "$scn" || continue
		v="" m=() m2=()
		for alg in $LEASE_ALGORITHMS; do
			x=$(ratio "$(sv S_RPS "$scn" "redis-$alg" one)" "$(sv S_RPS "$scn" "memory-$alg" one)")
			c=$(sv S_SCR "$scn" "redis-$alg" one)
			v+="$alg ${x}× embedded, $c calls/decision (off: $(ratio "$(sv S_RPS "$scn" "redis-$alg-off" one)" "$(sv S_RPS "$scn" "memory-$alg" one)")×, $(sv S_SCR "$scn" "redis-$alg-off" one)); "
			m+=("$(cmp "$x" ge 0.95)") m2+=("$(cmp "$c" le 0.01)")
		done
		echo "| one hot key, all admitted (-c$CONNECTIONS): ≥ 0.95× the embedded store | $scn | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
		echo "| the same: ≤ 0.01 script calls per decision | $scn | see above | $(met_all ${m2[@]+"${m2[@]}"}) |"
	done
	if ((fleet_ran)); then
		v="" m=()
		for alg in $FLEET_ALGORITHMS; do
			x=$(share "${FL_ADM[$alg]:-}" "${FL_ALLOWED[$alg]:-}")
			v+="$alg ${FL_SCR[$alg]:-–} calls/decision, $x admitted; "
			[[ $alg == token_bucket ]] && continue # reported: an overloaded bucket is empty, nothing to lease
			m+=("$(cmp "${FL_SCR[$alg]:-}" le 0.05)" "$(cmp "$x" ge 0.95)")
		done
		echo "| three instances, one hot key at 3× its limit: fixed_window and sliding_window ≤ 0.05 script calls per decision and ≥ 95% of what the algorithm allows admitted (token_bucket reported: an overloaded bucket is empty, nothing to lease) | lease-fleet | $(dash "$v") | $(met_all ${m[@]+"${m[@]}"}) |"
	fi
}

# lease_network_table: at one connection, each system's p50 and p99 over bare's.
lease_network_table() {
	local sys b50 b99
	b50=$(sv S_P50 lease-network bare c1) b99=$(sv S_P99 lease-network bare c1)
	echo "One round trip through the proxy (PING, one connection): ${LEASE_RTT:-–} µs (delay $NET_DELAY each way); one key, wrk -t1 -c1 -d$LEASE_DURATION."
	echo
	echo "| system | req/s | p50 ms | p99 ms | p50 − bare µs | p99 − bare µs | calls/decision |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	for sys in $(scn_systems lease-network); do
		[[ $(sv S_RPS lease-network "$sys" c1) == – ]] && continue
		printf '| %s | %.0f | %s | %s | %s | %s | %s |\n' "$sys" "$(sv S_RPS lease-network "$sys" c1)" \
			"$(sv S_P50 lease-network "$sys" c1)" "$(sv S_P99 lease-network "$sys" c1)" \
			"$(us_over "$(sv S_P50 lease-network "$sys" c1)" "$b50")" "$(us_over "$(sv S_P99 lease-network "$sys" c1)" "$b99")" \
			"$(sv S_SCR lease-network "$sys" c1)"
	done
}

# lease_usage <used> <granted> → "used of granted (share)", or "–".
lease_usage() {
	[[ $1 != – && $2 != – && $2 != 0 ]] || { echo "–"; return; }
	printf '%s of %s (%s)' "$1" "$2" "$(share "$1" "$2")"
}

# lease_usage_line <scenario>: the quota lease units its leasing redis
# systems used of those granted, as their instances stopped (the last
# round's instance; a steady hot key should use 80% or more).
lease_usage_line() {
	local inst line="Leased units used of granted:"
	for inst in "${!I_GRANTED[@]}"; do
		[[ $inst == "$1"/redis-* && $inst != *-off ]] || continue
		line+=" ${inst#"$1"/} $(lease_usage "${I_USED[$inst]}" "${I_GRANTED[$inst]}");"
	done
	echo "${line%;}"
}

# fleet_table: lease-fleet, per algorithm.
fleet_table() {
	local alg limit
	limit=$((FLEET_EVENTS / FLEET_WINDOW))
	echo "Three Caddy instances on one Redis, one key, events $FLEET_EVENTS per ${FLEET_WINDOW}s (limit $limit/s; a sliding_window slot holds $((FLEET_EVENTS / 20)))${FLEET_ZONE_OPTIONS:+, zone options \`$FLEET_ZONE_OPTIONS\`}, $FLEET_WINDOWS windows from a window's edge; each instance a wrk -t1 -c$FLEET_CONNECTIONS whose connections wait the delay below after each answer (about three times the limit in all). Allowed: the most the algorithm admits of requests offered evenly over the run (fixed_window: per epoch-aligned window, the smaller of events and what was offered in it; sliding_log: the same with windows from the run's start; sliding_window: its slotted count run over the offered stream, each slot counted until its end + window; token_bucket: its full bucket plus its rate over the run), at most what was offered."
	echo
	echo "| algorithm | delay ms | offered req/s | × limit | decisions | admitted | allowed | admitted share | script calls/decision | Redis CPU µs/decision | leased units used |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for alg in $FLEET_ALGORITHMS; do
		[[ -n ${FL_REQ[$alg]:-} ]] || continue
		printf '| %s | %s | %.0f | %s | %d | %d | %d | %s | %s | %s | %s |\n' "$alg" "${FL_DELAY[$alg]}" "${FL_RPS[$alg]}" \
			"$(ratio "${FL_RPS[$alg]}" "$limit")" "${FL_REQ[$alg]}" "${FL_ADM[$alg]}" "${FL_ALLOWED[$alg]}" \
			"$(share "${FL_ADM[$alg]}" "${FL_ALLOWED[$alg]}")" "${FL_SCR[$alg]}" "${FL_RCPU[$alg]}" \
			"$(lease_usage "${FL_USED[$alg]:-–}" "${FL_GRANTED[$alg]:-–}")"
	done
	echo
	echo "token_bucket: a bucket offered three times its rate is empty after its first burst, so Redis has no units to lease; its decisions stay Redis calls (batched), and the figures are reported, not held to the targets."
}

leases_report() {
	local layout
	scn_ran lease-network || lease_hot_ran || ((fleet_ran)) || return 0
	printf '## Quota leases: targets\n\n%s\n\n' "$(lease_targets)"
	if scn_ran lease-network; then
		printf '## Quota leases: one hot key behind bench/delayproxy (%s each way), one connection\n\n%s\n\n%s\n\n' \
			"$NET_DELAY" "$(lease_network_table)" "$(scn_table lease-network)"
	fi
	for layout in $LEASE_LAYOUTS; do
		scn_ran "lease-hot-$layout" || continue
		printf '## Quota leases: one hot key, all admitted, %s (Caddy, Redis, wrk on CPUs %s)\n\n%s\n\n%s\n\n' \
			"$layout" "$(layout_cpus "$layout")" "$(scn_table "lease-hot-$layout")" "$(lease_usage_line "lease-hot-$layout")"
	done
	if ((fleet_ran)); then
		printf '## Quota leases: three instances, one hot key at three times its limit\n\n%s\n\n' "$(fleet_table)"
	fi
}
