//! Argument parsing for `RLOCK.*`: argv (as bytes) to typed requests, with precise errors.
//!
//! Key and owner are left in argv (the skin passes Redis' own strings to the key API without
//! copying); only their validity is checked here.

use super::error::CmdError;

/// `RLOCK.ACQUIRE key owner lease_ms [BLOCK timeout_ms] [FENCE]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquire {
    pub lease_ms: i64,
    /// `None`: do not wait. `Some(0)`: wait forever. `Some(n)`: wait at most n ms.
    pub block_ms: Option<i64>,
    pub fence: bool,
}

/// `RLOCK.RENEW key owner lease_ms`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renew {
    pub lease_ms: i64,
}

/// Redis' strict integer syntax (as `string2ll`): optional `-`, digits, no spaces, no `+`, no
/// leading zeros, within i64.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(bytes).ok()?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && s != "-0";
    if canonical {
        s.parse().ok()
    } else {
        None
    }
}

fn lease(bytes: &[u8]) -> Result<i64, CmdError> {
    let ms = parse_i64(bytes).ok_or(CmdError::NotInteger("lease_ms"))?;
    if ms < 1 {
        return Err(CmdError::LeaseTooSmall);
    }
    Ok(ms)
}

fn owner(bytes: &[u8]) -> Result<(), CmdError> {
    if bytes.is_empty() {
        Err(CmdError::EmptyOwner)
    } else {
        Ok(())
    }
}

fn arity(argv: &[&[u8]], ok: impl Fn(usize) -> bool, name: &'static str) -> Result<(), CmdError> {
    if ok(argv.len()) {
        Ok(())
    } else {
        Err(CmdError::Arity(name))
    }
}

pub fn acquire(argv: &[&[u8]]) -> Result<Acquire, CmdError> {
    arity(argv, |n| n >= 4, "rlock.acquire")?;
    owner(argv[2])?;
    let lease_ms = lease(argv[3])?;
    let mut req = Acquire {
        lease_ms,
        block_ms: None,
        fence: false,
    };
    let mut i = 4;
    while i < argv.len() {
        let word = argv[i];
        if word.eq_ignore_ascii_case(b"BLOCK") {
            if req.block_ms.is_some() {
                return Err(CmdError::Syntax("BLOCK given twice".into()));
            }
            let value = argv
                .get(i + 1)
                .ok_or_else(|| CmdError::Syntax("BLOCK needs a timeout in milliseconds".into()))?;
            let ms = parse_i64(value).ok_or(CmdError::NotInteger("timeout"))?;
            if ms < 0 {
                return Err(CmdError::NegativeTimeout);
            }
            req.block_ms = Some(ms);
            i += 2;
        } else if word.eq_ignore_ascii_case(b"FENCE") {
            if req.fence {
                return Err(CmdError::Syntax("FENCE given twice".into()));
            }
            req.fence = true;
            i += 1;
        } else {
            return Err(CmdError::Syntax(format!(
                "unknown option '{}'",
                String::from_utf8_lossy(word)
            )));
        }
    }
    Ok(req)
}

/// `RLOCK.RELEASE key owner`
pub fn release(argv: &[&[u8]]) -> Result<(), CmdError> {
    arity(argv, |n| n == 3, "rlock.release")?;
    owner(argv[2])
}

pub fn renew(argv: &[&[u8]]) -> Result<Renew, CmdError> {
    arity(argv, |n| n == 4, "rlock.renew")?;
    owner(argv[2])?;
    Ok(Renew {
        lease_ms: lease(argv[3])?,
    })
}

/// `RLOCK.FORCERELEASE key`
pub fn force_release(argv: &[&[u8]]) -> Result<(), CmdError> {
    arity(argv, |n| n == 2, "rlock.forcerelease")
}

/// `RLOCK.INFO key`
pub fn info(argv: &[&[u8]]) -> Result<(), CmdError> {
    arity(argv, |n| n == 2, "rlock.info")
}

