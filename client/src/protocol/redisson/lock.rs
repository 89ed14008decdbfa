//! Redisson's `RLock` in its own protocol (reference/redisson.md §2.1, §2.2): the hash `name`
//! with one field `UUID:threadId` holding the re-entry count, `PEXPIRE` = the lease; its
//! scripts, and the hold kind the watchdog renews with Redisson's `LockTask` script. Also the
//! acquires of `RFencedLock` (§2.10) and `RedissonNonReentrantLock` (§2.12), which unlock as
//! `RLock` does.

use std::time::Duration;

use redis::{Cmd, Value};

use super::{lock_channel, unlock_latch, Script, LATCH_TTL_MS, UNLOCK_MESSAGE};
use crate::holds::Kind;

/// `RedissonLock.tryLockInnerAsync`. KEYS = [name]; ARGV = [lease_ms, owner]. Nil when
/// acquired or re-entered, else the holder's PTTL.
pub(crate) static ACQUIRE: Script = Script::new(
    "if ((redis.call('exists', KEYS[1]) == 0) \
    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
    end; \
    return redis.call('pttl', KEYS[1]);",
);

/// `RedissonFencedLock.tryLockInnerAsync` (the token-returning acquire; Redisson's plain
/// `lock()` on a fenced lock increments the token too). KEYS = [name, token key]; ARGV =
/// [lease_ms, owner]. `{-1, token}` when acquired or re-entered, else `{pttl, -1}`.
pub(crate) static FENCED_ACQUIRE: Script = Script::new(concat!(
    "if (redis.call('exists', KEYS[1]) == 0 ",
    "or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then ",
    "local token = redis.call('incr', KEYS[2]);",
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); ",
    "redis.call('pexpire', KEYS[1], ARGV[1]); ",
    "return {-1, token}; ",
    "end; ",
    "return {redis.call('pttl', KEYS[1]), -1};",
));

/// `RedissonNonReentrantLock.tryLockInnerAsync`. KEYS = [name]; ARGV = [lease_ms, owner,
/// [`REENTRY_ERR`]]. Nil when acquired, the error when the owner holds it already, else the
/// holder's PTTL.
pub(crate) static NON_REENTRANT_ACQUIRE: Script = Script::new(concat!(
    "if redis.call('exists', KEYS[1]) == 0 then ",
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); ",
    "redis.call('pexpire', KEYS[1], ARGV[1]); ",
    "return nil; ",
    "end; ",
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then ",
    "return redis.error_reply(ARGV[3]); ",
    "end; ",
    "return redis.call('pttl', KEYS[1]);",
));

/// The error [`NON_REENTRANT_ACQUIRE`] answers a holder's second acquire with (Redisson's
/// `REENTRY_ERR`).
pub(crate) const REENTRY_ERR: &str = "NON_REENTRANT_REACQUIRE";

/// `RedissonBaseLock.unlockInnerAsync`. KEYS = [name, channel, unlock latch]; ARGV = [0,
/// lease_ms, owner, publish command, latch TTL]. 1 fully released (and published), 0 still
/// held, nil not the holder.
pub(crate) static UNLOCK: Script = Script::new(concat!(
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
));

/// `RedissonLock.forceUnlockAsync`. KEYS = [name, channel]; ARGV = [0, publish command]. 1
/// when a lock was deleted.
pub(crate) static FORCE_UNLOCK: Script = Script::new(
    "if (redis.call('del', KEYS[1]) == 1) then \
    redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    return 1 \
    else \
    return 0 \
    end",
);

/// `LockTask`'s watchdog renewal. KEYS = [name..]; ARGV = [lease_ms, owner..]. Per key, 1 when
/// the owner's field exists (and the lease was set), else 0.
pub(crate) static RENEW: Script = Script::new(
    "local result = {} \
    for i = 1, #KEYS, 1 do \
    if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then \
    redis.call('pexpire', KEYS[i], ARGV[1]); \
    table.insert(result, 1); \
    else \
    table.insert(result, 0); \
    end; \
    end; \
    return result;",
);

/// Locks taken over Redisson's protocol, in the hold registry: the same kind as the module's
/// locks (one name: a hold is the same hold whichever protocol took it), renewed and released
/// with Redisson's scripts. The watchdog pipelines its renewals, so they are sent with `EVAL`
/// (a pipeline can't fall back on `NOSCRIPT` command by command).
pub(crate) static LOCK: Kind = Kind {
    name: "lock",
    renew: |key, holder, lease_ms, _publish| renew_cmd(key, holder, lease_ms),
    release: Some(orphan_release_cmd),
};

/// `LockTask`'s renewal of one lock, by `EVAL` (the watchdog pipelines it).
pub(crate) fn renew_cmd(name: &str, owner: &str, lease_ms: u64) -> Cmd {
    RENEW.eval_cmd(&[name], &[&lease_ms.to_string(), owner])
}

/// One release of an orphaned hold (the watchdog sends as many as it has holds, in one
/// pipeline: the last one deletes the lock; the lease the others set is Redisson's default
/// watchdog timeout, which only matters if the pipeline is cut half way).
fn orphan_release_cmd(name: &str, owner: &str, publish: &'static str) -> Cmd {
    let (keys, args) = unlock_words(name, owner, 30_000, publish);
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    UNLOCK.eval_cmd(&keys, &args)
}

/// The unlock script's KEYS and ARGV for `owner`, a partial release setting the lease to
/// `lease_ms` (Redisson's `internalLockLeaseTime`), with a fresh unlock latch, publishing with
/// `publish`.
pub(crate) fn unlock_words(
    name: &str,
    owner: &str,
    lease_ms: u64,
    publish: &str,
) -> ([String; 3], [String; 5]) {
    (
        [name.to_string(), lock_channel(name), unlock_latch(name)],
        [
            UNLOCK_MESSAGE.to_string(),
            lease_ms.to_string(),
            owner.to_string(),
            publish.to_string(),
            LATCH_TTL_MS.to_string(),
        ],
    )
}

