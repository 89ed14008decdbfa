//! Redisson's `RLock` and `RFencedLock` scripts (reference/redisson.md §2.1, §2.2 `LockTask`,
//! §2.10), the text Redisson sends, with helpers that run them with EVAL as its client does.

use super::unlock_latch::{unlock_latch, unlock_with_latch, LATCH_TTL_MS};
use crate::{cmd, lock_channel, raw, show, token_key, Value};

/// `RedissonLock.tryLockInnerAsync`: nil when acquired or re-entered, else the holder's PTTL.
pub const ACQUIRE: &str = "if ((redis.call('exists', KEYS[1]) == 0) \
    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
    end; \
    return redis.call('pttl', KEYS[1]);";

/// `RedissonLock.unlockInnerAsync`: 1 fully released, 0 still held, nil not the holder. Byte
/// for byte, as the Java source joins its literals (its SHA1 is Redisson's).
pub const UNLOCK: &str = concat!(
    "local val = redis.call('get', KEYS[3]); ",
    "if val ~= false then ",
    "return tonumber(val);",
    "end; ",
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then ",
    "return nil;",
    "end; ",
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); ",
    "if (counter > 0) then ",
    "redis.call('pexpire', KEYS[1], ARGV[2]); ",
    "redis.call('set', KEYS[3], 0, 'px', ARGV[5]); ",
    "return 0; ",
    "else ",
    "redis.call('del', KEYS[1]); ",
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); ",
    "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); ",
    "return 1; ",
    "end; ",
);

/// `RedissonLock.forceUnlockAsync`: 1 when a lock was deleted.
pub const FORCE_UNLOCK: &str = "if (redis.call('del', KEYS[1]) == 1) then \
    redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    return 1 \
    else \
    return 0 \
    end";

/// `RedissonFencedLock` token-returning acquire: `{-1, token}` when acquired, else
/// `{pttl, -1}`. Byte for byte (no space after the `incr` line, as in the Java source).
pub const FENCED_ACQUIRE: &str = "if (redis.call('exists', KEYS[1]) == 0 \
    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
    local token = redis.call('incr', KEYS[2]);\
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return {-1, token}; \
    end; \
    return {redis.call('pttl', KEYS[1]), -1};";

/// `RedissonNonReentrantLock`'s acquire (redisson 4.4.0, reference/redisson.md §2.12): KEYS =
/// [name]; ARGV = [lease_ms, owner, error text]. Nil when acquired, the lock's PTTL when held
/// by another owner, the error when held by this owner.
pub const NON_REENTRANT_ACQUIRE: &str = "if redis.call('exists', KEYS[1]) == 0 then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
    end; \
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
    return redis.error_reply(ARGV[3]); \
    end; \
    return redis.call('pttl', KEYS[1]);";

/// `LockTask` watchdog renewal: per key, 1 when the owner's field exists (and PEXPIRE), else 0.
pub const RENEW: &str = "local result = {} \
    for i = 1, #KEYS, 1 do \
    if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then \
    redis.call('pexpire', KEYS[i], ARGV[1]); \
    table.insert(result, 1); \
    else \
    table.insert(result, 0); \
    end; \
    end; \
    return result;";

/// Run the acquire script as a Redisson client would.
/// `RedissonSpinLock`'s acquire (the lock's layout; nil acquired, else the PTTL). KEYS =
/// [name]; ARGV = [leaseMs, owner].
pub const SPIN_ACQUIRE: &str = "if (redis.call('exists', KEYS[1]) == 0) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);";

/// `RedissonSpinLock`'s unlock (no publish). KEYS = [name, unlockLatch]; ARGV = [leaseMs,
/// owner, latchTtl]. 1 released, 0 held still (re-entered), nil not the holder's.
pub const SPIN_UNLOCK: &str = "local val = redis.call('get', KEYS[2]); if val ~= false then return tonumber(val);end; if (redis.call('hexists', KEYS[1], ARGV[2]) == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[1]); redis.call('set', KEYS[2], 0, 'px', ARGV[3]); return 0; else redis.call('del', KEYS[1]); redis.call('set', KEYS[2], 1, 'px', ARGV[3]); return 1; end; ";

/// Redisson's spin lock taking `key` for `owner`: nil acquired, else the lock's PTTL.
pub fn spin_acquire(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> Value {
    raw(conn, &cmd!("EVAL", SPIN_ACQUIRE, 1, key, lease_ms, owner))
}

/// Redisson's spin lock unlocking `key` as `owner` (then deleting its unlock latch, as the
/// client does after a successful unlock).
pub fn spin_unlock(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> Value {
    let latch = unlock_latch(key);
    let script = cmd!(
        "EVAL",
        SPIN_UNLOCK,
        2,
        key,
        &latch,
        lease_ms,
        owner,
        LATCH_TTL_MS
    );
    unlock_with_latch(conn, &script, &latch)
}

pub fn acquire(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> Value {
    raw(conn, &cmd!("EVAL", ACQUIRE, 1, key, lease_ms, owner))
}

/// Run the unlock script as a Redisson client would (fresh request id, `PUBLISH`), then
/// delete the unlock latch as the client does after a successful unlock.
pub fn unlock(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> Value {
    let latch = unlock_latch(key);
    let script = cmd!(
        "EVAL",
        UNLOCK,
        3,
        key,
        lock_channel(key),
        &latch,
        0,
        lease_ms,
        owner,
        "PUBLISH",
        LATCH_TTL_MS
    );
    unlock_with_latch(conn, &script, &latch)
}

/// Run the watchdog renewal script for one lock; true when renewed.
pub fn renew(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> bool {
    match raw(conn, &cmd!("EVAL", RENEW, 1, key, lease_ms, owner)) {
        Value::Array(v) => v == [Value::Int(1)],
        other => panic!("Redisson renew: {other:?}"),
    }
}

/// Run the force-unlock script.
pub fn force_unlock(conn: &mut redis::Connection, key: &str) -> Value {
    raw(
        conn,
        &cmd!(
            "EVAL",
            FORCE_UNLOCK,
            2,
            key,
            lock_channel(key),
            0,
            "PUBLISH"
        ),
    )
}

/// Run the fenced acquire script; returns `(ttl, token)` as the script does.
pub fn fenced_acquire(
    conn: &mut redis::Connection,
    key: &str,
    owner: &str,
    lease_ms: i64,
) -> (i64, i64) {
    let c = cmd!(
        "EVAL",
        FENCED_ACQUIRE,
        2,
        key,
        token_key(key),
        lease_ms,
        owner
    );
    match raw(conn, &c) {
        Value::Array(v) if v.len() == 2 => match (&v[0], &v[1]) {
            (Value::Int(a), Value::Int(b)) => (*a, *b),
            _ => panic!("{}: unexpected reply {v:?}", show(&c)),
        },
        other => panic!("{}: unexpected reply {other:?}", show(&c)),
    }
}
