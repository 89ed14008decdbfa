//! Redisson's `RPermitExpirableSemaphore` in its own protocol (reference/redisson.md §2.7): the
//! string `name` holding the available permits, the sorted set `{name}:timeout` with one member
//! per leased permit (its id as 16 raw bytes, the lease's end in epoch ms as its score, or
//! [`PERMANENT`]), the channel `redisson_sc:{name}` (the plain semaphore's) carrying the new
//! count. Ended leases are reclaimed lazily by every script, which is handed the client's clock
//! (`now`, epoch ms), as Redisson's are. The text is Redisson's (the harness's
//! `tests/src/redisson/semaphore.rs` holds the same for the scripts it runs).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use super::lock::Try;
use super::semaphore::channel;
use super::{suffix_name, Script};
use crate::holds::Kind;
use crate::permit::PermitId;

/// `tryAcquire(n, lease)`. KEYS = [name, timeout zset, channel]; ARGV = [n, expiry epoch ms,
/// now epoch ms, [`PERMANENT`], publish command, id1..idn (16 raw bytes each)]. Reclaims ended
/// leases first (publishing the new count); then `OK` acquired (the ids given are the permits),
/// `:<score>` not acquired and the earliest lease end, nil not acquired and nothing will end.
pub(crate) static TRY_ACQUIRE: Script = Script::new(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); \
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
    end return nil;",
);

/// `tryRelease(id)`. KEYS = [name, channel, timeout zset]; ARGV = [id, 1, now, publish
/// command]. 1 released (the new count published); 0 not leased, or its lease had ended (it
/// is returned to the pool then, and 0 replied).
pub(crate) static TRY_RELEASE: Script = Script::new(
    "local expire = redis.call('zscore', KEYS[3], ARGV[1]);local removed = redis.call('zrem', KEYS[3], ARGV[1]);if tonumber(removed) ~= 1 then return 0;end;local value = redis.call('incrby', KEYS[1], ARGV[2]); \
    redis.call(ARGV[4], KEYS[2], value); \
    if tonumber(expire) <= tonumber(ARGV[3]) then return 0;end;return 1;",
);

/// `tryRelease(ids)`, all or nothing. KEYS = [name, channel, timeout zset]; ARGV = [count,
/// now, publish command, ids..]. The number released; 0 if any is not leased or ended.
pub(crate) static TRY_RELEASE_MANY: Script = Script::new(
    "for i = 4, #ARGV, 1 do local expire = redis.call('zscore', KEYS[3], ARGV[i]);if expire== false or tonumber(expire) <= tonumber(ARGV[2]) then return 0;end; \
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
    return removed;",
);

/// `availablePermits()`: reclaims ended leases first. KEYS = [name, timeout zset, channel];
/// ARGV = [now, publish command]. The count (an integer or the string `GET` read).
pub(crate) static AVAILABLE: Script = Script::new(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); \
    if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); \
    local value = redis.call('incrby', KEYS[1], #expiredIds); \
    if tonumber(value) > 0 then redis.call(ARGV[2], KEYS[3], value); \
    end;return value; \
    end; \
    local ret = redis.call('get', KEYS[1]); \
    return ret == false and 0 or ret;",
);

/// `acquiredPermits()`: reclaims ended leases first. KEYS = [name, timeout zset, channel];
/// ARGV = [now, publish command]. The permits leased.
pub(crate) static ACQUIRED: Script = Script::new(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); \
    if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); \
    local value = redis.call('incrby', KEYS[1], #expiredIds); \
    if tonumber(value) > 0 then redis.call(ARGV[2], KEYS[3], value); \
    end;end; \
    local acquired = redis.call('zcount', KEYS[2], 0, '+inf'); \
    return acquired == false and 0 or acquired;",
);

/// `trySetPermits(n)` (its own text, not `RSemaphore`'s). KEYS = [name, channel]; ARGV = [n,
/// publish command]. 1 set, 0 the semaphore exists.
pub(crate) static TRY_SET_PERMITS: Script = Script::new(
    "local value = redis.call('get', KEYS[1]); \
    if (value == false) then redis.call('set', KEYS[1], ARGV[1]); \
    redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    return 1;end;return 0;",
);

/// `addPermits(n)` (publishes `n` when positive). KEYS = [name, channel]; ARGV = [n, publish
/// command]. Replies nothing.
pub(crate) static ADD_PERMITS: Script = Script::new(
    "local value = redis.call('get', KEYS[1]); \
    if (value == false) then value = 0;end;redis.call('set', KEYS[1], tonumber(value) + tonumber(ARGV[1])); \
    if tonumber(ARGV[1]) > 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    end;",
);