/// `now + ms` as an absolute millisecond time, or an error naming `what` when it overflows.
pub fn deadline(now_ms: i64, ms: i64, what: &'static str) -> Result<i64, CmdError> {
    now_ms.checked_add(ms).ok_or(CmdError::OutOfRange(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(args: &[&str]) -> Result<Acquire, CmdError> {
        let v: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        acquire(&v)
    }

    #[test]
    fn integers_follow_redis_syntax() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-5"), Some(-5));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            "",
            "-",
            "+1",
            " 1",
            "1 ",
            "01",
            "-0",
            "1.5",
            "9223372036854775808",
            "1e3",
        ] {
            assert_eq!(parse_i64(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(parse_i64(b"\xff"), None);
    }

    #[test]
    fn acquire_options() {
        let base = ["rlock.acquire", "k", "o", "100"];
        assert_eq!(
            a(&base),
            Ok(Acquire {
                lease_ms: 100,
                block_ms: None,
                fence: false
            })
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "100", "block", "0", "Fence"]),
            Ok(Acquire {
                lease_ms: 100,
                block_ms: Some(0),
                fence: true
            })
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "100", "FENCE", "BLOCK", "250"]),
            Ok(Acquire {
                lease_ms: 100,
                block_ms: Some(250),
                fence: true
            })
        );
    }

    #[test]
    fn acquire_errors() {
        assert_eq!(
            a(&["rlock.acquire", "k", "o"]),
            Err(CmdError::Arity("rlock.acquire"))
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "", "1"]),
            Err(CmdError::EmptyOwner)
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "0"]),
            Err(CmdError::LeaseTooSmall)
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "-3"]),
            Err(CmdError::LeaseTooSmall)
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "x"]),
            Err(CmdError::NotInteger("lease_ms"))
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "1", "BLOCK"]),
            Err(CmdError::Syntax(
                "BLOCK needs a timeout in milliseconds".into()
            ))
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "1", "BLOCK", "-1"]),
            Err(CmdError::NegativeTimeout)
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "1", "BLOCK", "1.5"]),
            Err(CmdError::NotInteger("timeout"))
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "1", "BLOCK", "1", "BLOCK", "2"]),
            Err(CmdError::Syntax("BLOCK given twice".into()))
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "1", "FENCE", "FENCE"]),
            Err(CmdError::Syntax("FENCE given twice".into()))
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "1", "NX"]),
            Err(CmdError::Syntax("unknown option 'NX'".into()))
        );
    }

    #[test]
    fn other_commands() {
        fn r<'a>(v: &[&'a str]) -> Vec<&'a [u8]> {
            v.iter().map(|s| s.as_bytes()).collect()
        }
        assert_eq!(release(&r(&["rlock.release", "k", "o"])), Ok(()));
        assert_eq!(
            release(&r(&["rlock.release", "k"])),
            Err(CmdError::Arity("rlock.release"))
        );
        assert_eq!(
            release(&r(&["rlock.release", "k", ""])),
            Err(CmdError::EmptyOwner)
        );
        assert_eq!(
            renew(&r(&["rlock.renew", "k", "o", "5"])),
            Ok(Renew { lease_ms: 5 })
        );
        assert_eq!(
            renew(&r(&["rlock.renew", "k", "o", "0"])),
            Err(CmdError::LeaseTooSmall)
        );
        assert_eq!(
            force_release(&r(&["rlock.forcerelease", "k", "x"])),
            Err(CmdError::Arity("rlock.forcerelease"))
        );
        assert_eq!(info(&r(&["rlock.info", "k"])), Ok(()));
    }

    #[test]
    fn deadlines_do_not_overflow() {
        assert_eq!(deadline(1_000, 5, "lease_ms"), Ok(1_005));
        assert_eq!(
            deadline(1_000, i64::MAX, "lease_ms"),
            Err(CmdError::OutOfRange("lease_ms"))
        );
    }
}

/// Property tests (fuzzing the parser with proptest; `make fuzz` raises the case count through
/// `PROPTEST_CASES`).
#[cfg(test)]
mod prop_tests {
    use super::*;
    use proptest::prelude::*;

