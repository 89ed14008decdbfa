//! `RLOCK.*`: the exclusive reentrant lock, in Redisson's `RLock` layout (a hash whose one
//! field, the owner, counts the holds; the key's TTL is the lease). Parsing, decisions, and the
//! lock's side of the waiting mechanism ([`LockRequest`]).

use super::args::{self, Opt, WaitArgs, WAIT_OPTS};
use super::decision::{Decision, Reply, Write};
use super::error::CmdError;
use super::names;
use super::stats::ObjectKind;
use super::store::{Int, KeyType, Store, Target};
use super::wait::{Acquiring, Decided, Hold, Object, Req, Request, TryGrant};
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
    match store.kind(&Target::Main) {
        KeyType::Empty => View::Free,
        KeyType::Hash => {
            let mine = store.hget_int(&Target::Main, owner);
            // A hash whose only field is this owner's is a lock: a read-write lock's hash has
            // its `mode` field besides its holders'. Known from the hash's length without
            // looking `mode` up (a second hash read: 740 instructions of every release,
            // callgrind). An owner named `mode` is looked up as `kind` does.
            let only_mine = mine != Int::Absent
                && owner != names::RWLOCK_MODE
                && store.hlen(&Target::Main) == 1;
            if !only_mine && store.hget_int(&Target::Main, names::RWLOCK_MODE) != Int::Absent {
                return View::WrongType;
            }
            View::Held { mine }
        }
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

/// An `RLOCK.ACQUIRE` as the acquire pipeline decides it.
pub struct LockAcquire<'a> {
    pub owner: &'a [u8],
    pub args: AcquireArgs<'a>,
}

impl<'a> Acquiring<'a> for LockAcquire<'a> {
    fn object(&self) -> &'static dyn Object {
        &LockObject
    }

    fn wait(&self) -> &WaitArgs<'a> {
        &self.args.wait
    }

    fn decide<S: Store + ?Sized>(
        &self,
        store: &S,
        queued: bool,
        _tidied: bool,
    ) -> Result<Decided<'a>, CmdError> {
        let a = &self.args;
        Ok(
            match acquire(store, self.owner, a.lease_ms, a.fence, queued)? {
                Acquire::Grant(decision, took) => Decided::Grant {
                    decision,
                    reentry: took == Took::Reentry,
                    own_lease_ms: None,
                },
                Acquire::Busy => Decided::Busy,
            },
        )
    }

    fn request(&self) -> Req {
        std::rc::Rc::new(LockRequest {
            owner: self.owner.into(),
            lease_ms: self.args.lease_ms,
            fence: self.args.fence,
        })
    }

    fn hold(&self) -> Option<bool> {
        Some(true)
    }
}

/// The writes of a full release (or a force release): delete, and tell Redisson's waiters.
fn free() -> Vec<Write<'static>> {
    vec![
        Write::Del { key: Target::Main },
        Write::PublishOn {
            prefix: names::LOCK_CHANNEL,
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
        View::Held { mine: Int::Is(_) } => Ok((Decision::new(free(), Reply::Int(0)), true)),
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
        KeyType::Hash => Ok(Decision::new(free(), Reply::Int(1))),
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

/// An owner's bytes, inline up to 64 (a Redisson owner: a 36-byte UUID, a colon and a thread
/// id): a request is one allocation, its `Rc`, not two (the second cost about 150
/// instructions of each session-watched `RLOCK.ACQUIRE`, callgrind).
pub type OwnerBytes = smallvec::SmallVec<[u8; 64]>;

/// A queued `RLOCK.ACQUIRE`: granted when the key is free, with its lease counted from then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRequest {
    pub owner: OwnerBytes,
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
        (store.hget_int(&Target::Main, &self.owner) == Int::Is(1)).then(|| Decision::writes(free()))
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
mod lock_tests;

/// Property tests: random operation sequences on one lock through these rules and the shared
/// serving loop (the real one, over the in-memory store), driven as the skin drives them: the
/// queue is served before a newcomer is decided and after every event that may free the lock.
/// `make fuzz` raises the case count through `PROPTEST_CASES`.
#[cfg(test)]
mod lock_prop_tests;
