//! `RLOCK.*`: the exclusive reentrant lock, in Redisson's `RLock` layout (a hash whose one
//! field, the owner, counts the holds; the key's TTL is the lease). Parsing, decisions, and the
//! lock's side of the waiting mechanism ([`LockRequest`]).

use super::args::{self, Opt, WaitArgs, WAIT_OPTS};
use super::decision::{Decision, Reply, Write};
use super::error::CmdError;
use super::names;
use super::stats::ObjectKind;
use super::store::{Int, KeyType, Store, Target};
use super::wait::{Hold, Object, Request, TryGrant};
use std::borrow::Cow;

// ---- arguments ---------------------------------------------------------------------------------

/// `RLOCK.ACQUIRE key owner lease_ms [BLOCK timeout_ms] [SESSION name [QUEUE request timeout_ms]]
/// [FENCE]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub lease_ms: i64,
    pub wait: WaitArgs<'a>,
    pub fence: bool,
}

const FENCE: Opt = Opt {
    name: "FENCE",
    values: 0,
    needs: "",
};

pub fn parse_acquire<'a>(argv: &[&'a [u8]]) -> Result<AcquireArgs<'a>, CmdError> {
    args::arity(argv, |n| n >= 4, "rlock.acquire")?;
    args::owner(argv[2])?;
    if argv[2] == names::RWLOCK_MODE {
        // A lock held by `mode` would read as a read-write lock.
        return Err(CmdError::ReservedOwner);
    }
    let mut req = AcquireArgs {
        lease_ms: args::lease(argv[3])?,
        wait: WaitArgs::new(),
        fence: false,
    };
    let [block, session, queue] = WAIT_OPTS;
    args::options(&argv[4..], &[block, session, queue, &FENCE], |k, v| {
        if k < WAIT_OPTS.len() {
            return req.wait.take(k, v);
        }
        req.fence = true;
        Ok(())
    })?;
    req.wait = req.wait.finish()?;
    Ok(req)
}

/// `RLOCK.RELEASE key owner`
pub fn parse_release(argv: &[&[u8]]) -> Result<(), CmdError> {
    args::arity(argv, |n| n == 3, "rlock.release")?;
    args::owner(argv[2])
}

/// `RLOCK.RENEW key owner lease_ms`: the lease.
pub fn parse_renew(argv: &[&[u8]]) -> Result<i64, CmdError> {
    args::arity(argv, |n| n == 4, "rlock.renew")?;
    args::owner(argv[2])?;
    args::lease(argv[3])
}

/// `RLOCK.FORCERELEASE key`
pub fn parse_force_release(argv: &[&[u8]]) -> Result<(), CmdError> {
    args::arity(argv, |n| n == 2, "rlock.forcerelease")
}

/// `RLOCK.INFO key`
pub fn parse_info(argv: &[&[u8]]) -> Result<(), CmdError> {
    args::arity(argv, |n| n == 2, "rlock.info")
}

// ---- decisions -----------------------------------------------------------------------------------

/// What the lock key holds, as far as one owner is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    Free,
    /// A hash; `mine` is this owner's field.
    Held {
        mine: Int,
    },
    WrongType,
}

fn view(store: &(impl Store + ?Sized), owner: &[u8]) -> View {
    match kind(store) {
        KeyType::Empty => View::Free,
        KeyType::Hash => View::Held {
            mine: store.hget_int(&Target::Main, owner),
        },
        _ => View::WrongType,
    }
}

/// What the key holds, a read-write lock's hash counting as another kind (`KeyType::Other`): the
/// lock commands never read, change or delete it as a lock.
fn kind(store: &(impl Store + ?Sized)) -> KeyType {
    match store.kind(&Target::Main) {
        KeyType::Hash if store.hget_int(&Target::Main, names::RWLOCK_MODE) != Int::Absent => {
            KeyType::Other
        }
        k => k,
    }
}

/// How an acquire ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Took {
    /// Taken while free.
    Fresh,
    /// Re-entered by its holder.
    Reentry,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Acquire<'a> {
    Grant(Decision<'a>, Took),
    /// Held by someone else (or free with waiters queued ahead): wait, or fail.
    Busy,
}

