//! Redisson 4.x's grouped MultiLock (`RedissonFasterMultiLock`, reference/redisson.md §2.12):
//! its scripts byte for byte, as the Java source joins its literals (tryLockInnerAsync,
//! tryLockOnceInnerAsync, unlockInnerAsync, forceUnlockAsync, and `FastMultilockTask`'s
//! renewal), with helpers that run them with EVAL as the Java client does (its clock for
//! `nowMs`, `PUBLISH`, a fresh unlock latch).

pub use super::semaphore::now_ms;
use super::unlock_latch::{unlock_latch, unlock_with_latch, LATCH_TTL_MS};
use crate::{cmd, int, lock_channel, raw, Value};

/// `RedissonFasterMultiLock.tryLockInnerAsync`: nil when every value was taken (or
/// re-entered), else the ms until the latest live holder's lease ends. ARGV = [leaseMs, nowMs,
/// lockName, F1 .. Fn].
pub const TRY_LOCK: &str = concat!(
    "local leaseTime = tonumber(ARGV[1]);",
    "local currentTime = tonumber(ARGV[2]);",
    "local currentThread = ARGV[3];",
    "local maxExpireTime = -1;",
    "local keyExist = nil;",
    "if (tonumber(redis.call('exists',KEYS[1])) > 0) then",
    "   keyExist = 1;",
    "   for i=4, #ARGV, 1 do ",
    "       local lockThread = redis.call('hget', KEYS[1], ARGV[i]); ",
    "       if(lockThread ~= false and lockThread ~= currentThread) then ",
    "           local expireFieldName = ARGV[i]..':'..lockThread..':expire_time';",
    "           local expireTime = redis.call('hget', KEYS[1], expireFieldName);",
    "           if(expireTime ~= false and tonumber(expireTime) > currentTime ) then ",
    "               if(tonumber(expireTime) > maxExpireTime) then",
    "                   maxExpireTime = tonumber(expireTime);",
    "               end;",
    "           end",
    "       end; ",
    "   end; ",
    "else",
    "   keyExist = 0;",
    "end;",
    "if( maxExpireTime ~= -1) then",
    "   return maxExpireTime-currentTime;",
    "end;",
    "for i=4, #ARGV, 1 do ",
    "   redis.call('hset', KEYS[1], ARGV[i], currentThread); ",
    "   local expireFieldName = ARGV[i]..':'..currentThread..':expire_time'",
    "   local expireTime = redis.call('hget', KEYS[1], expireFieldName); ",
    "   local newExpireTime = leaseTime + currentTime ",
    "   if(expireTime == false or tonumber(expireTime) < newExpireTime ) then",
    "      redis.call('hset', KEYS[1], expireFieldName, newExpireTime); ",
    "   end;",
    "   redis.call('HINCRBY', KEYS[1], ARGV[i]..':'..currentThread..':lock_count', 1); ",
    "end; ",
    "if(keyExist == 1) then",
    "   local expireTime = redis.call('pttl',KEYS[1]);",
    "   if(tonumber(expireTime) > 0 and leaseTime > tonumber(expireTime)) then",
    "       redis.call('pexpire',KEYS[1], leaseTime);",
    "   end;",
    "else",
    "    redis.call('pexpire',KEYS[1], leaseTime);",
    "end;",
    "return nil;",
);

