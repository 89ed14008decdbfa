//! Redisson's `RFairLock` in its own protocol (reference/redisson.md §2.4): the lock hash as
//! `RLock`'s, plus the queue of waiting owners `redisson_lock_queue:{name}` (a list, first come
//! first) and their deadlines `redisson_lock_timeout:{name}` (a sorted set of absolute epoch
//! milliseconds by which each must try again, or be dropped as dead). An unlock tells only the
//! first waiter, on its own channel `redisson_lock__channel:{name}:<owner>`. The scripts are
//! Redisson's text byte for byte (so its SHA1s), written as the Java source concatenates them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Cmd, Value};

use super::lock::{renew_cmd, Try};
use super::{lock_channel, prefix_name, unlock_latch, Script, LATCH_TTL_MS, UNLOCK_MESSAGE};
use crate::holds::Kind;

/// Redisson's `fairLockWaitTimeout` default: how long a queued owner may go without trying
/// again before it counts as dead, when its wait has no limit.
pub(crate) const WAIT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The queue of waiting owners.
pub(crate) fn queue(name: &str) -> String {
    prefix_name("redisson_lock_queue", name)
}

/// The waiters' deadlines.
pub(crate) fn timeouts(name: &str) -> String {
    prefix_name("redisson_lock_timeout", name)
}

/// The channel on which an unlock tells `owner` that it is first (Redisson's overridden
/// `subscribe`: the lock's channel, `:`, the owner).
pub(crate) fn owner_channel(name: &str, owner: &str) -> String {
    format!("{}:{owner}", lock_channel(name))
}

/// The wall clock in epoch milliseconds, as the scripts compare deadlines (Redisson:
/// `System.currentTimeMillis()` of the client).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `RedissonFairLock.acquireFailedAsync`. A waiter that gives up (its wait ended, or it
/// was cancelled) takes itself off the queue and the timeout set, and pulls the deadlines of those behind it forward by its wait.
/// KEYS = [queue, timeouts]; ARGV = [owner, wait_ms].
pub(crate) static ACQUIRE_FAILED: Script = Script::new(concat!(
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
));

/// `RedissonFairLock.tryLockInnerAsync` (`EVAL_NULL_BOOLEAN`). One attempt that never queues
/// (`tryLock()`). KEYS = [name, queue, timeouts]; ARGV = [lease_ms, owner, now_ms, wait_ms]. Nil
/// when acquired or re-entered, else 1.
pub(crate) static TRY_ACQUIRE: Script = Script::new(concat!(
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
));

/// `RedissonFairLock.tryLockInnerAsync` (`EVAL_LONG`). An attempt that queues the owner when it
/// can't have the lock (`lock()`, `tryLock(wait)`). KEYS = [name, queue, timeouts]; ARGV =
/// [lease_ms, owner, wait_ms, now_ms] (the last two swapped against [`TRY_ACQUIRE`]). Nil when
/// acquired or re-entered, else how long to wait at most: the time to the deadline of the
/// waiter before it (newly queued), or the lock's PTTL, at least 0 (queued already).
pub(crate) static ACQUIRE: Script = Script::new(concat!(
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
    ));

/// `RedissonFairLock.unlockInnerAsync`. KEYS = [name, queue, timeouts, channel prefix, unlock latch];
/// ARGV = [0, lease_ms, owner, now_ms, publish command, latch TTL]. 1 fully released (or the lock
/// no longer exists) and the first waiter told on its own channel, 0 still held, nil not the
/// holder.
pub(crate) static UNLOCK: Script = Script::new(concat!(
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
));

/// `RedissonFairLock.forceUnlockAsync`. KEYS = [name, queue, timeouts, channel prefix]; ARGV = [0,
/// now_ms, publish command]. 1 when a lock was deleted (and the first waiter told).
pub(crate) static FORCE_UNLOCK: Script = Script::new(concat!(
    "while true do ",
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
    "if firstThreadId2 == false then ",
    "break;",
    "end; ",
    "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
    "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[2]) then ",
    "redis.call('zrem', KEYS[3], firstThreadId2); ",
    "redis.call('lpop', KEYS[2]); ",
    "else ",
    "break;",
    "end; ",
    "end;",
    "if (redis.call('del', KEYS[1]) == 1) then ",
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); ",
    "if nextThreadId ~= false then ",
    "redis.call(ARGV[3], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); ",
    "end; ",
    "return 1; ",
    "end; ",
    "return 0;",
));

