//! Redisson's `RSemaphore` and `RPermitExpirableSemaphore` scripts (reference/redisson.md §2.6,
//! §2.7), verbatim, with helpers that call them as the Java client does: the publish command
//! as an argument, the client's clock for `nowMs`, permit ids as 16 raw bytes.

use crate::{cmd, int, prefix_name, raw, Rng, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

// ---- RSemaphore (KEYS = [name] or [name, channel]) ------------------------------------------------

/// `tryAcquire(n)`: 1 acquired, 0 not. ARGV = [permits].
pub const TRY_ACQUIRE: &str = "local value = redis.call('get', KEYS[1]); if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then local val = redis.call('decrby', KEYS[1], ARGV[1]); return 1; end; return 0;";

/// `release(n)`. ARGV = [n, publishCmd].
pub const RELEASE: &str = "local value = redis.call('incrby', KEYS[1], ARGV[1]); \
    redis.call(ARGV[2], KEYS[2], value); ";

/// `drainPermits()` (no publish).
pub const DRAIN: &str = "local value = redis.call('get', KEYS[1]); \
    if (value == false) then return 0; \
    end; \
    redis.call('set', KEYS[1], 0); \
    return value;";

/// `trySetPermits(n)`. ARGV = [n, publishCmd].
pub const TRY_SET_PERMITS: &str = "local value = redis.call('get', KEYS[1]); \
    if (value == false) then redis.call('set', KEYS[1], ARGV[1]); \
    redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    return 1;end;return 0;";

/// `addPermits(n)`. ARGV = [n, publishCmd].
pub const ADD_PERMITS: &str = "local value = redis.call('get', KEYS[1]); \
    if (value == false) then value = 0;end;redis.call('set', KEYS[1], value + ARGV[1]); \
    redis.call(ARGV[2], KEYS[2], value + ARGV[1]); ";

/// `releaseIfExists(n)` (4.0): 1 released, 0 absent. ARGV = [n, publishCmd].
pub const RELEASE_IF_EXISTS: &str = "if redis.call('exists', KEYS[1]) == 0 then return 0 end local value = redis.call('incrby', KEYS[1], ARGV[1]) redis.call(ARGV[2], KEYS[2], value) return 1 ";

/// `trySetPermits(n, ttl)` (3.29). ARGV = [n, publishCmd, ttlMs].
pub const TRY_SET_PERMITS_TTL: &str = "local value = redis.call('get', KEYS[1]); if (value == false) then redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3]); redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1;end;return 0;";

// ---- RPermitExpirableSemaphore ------------------------------------------------------------------

/// Redisson's score for a permit without an end (`nonExpirableTimeout`).
pub const PERMANENT: i64 = 922_337_203_685_477;

/// `tryAcquire`: `'OK'` acquired, `':<score>'` the earliest lease end, nil nothing will end.
/// KEYS = [name, timeoutZset, channel]; ARGV = [n, expiryDate, nowMs, 922337203685477,
/// publishCmd, id1..idn].
pub const EXP_TRY_ACQUIRE: &str = "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); \
    if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); \
    local value = redis.call('incrby', KEYS[1], #expiredIds); \
    if tonumber(value) > 0 then redis.call(ARGV[5], KEYS[3], value); \
    end;end; \
    local value = redis.call('get', KEYS[1]); \
    if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then redis.call('decrby', KEYS[1], ARGV[1]); \
    for i = 6, #ARGV, 1 do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); \
    end; \
    local ttl = redis.call('pttl', KEYS[1]); \
    if ttl > 0 then redis.call('pexpire', KEYS[2], ttl); \
    end; \
    return 'OK'; \
    end; \
    local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); \
    if v[1] ~= nil and v[2] ~= ARGV[4] then return ':' .. tostring(v[2]); \
    end return nil;";

/// `tryRelease(id)`: 1 released, 0 not (an expired permit is returned but 0 is replied).
/// KEYS = [name, channel, timeoutZset]; ARGV = [id, 1, nowMs, publishCmd].
pub const EXP_TRY_RELEASE: &str = "local expire = redis.call('zscore', KEYS[3], ARGV[1]);local removed = redis.call('zrem', KEYS[3], ARGV[1]);if tonumber(removed) ~= 1 then return 0;end;local value = redis.call('incrby', KEYS[1], ARGV[2]); \
    redis.call(ARGV[4], KEYS[2], value); \
    if tonumber(expire) <= tonumber(ARGV[3]) then return 0;end;return 1;";

/// `tryRelease(ids)`: the number released, 0 if any is missing or expired (all-or-nothing).
/// KEYS = [name, channel, timeoutZset]; ARGV = [count, nowMs, publishCmd, ids...].
pub const EXP_TRY_RELEASE_MANY: &str = "for i = 4, #ARGV, 1 do local expire = redis.call('zscore', KEYS[3], ARGV[i]);if expire== false or tonumber(expire) <= tonumber(ARGV[2]) then return 0;end; \
    end; \
    local expiredIds = redis.call('zrangebyscore', KEYS[3], 0, ARGV[2], 'limit', 0, -1); \
    if #expiredIds > 0 then redis.call('zrem', KEYS[3], unpack(expiredIds)); \
    local value = redis.call('incrby', KEYS[1], #expiredIds); \
    if tonumber(value) > 0 then redis.call(ARGV[3], KEYS[2], value); \
    end; \
    end; \
    local keys = {}; \
    for i = 4, #ARGV, 1 do table.insert(keys, ARGV[i]); \
    end; \
    local removed = redis.call('zrem', KEYS[3], unpack(keys)); \
    redis.call('incrby', KEYS[1], removed); \
    redis.call(ARGV[3], KEYS[2], removed); \
    return removed;";

/// The lease end the permit `id` (hex, as `RSEM.ACQUIRE` replies it) is scored with in the
/// leased-permit set of `name` (`None`: not there).
pub fn lease_score(conn: &mut redis::Connection, name: &str, id: &str) -> Option<i64> {
    cmd!("ZSCORE", timeouts(name), unhex(id))
        .query(conn)
        .unwrap()
}

/// `RSEM.AVAILABLE` plus the leased permits: the total `RSEM.SETPERMITS` sets.
pub fn total(conn: &mut redis::Connection, name: &str) -> i64 {
    int(conn, &cmd!("RSEM.AVAILABLE", name)) + int(conn, &cmd!("ZCARD", timeouts(name)))
}

/// `availablePermits()` (reclaims expired permits first). KEYS = [name, timeoutZset, channel];
/// ARGV = [nowMs, publishCmd].
pub const EXP_AVAILABLE: &str =
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); \
    if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); \
    local value = redis.call('incrby', KEYS[1], #expiredIds); \
    if tonumber(value) > 0 then redis.call(ARGV[2], KEYS[3], value); \
    end;return value; \
    end; \
    local ret = redis.call('get', KEYS[1]); \
    return ret == false and 0 or ret;";

/// `updateLeaseTime(id, lease)`: 1 updated, 0 unknown. KEYS = [name, timeoutZset, channel];
/// ARGV = [id, newExpiryDate, nowMs, publishCmd].
pub const EXP_UPDATE_LEASE: &str =
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, -1); \
    if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); \
    local value = redis.call('incrby', KEYS[1], #expiredIds); \
    if tonumber(value) > 0 then redis.call(ARGV[4], KEYS[3], value); \
    end;end; \
    local value = redis.call('zscore', KEYS[2], ARGV[1]); \
    if (value ~= false) then redis.call('zadd', KEYS[2], ARGV[2], ARGV[1]); \
    return 1;end;return 0;";

/// `getLeaseTime(id)`: remaining ms, -1 permanent, 0 unknown. KEYS = [name, timeoutZset,
/// channel]; ARGV = [id, 922337203685477, nowMs, publishCmd].
pub const EXP_LEASE_TIME: &str = "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, -1); \
    if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); \
    local value = redis.call('incrby', KEYS[1], #expiredIds); \
    if tonumber(value) > 0 then redis.call(ARGV[4], KEYS[3], value); \
    end;end; \
    local value = redis.call('zscore', KEYS[2], ARGV[1]); \
    if (value ~= false) then return tonumber(value) == tonumber(ARGV[2]) and -1 or tonumber(value) - tonumber(ARGV[3]);end;return 0;";

/// `getPermits()`: available plus leased. KEYS = [name, timeoutZset, channel]; ARGV = [nowMs,
/// publishCmd].
pub const EXP_PERMITS: &str = "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); local value = redis.call('incrby', KEYS[1], #expiredIds); if tonumber(value) > 0 then redis.call(ARGV[2], KEYS[3], value); end;end; local available = redis.call('get', KEYS[1]); if available == false then return 0 end;local acquired = redis.call('zcount', KEYS[2], 0, '+inf'); if acquired == false then return tonumber(available) end;return tonumber(available) + acquired;";

/// `setPermits(n)`. KEYS = [name, channel, timeoutZset]; ARGV = [n, publishCmd].
pub const EXP_SET_PERMITS: &str = "local available = redis.call('get', KEYS[1]); if (available == false) then redis.call('set', KEYS[1], ARGV[1]); redis.call(ARGV[2], KEYS[2], ARGV[1]); return;end;local acquired = redis.call('zcount', KEYS[3], 0, '+inf'); local maximum = (acquired == false and 0 or acquired) + tonumber(available); if (maximum == tonumber(ARGV[1])) then return;end;redis.call('incrby', KEYS[1], tonumber(ARGV[1]) - maximum); redis.call(ARGV[2], KEYS[2], ARGV[1]);";

// ---- names and ids -------------------------------------------------------------------------------

/// `redisson_sc:{name}` (both semaphores).
pub fn channel(name: &str) -> String {
    prefix_name("redisson_sc", name)
}

/// `suffixName(name, "timeout")`.
pub fn timeouts(name: &str) -> String {
    if name.contains('{') {
        format!("{name}:timeout")
    } else {
        format!("{{{name}}}:timeout")
    }
}

/// A permit id as the Java client makes one: 16 random bytes.
pub fn new_id() -> Vec<u8> {
    static N: AtomicU64 = AtomicU64::new(0);
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        ^ N.fetch_add(1, Ordering::Relaxed).rotate_left(32);
    let mut rng = Rng::new(seed);
    let mut id = rng.next_u64().to_be_bytes().to_vec();
    id.extend_from_slice(&rng.next_u64().to_be_bytes());
    id
}

/// An id as users see it (`ByteBufUtil.hexDump`): lowercase hex.
pub fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// An id from its hex form (`ByteBufUtil.decodeHexDump`).
pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex id"))
        .collect()
}

