#!/usr/bin/env bash
# redis-servers.sh fetches the servers of the test matrix from Debian's
# mirror and unpacks each into a folder of its own, with wrappers that run
# it from there:
#
#   redis-6.0   bullseye redis-server 5:6.0.16-1+deb11u2 (+ libssl1.1);
#               runs on this system's glibc with the folder's libraries
#   redis-8.0   trixie redis-server 5:8.0.2-3+deb13u3
#   valkey-8.1  trixie valkey-server 8.1.1+dfsg1-3+deb13u3
#
# Trixie's binaries need trixie's glibc, so they run through the folder's
# own loader: <root>/usr/lib64/ld-linux-x86-64.so.2 --library-path <libs>
# --argv0 <name> <binary>. Debian ships the server as the *-check-rdb binary
# (the *-server name is a symlink in another package); the binary picks its
# mode from argv[0], hence --argv0.
#
# apt-get runs with its own sources list, lists and cache under the output
# folder (-o Dir::Etc::sourcelist=…, Dir::State::Lists=…, Dir::Cache=…), so
# the system's apt is neither read for sources nor changed. Nothing is
# installed: packages are downloaded and unpacked with dpkg -x.
#
# Usage: scripts/redis-servers.sh [OUT]   (default: .servers in the repo)
# It prints one line per server: <name> <redis-server wrapper> <redis-cli
# wrapper>. A second run reuses what is there (delete OUT to start over).
# Redis 7.0 is the system's redis-server (make deps installs it).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mkdir -p "${1:-$repo/.servers}" && cd "${1:-$repo/.servers}" && pwd)"

REDIS6_VERSION="${REDIS6_VERSION:-5:6.0.16-1+deb11u2}"
REDIS8_VERSION="${REDIS8_VERSION:-5:8.0.2-3+deb13u3}"
VALKEY8_VERSION="${VALKEY8_VERSION:-8.1.1+dfsg1-3+deb13u3}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
KEYRING="${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"

stamp="$out/.done-$(printf '%s' "$REDIS6_VERSION $REDIS8_VERSION $VALKEY8_VERSION" | md5sum | cut -c1-12)"

report() {
	for name in redis-6.0 redis-8.0 valkey-8.1; do
		echo "$name $out/$name/bin/redis-server $out/$name/bin/redis-cli"
	done
}

if [ -e "$stamp" ]; then
	report
	exit 0
fi

apt_dir="$out/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
cat >"$apt_dir/sources.list" <<EOF
deb [signed-by=$KEYRING] $MIRROR bullseye main
deb [signed-by=$KEYRING] $SECURITY_MIRROR bullseye-security main
deb [signed-by=$KEYRING] $MIRROR trixie main
deb [signed-by=$KEYRING] $SECURITY_MIRROR trixie-security main
EOF
apt_opts=(
	-o "Dir::Etc::sourcelist=$apt_dir/sources.list"
	-o "Dir::Etc::sourceparts=-"
	-o "Dir::State::Lists=$apt_dir/lists"
	-o "Dir::Cache=$apt_dir/cache"
	-o "APT::Architecture=amd64"
	-o "Acquire::Languages=none"
	-o "APT::Sandbox::User=root"
	-q
)

echo "redis-servers: apt-get update (own lists in $apt_dir)" >&2
apt-get "${apt_opts[@]}" update >&2

# Libraries: bullseye's for Redis 6 (it runs on the system's glibc), trixie's
# closure (glibc included) for Redis 8 and Valkey 8.
bullseye_libs=(libssl1.1 liblua5.1-0 lua-bitop lua-cjson liblzf1 libjemalloc2 libatomic1)
trixie_libs=(libc6 libssl3t64 libjemalloc2 liblzf1 libatomic1 libstdc++6 libgcc-s1
	libsystemd0 libcap2 libzstd1 zlib1g)

debs="$apt_dir/debs"
rm -f "$debs"/*.deb
fetch() { # fetch <subdir> <package spec...>
	local sub="$debs/$1"
	shift
	rm -rf "$sub" && mkdir -p "$sub"
	(cd "$sub" && apt-get "${apt_opts[@]}" download "$@" >&2)
}
echo "redis-servers: downloading" >&2
fetch redis-6.0 "redis-server=$REDIS6_VERSION" "redis-tools=$REDIS6_VERSION" "${bullseye_libs[@]/%//bullseye}"
fetch redis-8.0 "redis-server=$REDIS8_VERSION" "redis-tools=$REDIS8_VERSION" "${trixie_libs[@]/%//trixie}"
fetch valkey-8.1 "valkey-server=$VALKEY8_VERSION" "valkey-tools=$VALKEY8_VERSION" "${trixie_libs[@]/%//trixie}"

unpack() { # unpack <name>: every .deb of its download into <name>/root
	local root="$out/$1/root"
	rm -rf "$out/$1" && mkdir -p "$root" "$out/$1/bin"
	for deb in "$debs/$1"/*.deb; do
		dpkg -x "$deb" "$root"
	done
}

# wrapper <file> <command...>: a script that execs the command with its args.
wrapper() {
	local file="$1"
	shift
	{
		echo '#!/bin/sh'
		printf 'exec'
		printf ' %q' "$@"
		echo ' "$@"'
	} >"$file"
	chmod +x "$file"
}

# Redis 6.0: bullseye's binary on this system's loader, the folder's
# libraries first. Its redis-server symlink gives the right argv[0].
unpack redis-6.0
root="$out/redis-6.0/root"
wrapper "$out/redis-6.0/bin/redis-server" env "LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu" "$root/usr/bin/redis-server"
wrapper "$out/redis-6.0/bin/redis-cli" env "LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu" "$root/usr/bin/redis-cli"

# trixie: the folder's loader runs the binary under the name it needs.
trixie() { # trixie <name> <server binary> <server argv0> <cli binary> <cli argv0>
	local root="$out/$1/root"
	local ld="$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
	local libs="$root/usr/lib/x86_64-linux-gnu"
	wrapper "$out/$1/bin/redis-server" "$ld" --library-path "$libs" --argv0 "$3" "$root/usr/bin/$2"
	wrapper "$out/$1/bin/redis-cli" "$ld" --library-path "$libs" --argv0 "$5" "$root/usr/bin/$4"
}
unpack redis-8.0
trixie redis-8.0 redis-check-rdb redis-server redis-cli redis-cli
unpack valkey-8.1
trixie valkey-8.1 valkey-check-rdb valkey-server valkey-cli valkey-cli

for name in redis-6.0 redis-8.0 valkey-8.1; do
	v="$("$out/$name/bin/redis-server" --version)"
	c="$("$out/$name/bin/redis-cli" --version)"
	echo "redis-servers: $name: $v; $c" >&2
done
rm -rf "$debs" "$apt_dir/cache"
touch "$stamp"
report