/// The writes of a grant: the token first (if its key is unusable, nothing else is written),
/// then the hold and its lease.
fn grant<'a>(name: &[u8], owner: &'a [u8], count: i64, at: i64, fence: bool) -> Decision<'a> {
    let mut writes = Vec::with_capacity(3);
    if fence {
        writes.push(Write::NextToken {
            key: Target::Aux(names::prefixed(names::FENCE_TOKEN, name)),
        });
    }
    writes.push(Write::HSetInt {
        key: Target::Main,
        field: Cow::Borrowed(owner),
        value: count,
    });
    writes.push(Write::PExpireAt {
        key: Target::Main,
        at,
    });
    let reply = if fence {
        Reply::Token
    } else {
        Reply::Int(count)
    };
    Decision::new(writes, reply)
}

/// Acquire for `owner`; `queued`: others wait for this key (a newcomer never overtakes them).
pub fn acquire<'a>(
    store: &(impl Store + ?Sized),
    owner: &'a [u8],
    lease_ms: i64,
    fence: bool,
    queued: bool,
) -> Result<Acquire<'a>, CmdError> {
    let at = args::deadline(store.now(), lease_ms, "lease_ms")?;
    let name = store.key_name();
    match view(store, owner) {
        View::WrongType => Err(CmdError::WrongType),
        View::Free if queued => Ok(Acquire::Busy),
        View::Free => Ok(Acquire::Grant(
            grant(name, owner, 1, at, fence),
            Took::Fresh,
        )),
        View::Held { mine: Int::Absent } => Ok(Acquire::Busy),
        View::Held { mine: Int::NotInt } => Err(CmdError::CorruptCount),
        View::Held { mine: Int::Is(n) } => {
            // Re-entry never waits. A count below 1 was not written by a lock client; re-entry
            // repairs it to 1.
            let count = n.max(0).checked_add(1).ok_or(CmdError::CountOverflow)?;
            Ok(Acquire::Grant(
                grant(name, owner, count, at, fence),
                Took::Reentry,
            ))
        }
    }
}

/// The writes of a full release (or a force release): delete, and tell Redisson's waiters.
fn free(name: &[u8]) -> Vec<Write<'static>> {
    vec![
        Write::Del { key: Target::Main },
        Write::Publish {
            channel: names::prefixed(names::LOCK_CHANNEL, name),
            message: 0,
        },
    ]
}

/// Release one hold of `owner`. The flag says whether it was the last one.
pub fn release<'a>(
    store: &(impl Store + ?Sized),
    owner: &'a [u8],
) -> Result<(Decision<'a>, bool), CmdError> {
    match view(store, owner) {
        View::WrongType => Err(CmdError::WrongType),
        View::Free | View::Held { mine: Int::Absent } => Err(CmdError::NotOwner),
        View::Held { mine: Int::NotInt } => Err(CmdError::CorruptCount),
        // A partial release keeps the TTL (the contract; Redisson re-arms it client-side).
        View::Held { mine: Int::Is(n) } if n > 1 => Ok((
            Decision::new(
                vec![Write::HSetInt {
                    key: Target::Main,
                    field: Cow::Borrowed(owner),
                    value: n - 1,
                }],
                Reply::Int(n - 1),
            ),
            false,
        )),
        View::Held { mine: Int::Is(_) } => {
            Ok((Decision::new(free(store.key_name()), Reply::Int(0)), true))
        }
    }
}

/// Extend the lease when `owner` holds the lock (Redisson's `hexists` check): reply 1, else 0.
pub fn renew(
    store: &(impl Store + ?Sized),
    owner: &[u8],
    lease_ms: i64,
) -> Result<Decision<'static>, CmdError> {
    let at = args::deadline(store.now(), lease_ms, "lease_ms")?;
    match view(store, owner) {
        View::WrongType => Err(CmdError::WrongType),
        View::Held { mine: Int::NotInt } => Err(CmdError::CorruptCount),
        View::Held { mine: Int::Is(_) } => Ok(Decision::new(
            vec![Write::PExpireAt {
                key: Target::Main,
                at,
            }],
            Reply::Int(1),
        )),
        View::Free | View::Held { mine: Int::Absent } => Ok(Decision::reply(Reply::Int(0))),
    }
}