/// The client's clock, as Redisson passes it to the expirable semaphore's scripts.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

// ---- calls ---------------------------------------------------------------------------------------

pub fn try_acquire(conn: &mut redis::Connection, name: &str, permits: i64) -> i64 {
    int(conn, &cmd!("EVAL", TRY_ACQUIRE, 1, name, permits))
}

pub fn release(conn: &mut redis::Connection, name: &str, n: i64) -> Value {
    raw(
        conn,
        &cmd!("EVAL", RELEASE, 2, name, channel(name), n, "PUBLISH"),
    )
}

pub fn try_set_permits(conn: &mut redis::Connection, name: &str, n: i64) -> i64 {
    int(
        conn,
        &cmd!(
            "EVAL",
            TRY_SET_PERMITS,
            2,
            name,
            channel(name),
            n,
            "PUBLISH"
        ),
    )
}

pub fn add_permits(conn: &mut redis::Connection, name: &str, n: i64) -> Value {
    raw(
        conn,
        &cmd!("EVAL", ADD_PERMITS, 2, name, channel(name), n, "PUBLISH"),
    )
}

pub fn drain(conn: &mut redis::Connection, name: &str) -> Value {
    raw(conn, &cmd!("EVAL", DRAIN, 1, name))
}

/// The expirable semaphore's `tryAcquire(n, lease)` (`None`: permanent permits): the script's
/// reply and the ids the client generated (its permits when the reply is `OK`).
pub fn lease(
    conn: &mut redis::Connection,
    name: &str,
    n: usize,
    lease_ms: Option<i64>,
) -> (Value, Vec<Vec<u8>>) {
    let now = now_ms();
    let expiry = lease_ms.map_or(PERMANENT, |ms| now + ms);
    let ids: Vec<Vec<u8>> = (0..n).map(|_| new_id()).collect();
    let mut c = cmd!(
        "EVAL",
        EXP_TRY_ACQUIRE,
        3,
        name,
        timeouts(name),
        channel(name),
        n,
        expiry,
        now,
        PERMANENT,
        "PUBLISH"
    );
    for id in &ids {
        c.arg(id.as_slice());
    }
    (raw(conn, &c), ids)
}

