//! Redisson's naming rules for an object's auxiliary keys and channels (`RedissonObject`):
//! `prefixName(p, name)` = `p:{name}`, `suffixName(name, s)` = `{name}:s`, or without the added
//! braces when the name already has a hash tag, so every auxiliary key shares the object's
//! cluster slot.

pub const LOCK_CHANNEL: &str = "redisson_lock__channel";
pub const FENCE_TOKEN: &str = "redisson_lock_token";
pub const RWLOCK_CHANNEL: &str = "redisson_rwlock";

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

/// `suffixName(name, parts...)`: the parts are joined as they are (Redisson builds the suffix
/// by concatenation before applying the rule).
pub fn suffixed(name: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let len = name.len() + 3 + parts.iter().map(|p| p.len()).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    if name.contains(&b'{') {
        out.extend_from_slice(name);
    } else {
        out.push(b'{');
        out.extend_from_slice(name);
        out.push(b'}');
    }
    out.push(b':');
    for p in parts {
        out.extend_from_slice(p);
    }
    out
}

/// The key of a read hold's lease: `{name}:<owner>:rwlock_timeout:<k>`.
pub fn rwlock_hold(name: &[u8], owner: &[u8], k: i64) -> Vec<u8> {
    let k = itoa::Buffer::new().format(k).as_bytes().to_vec();
    suffixed(name, &[owner, b":rwlock_timeout:", &k])
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

    #[test]
    fn redisson_suffix_rule() {
        assert_eq!(
            rwlock_hold(b"rw", b"u:1", 2),
            b"{rw}:u:1:rwlock_timeout:2".to_vec()
        );
        assert_eq!(
            rwlock_hold(b"{app}:rw", b"u:1", 10),
            b"{app}:rw:u:1:rwlock_timeout:10".to_vec()
        );
    }
}
