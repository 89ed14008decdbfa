//! Redisson's `RReadWriteLock` in its own protocol (reference/redisson.md §2.5, `ReadLockTask`
//! §2.2): one hash `name` with `mode` (`read`/`write`), a field per reader (`owner`, its
//! re-entry count) and `owner:write` for the writer; one string key per read hold
//! (`{name}:owner:rwlock_timeout:k`) carrying that hold's lease; the channel
//! `redisson_rwlock:{name}` shared by both sides (a read unlock publishes `0`: one waiter per
//! client; a write unlock `1`: all of them, since many readers may go). The scripts are the
//! text Redisson sends (the same as the harness's `tests/src/redisson/rwlock.rs`, so the SHA1
//! is Redisson's), and the hold kinds the watchdog renews with Redisson's renewal scripts.

use redis::Cmd;

use super::lock::RENEW;
use super::{prefix_name, suffix_name, unlock_latch, Script, LATCH_TTL_MS, UNLOCK_MESSAGE};
use crate::holds::Kind;

/// One side of a read-write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Read,
    Write,
}

/// `RedissonReadLock.tryLockInnerAsync`. KEYS = [name, timeout prefix]; ARGV = [lease_ms, owner,
/// `owner:write`]. Nil when acquired (or re-entered, or a writer's downgrade), else the lock's
/// PTTL.
pub(crate) static READ_ACQUIRE: Script = Script::new(
    "local mode = redis.call('hget', KEYS[1], 'mode'); \
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
    end;return redis.call('pttl', KEYS[1]);",
);

/// `RedissonReadLock.unlockInnerAsync`. KEYS = [name, channel, timeout prefix, key prefix,
/// unlock latch]; ARGV = [0, owner, publish command, latch TTL]. 1 the lock was freed (and
/// `0` published), 0 still held (by this owner or others), nil not a reader.
pub(crate) static READ_UNLOCK: Script = Script::new(
    "local val = redis.call('get', KEYS[5]); \
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
    return 1; ",
);

/// `RedissonReadLock.forceUnlockAsync`: deletes the lock only in read mode. KEYS = [name,
/// channel]; ARGV = [0, publish command]. 1 when deleted.
pub(crate) static READ_FORCE_UNLOCK: Script = Script::new(
    "if (redis.call('hget', KEYS[1], 'mode') == 'read') then redis.call('del', KEYS[1]); \
    redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    return 1; \
    end; \
    return 0; ",
);

/// `RedissonWriteLock.tryLockInnerAsync`. KEYS = [name]; ARGV = [lease_ms, `owner:write`]. Nil
/// when acquired (a re-entry adds the lease to the TTL left), else the lock's PTTL.
pub(crate) static WRITE_ACQUIRE: Script = Script::new(
    "local mode = redis.call('hget', KEYS[1], 'mode'); \
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
    end;return redis.call('pttl', KEYS[1]);",
);

/// `RedissonWriteLock.unlockInnerAsync`. KEYS = [name, channel, unlock latch]; ARGV = [1,
/// lease_ms, `owner:write`, publish command, latch TTL]. 1 the last write hold went (the lock
/// deleted and `1` published, or left to the writer's read holds), 0 still held, nil not the
/// writer.
pub(crate) static WRITE_UNLOCK: Script = Script::new(
    "local val = redis.call('get', KEYS[3]); \
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
    return nil;",
);

/// `RedissonWriteLock.forceUnlockAsync`: deletes the lock only in write mode. KEYS = [name,
/// channel]; ARGV = [1, publish command]. 1 when deleted.
pub(crate) static WRITE_FORCE_UNLOCK: Script = Script::new(
    "if (redis.call('hget', KEYS[1], 'mode') == 'write') then redis.call('del', KEYS[1]); \
    redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    return 1; \
    end; \
    return 0; ",
);

/// `ReadLockTask`'s watchdog renewal. KEYS = [name, key prefix, ...]; ARGV = [lease_ms, n,
/// owner.., ...]. Per lock, 1 when any of the owners still reads (its hold keys and the hash
/// renewed), else 0.
pub(crate) static READ_RENEW: Script = Script::new(
    "local result = {} \
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
    return result;",
);

/// `RedissonReadLock.isLocked`: 1 when any read hold exists (a writer's own read hold
/// included). KEYS = [name].
pub(crate) static READ_IS_LOCKED: Script = Script::new(
    "local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == 'read') or (mode == 'write' and redis.call('hlen', KEYS[1]) > 2) then return 1; \
    end; \
    return 0; ",
);

