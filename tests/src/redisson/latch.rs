//! Redisson's `RCountDownLatch` scripts (reference/redisson.md §2.8), verbatim, with helpers
//! that call them as the Java client does (KEYS = [name, channel], publish command as ARGV).

use crate::{cmd, int, raw, Value};

/// `countDown()`. ARGV = [0, publishCmd].
pub const COUNT_DOWN: &str = "local v = redis.call('decr', KEYS[1]);if v <= 0 then redis.call('del', KEYS[1]) end;if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;";

/// `trySetCount(count)`: 1 set, 0 not. ARGV = [1, count, publishCmd].
pub const TRY_SET_COUNT: &str =
    "if redis.call('exists', KEYS[1]) == 0 then redis.call('set', KEYS[1], ARGV[2]); \
    redis.call(ARGV[3], KEYS[2], ARGV[1]); \
    return 1 else return 0 end";

/// `delete()`: 1 deleted (publishes `1`), 0 absent. ARGV = [1, publishCmd].
pub const DELETE: &str =
    "if redis.call('del', KEYS[1]) == 1 then redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    return 1 else return 0 end";

/// `redisson_countdownlatch__channel__{name}`: braces around every name.
pub fn channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

pub fn count_down(conn: &mut redis::Connection, name: &str) -> Value {
    raw(
        conn,
        &cmd!("EVAL", COUNT_DOWN, 2, name, channel(name), 0, "PUBLISH"),
    )
}

pub fn try_set_count(conn: &mut redis::Connection, name: &str, count: i64) -> i64 {
    int(
        conn,
        &cmd!(
            "EVAL",
            TRY_SET_COUNT,
            2,
            name,
            channel(name),
            1,
            count,
            "PUBLISH"
        ),
    )
}

pub fn delete(conn: &mut redis::Connection, name: &str) -> i64 {
    int(
        conn,
        &cmd!("EVAL", DELETE, 2, name, channel(name), 1, "PUBLISH"),
    )
}

/// `getCount()`: GET, nil read as 0.
pub fn count(conn: &mut redis::Connection, name: &str) -> i64 {
    match raw(conn, &cmd!("GET", name)) {
        Value::Nil => 0,
        Value::BulkString(b) => String::from_utf8_lossy(&b).parse().expect("a count"),
        other => panic!("getCount: {other:?}"),
    }
}
