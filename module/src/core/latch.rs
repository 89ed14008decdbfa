//! `RLATCH.*`: the count-down latch, in Redisson's `RCountDownLatch` layout, so Redisson's own
//! scripts work on the same key: string `<key>` = the count (absent = 0 = open); channel
//! `redisson_countdownlatch__channel__{<key>}` with `0` when the count reaches zero and `1`
//! when a count is set.
//!
//! A latch is open while its count is 0 or less (absent included). Whatever opens it (a
//! countdown, Redisson's script, DEL, expiry, FLUSH) releases every waiter at once: each queued
//! [`LatchRequest`] can be granted as soon as the latch is open, so the serving loop grants the
//! whole queue in one step.

use super::args::{self, WaitArgs, WAIT_OPTS};
use super::decision::{Decision, Reply, Write};
use super::error::CmdError;
use super::names;
use super::stats::ObjectKind;
use super::store::{Int, KeyType, Store, Target};
use super::wait::{Object, Request, TryGrant};

/// The channel's payloads (Redisson's `CountDownLatchPubSub`).
const OPENED: i64 = 0;
const SET: i64 = 1;

// ---- arguments ---------------------------------------------------------------------------------

/// `RLATCH.TRYSETCOUNT key n`
pub fn parse_try_set(argv: &[&[u8]]) -> Result<i64, CmdError> {
    args::arity(argv, |n| n == 3, "rlatch.trysetcount")?;
    args::at_least(argv[2], "count", 1)
}

/// `RLATCH.AWAIT key [BLOCK timeout_ms] [SESSION s [QUEUE request timeout_ms]]`
pub fn parse_await<'a>(argv: &[&'a [u8]]) -> Result<WaitArgs<'a>, CmdError> {
    args::arity(argv, |n| n >= 2, "rlatch.await")?;
    let mut wait = WaitArgs::new();
    args::options(&argv[2..], &WAIT_OPTS, |k, v| wait.take(k, v))?;
    wait.finish()
}

/// `RLATCH.COUNTDOWN key`, `RLATCH.COUNT key`: the key only.
pub fn parse_key(argv: &[&[u8]], name: &'static str) -> Result<(), CmdError> {
    args::arity(argv, |n| n == 2, name)
}

// ---- decisions -----------------------------------------------------------------------------------

/// The count: 0 when absent; an error when the key is not a string holding an integer.
pub fn count(store: &(impl Store + ?Sized)) -> Result<i64, CmdError> {
    match (store.kind(&Target::Main), store.get_int(&Target::Main)) {
        (KeyType::Empty, _) => Ok(0),
        (KeyType::String, Int::Is(n)) => Ok(n),
        _ => Err(CmdError::WrongType),
    }
}

fn publish(store: &(impl Store + ?Sized), message: i64) -> Write<'static> {
    Write::Publish {
        channel: names::latch_channel(store.key_name()),
        message,
    }
}

/// Set the count to `n` (≥ 1) if the latch is open (absent), and publish `1`. Reply 1 set, 0 not.
pub fn try_set(store: &(impl Store + ?Sized), n: i64) -> Result<Decision<'static>, CmdError> {
    count(store)?;
    if store.kind(&Target::Main) != KeyType::Empty {
        return Ok(Decision::reply(Reply::Int(0)));
    }
    Ok(Decision::new(
        vec![
            Write::SetInt {
                key: Target::Main,
                value: n,
            },
            publish(store, SET),
        ],
        Reply::Int(1),
    ))
}

/// Count down once. Reply: the new count; at 0 (or below) the key is deleted and the reply is
/// 0, and reaching exactly 0 publishes `0` (Redisson's script). An absent latch stays as it is.
/// The flag says whether this countdown opened the latch.
pub fn count_down(store: &(impl Store + ?Sized)) -> Result<(Decision<'static>, bool), CmdError> {
    let n = count(store)?;
    if store.kind(&Target::Main) == KeyType::Empty {
        return Ok((Decision::reply(Reply::Int(0)), false));
    }
    let next = n.saturating_sub(1);
    if next > 0 {
        let d = Decision::new(
            vec![Write::IncrBy {
                key: Target::Main,
                by: -1,
            }],
            Reply::Int(next),
        );
        return Ok((d, false));
    }
    let mut writes = vec![Write::Del { key: Target::Main }];
    if next == 0 {
        writes.push(publish(store, OPENED));
    }
    Ok((Decision::new(writes, Reply::Int(0)), true))
}

