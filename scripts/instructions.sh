#!/usr/bin/env bash
# Server-side instructions per call, counted by valgrind's callgrind: repeatable whatever else
# the machine does (wall-clock figures on a shared VM are not). RLOCK.ACQUIRE / RLOCK.RELEASE
# against Redisson's acquire and unlock scripts (EVALSHA) and native HSET / DEL, each phase
# pipelined through one connection and dumped separately. Then the session-watched pair, the
# client's default path: RSESSION.OPEN on the same connection, RLOCK.ACQUIRE ... SESSION s QUEUE
# request timeout_ms (granted at once: its hold is watched for loss) and RLOCK.RELEASE (ends the
# watch), beside the plain pair. And hold tracking's cost: interleaved acquire + release pairs
# (as a pipelined client sends them) with the table of live holds on (rlock.top-max-holds at
# its default) and off (0), counted per pair.
# Usage: scripts/instructions.sh [calls]   (default 20000 per phase; needs valgrind)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
SO=${RLOCK_MODULE:-$PWD/target/release/librlock_module.so}
[ -f "$SO" ] || cargo build --release -p rlock-module
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
DIR=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$DIR/cg.out" \
  redis-server --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --save "" --appendonly no \
  --loadmodule "$SO" --logfile "$DIR/redis.log" >"$DIR/valgrind.log" 2>&1 &
VG=$!
trap 'kill $VG 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$DIR"' EXIT
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do sleep 0.2; done
cli() { redis-cli -p "$PORT" "$@"; }
OWNER=6e3d30b7-83b1-433a-9335-5e8b9916d3ac:1
SHA_A=$(cli SCRIPT LOAD "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);")
SHA_R=$(cli SCRIPT LOAD "local val = redis.call('get', KEYS[3]); if val ~= false then return tonumber(val); end; if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', ARGV[5]); return 0; else redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return 1; end;")
resp() { awk '{ printf "*%d\r\n", NF; for (i = 1; i <= NF; i++) printf "$%d\r\n%s\r\n", length($i), $i }'; }
phase() { # name generator
  "$2" | resp | cli --pipe >/dev/null
  callgrind_control --dump="$1" "$VG" >/dev/null 2>&1
}
rl_a() { for ((i = 0; i < N; i++)); do echo "RLOCK.ACQUIRE l:$i $OWNER 30000"; done; }
rl_r() { for ((i = 0; i < N; i++)); do echo "RLOCK.RELEASE l:$i $OWNER"; done; }
rs_a() { for ((i = 0; i < N; i++)); do echo "EVALSHA $SHA_A 1 r:$i 30000 $OWNER"; done; }
rs_r() { for ((i = 0; i < N; i++)); do
  echo "EVALSHA $SHA_R 3 r:$i redisson_lock__channel:{r:$i} redisson_unlock_latch:{r:$i}:q$i 0 30000 $OWNER PUBLISH 13000"; done; }
hs() { for ((i = 0; i < N; i++)); do echo "HSET h:$i $OWNER 1"; done; }
dl() { for ((i = 0; i < N; i++)); do echo "DEL h:$i"; done; }
SESSION=instructions-session
# The session is opened on the connection that sends the acquires (its own phase, not counted).
ws_a() { echo "RSESSION.OPEN $SESSION 60000"; for ((i = 0; i < N; i++)); do
  echo "RLOCK.ACQUIRE w:$i $OWNER 30000 SESSION $SESSION QUEUE $i 10000"; done; }