/// Delete the lock whoever holds it (never data that is not a lock): reply 1, or 0 when free.
pub fn force_release(store: &(impl Store + ?Sized)) -> Result<Decision<'static>, CmdError> {
    match kind(store) {
        KeyType::Empty => Ok(Decision::reply(Reply::Int(0))),
        KeyType::Hash => Ok(Decision::new(free(store.key_name()), Reply::Int(1))),
        _ => Err(CmdError::WrongType),
    }
}

/// Remaining ms of a key's lease: -2 absent, -1 without expiry (as PTTL).
pub fn ttl_ms(store: &(impl Store + ?Sized), key: &Target, exists: bool) -> i64 {
    if !exists {
        return -2;
    }
    store
        .expire_at(key)
        .map_or(-1, |at| (at - store.now()).max(0))
}

/// `RLOCK.INFO`: owner, holds, ttl_ms, token, waiters, queue (`queue`: the waiters as shown).
/// `token_readable`: whether the caller may read the fencing-token key (if not, `token` is nil:
/// a user who may read the lock is not thereby allowed to read the counter beside it).
pub fn info(
    store: &(impl Store + ?Sized),
    queue: Vec<Reply>,
    token_readable: bool,
) -> Result<Reply, CmdError> {
    let kind = kind(store);
    if !matches!(kind, KeyType::Empty | KeyType::Hash) {
        return Err(CmdError::WrongType);
    }
    // Redisson's layout has one field: report the first one found, without reading the rest.
    let first = (kind == KeyType::Hash)
        .then(|| store.hfirst(&Target::Main))
        .flatten();
    let holds = match &first {
        Some((_, v)) => args::parse_i64(v).unwrap_or(0),
        None => 0,
    };
    let token = match token_readable {
        true => store.get_int(&Target::Aux(names::prefixed(
            names::FENCE_TOKEN,
            store.key_name(),
        ))),
        false => Int::Absent,
    };
    Ok(Reply::Map(vec![
        ("owner", Reply::bulk_or_nil(first.map(|(f, _)| f))),
        ("holds", Reply::Int(holds)),
        (
            "ttl_ms",
            Reply::Int(ttl_ms(store, &Target::Main, kind == KeyType::Hash)),
        ),
        (
            "token",
            match token {
                Int::Is(t) => Reply::Int(t),
                _ => Reply::Nil,
            },
        ),
        ("waiters", Reply::Int(queue.len() as i64)),
        ("queue", Reply::Array(queue)),
    ]))
}

// ---- waiting -------------------------------------------------------------------------------------

/// The lock around its queue: one hold, which ends with the key's expiry; nothing to tidy.
pub struct LockObject;

impl Object for LockObject {
    fn kind(&self) -> ObjectKind {
        ObjectKind::Lock
    }

    fn held_until(&self, owner: &[u8], _exclusive: bool, store: &dyn Store) -> Option<Option<i64>> {
        match store.hget_int(&Target::Main, owner) {
            Int::Is(n) if n >= 1 => Some(store.expire_at(&Target::Main)),
            _ => None,
        }
    }

    fn holders_upto(&self, store: &dyn Store, limit: usize) -> Vec<(Vec<u8>, bool)> {
        // Redisson's layout has one field, the holder; every field counts, as an owner.
        let fields = store.hgetall(&Target::Main).into_iter();
        let mut hs: Vec<_> = fields.map(|(owner, _)| (owner, true)).collect();
        hs.truncate(limit);
        hs
    }
}

/// A queued `RLOCK.ACQUIRE`: granted when the key is free, with its lease counted from then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRequest {
    pub owner: Box<[u8]>,
    pub lease_ms: i64,
    pub fence: bool,
}

