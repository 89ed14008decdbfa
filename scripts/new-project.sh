#!/usr/bin/env bash
# `make new-project`: what a new user does, checked. A project outside the workspace (a
# temporary directory) depends on the client by path with its default features, its main.rs
# is the README's quick start (the first ```rust block of its Rust section, in a main that
# returns the client's Result), and it runs against a redis-server with the module on a free
# port (started here, stopped at the end). Fails if the project does not build or the quick
# start does not run to its end.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
module=${RLOCK_MODULE:-$target/release/librlock_module.so}
[ -f "$module" ] || cargo build --release -p rlock-module
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --dir "$tmp" --save "" --appendonly no \
  --loadmodule "$module" --logfile "$tmp/redis.log" &
pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

# The README's quick start: the first rust block after "## From Rust", with its port made ours.
quick=$(awk '/^## From Rust/ { on = 1 } on && /^```rust/ { inb = 1; next } inb && /^```/ { exit } inb' README.md)
[ -n "$quick" ] || { echo "new-project: no quick start found in README.md" >&2; exit 1; }

cd "$tmp"
cargo new --quiet --vcs none newproj
cd newproj
cargo add --quiet --path "$root/client"
# The quick start's async half needs an executor: tokio, which the client uses already.
cargo add --quiet tokio --features rt-multi-thread
sync=$(echo "$quick" | awk '/^\/\/ Async/ { exit } { print }' | sed "s|127.0.0.1:6390|127.0.0.1:$port|")
async=$(echo "$quick" | awk '/^\/\/ Async/ { on = 1 } on')
cat >src/main.rs <<RS
use std::time::Duration;

fn main() -> rlock_client::Result<()> {
$sync

tokio::runtime::Runtime::new().expect("a tokio runtime").block_on(async {
$async
    Ok::<(), rlock_client::Error>(())
})?;
println!("new-project: the README's quick start ran to its end");
Ok(())
}
RS
# Its own lockfile (resolved as a new user's would be), the workspace's target directory and
# release settings, so that the dependencies built for the workspace in the same versions and
# features are reused: the redis crate and the client build again (default features here).
CARGO_TARGET_DIR="$target" CARGO_PROFILE_RELEASE_DEBUG=1 cargo run --quiet --release
