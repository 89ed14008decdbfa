#!/usr/bin/env bash
# The client's stated minimum Rust (`rust-version` in Cargo.toml) checked as a user on that Rust
# gets it: the workspace copied without its Cargo.lock, dependencies resolved for that Rust
# (cargo's MSRV-aware fallback, which a dependent's cargo 1.84+ applies), then `cargo check` of
# the client with every feature. Needs that toolchain (`rustup toolchain install 1.88`), so it
# is not in CI (whose machine has one toolchain); run it before a release. About 8 min of CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
if ! cargo "+$msrv" --version >/dev/null 2>&1; then
  echo "msrv: Rust $msrv is not installed (rustup toolchain install $msrv)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git archive HEAD | tar -x -C "$work"
rm -f "$work/Cargo.lock"
cd "$work"
CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo "+$msrv" generate-lockfile
cargo "+$msrv" check -p rlock-client --all-features --lib
cargo "+$msrv" check -p rlock-client --no-default-features --lib
echo "msrv: rlock-client checks on Rust $msrv"
