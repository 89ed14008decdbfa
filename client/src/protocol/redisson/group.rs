//! Redisson's grouped multi-lock in its own protocol (`RedissonFasterMultiLock`,
//! reference/redisson.md §2.12): one hash named after the group; per locked value a field `F`
//! (the value's hashed name, see `field.rs`) holding the owner, `F:<owner>:expire_time` (ms
//! since the epoch) and `F:<owner>:lock_count`; the hash's PEXPIRE the longest lease. Its
//! scripts (the literals of RedissonFasterMultiLock.java and renewal/FastMultilockTask.java,
//! joined as Java joins them), and the hold kind the watchdog renews with the renewal script.

use std::time::{SystemTime, UNIX_EPOCH};

use redis::Cmd;

use super::{lock_channel, unlock_latch, Script, LATCH_TTL_MS, UNLOCK_MESSAGE};
use crate::holds::Kind;

/// `RedissonFasterMultiLock.tryLockOnceInnerAsync` (`tryLock()`: one attempt). KEYS = [group];
/// ARGV = [now_ms, lease_ms, owner, F..]. 1 when every value was taken (or re-entered), 0 when
/// one is held by another owner whose expire_time is still ahead.
pub(crate) static TRY_LOCK_ONCE: Script = Script::new(concat!(
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
));

/// `RedissonFasterMultiLock.tryLockInnerAsync` (the waits' attempt). KEYS = [group]; ARGV =
/// [lease_ms, now_ms, owner, F..]. Nil when every value was taken (or re-entered), else how
/// long until the latest expire_time of the other holders (ms).
pub(crate) static TRY_LOCK: Script = Script::new(concat!(
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
));

/// `RedissonFasterMultiLock.unlockInnerAsync`. KEYS = [group, channel, unlock latch]; ARGV =
/// [owner, 0, lease_ms, publish command, latch TTL, now_ms, F..]. 1 when every value was freed,
/// 0 when some are still held (re-entry), nil when one is not the owner's (the others were
/// decremented already: Redisson's script notices late).
pub(crate) static UNLOCK: Script = Script::new(concat!(
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
));

/// `RedissonFasterMultiLock.forceUnlockAsync`. KEYS = [group, channel]; ARGV = [0, publish
/// command, F..]. The number of values that were held.
pub(crate) static FORCE_UNLOCK: Script = Script::new(concat!(
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
));

/// `RedissonFasterMultiLock.isLockedAsync`. KEYS = [group]; ARGV = [now_ms, F..]. 1 when any
/// value is held by someone whose expire_time is not past.
pub(crate) static IS_LOCKED: Script = Script::new(concat!(
    "local currentTime = tonumber(ARGV[1]);",
    "for i = 2,#ARGV,1 do",
    "   local localThread = redis.call('hget', KEYS[1], ARGV[i]);",
    "   if(localThread ~= false) then",
    "       local expireTime = redis.call('hget', KEYS[1], ARGV[i]..':'..localThread..':expire_time');",
    "       if (expireTime ~= false and tonumber(expireTime) >= currentTime) then",
    "           return 1;",
    "       end;",
    "   end;",
    "end;",
    "return 0;",
));

/// `FastMultilockTask`'s renewal (its chunks are one group each). KEYS = [group]; ARGV =
/// [lease_ms, now_ms, owner, F..]. 1 when every value is the owner's (each expire_time raised to
/// now + lease, the hash's PEXPIRE to lease if lower), else 0 (nothing written after the
/// first value that is not).
pub(crate) static RENEW: Script = Script::new(concat!(
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
));

/// Redisson's clock argument: ms since the epoch by this client's clock (Redisson's
/// `System.currentTimeMillis()`).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A group hold's holder in the hold registry: the field names joined with `,`, a space, then
/// the owner (see [`holds::GROUP`](crate::holds::GROUP)).
pub(crate) fn holder(owner: &str, fields: &[String]) -> String {
    format!("{} {owner}", fields.join(","))
}

/// The owner and field names of a registry holder (see [`holder`]).
pub(crate) fn split_holder(holder: &str) -> (&str, Vec<&str>) {
    let (fields, owner) = holder.split_once(' ').unwrap_or(("", holder));
    (owner, fields.split(',').filter(|f| !f.is_empty()).collect())
}

/// Grouped multi-locks taken over Redisson's protocol, in the hold registry: renewed with
/// `FastMultilockTask`'s script by `EVAL` (the watchdog pipelines its renewals), an orphan
/// given back with the unlock script.
pub(crate) static GROUP: Kind = Kind {
    name: crate::holds::GROUP,
    renew: |key, holder, lease_ms, _publish| {
        let (owner, fields) = split_holder(holder);
        renew_cmd(key, owner, &fields, lease_ms, now_ms())
    },
    release: Some(|key, holder, publish| {
        let (owner, fields) = split_holder(holder);
        let (keys, args) = unlock_words(key, owner, &fields, 30_000, publish, now_ms());
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        UNLOCK.eval_cmd(&keys, &args)
    }),
};

