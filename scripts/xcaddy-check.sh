#!/usr/bin/env bash
# Builds Caddy with xcaddy and this checkout (`--with …=.`), as users build
# it, and checks that `caddy list-modules` shows http.handlers.rate_limit.
set -euo pipefail
cd "$(dirname "$0")/.."

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The module proxy does not serve this unpublished module: a proxy list
# ending in |off makes the go command use the local replacement instead.
export GOPROXY="$(go env GOPROXY | cut -d, -f1)|off"
export GOFLAGS=-buildvcs=false

go run "${XCADDY}" build "${CADDY_VERSION}" \
  --output "$out/caddy" \
  --with github.com/sluicehq/caddy-sluice=.

# captured first: grep -q would close the pipe early, and pipefail would
# count caddy's SIGPIPE as a failure
modules=$("$out/caddy" list-modules)
if grep -qx 'http.handlers.rate_limit' <<<"$modules"; then
  echo "xcaddy-check: http.handlers.rate_limit is in the xcaddy build"
else
  echo "xcaddy-check: http.handlers.rate_limit missing from the xcaddy build" >&2
  exit 1
fi