pub fn try_release(conn: &mut redis::Connection, name: &str, id: &[u8]) -> i64 {
    int(
        conn,
        &cmd!(
            "EVAL",
            EXP_TRY_RELEASE,
            3,
            name,
            channel(name),
            timeouts(name),
            id,
            1,
            now_ms(),
            "PUBLISH"
        ),
    )
}

pub fn try_release_many(conn: &mut redis::Connection, name: &str, ids: &[Vec<u8>]) -> i64 {
    let mut c = cmd!(
        "EVAL",
        EXP_TRY_RELEASE_MANY,
        3,
        name,
        channel(name),
        timeouts(name),
        ids.len(),
        now_ms(),
        "PUBLISH"
    );
    for id in ids {
        c.arg(id.as_slice());
    }
    int(conn, &c)
}

/// `availablePermits()` (reclaims expired permits first).
pub fn available(conn: &mut redis::Connection, name: &str) -> i64 {
    let c = cmd!(
        "EVAL",
        EXP_AVAILABLE,
        3,
        name,
        timeouts(name),
        channel(name),
        now_ms(),
        "PUBLISH"
    );
    match raw(conn, &c) {
        Value::Int(n) => n,
        Value::BulkString(b) => String::from_utf8_lossy(&b).parse().expect("a count"),
        other => panic!("availablePermits: {other:?}"),
    }
}

