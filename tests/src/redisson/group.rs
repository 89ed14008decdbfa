//! Redisson's grouped multi-lock (`RedissonFasterMultiLock`, reference/redisson.md §2.12):
//! the scripts its Java client sends to take and give back a group's values, the text of
//! RedissonFasterMultiLock.java (its literals joined as Java joins them), with helpers that run
//! them with EVAL as that client does. The tests play the Java side with them, apart from the
//! client's own copy.

use super::semaphore::now_ms;
use super::unlock_latch::{unlock_latch, unlock_with_latch, LATCH_TTL_MS};
use crate::{cmd, lock_channel, raw, Value};

/// `RedissonFasterMultiLock.tryLockInnerAsync`. KEYS = [group]; ARGV = [lease_ms, now_ms,
/// owner, F..]. Nil when every value was taken, else the ms until the other holders' latest
/// expire_time.
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

/// `RedissonFasterMultiLock.unlockInnerAsync`. KEYS = [group, channel, unlock latch]; ARGV =
/// [owner, 0, lease_ms, publish command, latch TTL, now_ms, F..]. 1 every value freed, 0 some
/// still held, nil one not the owner's.
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

/// Redisson's Java client taking `fields` of `group` for `owner` (its `tryLockInnerAsync`,
/// now by this machine's clock).
pub fn acquire(
    conn: &mut redis::Connection,
    group: &str,
    owner: &str,
    lease_ms: i64,
    fields: &[String],
) -> Value {
    let mut c = cmd!("EVAL", TRY_LOCK, 1, group, lease_ms, now_ms(), owner);
    for f in fields {
        c.arg(f);
    }
    raw(conn, &c)
}

/// Redisson's Java client giving back one hold of `fields` of `group` as `owner` (then deleting
/// its unlock latch, as the client does).
pub fn unlock(
    conn: &mut redis::Connection,
    group: &str,
    owner: &str,
    lease_ms: i64,
    fields: &[String],
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
        c.arg(f);
    }
    unlock_with_latch(conn, &c, &latch)
}