    /// Words the parser knows, in random case, mixed with integers and junk bytes.
    fn word() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            3 => prop::sample::select(vec!["BLOCK", "block", "Block", "FENCE", "fence", "fEnCe"])
                .prop_map(|s| s.as_bytes().to_vec()),
            3 => any::<i64>().prop_map(|n| n.to_string().into_bytes()),
            2 => (0i64..100_000).prop_map(|n| n.to_string().into_bytes()),
            1 => prop::sample::select(vec!["", "-", "-0", "01", "+1", " 1", "1 ", "1.5", "1e3",
                "9223372036854775808", "-9223372036854775809", "\r\n", "\0"])
                .prop_map(|s| s.as_bytes().to_vec()),
            2 => prop::collection::vec(any::<u8>(), 0..12),
        ]
    }

    fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
        v.iter().map(|w| w.as_slice()).collect()
    }

    proptest! {
        /// Every i64 round-trips through its decimal text.
        #[test]
        fn i64_round_trips(n in any::<i64>()) {
            prop_assert_eq!(parse_i64(n.to_string().as_bytes()), Some(n));
        }

        /// Only canonical text parses: whatever parses prints back to the same bytes (no `+`,
        /// spaces, leading zeros or `-0`), as Redis' `string2ll`.
        #[test]
        fn only_canonical_integers_parse(bytes in prop::collection::vec(any::<u8>(), 0..24)) {
            if let Some(n) = parse_i64(&bytes) {
                prop_assert_eq!(n.to_string().into_bytes(), bytes);
            }
        }

        /// Arbitrary argument vectors never panic, and an accepted request is consistent with
        /// its arguments: lease >= 1, timeout >= 0, each option present iff its word is.
        #[test]
        fn acquire_accepts_only_consistent_requests(
            key in prop::collection::vec(any::<u8>(), 0..6),
            owner in word(),
            lease in word(),
            rest in prop::collection::vec(word(), 0..6),
        ) {
            let mut argv = vec![b"rlock.acquire".to_vec(), key, owner, lease];
            argv.extend(rest);
            let r = acquire(&refs(&argv));
            // The other commands must not panic on the same vectors either.
            let _ = release(&refs(&argv));
            let _ = renew(&refs(&argv));
            let _ = force_release(&refs(&argv));
            let _ = info(&refs(&argv));
            match r {
                Ok(req) => {
                    prop_assert!(!argv[2].is_empty());
                    prop_assert_eq!(parse_i64(&argv[3]), Some(req.lease_ms));
                    prop_assert!(req.lease_ms >= 1);
                    let opts = &argv[4..];
                    let is = |w: &[u8], name: &[u8]| w.eq_ignore_ascii_case(name);
                    // Walk the options as the grammar says and compare.
                    let (mut block, mut fence, mut i) = (None, false, 0);
                    while i < opts.len() {
                        if is(&opts[i], b"BLOCK") {
                            block = parse_i64(&opts[i + 1]);
                            i += 2;
                        } else {
                            prop_assert!(is(&opts[i], b"FENCE"));
                            fence = true;
                            i += 1;
                        }
                    }
                    prop_assert_eq!(req.block_ms, block);
                    prop_assert!(req.block_ms.is_none_or(|b| b >= 0));
                    prop_assert_eq!(req.fence, fence);
                }
                Err(e) => {
                    let text = e.to_string();
                    prop_assert!(text.starts_with("ERR "), "{}", text);
                }
            }
        }

        /// Every well-formed request parses to exactly what was written, options in any order
        /// and case.
        #[test]
        fn well_formed_acquires_parse(
            lease in 1i64..=i64::MAX,
            block in prop::option::of(0i64..=i64::MAX),
            fence in any::<bool>(),
            fence_first in any::<bool>(),
            lower in any::<bool>(),
        ) {
            let case = |s: &str| if lower { s.to_lowercase() } else { s.to_string() };
            let mut argv: Vec<Vec<u8>> = ["RLOCK.ACQUIRE", "k", "owner"]
                .iter().map(|s| s.as_bytes().to_vec()).collect();
            argv.push(lease.to_string().into_bytes());
            let mut opts: Vec<Vec<u8>> = Vec::new();
            if let Some(b) = block {
                opts.push(case("BLOCK").into_bytes());
                opts.push(b.to_string().into_bytes());
            }
            if fence {
                if fence_first { opts.insert(0, case("FENCE").into_bytes()); }
                else { opts.push(case("FENCE").into_bytes()); }
            }
            argv.extend(opts);
            prop_assert_eq!(
                acquire(&refs(&argv)),
                Ok(Acquire { lease_ms: lease, block_ms: block, fence })
            );
        }

        /// `deadline` is `checked_add`: it never wraps.
        #[test]
        fn deadlines_never_wrap(now in 0i64..=i64::MAX, ms in 0i64..=i64::MAX) {
            match deadline(now, ms, "x") {
                Ok(t) => prop_assert!(t >= now && t - now == ms),
                Err(e) => {
                    prop_assert_eq!(e, CmdError::OutOfRange("x"));
                    prop_assert!(now.checked_add(ms).is_none());
                }
            }
        }
    }
}
