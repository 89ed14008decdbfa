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

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag (the
/// part between the first `{` and the next `}`, when not empty), modulo 16384.
pub(crate) fn slot(key: &str) -> u16 {
    let k = key.as_bytes();
    let tagged = k.iter().position(|&b| b == b'{').and_then(|open| {
        let close = k[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &k[open + 1..open + 1 + close])
    });
    crc16_xmodem(tagged.unwrap_or(k)) % 16384
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT on Redis 7.0.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}")); // empty tag: the whole key
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
        assert_eq!(slot(&token_key("orders")), slot("orders"));
    }

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
