//! Redis Cluster's key-to-slot rule, to refuse in cluster mode an object whose auxiliary keys
//! (a fencing token, a read hold's lease key, a semaphore's leased-permit set) would land in
//! another slot than its own key. Redisson's naming rule (`names`) keeps them together for a
//! name without braces and for a name with a proper hash tag, but not for names such as `x}y`
//! (its keys become `{x}y}:...`, hashed by `x`), `{}x` (an empty tag: every key hashed whole)
//! or `a{b` (no tag: likewise). Such an object's keys would live on different nodes, or be
//! left behind by resharding.

use crate::core::error::CmdError;

/// Slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis' `crc16.c`.
pub fn crc16(data: &[u8]) -> u16 {
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

/// The part of `key` Redis hashes: the bytes between the first `{` and the first `}` after it
/// when there are any, else the whole key (`keyHashSlot` in Redis' cluster.c).
pub fn hashed_part(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&b| b == b'}') {
            if close > 0 {
                return &rest[..close];
            }
        }
    }
    key
}

/// The cluster slot of `key`.
pub fn slot(key: &[u8]) -> u16 {
    crc16(hashed_part(key)) % SLOTS
}

/// `Ok` when every key in `aux` shares `name`'s slot; else the error naming the first that
/// does not.
pub fn check(name: &[u8], aux: &[Vec<u8>]) -> Result<(), CmdError> {
    let home = slot(name);
    match aux.iter().find(|k| slot(k) != home) {
        None => Ok(()),
        Some(k) => Err(CmdError::ForeignSlot {
            name: name.to_vec(),
            name_slot: home,
            key: k.clone(),
            key_slot: slot(k),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::names;

    #[test]
    fn crc16_matches_redis() {
        // The check value of CRC16/XMODEM, and slots Redis' CLUSTER KEYSLOT gives.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"somekey"), 11058);
        assert_eq!(slot(b""), 0);
    }

    #[test]
    fn hash_tags_follow_the_cluster_rule() {
        assert_eq!(hashed_part(b"{user1000}.following"), b"user1000");
        assert_eq!(hashed_part(b"foo{}{bar}"), b"foo{}{bar}"); // an empty first tag: whole key
        assert_eq!(hashed_part(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hashed_part(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hashed_part(b"a{b"), b"a{b");
        assert_eq!(hashed_part(b"x}y"), b"x}y");
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
    }

    /// The keys of every object kind named `name` (a fencing token, read holds of a few owners,
    /// the leased-permit set).
    fn aux_of(name: &[u8]) -> Vec<Vec<u8>> {
        let mut out = vec![
            names::prefixed(names::FENCE_TOKEN, name),
            names::semaphore_timeouts(name),
        ];
        for owner in [&b"a:1"[..], b"o}", b"{o}", b""] {
            out.push(names::rwlock_hold(name, owner, 1));
            out.push(names::rwlock_hold(name, owner, 12));
        }
        out
    }

    #[test]
    fn plain_and_tagged_names_keep_their_keys_together() {
        for name in [
            &b"lock"[..],
            b"orders:42",
            b"{app}:rw",
            b"x{y}z",
            b"{a}{b",
            b"{a}}",
        ] {
            assert_eq!(check(name, &aux_of(name)), Ok(()), "{:?}", name);
        }
    }

    #[test]
    fn names_without_a_proper_tag_are_refused() {
        // The names: `x}y`'s keys are hashed by `x`, `{}x`'s and `a{b`'s whole.
        for name in [&b"x}y"[..], b"x}y-s", b"{}x", b"a{b", b"a{b-l", b"}", b"{"] {
            let aux = aux_of(name);
            let err = check(name, &aux).unwrap_err();
            let text = err.to_string();
            assert!(text.starts_with("CROSSSLOT "), "{text}");
            assert!(text.contains("hash tag"), "{text}");
        }
        let err = check(b"x}y", &[names::rwlock_hold(b"x}y", b"a:1", 1)]).unwrap_err();
        assert_eq!(
            err,
            CmdError::ForeignSlot {
                name: b"x}y".to_vec(),
                name_slot: slot(b"x}y"),
                key: b"{x}y}:a:1:rwlock_timeout:1".to_vec(),
                key_slot: slot(b"x"),
            }
        );
    }

    #[test]
    fn names_with_no_brace_or_a_proper_tag_are_kept_and_the_others_refused() {
        // Exhaustively over short names of the interesting bytes: a name with no brace at all,
        // or whose first `{` opens a non-empty tag, keeps every key in its slot; any other
        // name is refused, unless its keys land in its slot by a CRC coincidence (1 in 16384).
        let alphabet = [b'a', b'{', b'}', b':'];
        let (mut others, mut refused) = (0, 0);
        for len in 1..=5u32 {
            for mut n in 0..alphabet.len().pow(len) {
                let mut name = Vec::new();
                for _ in 0..len {
                    name.push(alphabet[n % alphabet.len()]);
                    n /= alphabet.len();
                }
                let no_brace = !name.contains(&b'{') && !name.contains(&b'}');
                let tagged = hashed_part(&name).len() < name.len();
                let kept = check(&name, &aux_of(&name)).is_ok();
                if no_brace || tagged {
                    assert!(kept, "{:?}", String::from_utf8_lossy(&name));
                } else {
                    others += 1;
                    refused += usize::from(!kept);
                }
            }
        }
        assert!(
            others > 500 && refused + 3 >= others,
            "{refused} of {others}"
        );
    }
}
