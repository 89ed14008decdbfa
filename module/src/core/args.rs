//! Argument helpers every object's parser uses: Redis' integer syntax, durations, owners,
//! arity, option words, and the wait options (`BLOCK`).
//!
//! Keys and owners stay in argv (the skin hands Redis' own strings to the key API without
//! copying); only their validity is checked here.

use super::error::CmdError;

/// Redis' strict integer syntax (as `string2ll`): optional `-`, digits, no spaces, no `+`, no
/// leading zeros, within i64.
///
/// One pass over the bytes, accumulating downwards so that `i64::MIN` fits (UTF-8 validation
/// and `str::parse` cost 200 instructions a number; the client's default acquire has three).
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!negative).then_some(0), // "-0" is not canonical
        [b'0', ..] => return None,
        _ => {}
    }
    let mut n: i64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n.checked_mul(10)?.checked_sub(i64::from(d))?;
    }
    if negative {
        Some(n)
    } else {
        n.checked_neg()
    }
}

/// An integer argument named `what` in errors.
pub fn integer(bytes: &[u8], what: &'static str) -> Result<i64, CmdError> {
    // Not `ok_or`: its error, made and dropped on every good number, cost 24 instructions
    // (callgrind).
    match parse_i64(bytes) {
        Some(n) => Ok(n),
        None => Err(CmdError::NotInteger(what)),
    }
}

/// An integer argument of at least `min`.
pub fn at_least(bytes: &[u8], what: &'static str, min: i64) -> Result<i64, CmdError> {
    let n = integer(bytes, what)?;
    if n < min {
        return Err(CmdError::TooSmall(what, min));
    }
    Ok(n)
}

/// A lease: integer milliseconds, at least 1.
pub fn lease(bytes: &[u8]) -> Result<i64, CmdError> {
    let ms = integer(bytes, "lease_ms")?;
    if ms < 1 {
        return Err(CmdError::LeaseTooSmall);
    }
    Ok(ms)
}

pub fn owner(bytes: &[u8]) -> Result<(), CmdError> {
    if bytes.is_empty() {
        Err(CmdError::EmptyOwner)
    } else {
        Ok(())
    }
}

pub fn arity(
    argv: &[&[u8]],
    ok: impl Fn(usize) -> bool,
    name: &'static str,
) -> Result<(), CmdError> {
    if ok(argv.len()) {
        Ok(())
    } else {
        Err(CmdError::Arity(name))
    }
}

/// `now + ms` as an absolute millisecond time, or an error naming `what` when it overflows.
pub fn deadline(now_ms: i64, ms: i64, what: &'static str) -> Result<i64, CmdError> {
    match now_ms.checked_add(ms) {
        Some(at) => Ok(at),
        None => Err(CmdError::OutOfRange(what)),
    }
}

/// How long a request may wait when it cannot be granted at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    /// Reply at once (nil when not granted).
    No,
    /// `BLOCK timeout_ms`: park the caller; 0 waits forever.
    Block(i64),
    /// `SESSION s QUEUE request timeout_ms [BLOCK park_ms]`: queue in the session; the outcome
    /// goes to the session's listener. 0 waits forever. With `BLOCK`, the connection is parked
    /// first for up to `park_ms` (0: the whole wait): a grant within it is the reply, as for a
    /// blocked waiter; otherwise the reply is `QUEUED` and the wait goes on in the session.
    Queue {
        request: u64,
        timeout_ms: i64,
        park_ms: Option<i64>,
    },
}

impl WaitMode {
    /// The wait's length in ms, checked against `now` so that its deadline cannot overflow.
    pub fn check(self, now_ms: i64) -> Result<WaitMode, CmdError> {
        match self {
            WaitMode::Block(ms) => {
                deadline(now_ms, ms, "timeout")?;
            }
            WaitMode::Queue {
                timeout_ms,
                park_ms,
                ..
            } => {
                for ms in std::iter::once(timeout_ms).chain(park_ms) {
                    deadline(now_ms, ms, "timeout")?;
                }
            }
            WaitMode::No => {}
        }
        Ok(self)
    }
}

/// An option word a command accepts, with the number of values that follow it.
pub struct Opt {
    pub name: &'static str,
    pub values: usize,
    /// The error detail when its values are missing.
    pub needs: &'static str,
}

