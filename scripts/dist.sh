#!/usr/bin/env bash
# `make dist`: the module as a release an operator can load. Writes, under dist/:
#   rlock-<version>-linux-<arch>.so          the module (release build)
#   rlock-<version>-linux-<arch>.so.sha256   its checksum (sha256sum -c checks it)
#   rlock-<version>-LOADING.txt              how to load it and its configuration parameters
# then checks that a plain redis-server loads the file and reports its version.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(awk -F'"' '/^version *=/ { print $2; exit }' Cargo.toml)
arch=$(uname -m)
name="rlock-$version-linux-$arch"
cargo build --release -p rlock-module
mkdir -p dist
cp target/release/librlock_module.so "dist/$name.so"
strip --strip-debug "dist/$name.so"
(cd dist && sha256sum "$name.so" >"$name.so.sha256")
# The configuration parameters, from the table in docs/operations.md.
params=$(awk '/^## Module configuration/ { on = 1 } on && /^\| `rlock\./ {
  split($0, c, "|"); gsub(/^ +| +$/, "", c[2]); gsub(/^ +| +$/, "", c[3]); gsub(/^ +| +$/, "", c[4]);
  printf "  %-32s default %-10s range %s\n", c[2], c[3], c[4] } on && /^## / && !/Module configuration/ { exit }' docs/operations.md | tr -d '`')
cat >"dist/rlock-$version-LOADING.txt" <<TXT
rlock $version: Redisson's distributed locks as a native module, for Redis 7.0-8.x and Valkey 8-9
(Linux $arch).

Check the file:
  sha256sum -c $name.so.sha256

Load it at start, in redis.conf (or valkey.conf):
  loadmodule /path/to/$name.so

or on a running server (if MODULE LOAD is allowed there: enable-module-command yes):
  MODULE LOAD /path/to/$name.so

Then MODULE LIST shows it as "rlock" with ver $(awk -v v="$version" 'BEGIN { split(v, p, /[.-]/); print p[1] * 10000 + p[2] * 100 + p[3] }'),
and INFO rlock starts with rlock_version:$version.

Configuration parameters (in redis.conf as "rlock.<name> <value>", or CONFIG SET at run time);
docs/commands.md#module-configuration says what each one does:
$params

The commands (RLOCK.*, RRWLOCK.*, RSEM.*, RLATCH.*, RSESSION.*) are in docs/commands.md.
Clusters, Sentinel, ACL users and memory policy: docs/operations.md.
TXT
# A plain server loads it and reports the version.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
tmp=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --dir "$tmp" --save "" --daemonize no \
  --loadmodule "$PWD/dist/$name.so" --logfile "$tmp/log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
got=$(redis-cli -p "$port" INFO rlock | tr -d '\r' | awk -F: '$1 == "rlock_version" { print $2 }')
[ "$got" = "$version" ] || { echo "dist: the server reports rlock_version '$got', not $version" >&2; exit 1; }
redis-cli -p "$port" MODULE LIST | tr -d '\r' | grep -qx rlock || { echo "dist: MODULE LIST lacks rlock" >&2; exit 1; }
echo "==> dist/$name.so ($(cut -c1-16 "dist/$name.so.sha256")...), loaded by $(redis-server --version | awk '{ print $1, $2, $3 }')"
ls -l dist/
