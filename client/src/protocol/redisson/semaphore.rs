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

/// `releaseIfExists(n)` (Redisson 4.0). KEYS = [name, channel]; ARGV = [n, publish command].
/// 1 released (the new count published), 0 the semaphore does not exist (nothing written).
pub(crate) static RELEASE_IF_EXISTS: Script = Script::new(
    "if redis.call('exists', KEYS[1]) == 0 then return 0 end local value = redis.call('incrby', KEYS[1], ARGV[1]) redis.call(ARGV[2], KEYS[2], value) return 1 ",
);

/// `trySetPermits(n, ttl)` (Redisson 3.29). KEYS = [name, channel]; ARGV = [n, publish
/// command, ttl ms]. 1 set (the count lives `ttl` ms), 0 the semaphore exists.
pub(crate) static TRY_SET_PERMITS_TTL: Script = Script::new(
    "local value = redis.call('get', KEYS[1]); if (value == false) then redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3]); redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1;end;return 0;",
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
    fn redisson_4x_scripts_have_the_java_strings_sha1() {
        // SHA1 of the Java text (redisson/redisson RedissonSemaphore.java, 4.x).
        assert_eq!(
            super::RELEASE_IF_EXISTS.sha(),
            "6883802454c09d455e3234c8b01549adf1fb8b4c"
        );
        assert_eq!(
            super::TRY_SET_PERMITS_TTL.sha(),
            "38bf99884eb94708a40a9aabacb15b4c5f16e804"
        );
    }

    #[test]
    fn the_channel_is_redissons() {
        assert_eq!(super::channel("s"), "redisson_sc:{s}");
    }
}
