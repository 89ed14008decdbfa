#!/usr/bin/env bash
# Run the integration tests (crate rlock-tests, every file of tests/tests) against each server
# of the matrix, one server after another, and print a table of results (`make matrix`).
#
#   scripts/matrix.sh [NAME...]
#
# NAMEs are those of scripts/servers.sh (default: all of them); each server binary is fetched
# into the cache on first use. RLOCK_MODULE must name the built module (the Makefile sets it).
# MATRIX_CARGO_ARGS adds cargo test arguments, e.g. "--test servers" for one test file.
# MATRIX_SKIP names test targets (files of tests/tests) left out on the servers named in
# MATRIX_SKIP_ON: CI leaves the long torture and soak runs to `make test` and one of the four
# servers, to stay under its hour.
# CLIENT_TESTS (the Makefile sets it: "--test client_sync --test ...") are run a second time on
# the servers named in REDISSON_SERVERS (default: every server of the run), those servers
# started without the module: the client speaks Redisson's protocol there (row NAME/redisson).
# Logs: target/matrix/NAME.log. Exit status: non-zero when any server had a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RLOCK_MODULE:?set RLOCK_MODULE to the built module (make matrix does)}"

names=("$@")
[ ${#names[@]} -gt 0 ] || mapfile -t names < <(bash scripts/servers.sh names)

mkdir -p target/matrix
# Fetch every binary first, so a download failure stops the run before any test.
declare -A bin
for n in "${names[@]}"; do
  bin[$n]=$(bash scripts/servers.sh "$n")
done
# Every test target but those of MATRIX_SKIP, as `--test NAME` arguments.
targets_but_skipped() {
  local f t
  for f in tests/tests/*.rs tests/tests/*/main.rs; do
    t=${f#tests/tests/}
    t=${t%/main.rs}
    t=${t%.rs}
    [[ " ${MATRIX_SKIP:-} " == *" $t "* ]] || printf -- '--test %s ' "$t"
  done
}

# Cargo runs with --workspace and names the test targets: the features then resolve as in
# `make test`'s `cargo test --workspace` (the client's dev-dependencies turn on more of tokio's),
# so its test binaries are reused here; with `-p rlock-tests` every one of them was compiled
# again (about 60 binaries).
all_targets=$(MATRIX_SKIP="" targets_but_skipped)

# Build the test binaries once (they do not depend on the server).
# shellcheck disable=SC2086
cargo test --release --workspace --no-run ${MATRIX_CARGO_ARGS:-$all_targets}

rows=()
status=0
for n in "${names[@]}"; do
  b=${bin[$n]}
  version=$("$b" --version | sed -E 's/^(Redis|Valkey) server v=([^ ]+).*/\1 \2/')
  echo "==> $n: $version ($b)"
  log=target/matrix/$n.log
  start=$(date +%s)
  set +e
  # shellcheck disable=SC2086
  args=${MATRIX_CARGO_ARGS:-$all_targets}
  if [ -z "${MATRIX_CARGO_ARGS:-}" ] && [ -n "${MATRIX_SKIP:-}" ] && [[ " ${MATRIX_SKIP_ON:-} " == *" $n "* ]]; then
    echo "==> $n: leaving out ${MATRIX_SKIP}"
    args=$(targets_but_skipped)
  fi
  RLOCK_SERVER=$b cargo test --release --workspace --no-fail-fast $args \
    2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  secs=$(($(date +%s) - start))
  read -r p f < <(awk '/^test result:/ { p += $4; f += $6 } END { print p + 0, f + 0 }' "$log")
  [ "$rc" = 0 ] && [ "$f" = 0 ] || status=1
  result=ok
  [ "$rc" = 0 ] || result="FAILED (exit $rc)"
  rows+=("$(printf '%-11s %-14s %7s %7s %6ss  %s' "$n" "$version" "$p" "$f" "$secs" "$result")")

  if [ -n "${CLIENT_TESTS:-}" ] && [[ " ${REDISSON_SERVERS:-${names[*]}} " == *" $n "* ]]; then
    echo "==> $n without the module: the client's tests over Redisson's protocol"
    log=target/matrix/$n-redisson.log
    start=$(date +%s)
    set +e
    # shellcheck disable=SC2086
    RLOCK_CLIENT_PROTOCOL=redisson RLOCK_SERVER=$b \
      cargo test --release --workspace --no-fail-fast $CLIENT_TESTS 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    secs=$(($(date +%s) - start))
    read -r p f < <(awk '/^test result:/ { p += $4; f += $6 } END { print p + 0, f + 0 }' "$log")
    [ "$rc" = 0 ] && [ "$f" = 0 ] || status=1
    result=ok
    [ "$rc" = 0 ] || result="FAILED (exit $rc)"
    rows+=("$(printf '%-11s %-14s %7s %7s %6ss  %s' "$n/redisson" "$version" "$p" "$f" "$secs" "$result")")
  fi
done

echo
echo "==> server matrix (rlock-tests ${MATRIX_CARGO_ARGS:-all integration tests}):"
printf '%-11s %-14s %7s %7s %7s  %s\n' server version passed failed time result
printf '%s\n' "${rows[@]}"
exit $status