impl Request for LockRequest {
    fn object(&self) -> &'static dyn Object {
        &LockObject
    }

    fn try_grant(&self, store: &dyn Store) -> TryGrant<'_> {
        match kind(store) {
            KeyType::Empty => match args::deadline(store.now(), self.lease_ms, "lease_ms") {
                Ok(at) => TryGrant::Grant(grant(store.key_name(), &self.owner, 1, at, self.fence)),
                Err(e) => TryGrant::Fail(e),
            },
            KeyType::Hash => TryGrant::Wait,
            _ => TryGrant::Fail(CmdError::WrongType),
        }
    }

    fn undo(&self, _granted: &Reply, store: &dyn Store) -> Option<Decision<'_>> {
        // Only the untouched grant (count 1) is undone; anything else was done by a live client.
        (store.hget_int(&Target::Main, &self.owner) == Int::Is(1))
            .then(|| Decision::writes(free(store.key_name())))
    }

    fn aux_keys(&self, store: &dyn Store) -> Vec<Vec<u8>> {
        if self.fence {
            vec![names::prefixed(names::FENCE_TOKEN, store.key_name())]
        } else {
            Vec::new()
        }
    }

    fn show(&self) -> Reply {
        Reply::Bulk(self.owner.to_vec())
    }

    fn holds(&self) -> Option<&dyn Hold> {
        Some(self)
    }
}

impl Hold for LockRequest {
    fn owner(&self) -> &[u8] {
        &self.owner
    }

    /// A grant (first hold or re-entry) sets the lock's lease to `lease_ms` from now.
    fn granted_until(&self, now: i64) -> Option<Option<i64>> {
        Some(Some(now.saturating_add(self.lease_ms)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::args::WaitMode;
    use crate::core::mem::Mem;
    use crate::core::wait::ObjectKeys;

    fn a(args: &[&'static str]) -> Result<AcquireArgs<'static>, CmdError> {
        let v: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        parse_acquire(&v)
    }

    #[test]
    fn acquire_options() {
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "100"]),
            Ok(AcquireArgs {
                lease_ms: 100,
                wait: WaitArgs::new(),
                fence: false
            })
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "100", "block", "0", "Fence"]),
            Ok(AcquireArgs {
                lease_ms: 100,
                wait: WaitArgs {
                    wait: WaitMode::Block(0),
                    session: None
                },
                fence: true
            })
        );
    }