/// `updateLeaseTime(id, lease)`: reclaims ended leases first. KEYS = [name, timeout zset,
/// channel]; ARGV = [id, new expiry epoch ms, now, publish command]. 1 updated, 0 not leased.
pub(crate) static UPDATE_LEASE: Script = Script::new(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, -1); \
    if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); \
    local value = redis.call('incrby', KEYS[1], #expiredIds); \
    if tonumber(value) > 0 then redis.call(ARGV[4], KEYS[3], value); \
    end;end; \
    local value = redis.call('zscore', KEYS[2], ARGV[1]); \
    if (value ~= false) then redis.call('zadd', KEYS[2], ARGV[2], ARGV[1]); \
    return 1;end;return 0;",
);

/// `getPermits()`: reclaims ended leases first. KEYS = [name, timeout zset, channel]; ARGV =
/// [now, publish command]. Available plus leased permits (0 when the count is absent).
pub(crate) static PERMITS: Script = Script::new(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); local value = redis.call('incrby', KEYS[1], #expiredIds); if tonumber(value) > 0 then redis.call(ARGV[2], KEYS[3], value); end;end; local available = redis.call('get', KEYS[1]); if available == false then return 0 end;local acquired = redis.call('zcount', KEYS[2], 0, '+inf'); if acquired == false then return tonumber(available) end;return tonumber(available) + acquired;",
);

/// `setPermits(n)`: moves the available count by the difference between `n` and the permits
/// there are (available plus leased; the count may go negative), and publishes `n`. KEYS =
/// [name, channel, timeout zset]; ARGV = [n, publish command]. Replies nothing.
pub(crate) static SET_PERMITS: Script = Script::new(
    "local available = redis.call('get', KEYS[1]); if (available == false) then redis.call('set', KEYS[1], ARGV[1]); redis.call(ARGV[2], KEYS[2], ARGV[1]); return;end;local acquired = redis.call('zcount', KEYS[3], 0, '+inf'); local maximum = (acquired == false and 0 or acquired) + tonumber(available); if (maximum == tonumber(ARGV[1])) then return;end;redis.call('incrby', KEYS[1], tonumber(ARGV[1]) - maximum); redis.call(ARGV[2], KEYS[2], ARGV[1]);",
);

/// `getLeaseTime(id)`: reclaims ended leases first. KEYS = [name, timeout zset, channel]; ARGV
/// = [id, [`PERMANENT`], now, publish command]. The ms left, -1 a permit without an end, 0 not
/// leased.
pub(crate) static LEASE_TIME: Script = Script::new(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, -1); if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); local value = redis.call('incrby', KEYS[1], #expiredIds); if tonumber(value) > 0 then redis.call(ARGV[4], KEYS[3], value); end;end; local value = redis.call('zscore', KEYS[2], ARGV[1]); if (value ~= false) then return tonumber(value) == tonumber(ARGV[2]) and -1 or tonumber(value) - tonumber(ARGV[3]);end;return 0;",
);

/// Redisson's score for a permit without an end (`nonExpirableTimeout`).
pub(crate) const PERMANENT: &str = "922337203685477";

/// The sorted set of leased permits (`suffixName(name, "timeout")`).
pub(crate) fn timeouts(name: &str) -> String {
    suffix_name(name, "timeout")
}

/// Leased permits taken over Redisson's protocol, in the hold registry (the same kind, by
/// name, as the module's): renewed by the watchdog (a watched handle's) with
/// `updateLeaseTime`'s script, which finds a permit whose lease ended or that was released
/// elsewhere gone (0). Not released when orphaned (an id may have been handed on).
pub(crate) static PERMIT: Kind = Kind {
    name: "permit",
    renew: |name, hex, lease_ms, publish| {
        let id: PermitId = hex.parse().expect("permit holds are named by their hex id");
        let (keys, args) = update_lease_words(name, &id, lease_ms, publish);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        UPDATE_LEASE.eval_cmd_bytes(&keys, &args)
    },
    release: None,
};

/// `updateLeaseTime`'s KEYS and ARGV: the lease ends `lease_ms` from now by the client's clock.
pub(crate) fn update_lease_words(
    name: &str,
    id: &PermitId,
    lease_ms: u64,
    publish: &str,
) -> ([String; 3], [Vec<u8>; 4]) {
    let now = now_ms();
    (
        [name.to_string(), timeouts(name), channel(name)],
        [
            id.as_bytes().to_vec(),
            now.saturating_add(lease_ms).to_string().into_bytes(),
            now.to_string().into_bytes(),
            publish.as_bytes().to_vec(),
        ],
    )
}