ws_r() { for ((i = 0; i < N; i++)); do echo "RLOCK.RELEASE w:$i $OWNER"; done; }
pairs() { for ((i = 0; i < N; i++)); do echo "RLOCK.ACQUIRE $1:$i $OWNER 30000"; echo "RLOCK.RELEASE $1:$i $OWNER"; done; }
# Keys of one length in both phases ("trk_1:i", "trk_0:i"): Redis' own work on a key (its hash,
# its dict's compare) varies with the name's length, 24 instructions a pair between "tp_on:"
# and "tp_off:", which was counted against tracking's cost.
tp_on() { pairs trk_1; }
tp_off() { pairs trk_0; }
callgrind_control --zero "$VG" >/dev/null 2>&1
# The watched pair runs right after the plain one: later, the unlock latches Redisson's unlock
# script leaves (13 s leases) expire during the phase, and their keyspace events were counted
# against it (300 instructions per call).
# Tracking's pairs first, before any phase leaves keys to expire during them.
MAX_HOLDS=$(cli CONFIG GET rlock.top-max-holds | tail -1)
phase tp_on tp_on
cli CONFIG SET rlock.top-max-holds 0 >/dev/null
phase tp_off tp_off
cli CONFIG SET rlock.top-max-holds "$MAX_HOLDS" >/dev/null
for p in rl_a rl_r ws_a ws_r; do phase "$p" "$p"; done
# Both watched phases must have run with the session alive (grace_ms from its open, no reads):
# asked right after them, not after the slower phases that follow (a loaded machine can take
# longer than the session's grace over all of them).
[ "$(cli RSESSION.INFO $SESSION 2>&1 | head -c 8)" != "NOSESSIO" ] ||
  echo "warning: the session expired during the watched phases: its figures are not a watched pair" >&2
for p in rs_a rs_r hs dl; do phase "$p" "$p"; done
cli shutdown nosave >/dev/null 2>&1 || true
wait $VG 2>/dev/null || true
# Inclusive instructions of the command function in each phase's dump, per call.
per_call() { # phase function
  local f; f=$(grep -l "^desc: Trigger: dump $1\$" "$DIR"/cg.out.*)
  callgrind_annotate --inclusive=yes "$f" >"$f.txt" 2>/dev/null
  grep -m1 -E "[ :]$2( |\$)" "$f.txt" | awk -v n="$N" '{ gsub(",", "", $1); printf "%.0f", $1 / n }'
}
A=$(per_call rl_a 'RedisModuleCommandDispatcher'); R=$(per_call rl_r 'RedisModuleCommandDispatcher')
EA=$(per_call rs_a 'evalShaCommand'); ER=$(per_call rs_r 'evalShaCommand')
H=$(per_call hs 'hsetCommand'); D=$(per_call dl 'delCommand')
# (The watched acquire phase holds one RSESSION.OPEN too: under 0.1% of its calls' count at the
# default N.)
WA=$(per_call ws_a 'RedisModuleCommandDispatcher'); WR=$(per_call ws_r 'RedisModuleCommandDispatcher')
echo "server-side instructions per call (callgrind, $N calls per phase):"
printf '  acquire:  RLOCK.ACQUIRE %6s   Redisson acquire script %6s   ratio %s   (native HSET %s)\n' "$A" "$EA" "$(awk -v a="$A" -v e="$EA" 'BEGIN{printf "%.2fx", e/a}')" "$H"
printf '  release:  RLOCK.RELEASE %6s   Redisson unlock script  %6s   ratio %s   (native DEL %s)\n' "$R" "$ER" "$(awk -v a="$R" -v e="$ER" 'BEGIN{printf "%.2fx", e/a}')" "$D"
printf '  watched (SESSION s QUEUE request timeout_ms, session opened on the connection):\n'
printf '  acquire:  RLOCK.ACQUIRE %6s   plain %6s   +%s\n' "$WA" "$A" "$((WA - A))"
printf '  release:  RLOCK.RELEASE %6s   plain %6s   +%s\n' "$WR" "$R" "$((WR - R))"
printf '  pair:     watched %6s   plain %6s   +%s\n' "$((WA + WR))" "$((A + R))" "$((WA + WR - A - R))"
# (N pairs per phase: per_call gives instructions per pair.)
TON=$(per_call tp_on 'RedisModuleCommandDispatcher'); TOFF=$(per_call tp_off 'RedisModuleCommandDispatcher')
printf '  hold tracking (interleaved acquire + release pairs, per pair):\n'
printf '  pair:     tracking on %6s   off %6s   +%s\n' "$TON" "$TOFF" "$((TON - TOFF))"
[ -z "${KEEP:-}" ] || echo "  dumps kept in $DIR (cg.out.* per phase; callgrind_annotate --inclusive=yes --tree=caller)"