/// This client's, not Redisson's: after a waiter left the queue ([`ACQUIRE_FAILED`]), tell the
/// new first waiter if the lock is free. An unlock tells only the first waiter; if that one
/// leaves without taking the lock (it was cancelled, or its wait ended, as the unlock came), the
/// next would otherwise sleep until its timer. An extra message costs its receiver one attempt.
/// KEYS = [name, queue, channel prefix]; ARGV = [0, publish command]. 1 when told.
pub(crate) static HAND_ON: Script = Script::new(
    "if redis.call('exists', KEYS[1]) == 0 then \
    local first = redis.call('lindex', KEYS[2], 0); \
    if first ~= false then \
    redis.call(ARGV[2], KEYS[3] .. ':' .. first, ARGV[1]); \
    return 1; \
    end; \
    end; \
    return 0;",
);

/// An acquire's script, KEYS and ARGV: [`ACQUIRE`] when it may wait (it queues the owner),
/// [`TRY_ACQUIRE`] for one attempt (it never does). `wait_ms`: Redisson's `threadWaitTime`,
/// the caller's wait when it has one, else [`WAIT_TIMEOUT`].
pub(crate) fn acquire_words(
    name: &str,
    owner: &str,
    lease_ms: u64,
    wait_ms: u64,
    queues: bool,
) -> (&'static Script, Vec<String>, Vec<String>) {
    let keys = vec![name.to_string(), queue(name), timeouts(name)];
    let (lease, now, wait) = (
        lease_ms.to_string(),
        now_ms().to_string(),
        wait_ms.to_string(),
    );
    let owner = owner.to_string();
    if queues {
        (&ACQUIRE, keys, vec![lease, owner, wait, now])
    } else {
        (&TRY_ACQUIRE, keys, vec![lease, owner, now, wait])
    }
}

/// An acquire's reply: nil granted; else busy, to try again within the milliseconds it says
/// (0 or less: the lock is free but another owner is first, or it has no expiry: see
/// [`Polls`]).
pub(crate) fn read_acquire(reply: &Value, polls: &Polls) -> redis::RedisResult<Try> {
    match reply {
        Value::Nil => Ok(Try::Granted),
        Value::Int(ms) if *ms > 0 => {
            polls.reset();
            Ok(Try::Busy(Some(Duration::from_millis(*ms as u64))))
        }
        Value::Int(_) => Ok(Try::Busy(Some(polls.next()))),
        other => Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected reply to Redisson's fair lock acquire",
            format!("{other:?}"),
        ))),
    }
}

/// How soon a queued owner tries again when the reply gives no time: the lock is free but
/// another owner is first (it was told and is taking it, or it is dead and will be dropped at
/// its deadline), or the lock has no expiry. Redisson tries again at once, in a loop; this
/// client backs off, 5 ms doubling to 1 s, until a reply gives a time again. The first waiter
/// is told by a message, so it is not slowed by this.
#[derive(Default)]
pub(crate) struct Polls(std::sync::atomic::AtomicU32);

impl Polls {
    const FIRST: Duration = Duration::from_millis(5);
    const MOST: Duration = Duration::from_secs(1);

    fn next(&self) -> Duration {
        let n = self
            .0
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .min(16);
        Self::FIRST.saturating_mul(1 << n).min(Self::MOST)
    }

