//! Redisson's `RReadWriteLock` scripts (reference/redisson.md §2.5; `ReadLockTask` §2.2), the
//! text Redisson sends, with helpers that run them with EVAL as its client does.

use super::unlock_latch::{unlock_latch, unlock_with_latch, LATCH_TTL_MS};
use crate::{cmd, raw, rwlock_channel, suffix_name, Value};

/// `RedissonReadLock.tryLockInnerAsync`. KEYS = [name, `{name}:<owner>:rwlock_timeout`];
/// ARGV = [lease, owner, `owner:write`]. nil when acquired, else the lock's PTTL.
pub const READ_ACQUIRE: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then redis.call('hset', KEYS[1], 'mode', 'read'); \
    redis.call('hset', KEYS[1], ARGV[2], 1); \
    redis.call('set', KEYS[2] .. ':1', 1); \
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
    end; \
    if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    local key = KEYS[2] .. ':' .. ind;redis.call('set', key, 1); \
    redis.call('pexpire', key, ARGV[1]); \
    local remainTime = redis.call('pttl', KEYS[1]); \
    redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); \
    return nil; \
    end;return redis.call('pttl', KEYS[1]);";

/// `RedissonReadLock.unlockInnerAsync`. KEYS = [name, channel, timeoutPrefix, keyPrefix,
/// unlockLatch]; ARGV = [0, owner, publishCmd, latchTtl]. 1 freed, 0 still held, nil not
/// held.
pub const READ_UNLOCK: &str = "local val = redis.call('get', KEYS[5]); \
    if val ~= false then return tonumber(val);end; \
    local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then redis.call(ARGV[3], KEYS[2], ARGV[1]); \
    redis.call('set', KEYS[5], 1, 'px', ARGV[4]); \
    return nil; \
    end; \
    local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); \
    if (lockExists == 0) then return nil;end; \
    local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); \
    if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); \
    end;redis.call('del', KEYS[3] .. ':' .. (counter+1)); \
    if (redis.call('hlen', KEYS[1]) > 1) then local maxRemainTime = -3; \
    local keys = redis.call('hkeys', KEYS[1]); \
    for n, key in ipairs(keys) do counter = tonumber(redis.call('hget', KEYS[1], key)); \
    if type(counter) == 'number' then for i=counter, 1, -1 do local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); \
    maxRemainTime = math.max(remainTime, maxRemainTime);end; \
    end; \
    end; \
    if maxRemainTime > 0 then redis.call('pexpire', KEYS[1], maxRemainTime); \
    redis.call('set', KEYS[5], 0, 'px', ARGV[4]); \
    return 0; \
    end;if mode == 'write' then redis.call('set', KEYS[5], 0, 'px', ARGV[4]); \
    return 0;end; \
    end; \
    redis.call('del', KEYS[1]); \
    redis.call(ARGV[3], KEYS[2], ARGV[1]); \
    redis.call('set', KEYS[5], 1, 'px', ARGV[4]); \
    return 1; ";

/// `RedissonReadLock.forceUnlockAsync` (only in read mode). KEYS = [name, channel]; ARGV =
/// [0, publishCmd]. 1 when a read-mode lock was deleted.
pub const READ_FORCE_UNLOCK: &str =
    "if (redis.call('hget', KEYS[1], 'mode') == 'read') then redis.call('del', KEYS[1]); \
    redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    return 1; \
    end; \
    return 0; ";

/// `RedissonWriteLock.tryLockInnerAsync`. KEYS = [name]; ARGV = [lease, `owner:write`]. nil
/// when acquired, else the lock's PTTL.
pub const WRITE_ACQUIRE: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then redis.call('hset', KEYS[1], 'mode', 'write'); \
    redis.call('hset', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
    end; \
    if (mode == 'write') then if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    local currentExpire = redis.call('pttl', KEYS[1]); \
    redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); \
    return nil; \
    end; \
    end;return redis.call('pttl', KEYS[1]);";

/// `RedissonWriteLock.unlockInnerAsync`. KEYS = [name, channel, unlockLatch]; ARGV = [1,
/// lease, `owner:write`, publishCmd, latchTtl]. 1 when the last write hold went, 0 still
/// held, nil not held.
pub const WRITE_UNLOCK: &str = "local val = redis.call('get', KEYS[3]); \
    if val ~= false then return tonumber(val);end; \
    local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then redis.call(ARGV[4], KEYS[2], ARGV[1]); \
    redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
    return nil; \
    end;if (mode == 'write') then local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); \
    if (lockExists == 0) then return nil;else local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
    if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); \
    redis.call('set', KEYS[3], 0, 'px', ARGV[5]); \
    return 0; \
    else redis.call('hdel', KEYS[1], ARGV[3]); \
    if (redis.call('hlen', KEYS[1]) == 1) then redis.call('del', KEYS[1]); \
    redis.call(ARGV[4], KEYS[2], ARGV[1]); \
    else redis.call('hset', KEYS[1], 'mode', 'read'); \
    end; \
    redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
    return 1; \
    end; \
    end; \
    end; \
    return nil;";

/// `RedissonWriteLock.forceUnlockAsync` (only in write mode). KEYS = [name, channel]; ARGV =
/// [1, publishCmd]. 1 when a write-mode lock was deleted.
pub const WRITE_FORCE_UNLOCK: &str =
    "if (redis.call('hget', KEYS[1], 'mode') == 'write') then redis.call('del', KEYS[1]); \
    redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    return 1; \
    end; \
    return 0; ";

