//! Redisson's `RCountDownLatch` in its own protocol (reference/redisson.md §2.8): the string
//! `name` holding the count (absent: 0, open), the channel
//! `redisson_countdownlatch__channel__{name}` (its own format, not `prefixName`) carrying `0`
//! when the count reached zero (open: every waiter passes) and `1` when a count was set or the
//! latch deleted; its scripts (the harness's `tests/src/redisson/latch.rs` holds the same text).

use redis::{FromRedisValue, Value};

use super::lock::Try;
use super::Script;

/// `countDown()`. KEYS = [name, channel]; ARGV = [0, publish command]. Replies nothing; at
/// zero the key is deleted and `0` published (a missing key's -1 is deleted, not published).
pub(crate) static COUNT_DOWN: Script = Script::new(
    "local v = redis.call('decr', KEYS[1]);if v <= 0 then redis.call('del', KEYS[1]) end;if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;",
);

/// `trySetCount(count)`. KEYS = [name, channel]; ARGV = [1, count, publish command]. 1 set,
/// 0 not (the latch is closed).
pub(crate) static TRY_SET_COUNT: Script = Script::new(
    "if redis.call('exists', KEYS[1]) == 0 then redis.call('set', KEYS[1], ARGV[2]); \
    redis.call(ARGV[3], KEYS[2], ARGV[1]); \
    return 1 else return 0 end",
);

/// `delete()`. KEYS = [name, channel]; ARGV = [1, publish command]. 1 deleted, 0 absent.
pub(crate) static DELETE: Script = Script::new(
    "if redis.call('del', KEYS[1]) == 1 then redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    return 1 else return 0 end",
);

/// The count, as `getCount()` reads it (`GET`), in a script only so that a wait runs it
/// through the scripted wait loop (`wait::acquire_scripted`); it writes nothing.
pub(crate) static COUNT: Script = Script::new("return redis.call('get', KEYS[1])");

/// `ZERO_COUNT_MESSAGE` and `NEW_COUNT_MESSAGE`, as published.
pub(crate) const ZERO_COUNT_MESSAGE: &str = "0";
pub(crate) const NEW_COUNT_MESSAGE: &str = "1";

/// The latch's channel: `redisson_countdownlatch__channel__{name}`, braces around every name.
pub(crate) fn channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// A count as `GET` replies it (absent: 0).
pub(crate) fn read_count(reply: &Value) -> redis::RedisResult<i64> {
    Ok(Option::<i64>::from_redis_value_ref(reply)?.unwrap_or(0))
}

/// A wait's check: open (count 0 or less) is a grant; else wait for the zero message (a
/// count has no TTL).
pub(crate) fn read_open(reply: &Value) -> redis::RedisResult<Try> {
    Ok(if read_count(reply)? <= 0 {
        Try::Granted
    } else {
        Try::Busy(None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_channel_is_redissons() {
        assert_eq!(channel("l"), "redisson_countdownlatch__channel__{l}");
        assert_eq!(
            channel("{a}:l"),
            "redisson_countdownlatch__channel__{{a}:l}"
        );
    }

    #[test]
    fn counts_and_waits_read_replies() {
        assert_eq!(read_count(&Value::Nil).unwrap(), 0);
        assert_eq!(read_count(&Value::BulkString(b"3".to_vec())).unwrap(), 3);
        assert_eq!(read_open(&Value::Nil).unwrap(), Try::Granted);
        assert_eq!(
            read_open(&Value::BulkString(b"2".to_vec())).unwrap(),
            Try::Busy(None)
        );
        assert!(read_open(&Value::BulkString(b"x".to_vec())).is_err());
    }
}