/// The renewal of one group hold, by `EVAL`.
pub(crate) fn renew_cmd(group: &str, owner: &str, fields: &[&str], lease_ms: u64, now: u64) -> Cmd {
    let mut args = vec![lease_ms.to_string(), now.to_string(), owner.to_string()];
    args.extend(fields.iter().map(|f| f.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    RENEW.eval_cmd(&[group], &args)
}

/// An acquire script's ARGV: `tryLockInnerAsync`'s `[lease, now, owner, F..]`, or with `once`
/// `tryLockOnceInnerAsync`'s `[now, lease, owner, F..]`.
pub(crate) fn acquire_args<S: AsRef<str>>(
    owner: &str,
    fields: &[S],
    lease_ms: u64,
    now: u64,
    once: bool,
) -> Vec<String> {
    let (a, b) = match once {
        true => (now, lease_ms),
        false => (lease_ms, now),
    };
    let mut args = vec![a.to_string(), b.to_string(), owner.to_string()];
    args.extend(fields.iter().map(|f| f.as_ref().to_string()));
    args
}

/// The unlock script's KEYS and ARGV for `owner`, a partial release setting the values' expire
/// times to now + `lease_ms` (Redisson's `internalLockLeaseTime`), with a fresh unlock latch.
pub(crate) fn unlock_words<S: AsRef<str>>(
    group: &str,
    owner: &str,
    fields: &[S],
    lease_ms: u64,
    publish: &str,
    now: u64,
) -> (Vec<String>, Vec<String>) {
    let keys = vec![group.to_string(), lock_channel(group), unlock_latch(group)];
    let mut args = vec![
        owner.to_string(),
        UNLOCK_MESSAGE.to_string(),
        lease_ms.to_string(),
        publish.to_string(),
        LATCH_TTL_MS.to_string(),
        now.to_string(),
    ];
    args.extend(fields.iter().map(|f| f.as_ref().to_string()));
    (keys, args)
}

/// The force-unlock script's KEYS and ARGV.
pub(crate) fn force_unlock_words<S: AsRef<str>>(
    group: &str,
    fields: &[S],
    publish: &str,
) -> (Vec<String>, Vec<String>) {
    let mut args = vec![UNLOCK_MESSAGE.to_string(), publish.to_string()];
    args.extend(fields.iter().map(|f| f.as_ref().to_string()));
    (vec![group.to_string(), lock_channel(group)], args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::words;

    #[test]
    fn scripts_are_redissons_text() {
        // SHA1s of the literals of RedissonFasterMultiLock.java and FastMultilockTask.java,
        // joined as Java joins them (computed from the Java source apart from this file).
        let sha = |s: &Script| s.sha().to_string();
        assert_eq!(
            sha(&TRY_LOCK_ONCE),
            "6f6c8d62862d8d76ea41fc769938285c3aca3005"
        );
        assert_eq!(sha(&TRY_LOCK), "eba4f75b2998ef1ead8e55019d89d93d85dadf60");
        assert_eq!(sha(&UNLOCK), "5088a04fb08aa002f465f0f90b35ed8da9b27a3c");
        assert_eq!(
            sha(&FORCE_UNLOCK),
            "9f004091f2597ace3c2e75f8b32c7adf985f412e"
        );
        assert_eq!(sha(&IS_LOCKED), "25ede9b3422ba7c8d75cc43d73a4d90331598aa0");
        assert_eq!(sha(&RENEW), "935362a31ac5b3d6f7c5c3f1e26d9a012f87f2bd");
    }

    #[test]
    fn requests_follow_redissons_wire() {
        let h = holder("u:1", &["AA".into(), "B/+B".into()]);
        assert_eq!(h, "AA,B/+B u:1");
        assert_eq!(split_holder(&h), ("u:1", vec!["AA", "B/+B"]));
        // An owner given by hand may hold spaces.
        let h = holder("a b", &["AA".into()]);
        assert_eq!(split_holder(&h), ("a b", vec!["AA"]));
        assert_eq!(
            acquire_args("u:1", &["F"], 30_000, 7, false),
            ["30000", "7", "u:1", "F"]
        );
        assert_eq!(
            acquire_args("u:1", &["F"], 30_000, 7, true),
            ["7", "30000", "u:1", "F"]
        );
        let (k, a) = unlock_words("g", "u:1", &["F", "G"], 30_000, "PUBLISH", 9);
        assert_eq!(k[..2], ["g", "redisson_lock__channel:{g}"]);
        assert!(k[2].starts_with("redisson_unlock_latch:{g}:"));
        assert_eq!(a, ["u:1", "0", "30000", "PUBLISH", "18000", "9", "F", "G"]);
        assert_eq!(
            force_unlock_words("g", &["F"], "SPUBLISH"),
            (
                vec!["g".to_string(), "redisson_lock__channel:{g}".to_string()],
                vec!["0".to_string(), "SPUBLISH".to_string(), "F".to_string()]
            )
        );
        let r = words(&renew_cmd("g", "u:1", &["F"], 10, 5));
        assert_eq!(r[0], "EVAL");
        assert_eq!(&r[2..], ["1", "g", "10", "5", "u:1", "F"]);
    }
}
