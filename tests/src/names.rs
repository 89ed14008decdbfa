//! Redisson's key and channel names (reference/redisson.md §0.1), which the module keeps.

/// Redisson's naming rule (`RedissonObject.prefixName`): `prefix:{name}`, or `prefix:name` when
/// the name already holds `{`.
pub fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's naming rule for auxiliary keys (`RedissonObject.suffixName`): `{name}:suffix`, or
/// `name:suffix` when the name already holds `{`.
pub fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The channel a full release publishes on.
pub fn lock_channel(key: &str) -> String {
    prefix_name("redisson_lock__channel", key)
}

/// The fencing-token counter of a lock.
pub fn token_key(key: &str) -> String {
    prefix_name("redisson_lock_token", key)
}