/// `ReadLockTask` watchdog renewal. KEYS = [name1, keyPrefix1, ...]; ARGV = [lease, n1,
/// owner1_1..owner1_n1, ...]. Per lock: 1 when any owner still holds a read lock.
pub const READ_RENEW: &str = "local result = {} \
    local argIdx = 2 \
    for i = 1, #KEYS, 2 do \
    local anyAlive = false; \
    local lockNamesCount = tonumber(ARGV[argIdx]); \
    argIdx = argIdx + 1; \
    for k = 1, lockNamesCount do \
    local counter = redis.call('hget', KEYS[i], ARGV[argIdx]); \
    if (counter ~= false) then \
    anyAlive = true; \
    for c=counter, 1, -1 do \
    redis.call('pexpire', KEYS[i+1] .. ':' .. ARGV[argIdx] .. ':rwlock_timeout:' .. c, ARGV[1]); \
    end; \
    end; \
    argIdx = argIdx + 1; \
    end; \
    if (anyAlive) then \
    redis.call('pexpire', KEYS[i], ARGV[1]); \
    table.insert(result, 1); \
    else \
    table.insert(result, 0); \
    end; \
    end; \
    return result;";

/// Redisson's `getKeyPrefix`: the part of a read hold's key before `:<owner>`.
pub fn rw_key_prefix(key: &str) -> String {
    if key.contains('{') {
        key.to_string()
    } else {
        format!("{{{key}}}")
    }
}

/// Redisson's `getReadWriteTimeoutNamePrefix`: `{key}:<owner>:rwlock_timeout`.
pub fn rw_timeout_prefix(key: &str, owner: &str) -> String {
    suffix_name(key, &format!("{owner}:rwlock_timeout"))
}

/// Take a read hold as `RedissonReadLock` does: nil when acquired, else the lock's PTTL.
pub fn read_acquire(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> Value {
    let c = cmd!(
        "EVAL",
        READ_ACQUIRE,
        2,
        key,
        rw_timeout_prefix(key, owner),
        lease_ms,
        owner,
        format!("{owner}:write")
    );
    raw(conn, &c)
}

/// Release one read hold as `RedissonReadLock` does (fresh latch, `PUBLISH`).
pub fn read_unlock(conn: &mut redis::Connection, key: &str, owner: &str) -> Value {
    let latch = unlock_latch(key);
    let script = cmd!(
        "EVAL",
        READ_UNLOCK,
        5,
        key,
        rwlock_channel(key),
        rw_timeout_prefix(key, owner),
        rw_key_prefix(key),
        &latch,
        0,
        owner,
        "PUBLISH",
        LATCH_TTL_MS
    );
    unlock_with_latch(conn, &script, &latch)
}

/// Take a write hold as `RedissonWriteLock` does: nil when acquired, else the lock's PTTL.
pub fn write_acquire(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> Value {
    let c = cmd!(
        "EVAL",
        WRITE_ACQUIRE,
        1,
        key,
        lease_ms,
        format!("{owner}:write")
    );
    raw(conn, &c)
}

/// Release one write hold as `RedissonWriteLock` does (fresh latch, `PUBLISH`).
pub fn write_unlock(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> Value {
    let latch = unlock_latch(key);
    let script = cmd!(
        "EVAL",
        WRITE_UNLOCK,
        3,
        key,
        rwlock_channel(key),
        &latch,
        1,
        lease_ms,
        format!("{owner}:write"),
        "PUBLISH",
        LATCH_TTL_MS
    );
    unlock_with_latch(conn, &script, &latch)
}

/// `RedissonReadLock.forceUnlock`: 1 when a read-mode lock was deleted.
pub fn read_force_unlock(conn: &mut redis::Connection, key: &str) -> Value {
    let c = cmd!(
        "EVAL",
        READ_FORCE_UNLOCK,
        2,
        key,
        rwlock_channel(key),
        0,
        "PUBLISH"
    );
    raw(conn, &c)
}

/// `RedissonWriteLock.forceUnlock`: 1 when a write-mode lock was deleted.
pub fn write_force_unlock(conn: &mut redis::Connection, key: &str) -> Value {
    let c = cmd!(
        "EVAL",
        WRITE_FORCE_UNLOCK,
        2,
        key,
        rwlock_channel(key),
        1,
        "PUBLISH"
    );
    raw(conn, &c)
}

/// The `ReadLockTask` renewal of one lock for `owners`; true when any of them still reads.
pub fn read_renew(conn: &mut redis::Connection, key: &str, owners: &[&str], lease_ms: i64) -> bool {
    let mut c = cmd!(
        "EVAL",
        READ_RENEW,
        2,
        key,
        rw_key_prefix(key),
        lease_ms,
        owners.len()
    );
    for o in owners {
        c.arg(*o);
    }
    match raw(conn, &c) {
        Value::Array(v) if v.len() == 1 => v[0] == Value::Int(1),
        other => panic!("Redisson read renew: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use crate::{rwlock_channel, suffix_name};

    #[test]
    fn redisson_names() {
        assert_eq!(
            suffix_name("a", "o:1:rwlock_timeout"),
            "{a}:o:1:rwlock_timeout"
        );
        assert_eq!(suffix_name("{a}x", "s"), "{a}x:s");
        assert_eq!(rwlock_channel("a"), "redisson_rwlock:{a}");
    }
}
