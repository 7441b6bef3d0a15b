#!/usr/bin/env bash
# test-servers.sh runs the Redis-backed tests against each server of the
# matrix: Redis 6.0 (no Functions: the EVALSHA path), Redis 7.0 (the
# system's redis-server, as make test), Redis 8.0 and Valkey 8.1, each a real
# server that scripts/redis-servers.sh fetches from Debian's mirror. The
# tests take the server from SLUICE_REDIS_SERVER and SLUICE_REDIS_CLI.
#
# Redis 7.0 is what make test (run just before in CI) already ran every
# test on, so here it runs only the tests make test skips: those that need
# SLUICE_MATRIX=1 (a real Prometheus, a real Python client) and the
# provision log line read off a running Caddy. The other servers run every
# Redis-backed package in full.
#
#   SERVERS      the servers to run (default: all four)
#   PKGS         the packages run on 6.0, 8.0 and Valkey 8.1 (default: the
#                Redis-backed ones: the store tests, the root package, the
#                integration tests)
#   REDIS7_PKGS  the packages run on Redis 7.0 (default ./integration_test/)
#   REDIS7_RUN   their -run pattern (default: the matrix-only tests); set it
#                to '.' and REDIS7_PKGS to "$PKGS" for everything
#   MATRIX_RUN   a -run pattern for the other servers (default: every test)
#
# It prints one line per server with its result and duration, and fails if
# any server failed.
set -uo pipefail
cd "$(dirname "$0")/.."

SERVERS="${SERVERS:-redis-6.0 redis-7.0 redis-8.0 valkey-8.1}"
PKGS="${PKGS:-./redisstore/ . ./integration_test/}"
REDIS7_PKGS="${REDIS7_PKGS:-./integration_test/}"
REDIS7_RUN="${REDIS7_RUN:-TestServerAnswered|TestDashboardQueries|TestRealClient|TestTraces}"
MATRIX_RUN="${MATRIX_RUN:-}"
export SLUICE_MATRIX=1
out="${SERVERS_DIR:-$PWD/.servers}"

start=$(date +%s)
if ! scripts/redis-servers.sh "$out" >/dev/null; then
	echo "test-servers: fetching the servers failed" >&2
	exit 1
fi
echo "test-servers: servers ready in $(($(date +%s) - start))s"

summary=()
failed=0
for name in $SERVERS; do
	if [ "$name" = redis-7.0 ]; then
		server="$(command -v redis-server)" cli="$(command -v redis-cli)" pkgs="$REDIS7_PKGS" run="$REDIS7_RUN"
	else
		server="$out/$name/bin/redis-server" cli="$out/$name/bin/redis-cli" pkgs="$PKGS" run="$MATRIX_RUN"
	fi
	echo "=== test-servers: $name: $("$server" --version | cut -d' ' -f1-3): go test ${run:+-run '$run' }$pkgs"
	t0=$(date +%s)
	# shellcheck disable=SC2086
	if SLUICE_REDIS_SERVER="$server" SLUICE_REDIS_CLI="$cli" \
		go test -count=1 ${run:+-run "$run"} $pkgs; then
		result=ok
	else
		result=FAIL failed=1
	fi
	summary+=("$(printf '%-11s %-4s %4ss  %s' "$name" "$result" "$(($(date +%s) - t0))" "${run:+-run '$run' }$pkgs")")
done
echo "=== test-servers: summary ($(($(date +%s) - start))s in all)"
printf '%s\n' "${summary[@]}"
exit "$failed"
