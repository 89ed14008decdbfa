#!/usr/bin/env bash
# Run the integration tests (crate rlock-tests) with busy loops beside them (`make loaded`): a
# CI machine runs several things at once, and races with the machine's speed (a lease that ends
# before a waiter queued, a reply a dropped future still had in flight) show up there first. On
# the 2-core development VM, runs like this found three bugs a quiet machine hid.
#
#   scripts/loaded.sh [LOOPS]
#
# LOOPS busy loops (default: one per core) run at normal priority until the tests end.
# RLOCK_MODULE must name the built module (the Makefile sets it); RLOCK_SERVER picks the server.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RLOCK_MODULE:?set RLOCK_MODULE to the built module (make loaded does)}"
loops=${1:-$(nproc)}

# Build first, so the loops slow the tests, not the compiler.
cargo test --release -p rlock-tests --no-run

pids=()
stop() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap stop EXIT
for _ in $(seq 1 "$loops"); do
  sh -c 'while :; do :; done' &
  pids+=($!)
done
echo "==> integration tests beside $loops busy loop(s)"
cargo test --release -p rlock-tests --no-fail-fast
