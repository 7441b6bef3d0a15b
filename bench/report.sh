# bench/report.sh: the second half of bench/run.sh (sourced, not run): the
# references measured after the HTTP runs (redis-benchmark, Go benchmark)
# and the Markdown report. Uses run.sh's globals and bench/lib.sh.

# ------------------------------------------------------- redis-benchmark

rb_rows=""
redis_rate_note=""
REF_CPU="" REF_CPU1="" REF_UPC="" # the INCR+EXPIRE reference, -P RB_PIPELINE and -P 1

# rb_run <label> <statcmd> <pipeline> <cmd...> → RB_RPS, RB_UPC (µs/call in
# the script, usec_per_call), RB_CPU (Redis CPU µs per call: used_cpu
# delta over the calls, network and parsing included).
rb_run() {
	local label=$1 stat=$2 pipe=$3 out="$tmp/rb.txt" rps upc failed calls cpu0 cpu1
	shift 3
	# redis-benchmark's random numbers repeat from run to run: "P@" in a
	# key becomes P<pipeline>, so each run starts on keys nobody touched.
	local args=("${@//P@/P$pipe}")
	rcli CONFIG RESETSTAT >/dev/null
	cpu0=$(redis_cpu)
	if ! run_fg "$out" redis-benchmark -h 127.0.0.1 -p "$redis_port" -n "$RB_REQUESTS" -c "$RB_CLIENTS" \
		-P "$pipe" -r "$RB_KEYSPACE" --csv "${args[@]}"; then
		warn redis-benchmark "$label -P $pipe failed: $(tail -2 "$out" | tr '\n' ' ')"
	fi
	cpu1=$(redis_cpu)
	rcli INFO commandstats >"$tmp/rb-stats.txt"
	{ printf '\n===== %s -P %s =====\n' "$label" "$pipe"; cat "$out" "$tmp/rb-stats.txt"; } >>"$tmp/raw-redis-benchmark.txt"
	rps=$(awk -F'"' 'NR == 2 {print $4 + 0}' "$out")
	read -r calls upc failed < <(awk -F'[:,=]' -v c="cmdstat_$stat" '$1 == c {n = $3; u = $5; f = $9 + $11}
		END {printf "%d %s %d\n", n, (n > 0 ? sprintf("%.2f", u / n) : "–"), f}' "$tmp/rb-stats.txt")
	if ((failed > 0)); then warn redis-benchmark "$label -P $pipe: $failed failed calls"; fi
	if ((calls == 0)); then warn redis-benchmark "$label -P $pipe: no $stat calls recorded"; fi
	RB_RPS=${rps:-0} RB_UPC=$upc
	RB_CPU=$(awk -v a="$cpu0" -v b="$cpu1" -v n="$calls" 'BEGIN {if (n > 0) printf "%.2f", (b - a) * 1e6 / n; else print "–"}')
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
# arguments are the request count, then mode, now and zone count, then per
# zone algorithm, events, window, burst, cost, dry run, lease, max_delay.
decide_cases() {
	local files=(prelude fixed_window sliding_window sliding_log token_bucket concurrency decide) f src out alg ev
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
			FCALL sluice_bench_decide 1 "bench:$alg:P@:__rand_int__" 1 1 "" 1 "$alg" "$ev" "$M" "$ev" 1 0 "" 0
	done
	rb_case "decide $FLOOD_ALGORITHM (FCALL), denied, one key (events 1)" fcall \
		FCALL sluice_bench_decide 1 "bench:flood" 1 1 "" 1 "$FLOOD_ALGORITHM" 1 "$H" 1 1 0 "" 0
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
	# The physical reference first: the denominator of the Redis CPU ratio.
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

# Each target_* prints one row of issue 12's targets table:
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
- wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency (and -t1 -c1 for bare and redis-*), ${ROUNDS} round(s) round-robin (median shown), warm-up $WARMUP; random X-Key from 1..keys (flood: one key)
- limits: events $HIGH_EVENTS (sliding_window, token_bucket: $PRODUCT_EVENTS; sliding_log: $LOG_EVENTS) per $WINDOW; flood: events 1 per 1h
- everything on 127.0.0.1: wrk, Caddy and Redis share the machine's cores
- load average before the run: $load_start; after: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews every number)

## Targets (issue 12)

$(targets_table)

## HTTP (wrk -c$CONNECTIONS)

$(http_table)

Redis cmds/req counts every command in \`INFO commandstats\`, including the
ones a script runs (Redis 7 counts those too); scripts/req counts only script
calls (EVAL, EVALSHA, FCALL and their _ro forms), i.e. round trips. Per
command, per HTTP request:

$(per_command)

## Cost per request

$(cost_table)

## Redis per decision, many keys

$(redis_table)

## Latency at one connection (wrk -t1 -c1)

$(c1_table)

## Redis scripts alone (redis-benchmark -n $RB_REQUESTS -c $RB_CLIENTS -r $RB_KEYSPACE)

| script | req/s -P $RB_PIPELINE | µs/call -P $RB_PIPELINE | Redis CPU µs/call -P $RB_PIPELINE | req/s -P 1 | µs/call -P 1 | Redis CPU µs/call -P 1 |
|---|---:|---:|---:|---:|---:|---:|
${rb_rows%$'\n'}
${redis_rate_note:+
$redis_rate_note
}
## Go benchmark

\`go test -run '^\$' -bench '^BenchmarkServeHTTP(Keys)?\$/^memory/' -benchmem .\`

| benchmark | ns/op | B/op | allocs/op |
|---|---:|---:|---:|
${go_rows:-| – | – | – | – |}

## Warnings

${4:-none}
EOF
}