/// Whether the latch is open now (count 0 or less, absent included).
pub fn is_open(store: &(impl Store + ?Sized)) -> Result<bool, CmdError> {
    Ok(count(store)? <= 0)
}

// ---- waiting -------------------------------------------------------------------------------------

/// The latch around its queue: a count with a TTL opens when it expires.
pub struct LatchObject;

impl Object for LatchObject {
    fn kind(&self) -> ObjectKind {
        ObjectKind::Latch
    }
}

/// A queued `RLATCH.AWAIT`: granted (reply 1, nothing written) as soon as the latch is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatchRequest;

impl Request for LatchRequest {
    fn object(&self) -> &'static dyn Object {
        &LatchObject
    }

    fn try_grant(&self, store: &dyn Store) -> TryGrant<'_> {
        match is_open(store) {
            Ok(true) => TryGrant::Grant(Decision::reply(Reply::Int(1))),
            Ok(false) => TryGrant::Wait,
            Err(e) => TryGrant::Fail(e),
        }
    }

    fn undo(&self, _granted: &Reply, _store: &dyn Store) -> Option<Decision<'_>> {
        None // passing an open latch takes nothing
    }

    fn show(&self) -> Reply {
        Reply::Nil
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::args::WaitMode;
    use crate::core::mem::Mem;

    fn argv<'a>(v: &[&'a str]) -> Vec<&'a [u8]> {
        v.iter().map(|s| s.as_bytes()).collect()
    }

    const CH: &[u8] = b"redisson_countdownlatch__channel__{l}";

    #[test]
    fn arguments() {
        assert_eq!(
            parse_try_set(&argv(&["rlatch.trysetcount", "l", "3"])),
            Ok(3)
        );
        assert_eq!(
            parse_try_set(&argv(&["rlatch.trysetcount", "l", "0"])),
            Err(CmdError::TooSmall("count", 1))
        );
        assert_eq!(
            parse_await(&argv(&["rlatch.await", "l"])).map(|w| w.wait),
            Ok(WaitMode::No)
        );
        assert_eq!(
            parse_await(&argv(&["rlatch.await", "l", "block", "10"])).map(|w| w.wait),
            Ok(WaitMode::Block(10))
        );
        assert_eq!(
            parse_await(&argv(&["rlatch.await", "l", "BLOCK"])),
            Err(CmdError::Syntax(
                "BLOCK needs a timeout in milliseconds".into()
            ))
        );
        assert_eq!(
            parse_key(&argv(&["rlatch.countdown"]), "rlatch.countdown"),
            Err(CmdError::Arity("rlatch.countdown"))
        );
    }

    #[test]
    fn counts_down_to_open_as_redisson() {
        let mut m = Mem::new(b"l");
        assert_eq!(is_open(&m), Ok(true), "absent is open");
        let (d, opened) = count_down(&m).unwrap();
        assert!(!opened && d.writes.is_empty());
        assert_eq!(m.apply_ok(&d), Reply::Int(0));
        assert!(
            m.published.is_empty(),
            "nothing published on an absent latch"
        );
        assert_eq!(m.apply_ok(&try_set(&m, 2).unwrap()), Reply::Int(1));
        assert_eq!(m.apply_ok(&try_set(&m, 5).unwrap()), Reply::Int(0));
        assert_eq!(m.published, vec![(CH.to_vec(), 1)]);
        assert_eq!(is_open(&m), Ok(false));
        let (d, opened) = count_down(&m).unwrap();
        assert!(!opened);
        assert_eq!(m.apply_ok(&d), Reply::Int(1));
        let (d, opened) = count_down(&m).unwrap();
        assert!(opened);
        assert_eq!(m.apply_ok(&d), Reply::Int(0));
        assert!(!m.exists(b"l"));
        assert_eq!(m.published, vec![(CH.to_vec(), 1), (CH.to_vec(), 0)]);
        // A count already at 0 or below: deleted, nothing published.
        m.set_str(b"l", b"0");
        let (d, _) = count_down(&m).unwrap();
        assert_eq!(m.apply_ok(&d), Reply::Int(0));
        assert!(!m.exists(b"l"));
        assert_eq!(m.published.len(), 2);
    }

    #[test]
    fn wrong_types() {
        let mut m = Mem::new(b"l");
        m.set_str(b"l", b"x");
        assert_eq!(count(&m), Err(CmdError::WrongType));
        assert_eq!(try_set(&m, 1), Err(CmdError::WrongType));
        assert!(matches!(count_down(&m), Err(CmdError::WrongType)));
        assert!(matches!(
            LatchRequest.try_grant(&m),
            TryGrant::Fail(CmdError::WrongType)
        ));
        let mut m = Mem::new(b"l");
        m.hset(b"l", b"f", b"1");
        assert_eq!(is_open(&m), Err(CmdError::WrongType));
    }

    #[test]
    fn a_waiter_passes_when_open_and_wakes_at_expiry() {
        let mut m = Mem::new(b"l");
        m.apply_ok(&try_set(&m, 1).unwrap());
        assert!(matches!(LatchRequest.try_grant(&m), TryGrant::Wait));
        assert_eq!(LatchRequest.object().wake_at(&m), None);
        m.set_expire(b"l", m.now + 30);
        assert_eq!(LatchRequest.object().wake_at(&m), Some(m.now + 30));
        m.now += 30;
        let TryGrant::Grant(d) = LatchRequest.try_grant(&m) else {
            panic!("expired = open")
        };
        assert!(d.writes.is_empty());
        assert_eq!(d.reply, Some(Reply::Int(1)));
    }
}