/// The force-unlock script's KEYS and ARGV.
pub(crate) fn force_unlock_words(name: &str, publish: &str) -> ([String; 2], [String; 2]) {
    (
        [name.to_string(), lock_channel(name)],
        [UNLOCK_MESSAGE.to_string(), publish.to_string()],
    )
}

/// What an acquire's reply says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Try {
    /// Acquired (or re-entered).
    Granted,
    /// Held by another owner: try again after this long at the latest (when its lease ends),
    /// or when the channel says it was released; `None`: the lock has no expiry, only a
    /// message (or the caller's deadline) ends the wait.
    Busy(Option<Duration>),
}

/// The acquire script's reply: nil when granted, else the holder's PTTL (-1: no expiry; -2:
/// gone meanwhile, try again at once).
pub(crate) fn read_acquire(reply: &Value) -> redis::RedisResult<Try> {
    match reply {
        Value::Nil => Ok(Try::Granted),
        Value::Int(-1) => Ok(Try::Busy(None)),
        Value::Int(ms) => Ok(Try::Busy(Some(Duration::from_millis((*ms).max(0) as u64)))),
        other => Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected reply to Redisson's lock acquire",
            format!("{other:?}"),
        ))),
    }
}

/// The fenced acquire's reply: `{-1, token}` granted (the token is the value), else
/// `{pttl, -1}` (read as [`read_acquire`] reads a PTTL). Granted is told by the token, not by
/// the PTTL: a lock without expiry answers -1 there too.
pub(crate) fn read_fenced(reply: &Value) -> redis::RedisResult<(Try, Option<i64>)> {
    if let Value::Array(v) = reply {
        if let [Value::Int(ttl), Value::Int(token)] = v.as_slice() {
            return Ok(if *token == -1 {
                (read_acquire(&Value::Int(*ttl))?, None)
            } else {
                (Try::Granted, Some(*token))
            });
        }
    }
    Err(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply to Redisson's fenced lock acquire",
        format!("{reply:?}"),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::words;

    #[test]
    fn scripts_are_redissons_text() {
        // The text Redisson sends (the integration tests check its SHA1 against the
        // harness's copy on a server).
        assert!(UNLOCK
            .text
            .starts_with("local val = redis.call('get', KEYS[3]); if val"));
        // From Redisson's Java source (RedissonLock.java, RedissonFencedLock.java,
        // RedissonNonReentrantLock.java: the literals joined as Java joins them).
        let sha = |s: &Script| redis::Script::new(s.text).get_hash().to_string();
        assert_eq!(sha(&ACQUIRE), "149c5a8bf18676fd99e9e6e24923bd64d9b62f94");
        assert_eq!(sha(&UNLOCK), "6866459238a13a701d42f4971f12d9f3a50e2442");
        assert_eq!(
            sha(&FORCE_UNLOCK),
            "605e338249a7a1d40df83b04f7658354f883b41b"
        );
        assert_eq!(
            sha(&FENCED_ACQUIRE),
            "49babb5a1e6a0c5f188c2ae62b93b51cdfd63e45"
        );
        assert_eq!(
            sha(&NON_REENTRANT_ACQUIRE),
            "3daa7be6cf69d9309ad990442e83bf25094f9b22"
        );
    }

    #[test]
    fn fenced_replies() {
        let r = |a, b| read_fenced(&Value::Array(vec![Value::Int(a), Value::Int(b)])).unwrap();
        assert_eq!(r(-1, 7), (Try::Granted, Some(7)));
        assert_eq!(
            r(250, -1),
            (Try::Busy(Some(Duration::from_millis(250))), None)
        );
        assert_eq!(r(-1, -1), (Try::Busy(None), None));
        assert!(read_fenced(&Value::Nil).is_err());
    }

    #[test]
    fn requests_follow_redissons_wire() {
        let (k, a) = unlock_words("myLock", "u:1", 30_000, "PUBLISH");
        assert_eq!(k[0], "myLock");
        assert_eq!(k[1], "redisson_lock__channel:{myLock}");
        assert!(k[2].starts_with("redisson_unlock_latch:{myLock}:"));
        assert_eq!(a, ["0", "30000", "u:1", "PUBLISH", "18000"]);
        let r = words(&renew_cmd("k", "u:1", 10));
        assert_eq!(r[0], "EVAL");
        assert_eq!(&r[2..], ["1", "k", "10", "u:1"]);
        assert_eq!(
            force_unlock_words("k", "SPUBLISH"),
            (
                ["k".to_string(), "redisson_lock__channel:{k}".to_string()],
                ["0".to_string(), "SPUBLISH".to_string()]
            )
        );
    }

    #[test]
    fn acquire_and_renew_replies() {
        assert_eq!(read_acquire(&Value::Nil).unwrap(), Try::Granted);
        assert_eq!(
            read_acquire(&Value::Int(250)).unwrap(),
            Try::Busy(Some(Duration::from_millis(250)))
        );
        assert_eq!(read_acquire(&Value::Int(-1)).unwrap(), Try::Busy(None));
        assert_eq!(
            read_acquire(&Value::Int(-2)).unwrap(),
            Try::Busy(Some(Duration::ZERO))
        );
        assert!(read_acquire(&Value::Okay).is_err());
        assert!(crate::holds::held_after_renewal(&Value::Array(vec![
            Value::Int(1)
        ])));
        assert!(!crate::holds::held_after_renewal(&Value::Array(vec![
            Value::Int(0)
        ])));
        assert!(crate::holds::held_after_renewal(&Value::Int(2)));
    }
}