    fn reset(&self) {
        self.0.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The unlock script's KEYS and ARGV for `owner`, a partial release setting the lease to
/// `lease_ms`.
pub(crate) fn unlock_words(
    name: &str,
    owner: &str,
    lease_ms: u64,
    publish: &str,
) -> ([String; 5], [String; 6]) {
    (
        [
            name.to_string(),
            queue(name),
            timeouts(name),
            lock_channel(name),
            unlock_latch(name),
        ],
        [
            UNLOCK_MESSAGE.to_string(),
            lease_ms.to_string(),
            owner.to_string(),
            now_ms().to_string(),
            publish.to_string(),
            LATCH_TTL_MS.to_string(),
        ],
    )
}

/// The force-unlock script's KEYS and ARGV.
pub(crate) fn force_unlock_words(name: &str, publish: &str) -> ([String; 4], [String; 3]) {
    (
        [
            name.to_string(),
            queue(name),
            timeouts(name),
            lock_channel(name),
        ],
        [
            UNLOCK_MESSAGE.to_string(),
            now_ms().to_string(),
            publish.to_string(),
        ],
    )
}

/// The removal script's KEYS and ARGV for a waiter that gives up.
pub(crate) fn acquire_failed_words(
    name: &str,
    owner: &str,
    wait_ms: u64,
) -> ([String; 2], [String; 2]) {
    (
        [queue(name), timeouts(name)],
        [owner.to_string(), wait_ms.to_string()],
    )
}

/// The hand-on script's KEYS and ARGV.
pub(crate) fn hand_on_words(name: &str, publish: &str) -> ([String; 3], [String; 2]) {
    (
        [name.to_string(), queue(name), lock_channel(name)],
        [UNLOCK_MESSAGE.to_string(), publish.to_string()],
    )
}

/// Fair locks taken over Redisson's protocol, in the hold registry: a lock as any other (the
/// same name: renewed with `LockTask`'s script), whose orphans are released with the fair
/// unlock script, so that the first waiter is told.
pub(crate) static FAIR_LOCK: Kind = Kind {
    name: "lock",
    renew: |key, holder, lease_ms, _publish| renew_cmd(key, holder, lease_ms),
    release: Some(orphan_release_cmd),
};

fn orphan_release_cmd(name: &str, owner: &str, publish: &'static str) -> Cmd {
    let (keys, args) = unlock_words(name, owner, 30_000, publish);
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    UNLOCK.eval_cmd(&keys, &args)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SHA1 of each script, computed from Redisson's Java source (RedissonFairLock.java,
    /// the string literals of each script joined as Java joins them): Redisson's EVALSHA finds
    /// this client's scripts and the other way round.
    #[test]
    fn scripts_are_redissons_text() {
        let sha = |s: &Script| redis::Script::new(s.text).get_hash().to_string();
        assert_eq!(
            sha(&ACQUIRE_FAILED),
            "d1ddef65ad80886b5d36e023c99930044ddd653a"
        );
        assert_eq!(
            sha(&TRY_ACQUIRE),
            "d20501c26a30adf6fb0fe9883bbbcc497e6157e2"
        );
        assert_eq!(sha(&ACQUIRE), "8f6ed299ffd259f0539c20f89253998c0777ea75");
        assert_eq!(sha(&UNLOCK), "367f80bd2e300e411fb0936d9b601e5bcb3fd4b6");
        assert_eq!(
            sha(&FORCE_UNLOCK),
            "71ed11d4e4818119ac560b3d670a7f08256afc46"
        );
    }

    #[test]
    fn keys_and_channels_are_redissons() {
        assert_eq!(queue("f"), "redisson_lock_queue:{f}");
        assert_eq!(timeouts("{a}:f"), "redisson_lock_timeout:{a}:f");
        assert_eq!(owner_channel("f", "u:1"), "redisson_lock__channel:{f}:u:1");
        let (s, k, a) = acquire_words("f", "u:1", 30_000, 500, true);
        assert!(std::ptr::eq(s, &ACQUIRE));
        assert_eq!(
            k,
            ["f", "redisson_lock_queue:{f}", "redisson_lock_timeout:{f}"]
        );
        assert_eq!(
            (&a[..3], a[3].parse::<u64>().is_ok()),
            (&["30000".to_string(), "u:1".into(), "500".into()][..], true)
        );
        let (s, _, a) = acquire_words("f", "u:1", 30_000, 500, false);
        assert!(std::ptr::eq(s, &TRY_ACQUIRE));
        assert_eq!(a[3], "500");
        let (k, a) = unlock_words("f", "u:1", 10, "PUBLISH");
        assert_eq!(k[3], "redisson_lock__channel:{f}");
        assert!(k[4].starts_with("redisson_unlock_latch:{f}:"));
        assert_eq!(
            [&a[0], &a[1], &a[2], &a[4], &a[5]],
            ["0", "10", "u:1", "PUBLISH", "18000"]
        );
    }

    #[test]
    fn replies_and_backoff() {
        let p = Polls::default();
        assert_eq!(read_acquire(&Value::Nil, &p).unwrap(), Try::Granted);
        assert_eq!(
            read_acquire(&Value::Int(250), &p).unwrap(),
            Try::Busy(Some(Duration::from_millis(250)))
        );
        let waits: Vec<_> = (0..10)
            .map(|_| match read_acquire(&Value::Int(0), &p).unwrap() {
                Try::Busy(Some(d)) => d.as_millis() as u64,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(
            read_acquire(&Value::Int(-1), &p).unwrap(),
            Try::Busy(Some(Duration::from_secs(1)))
        );
        read_acquire(&Value::Int(7), &p).unwrap();
        assert_eq!(
            read_acquire(&Value::Int(0), &p).unwrap(),
            Try::Busy(Some(Duration::from_millis(5)))
        );
        assert!(read_acquire(&Value::Okay, &p).is_err());
    }
}
