#!/usr/bin/env bash
# Server-side cost per call: RLOCK.ACQUIRE / RLOCK.RELEASE against Redisson's acquire and release
# Lua scripts (EVALSHA, exact text from Redisson's RedissonLock), pipelined through one
# connection in the same run, read from INFO commandstats (usec_per_call).
# Usage: scripts/commandstats.sh [calls]   (default 200000 calls per phase)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
SO=${RLOCK_MODULE:-$PWD/target/release/librlock_module.so}
[ -f "$SO" ] || cargo build --release -p rlock-module
DIR=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --save "" --appendonly no \
  --loadmodule "$SO" --daemonize yes --logfile "$DIR/redis.log" --pidfile "$DIR/pid"
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do sleep 0.05; done
cli() { redis-cli -p "$PORT" "$@"; }

ACQUIRE='if ((redis.call('"'"'exists'"'"', KEYS[1]) == 0) or (redis.call('"'"'hexists'"'"', KEYS[1], ARGV[2]) == 1)) then redis.call('"'"'hincrby'"'"', KEYS[1], ARGV[2], 1); redis.call('"'"'pexpire'"'"', KEYS[1], ARGV[1]); return nil; end; return redis.call('"'"'pttl'"'"', KEYS[1]);'
RELEASE='local val = redis.call('"'"'get'"'"', KEYS[3]); if val ~= false then return tonumber(val); end; if (redis.call('"'"'hexists'"'"', KEYS[1], ARGV[3]) == 0) then return nil; end; local counter = redis.call('"'"'hincrby'"'"', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('"'"'pexpire'"'"', KEYS[1], ARGV[2]); redis.call('"'"'set'"'"', KEYS[3], 0, '"'"'px'"'"', ARGV[5]); return 0; else redis.call('"'"'del'"'"', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('"'"'set'"'"', KEYS[3], 1, '"'"'px'"'"', ARGV[5]); return 1; end;'
SHA_A=$(cli SCRIPT LOAD "$ACQUIRE")
SHA_R=$(cli SCRIPT LOAD "$RELEASE")
OWNER=6e3d30b7-83b1-433a-9335-5e8b9916d3ac:1

# RESP-encode commands with awk and pipe them through one connection.
resp() { awk '{ printf "*%d\r\n", NF; for (i = 1; i <= NF; i++) printf "$%d\r\n%s\r\n", length($i), $i }'; }
# Run one phase (a generator of commands) and print usec_per_call of command $2.
phase() {
  cli CONFIG RESETSTAT >/dev/null
  $1 | resp | cli --pipe >/dev/null
  cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$2:.*usec_per_call=\([0-9.]*\).*/\1/p"
}
rl_acquire() { for ((i = 0; i < N; i++)); do echo "RLOCK.ACQUIRE lock:$i $OWNER 30000"; done; }
rl_release() { for ((i = 0; i < N; i++)); do echo "RLOCK.RELEASE lock:$i $OWNER"; done; }
rs_acquire() { for ((i = 0; i < N; i++)); do echo "EVALSHA $SHA_A 1 rlock:$i 30000 $OWNER"; done; }
rs_release() { for ((i = 0; i < N; i++)); do
  echo "EVALSHA $SHA_R 3 rlock:$i redisson_lock__channel:{rlock:$i} redisson_unlock_latch:{rlock:$i}:req$i 0 30000 $OWNER PUBLISH 13000"; done; }

# Each phase three times, interleaved, keeping its fastest run: on a shared VM single runs
# swing widely, the minimum is the cost without interference.
min() { printf '%s\n' "$@" | sort -g | head -1; }
A=(); EA=(); R=(); ER=()
for _ in 1 2 3; do
  A+=("$(phase rl_acquire rlock.acquire)"); R+=("$(phase rl_release rlock.release)")
  EA+=("$(phase rs_acquire evalsha)"); ER+=("$(phase rs_release evalsha)")
done
A=$(min "${A[@]}"); R=$(min "${R[@]}"); EA=$(min "${EA[@]}"); ER=$(min "${ER[@]}")
echo "server-side usec per call (INFO commandstats), $N pipelined calls per phase, one connection, best of 3:"
printf '  acquire:  RLOCK.ACQUIRE %6s us   Redisson acquire script (EVALSHA) %6s us   ratio %s\n' "$A" "$EA" "$(awk -v a="$A" -v e="$EA" 'BEGIN{printf "%.2fx", e/a}')"
printf '  release:  RLOCK.RELEASE %6s us   Redisson unlock script  (EVALSHA) %6s us   ratio %s\n' "$R" "$ER" "$(awk -v a="$R" -v e="$ER" 'BEGIN{printf "%.2fx", e/a}')"