/// Property tests: random sequences of count settings, countdowns, awaits (waiting or not),
/// deletions, expiries and waiters leaving, with the queue served after every event as the
/// skin does. Checked after every step: a waiter is granted only while the latch is open, and
/// once it is open nobody is left waiting (every waiter released at once).
#[cfg(test)]
mod prop_tests {
    use super::*;
    use crate::core::mem::Mem;
    use crate::core::wait::{serve, KeyId, Outcome, Queues, Req, Waiter};
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        TrySet {
            n: i64,
        },
        CountDown,
        Await {
            block: bool,
        },
        Del,
        /// The count gets a TTL that runs out.
        Expire,
        Leave {
            i: usize,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => (1i64..4).prop_map(|n| Op::TrySet { n }),
            4 => Just(Op::CountDown),
            4 => any::<bool>().prop_map(|block| Op::Await { block }),
            1 => Just(Op::Del),
            1 => Just(Op::Expire),
            1 => (0usize..8).prop_map(|i| Op::Leave { i }),
        ]
    }

    proptest! {
        #[test]
        fn latch_releases_everyone_at_once(ops in prop::collection::vec(op(), 1..100)) {
            let id = KeyId::new(0, b"l");
            let mut m = Mem::new(b"l");
            let mut q: Queues<u32, Req> = Queues::default();
            let mut queued: Vec<u32> = Vec::new();
            let mut next = 0u32;
            for op in &ops {
                match *op {
                    Op::TrySet { n } => {
                        let d = try_set(&m, n).unwrap();
                        m.apply_ok(&d);
                    }
                    Op::CountDown => {
                        let (d, opened) = count_down(&m).unwrap();
                        m.apply_ok(&d);
                        prop_assert_eq!(opened, d.writes.contains(&Write::Del { key: Target::Main }));
                    }
                    Op::Await { block } => {
                        if !is_open(&m).unwrap() && block {
                            let req: Req = std::rc::Rc::new(LatchRequest);
                            q.push(&id, Waiter { handle: next, serial: next as u64, req, deadline: None, queued_us: 0 });
                            queued.push(next);
                            next += 1;
                        }
                    }
                    Op::Del => m.del(b"l"),
                    Op::Expire => {
                        if m.exists(b"l") {
                            m.set_expire(b"l", m.now + 5);
                        }
                        m.now += 5;
                        m.expire();
                    }
                    Op::Leave { i } => {
                        if !queued.is_empty() {
                            let h = queued.remove(i % queued.len());
                            q.remove(h).expect("queued");
                        }
                    }
                }
                // The skin serves after every event that may open the latch.
                let open = is_open(&m).unwrap();
                let served = serve(&mut q, &id, &mut m);
                let granted: Vec<u32> = served
                    .outcomes
                    .into_iter()
                    .map(|o| match o {
                        Outcome::Granted { waiter, reply, .. } => {
                            assert_eq!(reply, Reply::Int(1));
                            waiter.handle
                        }
                        Outcome::Failed { error, .. } => panic!("{error}"),
                    })
                    .collect();
                if open {
                    prop_assert_eq!(&granted, &queued, "everyone at once");
                    queued.clear();
                } else {
                    prop_assert!(granted.is_empty(), "granted while closed");
                }
                q.forget_if_idle(&id);
                prop_assert_eq!(q.total(), queued.len());
            }
        }
    }
}
