# Sluice: `make run` serves Caddyfile.example on http://localhost:8080 (with
# REDIS_URL set, on Redis; else on the embedded store; HTTP_PORT and
# ADMIN_PORT move it); `make test` installs what is missing and runs the
# lint and every test.

GO            ?= go
CADDY_VERSION := v2.11.9
XCADDY        := github.com/caddyserver/xcaddy/cmd/xcaddy@v0.4.5
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2

# FUZZTIME counts executions rather than seconds: with a duration, Go 1.26's
# fuzz coordinator can fail a target with "context deadline exceeded" when
# the deadline races a busy worker (go.dev/issue/75804, fixed in Go 1.27).
FUZZTIME      ?= 5000x

.PHONY: build run test deps lint vet fuzz bench bench-drill xcaddy-check test-servers servers-deps

build:
	$(GO) build -o bin/caddy ./cmd/caddy

# run's ports: `make run HTTP_PORT=8081 ADMIN_PORT=2020` serves the example
# on http://localhost:8081 with its admin API on localhost:2020.
HTTP_PORT     ?= 8080
ADMIN_PORT    ?= 2019

run: build
	HTTP_PORT=$(HTTP_PORT) ADMIN_PORT=$(ADMIN_PORT) SLUICE_STORE=$(if $(REDIS_URL),redis,memory) \
	  ./bin/caddy run --config Caddyfile.example --adapter caddyfile

test: deps lint
	$(GO) test -count=1 ./...
	$(MAKE) fuzz
	$(MAKE) xcaddy-check

# fuzz runs each fuzz target briefly; FUZZTIME=1000000x make fuzz for longer.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./jwtclaims
	$(GO) test -run '^$$' -fuzz '^FuzzUnmarshalCaddyfile$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzStoreKey$$' -fuzztime $(FUZZTIME) .

# lint: gofmt, go vet and staticcheck (pinned; run through go run, so
# nothing is installed).
lint: vet
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then \
	  echo "gofmt would change:" >&2; echo "$$unformatted" >&2; exit 1; fi
	$(GO) run $(STATICCHECK) ./...

vet:
	$(GO) vet ./...

# deps installs redis-server (the tests start their own) when it is missing
# and we are root on a Debian-like system; otherwise it says how.
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server; \
	  else \
	    echo "redis-server is missing; install it: sudo apt-get install -y redis-server" >&2; exit 1; \
	  fi; }

# test-servers runs the Redis-backed tests against Redis 6.0, 7.0, 8.0 and
# Valkey 8.1 (scripts/redis-servers.sh fetches them from Debian's mirror
# into .servers; scripts/test-servers.sh says which packages run where).
test-servers: deps servers-deps
	scripts/test-servers.sh

# servers-deps installs what the matrix's tests use besides the servers:
# prometheus (the dashboard test) and python3-urllib3 (a real client).
servers-deps:
	@missing=""; command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	python3 -c 'import urllib3' >/dev/null 2>&1 || missing="$$missing python3-urllib3"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	  else \
	    echo "missing:$$missing; install: sudo apt-get install -y$$missing" >&2; exit 1; \
	  fi; \
	fi

# bench measures Caddy bare, with Sluice in memory and on Redis, with wrk,
# in the scenarios of bench/README.md (SCENARIOS=...; a quick check:
# DURATION=2s ROUNDS=1 make bench), then runs the overload drill
# (bench-drill; DRILL=0 skips it). It is not part of make test.
bench: deps
	@command -v wrk >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y wrk; \
	  else \
	    echo "wrk is missing; install it: sudo apt-get install -y wrk" >&2; exit 1; \
	  fi; }
	CADDY_VERSION=$(CADDY_VERSION) XCADDY=$(XCADDY) bash bench/run.sh
	@if [ "$(DRILL)" != 0 ]; then $(MAKE) --no-print-directory bench-drill; fi

# bench-drill is the overload drill of load shedding (bench/drill) with
# short phases, about 4 minutes: every limiter on one Caddy (capacity
# halved by half the workers stopping), then the adaptive zone alone with
# each request's time doubled instead, their targets judged, reports and
# per-second series written to bench/results/.
# DRILL_FLAGS replaces the phases, e.g. DRILL_FLAGS="-instances 2 -steady 30s".
DRILL       ?= 1
DRILL_FLAGS ?= -phases 0.5@3s,3@4s,3/2@6s,3@10s,10@4s -steady 0
bench-drill:
	$(GO) run ./bench/drill -out bench/results $(DRILL_FLAGS)
	$(GO) run ./bench/drill -out bench/results -limiters adaptive -halve service $(DRILL_FLAGS)

# xcaddy-check builds Caddy the way users will, with xcaddy and this
# checkout, and checks that the module is in it.
xcaddy-check:
	CADDY_VERSION=$(CADDY_VERSION) XCADDY=$(XCADDY) scripts/xcaddy-check.sh
