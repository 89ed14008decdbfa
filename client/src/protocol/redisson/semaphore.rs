//! Redisson's `RSemaphore` in its own protocol (reference/redisson.md §2.6): the string `name`
//! holding the available permits (absent: 0), the channel `redisson_sc:{name}` carrying the new
//! count after a release, and its scripts (the harness's `tests/src/redisson/semaphore.rs`
//! holds the same text).

use super::{prefix_name, Script};

/// `tryAcquire(n)`. KEYS = [name]; ARGV = [permits]. 1 acquired, 0 not. Redisson's Java
/// string, byte for byte (its SHA1 is the one a Java service loads).
pub(crate) static TRY_ACQUIRE: Script = Script::new(
    "local value = redis.call('get', KEYS[1]); \
    if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then \
    local val = redis.call('decrby', KEYS[1], ARGV[1]); \
    return 1; \
    end; \
    return 0;",
);

/// `release(n)`. KEYS = [name, channel]; ARGV = [n, publish command]. Publishes the new count.
pub(crate) static RELEASE: Script = Script::new(
    "local value = redis.call('incrby', KEYS[1], ARGV[1]); \
    redis.call(ARGV[2], KEYS[2], value); ",
);

/// `drainPermits()`. KEYS = [name]. The permits taken (no publish).
pub(crate) static DRAIN: Script = Script::new(
    "local value = redis.call('get', KEYS[1]); \
    if (value == false) then return 0; \
    end; \
    redis.call('set', KEYS[1], 0); \
    return value;",
);

/// `trySetPermits(n)`. KEYS = [name, channel]; ARGV = [n, publish command]. 1 when set.
pub(crate) static TRY_SET_PERMITS: Script = Script::new(
    "local value = redis.call('get', KEYS[1]); \
    if (value == false) then redis.call('set', KEYS[1], ARGV[1]); \
    redis.call(ARGV[2], KEYS[2], ARGV[1]); \
    return 1;end;return 0;",
);

/// `addPermits(n)`. KEYS = [name, channel]; ARGV = [n, publish command]. Publishes the new
/// count.
pub(crate) static ADD_PERMITS: Script = Script::new(
    "local value = redis.call('get', KEYS[1]); \
    if (value == false) then value = 0;end;redis.call('set', KEYS[1], value + ARGV[1]); \
    redis.call(ARGV[2], KEYS[2], value + ARGV[1]); ",
);

/// The channel of a semaphore (`redisson_sc:{name}`).
pub(crate) fn channel(name: &str) -> String {
    prefix_name("redisson_sc", name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn try_acquire_is_redissons_java_string() {
        assert_eq!(
            super::TRY_ACQUIRE.text,
            "local value = redis.call('get', KEYS[1]); if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then local val = redis.call('decrby', KEYS[1], ARGV[1]); return 1; end; return 0;"
        );
    }

    #[test]
    fn the_channel_is_redissons() {
        assert_eq!(super::channel("s"), "redisson_sc:{s}");
    }
}