/// `BLOCK timeout_ms`, shared by every command that can wait.
pub const BLOCK: Opt = Opt {
    name: "BLOCK",
    values: 1,
    needs: "BLOCK needs a timeout in milliseconds",
};

/// The timeout after `BLOCK`: integer ms, not negative.
pub fn block(value: &[u8]) -> Result<WaitMode, CmdError> {
    Ok(WaitMode::Block(timeout(value)?))
}

fn timeout(value: &[u8]) -> Result<i64, CmdError> {
    let ms = integer(value, "timeout")?;
    if ms < 0 {
        return Err(CmdError::NegativeTimeout);
    }
    Ok(ms)
}

/// `SESSION name`: the session a request belongs to (its holds are watched for loss; with
/// `QUEUE`, it waits through the session).
pub const SESSION: Opt = Opt {
    name: "SESSION",
    values: 1,
    needs: "SESSION needs a session name",
};

/// `QUEUE request_id timeout_ms`: wait through the session (with `BLOCK`: after a first part
/// parked on the connection).
pub const QUEUE: Opt = Opt {
    name: "QUEUE",
    values: 2,
    needs: "QUEUE needs a request id and a timeout in milliseconds",
};

/// The wait options every command that can wait takes, in this order: `BLOCK`, `SESSION`,
/// `QUEUE`. An object's parser lists them first among its options and hands their values here.
pub const WAIT_OPTS: [&Opt; 3] = [&BLOCK, &SESSION, &QUEUE];

/// Where each wait option sits in [`WAIT_OPTS`] (the index `options` hands back).
pub const AT_BLOCK: usize = 0;
pub const AT_SESSION: usize = 1;
pub const AT_QUEUE: usize = 2;

/// What the wait options of a command said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitArgs<'a> {
    pub wait: WaitMode,
    pub session: Option<&'a [u8]>,
}

impl<'a> WaitArgs<'a> {
    pub fn new() -> WaitArgs<'a> {
        WaitArgs {
            wait: WaitMode::No,
            session: None,
        }
    }

    /// Take option `k` (an index into [`WAIT_OPTS`]) with its values.
    pub fn take(&mut self, k: usize, v: &[&'a [u8]]) -> Result<(), CmdError> {
        match k {
            AT_BLOCK => {
                let ms = timeout(v[0])?;
                self.wait = match self.wait {
                    WaitMode::Queue {
                        request,
                        timeout_ms,
                        ..
                    } => WaitMode::Queue {
                        request,
                        timeout_ms,
                        park_ms: Some(ms),
                    },
                    _ => WaitMode::Block(ms),
                };
            }
            AT_SESSION => {
                if v[0].is_empty() {
                    return Err(CmdError::Syntax(
                        "the session name must not be empty".into(),
                    ));
                }
                self.session = Some(v[0]);
            }
            _ => {
                debug_assert_eq!(k, AT_QUEUE);
                let request = parse_i64(v[0])
                    .filter(|n| *n >= 0)
                    .ok_or(CmdError::NotInteger("request id"))?
                    as u64;
                self.wait = WaitMode::Queue {
                    request,
                    timeout_ms: timeout(v[1])?,
                    park_ms: match self.wait {
                        WaitMode::Block(ms) => Some(ms),
                        _ => None,
                    },
                };
            }
        }
        Ok(())
    }

    /// Refuse a wait whose deadline from `now_ms` would overflow.
    pub fn check_deadline(&self, now_ms: i64) -> Result<(), CmdError> {
        self.wait.check(now_ms).map(drop)
    }

    /// Check the combination once every option is read: `QUEUE` needs `SESSION`.
    pub fn finish(self) -> Result<WaitArgs<'a>, CmdError> {
        if matches!(self.wait, WaitMode::Queue { .. }) && self.session.is_none() {
            return Err(CmdError::Syntax("QUEUE needs SESSION".into()));
        }
        Ok(self)
    }
}

impl Default for WaitArgs<'_> {
    fn default() -> Self {
        WaitArgs::new()
    }
}