    #[test]
    fn argument_errors() {
        let r =
            |v: &[&'static str]| -> Vec<&'static [u8]> { v.iter().map(|s| s.as_bytes()).collect() };
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
            a(&["rlock.acquire", "k", "o", "x"]),
            Err(CmdError::NotInteger("lease_ms"))
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "1", "BLOCK", "-1"]),
            Err(CmdError::NegativeTimeout)
        );
        assert_eq!(
            a(&["rlock.acquire", "k", "o", "1", "NX"]),
            Err(CmdError::Syntax("unknown option 'NX'".into()))
        );
        assert_eq!(parse_release(&r(&["rlock.release", "k", "o"])), Ok(()));
        assert_eq!(
            parse_release(&r(&["rlock.release", "k"])),
            Err(CmdError::Arity("rlock.release"))
        );
        assert_eq!(parse_renew(&r(&["rlock.renew", "k", "o", "5"])), Ok(5));
        assert_eq!(
            parse_renew(&r(&["rlock.renew", "k", "o", "0"])),
            Err(CmdError::LeaseTooSmall)
        );
        assert_eq!(
            parse_force_release(&r(&["rlock.forcerelease", "k", "x"])),
            Err(CmdError::Arity("rlock.forcerelease"))
        );
        assert_eq!(parse_info(&r(&["rlock.info", "k"])), Ok(()));
    }

    #[test]
    fn acquire_reenter_release() {
        let mut m = Mem::new(b"k");
        let Acquire::Grant(d, Took::Fresh) = acquire(&m, b"a", 100, false, false).unwrap() else {
            panic!()
        };
        assert_eq!(m.apply_ok(&d), Reply::Int(1));
        assert_eq!(m.ttl(b"k"), Some(100));
        assert_eq!(acquire(&m, b"b", 100, false, false), Ok(Acquire::Busy));
        let Acquire::Grant(d, Took::Reentry) = acquire(&m, b"a", 500, false, true).unwrap() else {
            panic!("re-entry never waits")
        };
        assert_eq!(m.apply_ok(&d), Reply::Int(2));
        assert_eq!(m.ttl(b"k"), Some(500));
        assert_eq!(release(&m, b"b").unwrap_err(), CmdError::NotOwner);
        let (d, full) = release(&m, b"a").unwrap();
        assert!(!full);
        assert_eq!(m.apply_ok(&d), Reply::Int(1));
        let (d, full) = release(&m, b"a").unwrap();
        assert!(full);
        assert_eq!(m.apply_ok(&d), Reply::Int(0));
        assert!(!m.exists(b"k"));
        assert_eq!(
            m.published,
            vec![(b"redisson_lock__channel:{k}".to_vec(), 0)]
        );
    }

    #[test]
    fn fencing_tokens_increase() {
        let mut m = Mem::new(b"k");
        // The counter goes on within one millisecond of the clock, and jumps to the clock term
        // when the clock passed it.
        let first = m.now * super::super::fencing::PER_MS;
        for want in [first, first + 1, first + 2] {
            let Acquire::Grant(d, _) = acquire(&m, b"a", 100, true, false).unwrap() else {
                panic!()
            };
            assert_eq!(m.apply_ok(&d), Reply::Int(want));
        }
        m.now += 1;
        let Acquire::Grant(d, _) = acquire(&m, b"a", 100, true, false).unwrap() else {
            panic!()
        };
        assert_eq!(m.apply_ok(&d), Reply::Int(m.now * 1_000));
        m.set_str(b"redisson_lock_token:{k}", b"nope");
        let Acquire::Grant(d, _) = acquire(&m, b"a", 100, true, false).unwrap() else {
            panic!()
        };
        assert_eq!(m.write_serving(&d), Err(CmdError::CorruptToken));
        assert_eq!(
            m.hget_int(&Target::Main, b"a"),
            Int::Is(4),
            "nothing written"
        );
    }

    #[test]
    fn wrong_types_and_corrupt_counts() {
        let mut m = Mem::new(b"k");
        m.set_str(b"k", b"x");
        assert_eq!(acquire(&m, b"a", 1, false, false), Err(CmdError::WrongType));
        assert_eq!(release(&m, b"a").unwrap_err(), CmdError::WrongType);
        assert_eq!(renew(&m, b"a", 5), Err(CmdError::WrongType));
        assert_eq!(force_release(&m), Err(CmdError::WrongType));
        assert_eq!(info(&m, vec![], true), Err(CmdError::WrongType));
        let mut m = Mem::new(b"k");
        m.hset(b"k", b"a", b"x");
        assert_eq!(
            acquire(&m, b"a", 1, false, false),
            Err(CmdError::CorruptCount)
        );
        assert_eq!(release(&m, b"a").unwrap_err(), CmdError::CorruptCount);
        m.hset(b"k", b"a", itoa::Buffer::new().format(i64::MAX).as_bytes());
        assert_eq!(
            acquire(&m, b"a", 1, false, false),
            Err(CmdError::CountOverflow)
        );
        m.hset(b"k", b"a", b"-4");
        assert!(matches!(
            acquire(&m, b"a", 1, false, false),
            Ok(Acquire::Grant(_, Took::Reentry))
        ));
    }

    #[test]
    fn renew_force_and_info() {
        let mut m = Mem::new(b"k");
        assert_eq!(m.apply_ok(&renew(&m, b"a", 5).unwrap()), Reply::Int(0));
        assert_eq!(m.apply_ok(&force_release(&m).unwrap()), Reply::Int(0));
        let Acquire::Grant(d, _) = acquire(&m, b"a", 100, false, false).unwrap() else {
            panic!()
        };
        m.apply_ok(&d);
        m.now += 40;
        assert_eq!(m.apply_ok(&renew(&m, b"a", 500).unwrap()), Reply::Int(1));
        assert_eq!(m.ttl(b"k"), Some(500));
        let shown = info(&m, vec![Reply::Bulk(b"w".to_vec())], true).unwrap();
        assert_eq!(
            shown,
            Reply::Map(vec![
                ("owner", Reply::Bulk(b"a".to_vec())),
                ("holds", Reply::Int(1)),
                ("ttl_ms", Reply::Int(500)),
                ("token", Reply::Nil),
                ("waiters", Reply::Int(1)),
                ("queue", Reply::Array(vec![Reply::Bulk(b"w".to_vec())])),
            ])
        );
        assert_eq!(m.apply_ok(&force_release(&m).unwrap()), Reply::Int(1));
        assert!(!m.exists(b"k"));
    }

    #[test]
    fn a_read_write_locks_hash_is_another_kind() {
        let mut m = Mem::new(b"k");
        m.hset(b"k", b"mode", b"read");
        m.hset(b"k", b"r", b"1");
        assert_eq!(
            acquire(&m, b"r", 100, false, false),
            Err(CmdError::WrongType)
        );
        assert_eq!(release(&m, b"r").err(), Some(CmdError::WrongType));
        assert_eq!(renew(&m, b"r", 100).err(), Some(CmdError::WrongType));
        assert_eq!(force_release(&m), Err(CmdError::WrongType));
        assert_eq!(info(&m, vec![], true), Err(CmdError::WrongType));
        let w = LockRequest {
            owner: b"w".as_slice().into(),
            lease_ms: 50,
            fence: false,
        };
        assert!(matches!(
            w.try_grant(&m),
            TryGrant::Fail(CmdError::WrongType)
        ));
        assert!(m.exists(b"k"), "never deleted");
        assert_eq!(
            parse_acquire(&[b"rlock.acquire", b"k", b"mode", b"100"]),
            Err(CmdError::ReservedOwner),
            "a lock held by `mode` would read as a read-write lock"
        );
    }

    #[test]
    fn a_waiter_is_served_when_free_and_undone_only_untouched() {
        let mut m = Mem::new(b"k");
        let w = LockRequest {
            owner: b"w".as_slice().into(),
            lease_ms: 50,
            fence: false,
        };
        m.hset(b"k", b"a", b"1");
        assert!(matches!(w.try_grant(&m), TryGrant::Wait));
        m.del(b"k");
        let TryGrant::Grant(d) = w.try_grant(&m) else {
            panic!()
        };
        assert_eq!(m.apply_ok(&d), Reply::Int(1));
        assert_eq!(m.ttl(b"k"), Some(50));
        assert_eq!(w.object().wake_at(&m), Some(m.now + 50));
        let undo = w
            .undo(&Reply::Int(1), &m)
            .expect("untouched grant is undone");
        m.apply_ok(&undo);
        assert!(!m.exists(b"k"));
        m.hset(b"k", b"w", b"2");
        assert!(w.undo(&Reply::Int(1), &m).is_none(), "re-entered since");
        m.set_str(b"k", b"x");
        assert!(matches!(
            w.try_grant(&m),
            TryGrant::Fail(CmdError::WrongType)
        ));
    }
}

