#!/usr/bin/env bash
# Install what rlock needs to build and run, only when it is missing:
# redis-server + redis-cli (Redis 7.0+) and libclang (bindgen in the redis-module crate).
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
if ! ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q 'libclang\.so'; then
  missing+=(libclang-dev)
fi
command -v cc >/dev/null 2>&1 || missing+=(gcc)
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian's package starts a system redis on 6379 on some machines; rlock never uses it.
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