/// `LockPubSub.READ_UNLOCK_MESSAGE`: every waiter of a client may try.
pub(crate) const READ_UNLOCK_MESSAGE: i64 = 1;

/// The channel of a read-write lock (`redisson_rwlock:{name}`).
pub(crate) fn channel(name: &str) -> String {
    prefix_name("redisson_rwlock", name)
}

/// `getKeyPrefix`: what comes before `:owner:rwlock_timeout:k` in a read hold's key.
pub(crate) fn key_prefix(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

/// `getReadWriteTimeoutNamePrefix`: `{name}:owner:rwlock_timeout`.
pub(crate) fn timeout_prefix(name: &str, owner: &str) -> String {
    suffix_name(name, &format!("{owner}:rwlock_timeout"))
}

/// The acquire script of `side` and its KEYS and ARGV.
pub(crate) fn acquire_words(
    name: &str,
    owner: &str,
    side: Side,
    lease_ms: u64,
) -> (&'static Script, Vec<String>, Vec<String>) {
    let lease = lease_ms.to_string();
    match side {
        Side::Read => (
            &READ_ACQUIRE,
            vec![name.to_string(), timeout_prefix(name, owner)],
            vec![lease, owner.to_string(), write_field(owner)],
        ),
        Side::Write => (
            &WRITE_ACQUIRE,
            vec![name.to_string()],
            vec![lease, write_field(owner)],
        ),
    }
}

/// The unlock script of `side` and its KEYS and ARGV, with a fresh unlock latch (the last of
/// KEYS, which the caller deletes once answered); a partial write release sets the lease to
/// `lease_ms` (Redisson's `internalLockLeaseTime`).
pub(crate) fn unlock_words(
    name: &str,
    owner: &str,
    side: Side,
    lease_ms: u64,
    publish: &str,
) -> (&'static Script, Vec<String>, Vec<String>) {
    let latch = unlock_latch(name);
    match side {
        Side::Read => (
            &READ_UNLOCK,
            vec![
                name.to_string(),
                channel(name),
                timeout_prefix(name, owner),
                key_prefix(name),
                latch,
            ],
            vec![
                UNLOCK_MESSAGE.to_string(),
                owner.to_string(),
                publish.to_string(),
                LATCH_TTL_MS.to_string(),
            ],
        ),
        Side::Write => (
            &WRITE_UNLOCK,
            vec![name.to_string(), channel(name), latch],
            vec![
                READ_UNLOCK_MESSAGE.to_string(),
                lease_ms.to_string(),
                write_field(owner),
                publish.to_string(),
                LATCH_TTL_MS.to_string(),
            ],
        ),
    }
}

/// The force-unlock script of `side` and its KEYS and ARGV.
pub(crate) fn force_unlock_words(
    name: &str,
    side: Side,
    publish: &str,
) -> (&'static Script, [String; 2], [String; 2]) {
    let (script, message) = match side {
        Side::Read => (&READ_FORCE_UNLOCK, UNLOCK_MESSAGE),
        Side::Write => (&WRITE_FORCE_UNLOCK, READ_UNLOCK_MESSAGE),
    };
    (
        script,
        [name.to_string(), channel(name)],
        [message.to_string(), publish.to_string()],
    )
}

/// The hash field counting `owner`'s write holds (a reader's field is the owner itself).
pub(crate) fn write_field(owner: &str) -> String {
    format!("{owner}:write")
}

/// The renewal script of `side` (`ReadLockTask`'s, or `LockTask`'s on the `owner:write`
/// field) and its KEYS and ARGV, for one lock and one owner.
pub(crate) fn renew_words(
    name: &str,
    owner: &str,
    side: Side,
    lease_ms: u64,
) -> (&'static Script, Vec<String>, Vec<String>) {
    let lease = lease_ms.to_string();
    match side {
        Side::Read => (
            &READ_RENEW,
            vec![name.to_string(), key_prefix(name)],
            vec![lease, "1".to_string(), owner.to_string()],
        ),
        Side::Write => (
            &RENEW,
            vec![name.to_string()],
            vec![lease, write_field(owner)],
        ),
    }
}

/// A script's words as `EVAL` (the watchdog pipelines its commands, so it can't fall back on
/// `NOSCRIPT` one by one).
fn eval((script, keys, args): (&'static Script, Vec<String>, Vec<String>)) -> Cmd {
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    script.eval_cmd(&keys, &args)
}

/// Read holds taken over Redisson's protocol, in the hold registry (the same kind, by name, as
/// the module's), renewed with `ReadLockTask`'s script and released with the read unlock.
pub(crate) static READ: Kind = Kind {
    name: "read lock",
    renew: |name, owner, lease_ms, _| eval(renew_words(name, owner, Side::Read, lease_ms)),
    release: Some(|name, owner, publish| orphan_release_cmd(name, owner, Side::Read, publish)),
};

/// Write holds taken over Redisson's protocol, renewed with `LockTask`'s script on the
/// `owner:write` field and released with the write unlock.
pub(crate) static WRITE: Kind = Kind {
    name: "write lock",
    renew: |name, owner, lease_ms, _| eval(renew_words(name, owner, Side::Write, lease_ms)),
    release: Some(|name, owner, publish| orphan_release_cmd(name, owner, Side::Write, publish)),
};

pub(crate) fn kind(side: Side) -> &'static Kind {
    match side {
        Side::Read => &READ,
        Side::Write => &WRITE,
    }
}

/// One release of an orphaned hold, with `EVAL` (the watchdog pipelines its commands); the
/// lease a partial write release sets is Redisson's default watchdog timeout (see
/// `lock::orphan_release_cmd`).
fn orphan_release_cmd(name: &str, owner: &str, side: Side, publish: &str) -> Cmd {
    eval(unlock_words(name, owner, side, 30_000, publish))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::words;

    #[test]
    fn keys_and_channel_are_redissons() {
        assert_eq!(channel("rw"), "redisson_rwlock:{rw}");
        assert_eq!(channel("{a}:rw"), "redisson_rwlock:{a}:rw");
        assert_eq!(timeout_prefix("rw", "u:1"), "{rw}:u:1:rwlock_timeout");
        assert_eq!(timeout_prefix("{a}:rw", "u:1"), "{a}:rw:u:1:rwlock_timeout");
        assert_eq!(key_prefix("rw"), "{rw}");
        assert_eq!(key_prefix("{a}:rw"), "{a}:rw");
    }

    #[test]
    fn requests_follow_redissons_wire() {
        let (s, k, a) = acquire_words("rw", "u:1", Side::Read, 500);
        assert!(std::ptr::eq(s, &READ_ACQUIRE));
        assert_eq!(k, ["rw", "{rw}:u:1:rwlock_timeout"]);
        assert_eq!(a, ["500", "u:1", "u:1:write"]);
        let (s, k, a) = acquire_words("rw", "u:1", Side::Write, 500);
        assert!(std::ptr::eq(s, &WRITE_ACQUIRE));
        assert_eq!(k, ["rw"]);
        assert_eq!(a, ["500", "u:1:write"]);
        let (_, k, a) = unlock_words("rw", "u:1", Side::Read, 9, "PUBLISH");
        assert_eq!(
            &k[..4],
            [
                "rw",
                "redisson_rwlock:{rw}",
                "{rw}:u:1:rwlock_timeout",
                "{rw}"
            ]
        );
        assert!(k[4].starts_with("redisson_unlock_latch:{rw}:"));
        assert_eq!(a, ["0", "u:1", "PUBLISH", "18000"]);
        let (_, k, a) = unlock_words("rw", "u:1", Side::Write, 9, "PUBLISH");
        assert_eq!(&k[..2], ["rw", "redisson_rwlock:{rw}"]);
        assert_eq!(a, ["1", "9", "u:1:write", "PUBLISH", "18000"]);
        let (s, _, a) = force_unlock_words("rw", Side::Write, "PUBLISH");
        assert!(std::ptr::eq(s, &WRITE_FORCE_UNLOCK));
        assert_eq!(a, ["1".to_string(), "PUBLISH".to_string()]);
        let r = words(&(READ.renew)("rw", "u:1", 7, "PUBLISH"));
        assert_eq!(&r[2..], ["2", "rw", "{rw}", "7", "1", "u:1"]);
        let w = words(&(WRITE.renew)("rw", "u:1", 7, "PUBLISH"));
        assert_eq!(&w[2..], ["1", "rw", "7", "u:1:write"]);
    }

    #[test]
    fn scripts_are_redissons_text() {
        assert!(READ_UNLOCK
            .text
            .starts_with("local val = redis.call('get', KEYS[5]); if"));
        assert!(WRITE_ACQUIRE
            .text
            .ends_with("return redis.call('pttl', KEYS[1]);"));
    }
}
