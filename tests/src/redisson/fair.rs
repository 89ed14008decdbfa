//! Redisson's `RFairLock` scripts (reference/redisson.md §2.4), the text Redisson sends (the
//! Java source's literals joined as Java joins them), with helpers that run them with EVAL as
//! its client does: the queue `redisson_lock_queue:{name}`, the deadlines
//! `redisson_lock_timeout:{name}`, an unlock telling the first waiter on
//! `redisson_lock__channel:{name}:<owner>`.

use std::time::{SystemTime, UNIX_EPOCH};

use super::unlock_latch::{unlock_latch, unlock_with_latch, LATCH_TTL_MS};
use crate::{cmd, lock_channel, prefix_name, raw, Value};

/// `RedissonFairLock.tryLockInnerAsync` (`EVAL_LONG`): KEYS = [name, queue, timeouts]; ARGV = [lease_ms,
/// owner, wait_ms, now_ms]. Nil when acquired, else how long to wait (queued).
pub const FAIR_ACQUIRE: &str = concat!(
        "while true do ",
        "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
        "if firstThreadId2 == false then ",
        "break;",
        "end;",
        "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
        "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then ",
        "redis.call('zrem', KEYS[3], firstThreadId2);",
        "redis.call('lpop', KEYS[2]);",
        "else ",
        "break;",
        "end;",
        "end;",
        "if (redis.call('exists', KEYS[1]) == 0) ",
        "and ((redis.call('exists', KEYS[2]) == 0) ",
        "or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then ",
        "redis.call('lpop', KEYS[2]);",
        "redis.call('zrem', KEYS[3], ARGV[2]);",
        "local keys = redis.call('zrange', KEYS[3], 0, -1);",
        "for i = 1, #keys, 1 do ",
        "redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);",
        "end;",
        "redis.call('hset', KEYS[1], ARGV[2], 1);",
        "redis.call('pexpire', KEYS[1], ARGV[1]);",
        "return nil;",
        "end;",
        "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then ",
        "redis.call('hincrby', KEYS[1], ARGV[2],1);",
        "redis.call('pexpire', KEYS[1], ARGV[1]);",
        "return nil;",
        "end;",
        "local timeout = redis.call('zscore', KEYS[3], ARGV[2]);",
        "if timeout ~= false then ",
        "local ttl = redis.call('pttl', KEYS[1]);",
        "return math.max(0, ttl); ",
        "end;",
        "local lastThreadId = redis.call('lindex', KEYS[2], -1);",
        "local ttl;",
        "if lastThreadId ~= false and lastThreadId ~= ARGV[2] and redis.call('zscore', KEYS[3], lastThreadId) ~= false then ",
        "ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);",
        "else ",
        "ttl = redis.call('pttl', KEYS[1]);",
        "end;",
        "local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);",
        "if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then ",
        "redis.call('rpush', KEYS[2], ARGV[2]);",
        "end;",
        "return ttl;",
    );

/// `RedissonFairLock.tryLockInnerAsync` (`EVAL_NULL_BOOLEAN`): KEYS = [name, queue, timeouts]; ARGV =
/// [lease_ms, owner, now_ms, wait_ms]. Nil when acquired, else 1 (never queues).
pub const FAIR_TRY_ACQUIRE: &str = concat!(
    "while true do ",
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
    "if firstThreadId2 == false then ",
    "break;",
    "end;",
    "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
    "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[3]) then ",
    "redis.call('zrem', KEYS[3], firstThreadId2);",
    "redis.call('lpop', KEYS[2]);",
    "else ",
    "break;",
    "end;",
    "end;",
    "if (redis.call('exists', KEYS[1]) == 0) ",
    "and ((redis.call('exists', KEYS[2]) == 0) ",
    "or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then ",
    "redis.call('lpop', KEYS[2]);",
    "redis.call('zrem', KEYS[3], ARGV[2]);",
    "local keys = redis.call('zrange', KEYS[3], 0, -1);",
    "for i = 1, #keys, 1 do ",
    "redis.call('zincrby', KEYS[3], -tonumber(ARGV[4]), keys[i]);",
    "end;",
    "redis.call('hset', KEYS[1], ARGV[2], 1);",
    "redis.call('pexpire', KEYS[1], ARGV[1]);",
    "return nil;",
    "end;",
    "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then ",
    "redis.call('hincrby', KEYS[1], ARGV[2], 1);",
    "redis.call('pexpire', KEYS[1], ARGV[1]);",
    "return nil;",
    "end;",
    "return 1;",
);