/// Walk the option words in `rest` (case-insensitive), calling `on(index into known, values)`
/// for each. Unknown words, repeated options and missing values are errors.
pub fn options<'a>(
    rest: &[&'a [u8]],
    known: &[&Opt],
    mut on: impl FnMut(usize, &[&'a [u8]]) -> Result<(), CmdError>,
) -> Result<(), CmdError> {
    let mut seen = 0u64;
    let mut i = 0;
    while i < rest.len() {
        let word = rest[i];
        let Some(k) = known
            .iter()
            .position(|o| word.eq_ignore_ascii_case(o.name.as_bytes()))
        else {
            return Err(CmdError::unknown_option(word));
        };
        let opt = known[k];
        if seen & (1 << k) != 0 {
            return Err(CmdError::Syntax(format!("{} given twice", opt.name)));
        }
        seen |= 1 << k;
        let values = rest
            .get(i + 1..i + 1 + opt.values)
            .ok_or_else(|| CmdError::Syntax(opt.needs.into()))?;
        on(k, values)?;
        i += 1 + opt.values;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_redis_syntax() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-5"), Some(-5));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
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
            "-9223372036854775809",
            "-01",
            "--1",
            "1e3",
        ] {
            assert_eq!(parse_i64(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(parse_i64(b"\xff"), None);
    }

    #[test]
    fn deadlines_do_not_overflow() {
        assert_eq!(deadline(1_000, 5, "lease_ms"), Ok(1_005));
        assert_eq!(
            deadline(1_000, i64::MAX, "lease_ms"),
            Err(CmdError::OutOfRange("lease_ms"))
        );
        assert_eq!(
            WaitMode::Block(i64::MAX).check(5),
            Err(CmdError::OutOfRange("timeout"))
        );
    }

    #[test]
    fn option_walk() {
        const FENCE: Opt = Opt {
            name: "FENCE",
            values: 0,
            needs: "",
        };
        let run = |words: &[&str]| {
            let v: Vec<&[u8]> = words.iter().map(|s| s.as_bytes()).collect();
            let mut got = Vec::new();
            options(&v, &[&BLOCK, &FENCE], |k, vals| {
                got.push((k, vals.len()));
                Ok(())
            })
            .map(|_| got)
        };
        assert_eq!(run(&["fence", "Block", "5"]), Ok(vec![(1, 0), (0, 1)]));
        assert_eq!(
            run(&["BLOCK"]),
            Err(CmdError::Syntax(
                "BLOCK needs a timeout in milliseconds".into()
            ))
        );
        assert_eq!(
            run(&["FENCE", "FENCE"]),
            Err(CmdError::Syntax("FENCE given twice".into()))
        );
        assert_eq!(
            run(&["NX"]),
            Err(CmdError::Syntax("unknown option 'NX'".into()))
        );
        assert_eq!(block(b"-1"), Err(CmdError::NegativeTimeout));
        let wait = |words: &[&'static str]| {
            let v: Vec<&[u8]> = words.iter().map(|s| s.as_bytes()).collect();
            let mut w = WaitArgs::new();
            options(&v, &WAIT_OPTS, |k, vals| w.take(k, vals))?;
            w.finish()
        };
        assert_eq!(
            wait(&["session", "s1", "QUEUE", "7", "250"]),
            Ok(WaitArgs {
                wait: WaitMode::Queue {
                    request: 7,
                    timeout_ms: 250,
                    park_ms: None
                },
                session: Some(b"s1")
            })
        );
        // BLOCK with QUEUE parks the connection first, whichever comes first.
        for words in [
            ["SESSION", "s", "QUEUE", "7", "1", "BLOCK", "5"],
            ["BLOCK", "5", "SESSION", "s", "QUEUE", "7", "1"],
        ] {
            assert_eq!(
                wait(&words),
                Ok(WaitArgs {
                    wait: WaitMode::Queue {
                        request: 7,
                        timeout_ms: 1,
                        park_ms: Some(5)
                    },
                    session: Some(b"s")
                })
            );
        }
        assert_eq!(
            wait(&["QUEUE", "7", "250"]),
            Err(CmdError::Syntax("QUEUE needs SESSION".into()))
        );
        assert_eq!(
            wait(&["SESSION", "s", "QUEUE", "-1", "1"]),
            Err(CmdError::NotInteger("request id"))
        );
        assert_eq!(
            wait(&["SESSION", "s", "QUEUE", "1"]),
            Err(CmdError::Syntax(
                "QUEUE needs a request id and a timeout in milliseconds".into()
            ))
        );
        assert_eq!(block(b"1.5"), Err(CmdError::NotInteger("timeout")));
    }
}

/// Property tests of the integer syntax (`make fuzz` raises the case count through
/// `PROPTEST_CASES`).
#[cfg(test)]
mod prop_tests {
    use super::*;
    use proptest::prelude::*;

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