pub fn update_lease(conn: &mut redis::Connection, name: &str, id: &[u8], lease_ms: i64) -> i64 {
    let now = now_ms();
    int(
        conn,
        &cmd!(
            "EVAL",
            EXP_UPDATE_LEASE,
            3,
            name,
            timeouts(name),
            channel(name),
            id,
            now + lease_ms,
            now,
            "PUBLISH"
        ),
    )
}

/// `getLeaseTime(id)`: remaining ms, -1 permanent, 0 unknown.
pub fn lease_time(conn: &mut redis::Connection, name: &str, id: &[u8]) -> i64 {
    int(
        conn,
        &cmd!(
            "EVAL",
            EXP_LEASE_TIME,
            3,
            name,
            timeouts(name),
            channel(name),
            id,
            PERMANENT,
            now_ms(),
            "PUBLISH"
        ),
    )
}

pub fn release_if_exists(conn: &mut redis::Connection, name: &str, n: i64) -> i64 {
    int(
        conn,
        &cmd!(
            "EVAL",
            RELEASE_IF_EXISTS,
            2,
            name,
            channel(name),
            n,
            "PUBLISH"
        ),
    )
}

pub fn try_set_permits_ttl(conn: &mut redis::Connection, name: &str, n: i64, ttl_ms: i64) -> i64 {
    int(
        conn,
        &cmd!(
            "EVAL",
            TRY_SET_PERMITS_TTL,
            2,
            name,
            channel(name),
            n,
            "PUBLISH",
            ttl_ms
        ),
    )
}

/// The expirable semaphore's `getPermits()`.
pub fn permits(conn: &mut redis::Connection, name: &str) -> i64 {
    int(
        conn,
        &cmd!(
            "EVAL",
            EXP_PERMITS,
            3,
            name,
            timeouts(name),
            channel(name),
            now_ms(),
            "PUBLISH"
        ),
    )
}

/// The expirable semaphore's `setPermits(n)`.
pub fn set_permits(conn: &mut redis::Connection, name: &str, n: i64) -> Value {
    raw(
        conn,
        &cmd!(
            "EVAL",
            EXP_SET_PERMITS,
            3,
            name,
            channel(name),
            timeouts(name),
            n,
            "PUBLISH"
        ),
    )
}