/// `RedissonFairLock.unlockInnerAsync`: KEYS = [name, queue, timeouts, channel prefix, unlock latch]; ARGV
/// = [0, lease_ms, owner, now_ms, publish command, latch TTL].
pub const FAIR_UNLOCK: &str = concat!(
    "local val = redis.call('get', KEYS[5]); ",
    "if val ~= false then ",
    "return tonumber(val);",
    "end; ",
    "while true do ",
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
    "if firstThreadId2 == false then ",
    "break;",
    "end; ",
    "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
    "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then ",
    "redis.call('zrem', KEYS[3], firstThreadId2); ",
    "redis.call('lpop', KEYS[2]); ",
    "else ",
    "break;",
    "end; ",
    "end;",
    "if (redis.call('exists', KEYS[1]) == 0) then ",
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); ",
    "if nextThreadId ~= false then ",
    "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); ",
    "end; ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[6]); ",
    "return 1; ",
    "end;",
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then ",
    "return nil;",
    "end; ",
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); ",
    "if (counter > 0) then ",
    "redis.call('pexpire', KEYS[1], ARGV[2]); ",
    "redis.call('set', KEYS[5], 0, 'px', ARGV[6]); ",
    "return 0; ",
    "end; ",
    "redis.call('del', KEYS[1]); ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[6]); ",
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); ",
    "if nextThreadId ~= false then ",
    "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); ",
    "end; ",
    "return 1; ",
);

/// `RedissonFairLock.acquireFailedAsync`: KEYS = [queue, timeouts]; ARGV = [owner, wait_ms].
pub const FAIR_ACQUIRE_FAILED: &str = concat!(
    "local queue = redis.call('lrange', KEYS[1], 0, -1);",
    "local i = 1;",
    "while i <= #queue and queue[i] ~= ARGV[1] do ",
    "i = i + 1;",
    "end;",
    "i = i + 1;",
    "while i <= #queue do ",
    "redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i]);",
    "i = i + 1;",
    "end;",
    "redis.call('zrem', KEYS[2], ARGV[1]);",
    "redis.call('lrem', KEYS[1], 0, ARGV[1]);",
);

/// The queue of waiting owners.
pub fn fair_queue_key(key: &str) -> String {
    prefix_name("redisson_lock_queue", key)
}

/// The waiters' deadlines.
pub fn fair_timeout_key(key: &str) -> String {
    prefix_name("redisson_lock_timeout", key)
}

/// The channel an unlock tells `owner` on when it is first.
pub fn fair_owner_channel(key: &str, owner: &str) -> String {
    format!("{}:{owner}", lock_channel(key))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Run the queueing acquire as a Redisson client would (`lock()`, `tryLock(wait)`).
pub fn fair_acquire(
    conn: &mut redis::Connection,
    key: &str,
    owner: &str,
    lease_ms: i64,
    wait_ms: i64,
) -> Value {
    raw(
        conn,
        &cmd!(
            "EVAL",
            FAIR_ACQUIRE,
            3,
            key,
            fair_queue_key(key),
            fair_timeout_key(key),
            lease_ms,
            owner,
            wait_ms,
            now_ms()
        ),
    )
}

/// Run the fair unlock script as a Redisson client would, then delete its latch.
pub fn fair_unlock(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> Value {
    let latch = unlock_latch(key);
    let script = cmd!(
        "EVAL",
        FAIR_UNLOCK,
        5,
        key,
        fair_queue_key(key),
        fair_timeout_key(key),
        lock_channel(key),
        &latch,
        0,
        lease_ms,
        owner,
        now_ms(),
        "PUBLISH",
        LATCH_TTL_MS
    );
    unlock_with_latch(conn, &script, &latch)
}

/// The queue, first waiter first.
pub fn fair_queue(conn: &mut redis::Connection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(fair_queue_key(key))
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap()
}

/// The deadlines, by owner (epoch ms).
pub fn fair_timeouts(conn: &mut redis::Connection, key: &str) -> Vec<(String, i64)> {
    let v: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(fair_timeout_key(key))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(conn)
        .unwrap();
    v.into_iter().map(|(o, s)| (o, s as i64)).collect()
}
