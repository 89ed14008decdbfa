//! Redisson's naming rules for an object's auxiliary keys and channels (`RedissonObject`):
//! `prefixName(p, name)` = `p:{name}`, `suffixName(name, s)` = `{name}:s`, or without the added
//! braces when the name already has a hash tag, so every auxiliary key shares the object's
//! cluster slot.

pub const LOCK_CHANNEL: &str = "redisson_lock__channel";
pub const FENCE_TOKEN: &str = "redisson_lock_token";
pub const RWLOCK_CHANNEL: &str = "redisson_rwlock";
/// The semaphore's channel (`RSemaphore` and `RPermitExpirableSemaphore` share it).
pub const SEMAPHORE_CHANNEL: &str = "redisson_sc";
const TIMEOUT_SUFFIX: &[u8] = b"timeout";
/// The field that makes a hash a read-write lock (`read` or `write`); a lock's hash has only its
/// owner's field. Each kind's commands refuse the other's hash (`WRONGTYPE`).
pub const RWLOCK_MODE: &[u8] = b"mode";

pub fn prefixed(prefix: &str, name: &[u8]) -> Vec<u8> {
    let [a, b, c] = hash_tagged(name);
    let mut out = Vec::with_capacity(prefix.len() + name.len() + 3);
    for part in [prefix.as_bytes(), a, b, c] {
        out.extend_from_slice(part);
    }
    out
}

/// What follows a prefix: `:{name}`, or `:name` when the name has a hash tag already.
fn hash_tagged(name: &[u8]) -> [&[u8]; 3] {
    if name.contains(&b'{') {
        [b":", name, b""]
    } else {
        [b":{", name, b"}"]
    }
}

/// [`prefixed`], passed to `f` from a buffer on the stack when it fits (a channel name made
/// per release: no allocation).
pub fn prefixed_with<R>(prefix: &str, name: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    const ROOM: usize = 192;
    let len = prefix.len() + name.len() + 3;
    if len > ROOM {
        return f(&prefixed(prefix, name));
    }
    let [a, b, c] = hash_tagged(name);
    let mut buf = [0u8; ROOM];
    let mut at = 0;
    for part in [prefix.as_bytes(), a, b, c] {
        buf[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    f(&buf[..at])
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

/// The semaphore's sorted set of leased permits: `suffixName(name, "timeout")`.
pub fn semaphore_timeouts(name: &[u8]) -> Vec<u8> {
    suffixed(name, &[TIMEOUT_SUFFIX])
}

/// The semaphores whose leased-permit set `key` may be: the names `n` with
/// `semaphore_timeouts(n) == key`. There can be two (`a` and `{a}` both use `{a}:timeout`),
/// or none for any other key.
pub fn semaphores_of_timeouts(key: &[u8]) -> Vec<Vec<u8>> {
    let Some(base) = key
        .strip_suffix(TIMEOUT_SUFFIX)
        .and_then(|k| k.strip_suffix(b":"))
    else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(2);
    // A name holding `{` keeps itself: `name:timeout`.
    if base.contains(&b'{') {
        out.push(base.to_vec());
    }
    // A plain name gets braces: `{name}:timeout`.
    if let Some(inner) = base.strip_prefix(b"{").and_then(|b| b.strip_suffix(b"}")) {
        if !inner.contains(&b'{') {
            out.push(inner.to_vec());
        }
    }
    out
}

/// The count-down latch's channel: Redisson's own format, braces around every name.
pub fn latch_channel(name: &[u8]) -> Vec<u8> {
    [b"redisson_countdownlatch__channel__{", name, b"}"].concat()
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
    fn prefixed_on_the_stack_is_prefixed() {
        let long = vec![b'k'; 300];
        for name in [
            &b"myLock"[..],
            b"{app}:myLock",
            b"",
            &long,
            &long[..189],
            &long[..190],
        ] {
            for prefix in [LOCK_CHANNEL, RWLOCK_CHANNEL] {
                prefixed_with(prefix, name, |ch| assert_eq!(ch, prefixed(prefix, name)));
            }
        }
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

    #[test]
    fn semaphore_and_latch_names() {
        assert_eq!(semaphore_timeouts(b"s"), b"{s}:timeout");
        assert_eq!(semaphore_timeouts(b"{app}:s"), b"{app}:s:timeout");
        assert_eq!(prefixed(SEMAPHORE_CHANNEL, b"s"), b"redisson_sc:{s}");
        assert_eq!(
            latch_channel(b"l"),
            b"redisson_countdownlatch__channel__{l}"
        );
        assert_eq!(
            latch_channel(b"{app}:l"),
            b"redisson_countdownlatch__channel__{{app}:l}"
        );
    }

    #[test]
    fn timeout_sets_map_back_to_their_semaphores() {
        for name in [&b"s"[..], b"{app}:s", b"{s}", b"a:b", b"{x}y"] {
            let key = semaphore_timeouts(name);
            assert!(
                semaphores_of_timeouts(&key).contains(&name.to_vec()),
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
        assert_eq!(
            semaphores_of_timeouts(b"{a}:timeout"),
            vec![b"{a}".to_vec(), b"a".to_vec()]
        );
        assert!(semaphores_of_timeouts(b"s").is_empty());
        assert!(semaphores_of_timeouts(b"stimeout").is_empty());
        assert!(semaphores_of_timeouts(b"s:timeout").is_empty());
    }
}