/// `RedissonFasterMultiLock.tryLockOnceInnerAsync`: 1 taken, 0 not. ARGV = [nowMs, leaseMs,
/// lockName, F1 .. Fn].
pub const TRY_LOCK_ONCE: &str = concat!(
    "local currentTime = tonumber(ARGV[1]);",
    "local leaseTime = tonumber(ARGV[2]);",
    "local currentThread = ARGV[3];",
    "local keyExist = nil;",
    "if (redis.call('exists',KEYS[1]) > 0) then",
    "   keyExist = 1;",
    "   for i=4, #ARGV, 1 do ",
    "       local lockThread = redis.call('hget', KEYS[1], ARGV[i]); ",
    "       if(lockThread ~= false and currentThread ~= lockThread ) then ",
    "           local expireFieldName = ARGV[i]..':'..lockThread..':expire_time'",
    "           local expireTime = redis.call('hget', KEYS[1], expireFieldName);",
    "           if( tonumber(expireTime) > currentTime and currentThread ~= lockThread) then ",
    "               return 0;",
    "           end",
    "       end; ",
    "   end; ",
    "else",
    "   keyExist = 0;",
    "end;",
    "for i=4, #ARGV, 1 do ",
    "   redis.call('hset', KEYS[1], ARGV[i], currentThread); ",
    "   local expireFieldName = ARGV[i]..':'..currentThread..':expire_time'",
    "   local expireTime = redis.call('hget', KEYS[1], expireFieldName); ",
    "   local newExpireTime = leaseTime + currentTime ",
    "   if(expireTime == false or tonumber(expireTime) < newExpireTime ) then",
    "      redis.call('hset', KEYS[1], expireFieldName, newExpireTime); ",
    "   end;",
    "   redis.call('HINCRBY', KEYS[1], ARGV[i]..':'..currentThread..':lock_count', 1); ",
    "end; ",
    "if(keyExist == 1) then",
    "   local expireTime = redis.call('pttl',KEYS[1]);",
    "   if(tonumber(expireTime) > 0 and leaseTime > tonumber(expireTime)) then",
    "       redis.call('pexpire',KEYS[1], leaseTime);",
    "   end;",
    "else",
    "    redis.call('pexpire',KEYS[1], leaseTime);",
    "end;",
    "return 1;",
);

/// `RedissonFasterMultiLock.unlockInnerAsync`: 1 every value freed, 0 some still held, nil when
/// one was not the caller's. KEYS = [group, channel, unlock latch]; ARGV = [lockName, 0,
/// leaseMs, publishCmd, latchTtlMs, nowMs, F1 .. Fn].
pub const UNLOCK: &str = concat!(
    "local val = redis.call('get', KEYS[3]); ",
    "if val ~= false then ",
    "   return tonumber(val);",
    "end; ",
    "if(redis.call('exists', KEYS[1]) == 0) then",
    "   redis.call(ARGV[4], KEYS[2], ARGV[2]); ",
    "   return nil;",
    "end;",
    "local lockName = ARGV[1];",
    "local hasFailed = 0;",
    "local allDeleted = 1;",
    "local hasDeleted = 0;",
    "local newExpireTime = tonumber(ARGV[3]) + tonumber(ARGV[6]);",
    "for i = 7,#ARGV,1 do",
    "   local expireTime = redis.call('hget', KEYS[1], ARGV[i]..':'..lockName..':expire_time');",
    "   if (expireTime ~= false and tonumber(expireTime) >= tonumber(ARGV[6])) then",
    "       if(tonumber(redis.call('hincrby', KEYS[1], ARGV[i]..':'..lockName..':lock_count',-1)) <= 0) then",
    "           redis.call('hdel',KEYS[1], ARGV[i]..':'..lockName..':expire_time');",
    "           redis.call('hdel',KEYS[1], ARGV[i]..':'..lockName..':lock_count');",
    "           redis.call('hdel',KEYS[1], ARGV[i]);",
    "           hasDeleted = 1;",
    "       else",
    "           if(tonumber(expireTime) < newExpireTime) then ",
    "               redis.call('hset', KEYS[1], ARGV[i]..':'..lockName..':expire_time', newExpireTime);",
    "           end;",
    "           allDeleted = 0;",
    "       end;",
    "   else",
    "       allDeleted = 0;",
    "       hasFailed = 1;",
    "   end;",
    "end;",
    "if(hasFailed ~= 0) then",
    "   return nil;",
    "end;",
    "if(hasDeleted) then",
    "   redis.call(ARGV[4], KEYS[2], ARGV[2]); ",
    "end;",
    "if(allDeleted == 1) then",
    "   redis.call('set', KEYS[3], 1, 'px', ARGV[5]); ",
    "else ",
    "   redis.call('set', KEYS[3], 0, 'px', ARGV[5]); ",
    "   local expireTime = redis.call('pttl',KEYS[1]);",
    "   if(tonumber(ARGV[3]) > tonumber(expireTime)) then",
    "       redis.call('pexpire',KEYS[1], ARGV[3]);",
    "   end;",
    "end;",
    "return allDeleted;",
);