/// Property tests: random operation sequences on one lock through these rules and the shared
/// serving loop (the real one, over the in-memory store), driven as the skin drives them: the
/// queue is served before a newcomer is decided and after every event that may free the lock.
/// `make fuzz` raises the case count through `PROPTEST_CASES`.
#[cfg(test)]
mod prop_tests {
    use super::*;
    use crate::core::mem::Mem;
    use crate::core::wait::{serve, KeyId, Outcome, Queues, Req, Waiter};
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[derive(Debug, Clone)]
    enum Op {
        /// Owner `o` acquires; `block`: queues when busy.
        Acquire {
            o: u8,
            block: bool,
        },
        Release {
            o: u8,
        },
        Renew {
            o: u8,
        },
        Force,
        /// Time passes (the lease may run out).
        Tick {
            ms: i64,
        },
        /// The `i`-th queued waiter (modulo the queue length) times out or disconnects.
        Leave {
            i: usize,
        },
        /// The key is overwritten with a string (SET): waiters end with WRONGTYPE.
        Clobber,
        /// The clobbering value is deleted again.
        Unclobber,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..4, any::<bool>()).prop_map(|(o, block)| Op::Acquire { o, block }),
            3 => (0u8..4).prop_map(|o| Op::Release { o }),
            1 => (0u8..4).prop_map(|o| Op::Renew { o }),
            1 => Just(Op::Force),
            2 => (1i64..150).prop_map(|ms| Op::Tick { ms }),
            2 => (0usize..8).prop_map(|i| Op::Leave { i }),
            1 => Just(Op::Clobber),
            1 => Just(Op::Unclobber),
        ]
    }

    const LEASE: i64 = 100;

    struct Sim {
        mem: Mem,
        queues: Queues<u32, Req>,
        /// The model of the queue: (handle, owner) in arrival order.
        model: VecDeque<(u32, u8)>,
        next: u32,
        /// Handles granted from the queue, in order.
        granted: Vec<u32>,
        arrivals: Vec<u32>,
    }

    fn id() -> KeyId {
        KeyId::new(0, b"lock")
    }

    fn owner(o: u8) -> Vec<u8> {
        vec![b'a' + o]
    }

    impl Sim {
        fn holder(&self) -> Option<(u8, i64)> {
            let h = self.mem.hash(b"lock");
            let (f, v) = h.iter().next()?;
            Some((f[0] - b'a', String::from_utf8_lossy(v).parse().unwrap()))
        }

        fn serve(&mut self) {
            let served = serve(&mut self.queues, &id(), &mut self.mem);
            for o in served.outcomes {
                match o {
                    Outcome::Granted { waiter, reply, .. } => {
                        assert_eq!(reply, Reply::Int(1));
                        let (h, ow) = self.model.pop_front().expect("model has the waiter");
                        assert_eq!(waiter.handle, h, "FIFO head");
                        assert_eq!(self.holder(), Some((ow, 1)));
                        self.granted.push(h);
                    }
                    Outcome::Failed { waiter, error } => {
                        assert_eq!(error, CmdError::WrongType);
                        self.model.retain(|(h, _)| *h != waiter.handle);
                    }
                }
            }
            self.queues.forget_if_idle(&id());
        }

        fn step(&mut self, op: &Op) {
            match *op {
                Op::Acquire { o, block } => {
                    self.serve();
                    let queued = self.queues.is_queued(&id());
                    let who = owner(o);
                    match acquire(&self.mem, &who, LEASE, false, queued) {
                        Ok(Acquire::Grant(d, took)) => {
                            let before = self.holder();
                            let n = self.mem.apply_ok(&d);
                            match took {
                                Took::Fresh => {
                                    assert!(before.is_none() && !queued);
                                    assert_eq!(n, Reply::Int(1));
                                }
                                Took::Reentry => {
                                    let (b, c) = before.expect("re-entry of a held lock");
                                    assert_eq!((b, n), (o, Reply::Int(c + 1)));
                                }
                            }
                        }
                        Ok(Acquire::Busy) => {
                            assert!(queued || self.holder().is_some_and(|(b, _)| b != o));
                            if block {
                                let h = self.next;
                                self.next += 1;
                                let req: Req = std::rc::Rc::new(LockRequest {
                                    owner: who.into(),
                                    lease_ms: LEASE,
                                    fence: false,
                                });
                                self.queues.push(
                                    &id(),
                                    Waiter {
                                        handle: h,
                                        serial: h as u64,
                                        req,
                                        deadline: None,
                                        queued_us: 0,
                                    },
                                );
                                self.model.push_back((h, o));
                                self.arrivals.push(h);
                            }
                        }
                        Err(e) => assert_eq!(e, CmdError::WrongType),
                    }
                }
                Op::Release { o } => {
                    match release(&self.mem, &owner(o)) {
                        Ok((d, full)) => {
                            let (b, c) = self.holder().expect("held");
                            assert_eq!((b, full), (o, c == 1));
                            self.mem.apply_ok(&d);
                        }
                        Err(CmdError::NotOwner) => {
                            assert!(self.holder().is_none_or(|(b, _)| b != o))
                        }
                        Err(e) => assert_eq!(e, CmdError::WrongType),
                    }
                    self.serve();
                }
                Op::Renew { o } => match renew(&self.mem, &owner(o), LEASE) {
                    Ok(d) => {
                        let r = self.mem.apply_ok(&d);
                        let mine = self.holder().is_some_and(|(b, _)| b == o);
                        assert_eq!(r, Reply::Int(mine as i64));
                    }
                    Err(e) => assert_eq!(e, CmdError::WrongType),
                },
                Op::Force => {
                    if let Ok(d) = force_release(&self.mem) {
                        self.mem.apply_ok(&d);
                    }
                    self.serve();
                }
                Op::Tick { ms } => {
                    self.mem.now += ms;
                    self.mem.expire();
                    self.serve();
                }
                Op::Leave { i } => {
                    if !self.model.is_empty() {
                        let (h, _) = self.model.remove(i % self.model.len()).unwrap();
                        let (kid, w) = self.queues.remove(h).expect("a queued waiter is found");
                        assert_eq!((kid, w.handle), (id(), h));
                        assert!(self.queues.remove(h).is_none(), "removed once");
                        self.serve();
                    }
                }
                Op::Clobber => {
                    self.mem.set_str(b"lock", b"x");
                    self.serve();
                    assert!(self.model.is_empty(), "every waiter ended with WRONGTYPE");
                }
                Op::Unclobber => {
                    if self.mem.kind(&Target::Main) == KeyType::String {
                        self.mem.del(b"lock");
                    }
                }
            }
        }

        fn check(&self) {
            // Never free (observably) while someone waits.
            if !self.model.is_empty() {
                assert!(self.holder().is_some(), "free lock with waiters");
            }
            if let Some((_, c)) = self.holder() {
                assert!(c >= 1);
            }
            // Redisson's layout: at most one field (`holder` reads only the first).
            let fields = self.mem.hash(b"lock").len();
            assert!(fields <= 1, "{fields} fields in the lock's hash");
            assert_eq!(self.queues.total(), self.model.len());
            let queued: Vec<u32> = self.queues.queued(&id());
            let model: Vec<u32> = self.model.iter().map(|&(h, _)| h).collect();
            assert_eq!(queued, model);
            // Idle queues are forgotten (no per-key memory left behind).
            assert_eq!(self.queues.get(&id()).is_some(), !self.model.is_empty());
            // Grants follow arrival order (a waiter that left is skipped, never overtaken).
            let pos = |h: &u32| self.arrivals.iter().position(|a| a == h).unwrap();
            assert!(
                self.granted.windows(2).all(|w| pos(&w[0]) < pos(&w[1])),
                "FIFO grants"
            );
        }
    }

    proptest! {
        #[test]
        fn lock_and_queue_state_machine(ops in prop::collection::vec(op(), 1..120)) {
            let mut sim = Sim {
                mem: Mem::new(b"lock"),
                queues: Queues::default(),
                model: VecDeque::new(),
                next: 0,
                granted: Vec::new(),
                arrivals: Vec::new(),
            };
            for op in &ops {
                sim.step(op);
                sim.check();
            }
        }

        /// Decisions never panic for any hold count, and re-entry never overflows silently.
        #[test]
        fn decisions_are_total(count in prop::option::of(any::<i64>()), queued in any::<bool>()) {
            let mut m = Mem::new(b"k");
            m.hset(b"k", b"other", b"1");
            if let Some(c) = count {
                m.hset(b"k", b"me", c.to_string().as_bytes());
            }
            match acquire(&m, b"me", 10, false, queued) {
                Ok(Acquire::Grant(d, Took::Reentry)) => {
                    prop_assert!(matches!(d.reply, Some(Reply::Int(n)) if n >= 1))
                }
                Ok(Acquire::Busy) => prop_assert!(count.is_none()),
                Ok(other) => prop_assert!(false, "{:?} for a held lock", other),
                Err(e) => prop_assert_eq!(e, CmdError::CountOverflow),
            }
            match release(&m, b"me") {
                Ok((d, full)) => prop_assert_eq!(full, d.reply == Some(Reply::Int(0))),
                Err(e) => prop_assert_eq!(e, CmdError::NotOwner),
            }
        }
    }
}
