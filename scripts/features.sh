#!/usr/bin/env bash
# `make features`: every combination of the client's features that its docs name ("Features"
# in client/src/lib.rs), each linted (clippy, warnings as errors) and its unit tests run. Cheap
# on purpose: the library and its unit tests only (debug builds); the integration suite builds
# the client with every feature (tests/Cargo.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
combos=(
  "--no-default-features"
  ""
  "--all-features"
)
for c in "${combos[@]}"; do
  echo "==> rlock-client: ${c:-default features}"
  # shellcheck disable=SC2086 # the flags are words
  cargo clippy -p rlock-client --lib --tests $c -- -D warnings
  # shellcheck disable=SC2086
  cargo test -p rlock-client --lib $c
done
