//! Redisson's naming rule for a lock's auxiliary keys and channels.

/// `prefix:{name}`, or `prefix:name` when the name already holds a `{` (Redisson's
/// `RedissonObject.prefixName`), so auxiliaries share the lock's cluster slot.
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The fencing token counter of a lock (Redisson `RFencedLock`).
pub(crate) fn token_key(name: &str) -> String {
    prefix_name("redisson_lock_token", name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naming_rule() {
        assert_eq!(token_key("myLock"), "redisson_lock_token:{myLock}");
        assert_eq!(
            token_key("{app}:myLock"),
            "redisson_lock_token:{app}:myLock"
        );
        assert_eq!(
            prefix_name("redisson_lock__channel", "a"),
            "redisson_lock__channel:{a}"
        );
    }
}