/// The client's clock in epoch milliseconds, as Redisson passes it to these scripts.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What an acquire's reply says: `OK` granted; `:<score>` busy until the earliest lease ends
/// (`now` the clock the script was given); nil busy until a release.
pub(crate) fn read_acquire(reply: &Value, now: u64) -> redis::RedisResult<Try> {
    let text = match reply {
        Value::Nil => return Ok(Try::Busy(None)),
        Value::Okay => return Ok(Try::Granted),
        Value::SimpleString(s) => s.as_bytes(),
        Value::BulkString(b) => b.as_slice(),
        _ => &[][..],
    };
    if text == b"OK" {
        return Ok(Try::Granted);
    }
    let ends = std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.strip_prefix(':'))
        .and_then(|t| t.parse::<f64>().ok());
    match ends {
        Some(at) => {
            let at = at.max(0.0) as u64;
            Ok(Try::Busy(Some(Duration::from_millis(
                at.saturating_sub(now),
            ))))
        }
        None => Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected reply to Redisson's permit acquire",
            format!("{reply:?}"),
        ))),
    }
}

/// A count as the scripts reply it: an integer, or the string `GET` read (absent: 0).
pub(crate) fn read_count(reply: &Value) -> redis::RedisResult<i64> {
    use redis::FromRedisValue;
    Ok(Option::<i64>::from_redis_value_ref(reply)?.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_renews_with_update_lease_time() {
        let id: PermitId = "7034183b6982aae9385b7798796c1ef5".parse().unwrap();
        let cmd = (PERMIT.renew)("s", &id.to_string(), 500, "SPUBLISH");
        let words = crate::ops::words(&cmd);
        assert_eq!(words[0], "EVAL");
        assert_eq!(&words[2..5], ["3", "s", "{s}:timeout"]);
        assert_eq!(words[5], "redisson_sc:{s}");
        let args = cmd.args_iter().skip(6).collect::<Vec<_>>();
        assert!(matches!(args[0], redis::Arg::Simple(b) if b == id.as_bytes()));
        // The deployment's publish command reaches the script (SPUBLISH in a cluster).
        assert!(matches!(args[3], redis::Arg::Simple(b) if b == b"SPUBLISH"));
        let (_, a) = update_lease_words("s", &id, 500, "PUBLISH");
        let end: u64 = String::from_utf8(a[1].clone()).unwrap().parse().unwrap();
        let now: u64 = String::from_utf8(a[2].clone()).unwrap().parse().unwrap();
        assert_eq!(end - now, 500);
        assert_eq!(a[3], b"PUBLISH");
    }

    #[test]
    fn keys_are_redissons() {
        assert_eq!(timeouts("s"), "{s}:timeout");
        assert_eq!(timeouts("{a}:s"), "{a}:s:timeout");
    }

    #[test]
    fn acquire_replies() {
        assert_eq!(read_acquire(&Value::Okay, 0).unwrap(), Try::Granted);
        assert_eq!(
            read_acquire(&Value::BulkString(b"OK".to_vec()), 0).unwrap(),
            Try::Granted
        );
        assert_eq!(read_acquire(&Value::Nil, 0).unwrap(), Try::Busy(None));
        assert_eq!(
            read_acquire(&Value::BulkString(b":1500".to_vec()), 1000).unwrap(),
            Try::Busy(Some(Duration::from_millis(500)))
        );
        // Ended meanwhile: at once.
        assert_eq!(
            read_acquire(&Value::BulkString(b":900".to_vec()), 1000).unwrap(),
            Try::Busy(Some(Duration::ZERO))
        );
        assert!(read_acquire(&Value::Int(3), 0).is_err());
        assert_eq!(read_count(&Value::Int(4)).unwrap(), 4);
        assert_eq!(read_count(&Value::BulkString(b"-2".to_vec())).unwrap(), -2);
        assert_eq!(read_count(&Value::Nil).unwrap(), 0);
    }

    #[test]
    fn redisson_4x_scripts_have_the_java_strings_sha1() {
        // SHA1 of the Java text (RedissonPermitExpirableSemaphore.java, 4.x).
        assert_eq!(PERMITS.sha(), "e242db5c1c68811b0d26a41937dcf22415b6d872");
        assert_eq!(
            SET_PERMITS.sha(),
            "494d8561fee0cdb033f6c28d74c052c52189a578"
        );
        assert_eq!(LEASE_TIME.sha(), "8be95cb5221cc7ee883cacb8859a8b32ef501a0e");
    }

    #[test]
    fn scripts_are_redissons_text() {
        // Redisson's Java strings: one line, no newline.
        assert!(TRY_ACQUIRE
            .text
            .starts_with("local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); "));
        assert!(!ADD_PERMITS.text.contains('\n'));
    }
}
