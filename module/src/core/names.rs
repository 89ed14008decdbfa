//! Redisson's naming rule for a lock's auxiliary keys and channels (`RedissonObject.prefixName`):
//! `prefix:{name}`, or `prefix:name` when the name already has a hash tag, so every auxiliary
//! key shares the lock's cluster slot.

pub const LOCK_CHANNEL: &str = "redisson_lock__channel";
pub const FENCE_TOKEN: &str = "redisson_lock_token";

pub fn prefixed(prefix: &str, name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + name.len() + 3);
    out.extend_from_slice(prefix.as_bytes());
    if name.contains(&b'{') {
        out.push(b':');
        out.extend_from_slice(name);
    } else {
        out.extend_from_slice(b":{");
        out.extend_from_slice(name);
        out.push(b'}');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redisson_prefix_rule() {
        assert_eq!(
            prefixed(LOCK_CHANNEL, b"myLock"),
            b"redisson_lock__channel:{myLock}"
        );
        assert_eq!(
            prefixed(LOCK_CHANNEL, b"{app}:myLock"),
            b"redisson_lock__channel:{app}:myLock"
        );
        assert_eq!(prefixed(FENCE_TOKEN, b"x"), b"redisson_lock_token:{x}");
    }
}