/// `RedissonFasterMultiLock.forceUnlockAsync`: the number of values removed. KEYS = [group,
/// channel]; ARGV = [0, publishCmd, F1 .. Fn].
pub const FORCE_UNLOCK: &str = concat!(
    "local removeCount = 0;",
    "for i=3, #ARGV, 1 do ",
    "    local lockName = redis.call('hget', KEYS[1], ARGV[i]); ",
    "    local count = redis.call('HDEL', KEYS[1], ARGV[i]); ",
    "    redis.call('HDEL', KEYS[1], ARGV[i]..':'..lockName..':expire_time'); ",
    "    redis.call('HDEL', KEYS[1], ARGV[i]..':'..lockName..':lock_count'); ",
    "    removeCount = removeCount+count;",
    "end; ",
    "redis.call(ARGV[2], KEYS[2], ARGV[1]); ",
    "return removeCount; ",
);

/// `FastMultilockTask`'s renewal: 1 renewed, 0 when a value is not the caller's. ARGV =
/// [leaseMs, nowMs, lockName, F1 .. Fn].
pub const RENEW: &str = concat!(
    "local leaseTime = tonumber(ARGV[1]);",
    "local currentTime = tonumber(ARGV[2]);",
    "local currentThread = ARGV[3];",
    "if (redis.call('exists',KEYS[1]) > 0) then",
    "   local newExpireTime = leaseTime + currentTime;",
    "   for i=4, #ARGV, 1 do ",
    "       local lockThread = redis.call('hget', KEYS[1], ARGV[i]);",
    "       if(lockThread ~= false and lockThread == currentThread) then ",
    "           local expireFieldName = ARGV[i]..':'..lockThread..':expire_time';",
    "           local expireTime = redis.call('hget', KEYS[1], expireFieldName);",
    "           if(tonumber(expireTime) < newExpireTime) then ",
    "               redis.call('hset', KEYS[1],expireFieldName, newExpireTime);",
    "           end;",
    "       else",
    "           return 0;",
    "       end;",
    "   end; ",
    "   local expireTime = redis.call('pttl',KEYS[1]);",
    "   if(tonumber(expireTime) < tonumber(leaseTime)) then ",
    "       redis.call('pexpire',KEYS[1], leaseTime);",
    "   end;",
    "   return 1;",
    "end;",
    "return 0;",
);

/// Run `tryLockInnerAsync`: nil when taken, else the ms Redisson would wait.
pub fn try_lock(
    conn: &mut redis::Connection,
    group: &str,
    owner: &str,
    lease_ms: i64,
    fields: &[impl AsRef<str>],
) -> Value {
    let mut c = cmd!("EVAL", TRY_LOCK, 1, group, lease_ms, now_ms(), owner);
    for f in fields {
        c.arg(f.as_ref());
    }
    raw(conn, &c)
}

/// Run `tryLockOnceInnerAsync`: 1 taken, 0 not.
pub fn try_lock_once(
    conn: &mut redis::Connection,
    group: &str,
    owner: &str,
    lease_ms: i64,
    fields: &[&str],
) -> i64 {
    let mut c = cmd!("EVAL", TRY_LOCK_ONCE, 1, group, now_ms(), lease_ms, owner);
    c.arg(fields);
    int(conn, &c)
}

/// Run `unlockInnerAsync` as the Java client does (fresh unlock latch, `PUBLISH`), then delete
/// the latch.
pub fn unlock(
    conn: &mut redis::Connection,
    group: &str,
    owner: &str,
    lease_ms: i64,
    fields: &[impl AsRef<str>],
) -> Value {
    let latch = unlock_latch(group);
    let mut c = cmd!(
        "EVAL",
        UNLOCK,
        3,
        group,
        lock_channel(group),
        &latch,
        owner,
        0,
        lease_ms,
        "PUBLISH",
        LATCH_TTL_MS,
        now_ms()
    );
    for f in fields {
        c.arg(f.as_ref());
    }
    unlock_with_latch(conn, &c, &latch)
}

/// Run `forceUnlockAsync`: the number of values removed.
pub fn force_unlock(conn: &mut redis::Connection, group: &str, fields: &[&str]) -> i64 {
    let mut c = cmd!(
        "EVAL",
        FORCE_UNLOCK,
        2,
        group,
        lock_channel(group),
        0,
        "PUBLISH"
    );
    c.arg(fields);
    int(conn, &c)
}

/// Run the watchdog's renewal for one group: 1 renewed, 0 not.
pub fn renew(
    conn: &mut redis::Connection,
    group: &str,
    owner: &str,
    lease_ms: i64,
    fields: &[&str],
) -> i64 {
    let mut c = cmd!("EVAL", RENEW, 1, group, lease_ms, now_ms(), owner);
    c.arg(fields);
    int(conn, &c)
}
