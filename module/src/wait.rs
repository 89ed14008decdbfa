//! The shared waiting mechanism, Redis side: queueing a request, serving a key's queue whenever
//! something may have freed it, delivering each outcome to its waiter, deadlines, and undoing a
//! grant whose waiter vanished. Every object waits through here; none has code of its own for
//! queues, deadlines or hand-off.
//!
//! A waiter is reached through its [`Handle`]: a client parked with `BLOCK` gets its reply
//! through Redis' blocked-client machinery; a request queued through a session gets it through
//! the session's outcome list (`sessions`, which installs itself through [`SessionHooks`]). A
//! session request may also have its connection parked for a first part of its wait
//! (`QUEUE ... BLOCK ms`, see [`park_request`]): a grant then goes straight to that connection,
//! as to a blocked waiter, and anything else answers it `QUEUED` and goes to the session.
//!
//! Invariants:
//! - a waiter is in exactly one queue until it is granted, fails, times out or leaves, and its
//!   blocked client is unblocked exactly once (by whichever of those removes it from the queue);
//! - Redis never times a waiter out by itself: deadlines are module timer jobs, so a grant and a
//!   timeout are decided in one place (Redis 7.0 mishandles a timeout that lands between a
//!   module's unblock and its reply: the client gets no reply at all);
//! - a key with waiters has a re-check job at its next lease end (or sooner), and serving
//!   re-reads the key: a freed object goes to the head of its queue in the same step;
//! - the state's `RefCell` is never borrowed across a call that can call back into this file
//!   (our own writes' keyspace events are dropped at the FFI boundary).

use crate::core::args::Wait;
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::stats::{self, ObjectKind};
use crate::core::store::{Kind, Store, Target};
use crate::core::wait::deadlock::{self, Place};
use crate::core::wait::HashMap;
use crate::core::wait::{
    self, queue, Grouped, KeyId, Outcome, Queues, Req, TimerKey, Upkeep, Waiter,
};
use crate::ffi::block::{self, BlockedClient, Wake};
use crate::ffi::{Answer, Ctx};
use crate::keys::RedisKeys;
use crate::{config, timers};
use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::OnceLock;

/// How a waiter is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Handle {
    /// A client parked with `BLOCK`.
    Blocked(BlockedClient),
    /// A request queued through a session: the session's number and the client's request id.
    Session { session: u32, request: u64 },
}

/// A session's requests are a group (they leave together when it ends); blocked clients,
/// one group of their own.
impl Grouped for Handle {
    type Group = Option<u32>;
    fn group(&self) -> Option<u32> {
        match self {
            Handle::Blocked(_) => None,
            Handle::Session { session, .. } => Some(*session),
        }
    }
}

/// How a waiter's wait ended.
pub enum Ended {
    /// Granted: the reply a blocked waiter receives, and what is needed to undo the grant.
    Granted { id: KeyId, req: Req, reply: Reply },
    /// Its deadline passed.
    TimedOut,
    /// It can never be granted (the key changed type, its slot moved away).
    Failed(CmdError),
}

/// What `sessions` (above this file) does for it, installed at load, so that this file never
/// calls up into it.
pub struct SessionHooks {
    /// Where outcomes of session requests go: the session, the request id, how it ended.
    pub sink: fn(Ctx, u32, u64, Ended),
    /// Where a hold granted to a blocked client that named a session goes to be watched for
    /// loss: the session, the key, the request.
    pub watch: fn(Ctx, u32, KeyId, Req),
    /// A background write (expired holds tidied) may have ended watched holds on these keys.
    pub after_write: fn(Ctx, &RedisKeys),
    /// A request of this session (its id) was granted straight to its parked connection (the
    /// session no longer counts it as queued).
    pub handed: fn(u32, u64),
}

static SESSION_HOOKS: OnceLock<SessionHooks> = OnceLock::new();

pub fn set_session_hooks(hooks: SessionHooks) {
    let _ = SESSION_HOOKS.set(hooks);
}

fn session_after_write(ctx: Ctx, keys: &RedisKeys) {
    if let Some(h) = SESSION_HOOKS.get() {
        (h.after_write)(ctx, keys);
    }
}

/// A grant on its way to a parked client (its reply is sent from `beforeSleep`).
struct InFlight {
    id: KeyId,
    req: Req,
    reply: Reply,
    /// The session that watches the hold once the reply is sent (`BLOCK` with `SESSION`).
    session: Option<u32>,
}

/// An owner within a database (the same name in two databases is two owners).
/// An owner within a database (the same name in two databases is two owners), as a hash:
/// the index keeps no copy of the name (a queued request's memory matters when thousands
/// wait). Two owners with the same hash share an entry; readers of the index check the
/// waiter's own owner and database.
type OwnerId = u64;

fn owner_id(db: i32, owner: &[u8]) -> OwnerId {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
    SEED.get_or_init(Default::default).hash_one((db, owner))
}

/// The waits of one owner: nearly always one, kept in a short list; an owner that waits many
/// times (thousands of requests of one owner through a session) gets a set, so that one of
/// them leaving does not scan the others.
enum OwnerWaits {
    Few(smallvec::SmallVec<[Handle; 1]>),
    Many(HashSet<Handle, foldhash::fast::RandomState>),
}

/// Waits of one owner kept in a list before they move to a set.
const FEW_WAITS: usize = 16;

impl Default for OwnerWaits {
    fn default() -> Self {
        OwnerWaits::Few(smallvec::SmallVec::new())
    }
}

impl OwnerWaits {
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> usize {
        match self {
            OwnerWaits::Few(v) => v.len(),
            OwnerWaits::Many(s) => s.len(),
        }
    }

    fn push(&mut self, h: Handle) {
        match self {
            OwnerWaits::Few(v) if v.len() < FEW_WAITS => v.push(h),
            OwnerWaits::Few(v) => {
                let mut set: HashSet<Handle, _> = v.drain(..).collect();
                set.insert(h);
                *self = OwnerWaits::Many(set);
            }
            OwnerWaits::Many(s) => {
                s.insert(h);
            }
        }
    }

    fn remove(&mut self, h: Handle) {
        match self {
            OwnerWaits::Few(v) => v.retain(|x| *x != h),
            OwnerWaits::Many(s) => {
                s.remove(&h);
                if s.capacity() > 64 && s.len() * 4 < s.capacity() {
                    s.shrink_to(s.len() * 2);
                }
            }
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &Handle> + '_> {
        match self {
            OwnerWaits::Few(v) => Box::new(v.iter()),
            OwnerWaits::Many(s) => Box::new(s.iter()),
        }
    }
}

#[derive(Default)]
struct State {
    queues: Queues<Handle, Req>,
    /// The waits of each owner (for deadlock detection).
    by_owner: HashMap<OwnerId, OwnerWaits>,
    /// Keys looked at when a single hold's lease ends although nobody waits (see `upkeep`).
    upkeep: HashMap<KeyId, TimerKey>,
    /// The owners with more than one wait (usually none; deadlock detection follows them).
    multi: HashSet<OwnerId>,
    /// The waits of the owners in `multi`, all told: what a deadlock check reads first.
    multi_waits: usize,
    in_flight: HashMap<usize, InFlight>,
    /// Parked clients whose acquire named a session, by blocked-client id.
    watched: HashMap<usize, u32>,
    /// Session requests whose connection is parked for the first part of their wait, and the
    /// job that answers it `QUEUED` when that part ends.
    parked: HashMap<Handle, (BlockedClient, Option<TimerKey>)>,
    /// The same, by blocked-client id.
    parked_by_bc: HashMap<usize, Handle>,
    serial: u64,
    /// The client Redis is freeing right now (its CLIENT_CHANGE event comes just before its
    /// blocked-client disconnect callback), to tell a real disconnect from CLIENT UNBLOCK.
    closing: u64,
    /// Keys whose queue the job at the end of the current execution unit serves (see
    /// [`key_touched`]); not empty while that job is pending.
    soon: HashSet<KeyId, foldhash::fast::RandomState>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::default();
}

fn state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with(|s| f(&mut s.borrow_mut()))
}

/// Waiters queued across all keys (cheap: the uncontended path asks it first).
pub fn total() -> usize {
    state(|s| s.queues.total())
}

/// The queue of `key` as introspection shows it, in FIFO order.
pub fn shown(db: i32, key: &[u8]) -> Vec<Reply> {
    state(|s| {
        s.queues
            .get(&KeyId::new(db, key))
            .map_or_else(Vec::new, |q| q.iter().map(|w| w.req.show()).collect())
    })
}

/// The first `limit` of `key`'s queue as introspection shows it, and the queue's length.
pub fn shown_upto(db: i32, key: &[u8], limit: usize) -> (Vec<Reply>, usize) {
    state(|s| {
        let id = KeyId::new(db, key);
        let shown = s.queues.get(&id).map_or_else(Vec::new, |q| {
            q.iter().take(limit).map(|w| w.req.show()).collect()
        });
        (shown, s.queues.len(&id))
    })
}

/// Queued waiters per object kind.
pub fn waiters_by_kind() -> Vec<(ObjectKind, usize)> {
    state(|s| {
        let mut counts: HashMap<ObjectKind, usize> = HashMap::default();
        for id in s.queues.ids(None) {
            if let Some(q) = s.queues.get(&id) {
                for w in q.iter() {
                    *counts.entry(w.req.kind()).or_default() += 1;
                }
            }
        }
        ObjectKind::ALL
            .iter()
            .map(|k| (*k, counts.get(k).copied().unwrap_or(0)))
            .collect()
    })
}

/// Session requests whose connection is parked now (`QUEUE ... BLOCK`).
pub fn parked_requests() -> usize {
    state(|s| s.parked.len())
}

// ---- bookkeeping ---------------------------------------------------------------------------------

impl State {
    /// Make sure `id`'s queue is looked at again no later than `at`.
    fn watch(&mut self, ctx: Ctx, id: &KeyId, at: i64) {
        let Some(current) = self.queues.get(id).map(|q| q.check) else {
            return;
        };
        if !timers::supersede(current, at) {
            return;
        }
        let check = id.clone();
        let t = timers::schedule(ctx, at, move |ctx| {
            state(|s| {
                if let Some(q) = s.queues.get_mut(&check) {
                    q.check = None;
                }
            });
            serve_background(ctx, &check);
        });
        if let Some(q) = self.queues.get_mut(id) {
            q.check = Some(t);
        }
    }

    /// Drop the bookkeeping of a key nobody waits for.
    fn forget_if_idle(&mut self, id: &KeyId) {
        if let Some(t) = self.queues.forget_if_idle(id) {
            timers::cancel(t);
        }
    }
}

impl State {
    fn index(&mut self, db: i32, waiter: &Waiter<Handle, Req>) {
        if let Some(o) = waiter.req.owner() {
            let id = owner_id(db, o);
            let hs = self.by_owner.entry(id).or_default();
            hs.push(waiter.handle);
            match hs.len() {
                2 => {
                    self.multi.insert(id);
                    self.multi_waits += 2;
                }
                n if n > 2 => self.multi_waits += 1,
                _ => {}
            }
        }
    }

    fn unindex(&mut self, db: i32, waiter: &Waiter<Handle, Req>) {
        if let Some(o) = waiter.req.owner() {
            self.unindex_owner(owner_id(db, o), waiter.handle);
        }
    }

    /// `unindex` of many owners' waits (bucket, owner, handle), in the owner index's memory
    /// order (see `withdraw_all`).
    fn unindex_many(&mut self, mut owners: Vec<(u64, OwnerId, Handle)>) {
        owners.sort_unstable_by_key(|(bucket, ..)| *bucket);
        for (_, oid, handle) in owners {
            self.unindex_owner(oid, handle);
        }
    }

    fn unindex_owner(&mut self, id: OwnerId, handle: Handle) {
        if let Some(hs) = self.by_owner.get_mut(&id) {
            let before = hs.len();
            hs.remove(handle);
            match (before, hs.len()) {
                (2, 1) => {
                    self.multi.remove(&id);
                    self.multi_waits -= 2;
                }
                (b, a) if a < b && a >= 2 => self.multi_waits -= 1,
                _ => {}
            }
            if hs.is_empty() {
                self.by_owner.remove(&id);
                queue::shrink(&mut self.by_owner);
            }
        }
    }
}

/// A waiter left its queue (granted, failed, timed out, withdrawn): its deadline and its
/// place in the owner index go.
fn retire(db: i32, waiter: &Waiter<Handle, Req>) {
    if let Some(t) = waiter.deadline {
        timers::cancel(t);
    }
    state(|s| s.unindex(db, waiter));
}

// ---- queueing ------------------------------------------------------------------------------------

/// The kind of object whose requests wait on `key` of database `db`, if any wait. A queue holds
/// one kind: `commands::wait_or_nil` refuses requests of another.
pub fn queued_kind(db: i32, key: &[u8]) -> Option<ObjectKind> {
    if total() == 0 {
        return None;
    }
    let id = KeyId::new(db, key);
    state(|s| s.queues.get(&id)?.front().map(|w| w.req.kind()))
}

/// Park the calling client behind `keys`' queue with request `req` (`BLOCK`), or reply nil at
/// once when the request may not wait (no BLOCK; or inside MULTI, Lua or RM_Call, where a wait
/// degrades to one attempt, as BLPOP's). Session waits (`QUEUE`) go through `sessions`; a
/// blocked acquire that names a session has its hold watched by it once granted.
pub fn park_or_nil(
    ctx: Ctx,
    keys: &RedisKeys,
    wait: Wait,
    req: Req,
    session: Option<u32>,
) -> Answer {
    match wait {
        Wait::Block(ms) if ctx.may_block() => {
            let bc = ctx.block();
            if let Some(session) = session {
                state(|s| s.watched.insert(bc.id(), session));
            }
            enqueue(ctx, keys, Handle::Blocked(bc), ms, req);
            Answer::Parked
        }
        _ => {
            req.kind().counters().busy.incr();
            Answer::Reply(Reply::Nil)
        }
    }
}

/// Queue `req` behind `keys`' queue, reached through `handle`, for at most `timeout_ms`
/// (0: no limit; checked by the caller not to overflow).
pub fn enqueue(ctx: Ctx, keys: &RedisKeys, handle: Handle, timeout_ms: i64, req: Req) {
    let id = KeyId::new(ctx.db(), keys.key_name());
    let wake_at = req.wake_at(keys);
    req.kind().counters().waits_started.incr();
    state(|s| {
        s.serial += 1;
        let serial = s.serial;
        let deadline = (timeout_ms > 0).then(|| {
            timers::schedule(ctx, ctx.now_ms() + timeout_ms, move |ctx| {
                deadline(ctx, handle, serial)
            })
        });
        let waiter = Waiter {
            handle,
            serial,
            req,
            deadline,
        };
        s.index(id.db, &waiter);
        s.queues.push(&id, waiter);
        if let Some(at) = wake_at {
            s.watch(ctx, &id, at.saturating_add(1));
        }
    });
}

/// Park the calling connection for the first `park_ms` of session request `handle`'s wait
/// (just queued; 0: all of it): a grant within it is replied here (see [`deliver`]); when the
/// time is up, or the request ends otherwise, the connection is answered `QUEUED` and the
/// outcome goes to the session. Measured with `rlock-bench --only contended,family` (sync
/// threads, each on a connection of its own): 8 threads on one lock 1.17× raw `BLOCK` clients
/// against 0.68× when every grant went through the listener (one more command and two more
/// thread wake-ups per hand-off).
pub fn park_request(ctx: Ctx, handle: Handle, park_ms: i64) -> Answer {
    if !ctx.may_block() {
        return Answer::Reply(QUEUED);
    }
    let bc = ctx.block();
    let window = (park_ms > 0).then(|| {
        timers::schedule(ctx, ctx.now_ms().saturating_add(park_ms), move |_| {
            if state(|s| s.parked.get(&handle).is_some_and(|(b, _)| *b == bc)) {
                answer_queued(handle);
            }
        })
    });
    state(|s| {
        s.parked.insert(handle, (bc, window));
        s.parked_by_bc.insert(bc.id(), handle);
    });
    Answer::Parked
}

/// The reply of a request that waits on in its session.
pub const QUEUED: Reply = Reply::Status("QUEUED");

/// The parked connection of session request `handle`, no longer parked.
fn unpark(handle: Handle) -> Option<BlockedClient> {
    let (bc, window) = state(|s| {
        let p = s.parked.remove(&handle)?;
        s.parked_by_bc.remove(&p.0.id());
        queue::shrink(&mut s.parked);
        queue::shrink(&mut s.parked_by_bc);
        Some(p)
    })?;
    if let Some(t) = window {
        timers::cancel(t);
    }
    Some(bc)
}

/// Answer the parked connection of `handle` `QUEUED` (its wait goes on in the session).
fn answer_queued(handle: Handle) {
    if let Some(bc) = unpark(handle) {
        wake(bc, QUEUED);
    }
}

/// Let a parked session request's connection go without a reply (it closed, or `CLIENT
/// UNBLOCK` replies itself): the request stays queued in its session. False when `bc` is not
/// such a connection.
fn let_go(bc: BlockedClient) -> bool {
    let Some(handle) = state(|s| s.parked_by_bc.get(&bc.id()).copied()) else {
        return false;
    };
    unpark(handle);
    block::unblock(bc, None);
    true
}

fn deadline(ctx: Ctx, handle: Handle, serial: u64) {
    let removed = state(|s| {
        let mine = s
            .queues
            .find(handle)
            .is_some_and(|(_, w)| w.serial == serial);
        if mine {
            s.queues.remove(handle)
        } else {
            None
        }
    });
    if let Some((id, waiter)) = removed {
        state(|s| s.unindex(id.db, &waiter));
        let kind = waiter.req.kind();
        kind.counters().waits_timed_out.incr();
        deliver(ctx, waiter.handle, Ended::TimedOut);
        after_leaving(ctx, &id);
    }
}

/// Take a waiter out of its queue (cancel, timeout, disconnect, session expiry); false when it
/// is not queued any more (already granted).
pub fn withdraw(ctx: Ctx, handle: Handle) -> Option<ObjectKind> {
    let (id, waiter) = state(|s| s.queues.remove(handle))?;
    answer_queued(handle);
    retire(id.db, &waiter);
    after_leaving(ctx, &id);
    Some(waiter.req.kind())
}

/// Take every queued request of session `session` out of its queue (the session ends), each
/// key's new head looked at once at the end. The queues and the owner index are visited in
/// their memory order (see `Queues::remove_group`): closing a session of 100,000 requests on
/// one key one by one spent most of its time on cache misses in both. Their requests' memory
/// is freed on later turns (`timers::free_later`).
pub fn withdraw_session(ctx: Ctx, session: u32) {
    // What is left to do once the waiters are out of the queues, kept small: the deadlines,
    // the handles that may have a parked connection to answer (none when nothing is parked),
    // the requests to free.
    let mut deadlines: Vec<TimerKey> = Vec::new();
    let mut parked: Vec<Handle> = Vec::new();
    let mut requests: Vec<Req> = Vec::new();
    let checks = state(|s| {
        let any_parked = !s.parked.is_empty();
        let mask = queue::bucket_mask(s.by_owner.capacity());
        let hasher = s.by_owner.hasher().clone();
        let mut owners: Vec<(u64, OwnerId, Handle)> = Vec::new();
        let left = s.queues.remove_group(Some(session), |id, waiter| {
            if let Some(o) = waiter.req.owner() {
                let oid = owner_id(id.db, o);
                owners.push((hasher.hash_one(oid) & mask, oid, waiter.handle));
            }
            if any_parked {
                parked.push(waiter.handle);
            }
            deadlines.extend(waiter.deadline);
            requests.push(waiter.req);
        });
        s.unindex_many(owners);
        // In the same borrow of the state: with 100,000 requests on as many keys, a borrow per
        // key (a thread-local look-up each) took a sixth of the time.
        let now = ctx.now_ms();
        for id in &left.queued {
            s.watch(ctx, id, now);
        }
        left.checks
    });
    timers::free_later(ctx, requests);
    for handle in parked {
        answer_queued(handle);
    }
    for t in deadlines.into_iter().chain(checks) {
        timers::cancel(t);
    }
}

/// A waiter left `id`'s queue without being granted: whoever is now at its head may be
/// grantable (a reader behind a writer that timed out).
fn after_leaving(ctx: Ctx, id: &KeyId) {
    state(|s| {
        if s.queues.is_queued(id) {
            s.watch(ctx, id, ctx.now_ms());
        } else {
            s.forget_if_idle(id);
        }
    });
}

// ---- deadlock detection -----------------------------------------------------------------------

/// The wait-for graph of one database, read from the queues and the keys. Its keys are queue
/// ids; the key the new request is about to wait on may have no queue yet (`new`).
struct WaitGraph<'a> {
    ctx: Ctx,
    db: i32,
    s: &'a State,
    new: (&'a KeyId, &'a Req, &'a RedisKeys),
    /// Holders read of one key at most: one more than the search may look at tells it the
    /// key is too large, without reading thousands of readers.
    holders_max: usize,
}

impl WaitGraph<'_> {
    /// The request in slot `pos` of `key`'s queue. Positions are slots (see
    /// `KeyQueue::slots`): a slot whose waiter left reads as a request without owner, which
    /// leads nowhere, as a waiter that is not there.
    fn at(&self, key: &KeyId, pos: usize) -> Option<&Req> {
        self.s.queues.get(key)?.at(pos).map(|w| &w.req)
    }
}

impl deadlock::Graph for WaitGraph<'_> {
    type Owner = Box<[u8]>;
    type Key = KeyId;

    fn holders(&self, key: &KeyId) -> Vec<(Box<[u8]>, bool)> {
        let held = |req: &Req, keys: &RedisKeys| {
            let hs = req.holders_upto(keys, self.holders_max).into_iter();
            hs.map(|(o, x)| (o.into_boxed_slice(), x)).collect()
        };
        let (new_key, new_req, new_keys) = self.new;
        if key == new_key {
            return held(new_req, new_keys);
        }
        match self.s.queues.get(key).and_then(|q| q.front()) {
            Some(w) => held(&w.req, &RedisKeys::peek(self.ctx, &key.key)),
            None => Vec::new(),
        }
    }

    fn queue_len(&self, key: &KeyId) -> usize {
        self.s.queues.get(key).map_or(0, |q| q.slots())
    }

    fn exclusive_at(&self, key: &KeyId, pos: usize) -> Option<bool> {
        let req = self.at(key, pos)?;
        req.owner().map(|_| req.exclusive())
    }

    fn owner_at(&self, key: &KeyId, pos: usize) -> Option<Box<[u8]>> {
        self.at(key, pos)?.owner().map(Box::from)
    }

    fn waits(&self, owner: &Box<[u8]>) -> Vec<Place<KeyId>> {
        let Some(handles) = self.s.by_owner.get(&owner_id(self.db, owner)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for h in handles.iter() {
            let Some((id, pos, w)) = self.s.queues.locate(*h) else {
                continue;
            };
            if id.db != self.db || w.req.owner() != Some(&owner[..]) {
                continue; // another owner with the same hash
            }
            out.push(Place {
                key: id.clone(),
                pos,
                exclusive: w.req.exclusive(),
            });
        }
        out
    }

    fn multi(&self) -> Vec<Box<[u8]>> {
        let mut seen: HashSet<&[u8]> = HashSet::new();
        let mut out: Vec<Box<[u8]>> = Vec::new();
        for id in &self.s.multi {
            for h in self
                .s
                .by_owner
                .get(id)
                .into_iter()
                .flat_map(OwnerWaits::iter)
            {
                let Some((key, w)) = self.s.queues.find(*h) else {
                    continue;
                };
                if let Some(o) = w.req.owner().filter(|_| key.db == self.db) {
                    if seen.insert(o) {
                        out.push(o.into());
                    }
                }
            }
        }
        out
    }
}

/// Refuse `req` (about to wait on the command's key) when its owner would close a cycle of
/// owners waiting for one another on this server.
pub fn check_deadlock(ctx: Ctx, keys: &RedisKeys, req: &Req) -> Result<(), CmdError> {
    let Some(owner) = req.owner() else {
        return Ok(());
    };
    let db = ctx.db();
    let budget = config::deadlock_max_steps();
    let found = state(|s| {
        if s.by_owner.is_empty() {
            return Ok(None); // nobody waits anywhere: no cycle can close
        }
        // The search reads every wait of the owners that wait more than once before it
        // starts: more of them than the budget is a graph too large to search.
        if s.multi_waits > budget {
            return Err(deadlock::Exhausted);
        }
        let id = KeyId::new(db, keys.key_name());
        let graph = WaitGraph {
            ctx,
            db,
            s,
            new: (&id, req, keys),
            holders_max: budget.saturating_add(1),
        };
        let owner = Box::from(owner);
        deadlock::search(&graph, &owner, &id, req.exclusive(), budget)
    });
    let steps = match found {
        Ok(Some(steps)) => steps,
        Ok(None) => return Ok(()),
        Err(deadlock::Exhausted) => {
            // Admitted undecided, as without detection.
            stats::DEADLOCK_CHECKS_EXHAUSTED.incr();
            return Ok(());
        }
    };
    stats::DEADLOCKS.incr();
    let echo = crate::core::error::echo;
    // Keys the caller may not read are not named (an ACL user limited to `~a:*` must not learn
    // the names of other users' keys from who waits for whom); owners are named, as the
    // cycle would be meaningless without them.
    let mut readable: HashMap<Vec<u8>, bool> = HashMap::default();
    let mut key_name = |k: &[u8]| -> String {
        if *readable
            .entry(k.to_vec())
            .or_insert_with(|| ctx.may_read_key(k))
        {
            format!("'{}'", echo(k))
        } else {
            "(hidden)".to_string()
        }
    };
    let hops: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let next = &steps[(i + 1) % steps.len()].owner;
            format!(
                "'{}' waits for '{}' on {}",
                echo(&st.owner),
                echo(next),
                key_name(&st.key.key)
            )
        })
        .collect();
    Err(CmdError::Deadlock(format!(
        "waiting would close a cycle: {}",
        hops.join(", ")
    )))
}

// ---- serving -------------------------------------------------------------------------------------

/// Serve the queue of the command's key, if it has one: before deciding a newcomer (who must
/// not overtake anyone) and after a write that may have freed the object. Returns whether
/// anyone still waits.
pub fn serve_now(keys: &mut RedisKeys) -> bool {
    if total() == 0 {
        return false;
    }
    let id = KeyId::new(keys.ctx.db(), keys.key_name());
    if !state(|s| s.queues.is_queued(&id)) {
        return false;
    }
    serve(keys, &id);
    state(|s| s.queues.is_queued(&id))
}

/// Serve `id`'s queue from a timer or an event: select its database and open its key.
fn serve_background(ctx: Ctx, id: &KeyId) {
    if !state(|s| s.queues.is_queued(id)) {
        state(|s| s.forget_if_idle(id));
        return;
    }
    // A replica never writes; its blocked waiters were disconnected when it was demoted, and
    // `sessions` fails its queued requests.
    if ctx.is_replica() || !ctx.select_db(id.db) {
        return;
    }
    let mut keys = RedisKeys::background(ctx, &id.key);
    // In a cluster, MIGRATE deletes the key on this node: the object lives on elsewhere now,
    // so its waiters must retry there instead of being granted a copy here.
    if keys.kind(&Target::Main) == Kind::Empty && !ctx.serves_key(&id.key) {
        fail_all(ctx, id, CmdError::SlotMoved);
        return;
    }
    serve(&mut keys, id);
}

/// Grant what can be granted of `id`'s queue and deliver every outcome.
fn serve(keys: &mut RedisKeys, id: &KeyId) {
    let ctx = keys.ctx;
    let served = state(|s| wait::serve(&mut s.queues, id, keys));
    for outcome in served.outcomes {
        match outcome {
            Outcome::Granted {
                waiter,
                reply,
                after_expiry,
            } => {
                let c = waiter.req.kind().counters();
                c.acquired.incr();
                c.handoffs.incr();
                if after_expiry {
                    c.grants_after_expiry.incr();
                }
                retire(id.db, &waiter);
                let ended = Ended::Granted {
                    id: id.clone(),
                    req: waiter.req,
                    reply,
                };
                deliver(ctx, waiter.handle, ended);
            }
            Outcome::Failed { waiter, error } => {
                retire(id.db, &waiter);
                stats::ERRORS.incr();
                deliver(ctx, waiter.handle, Ended::Failed(error));
            }
        }
    }
    state(|s| {
        if let Some(at) = served.wake_at {
            // Never in the past: a lease end the live clock has passed while the server still
            // shows the key held (see timers::on_timer) is looked at again a millisecond on.
            s.watch(ctx, id, at.saturating_add(1).max(ctx.now_ms() + 1));
        }
        s.forget_if_idle(id);
    });
}

/// Look at the command's key at `at` (the end of a hold's own lease, such as a read hold's)
/// even if nobody waits then: the object tidies what expired (a crashed reader's field),
/// serves its queue if it has one, and is looked at again at its next lease end. A key with
/// waiters needs none of this: its queue's check does the same.
pub fn upkeep(ctx: Ctx, keys: &RedisKeys, at: i64, object: Upkeep) {
    let id = KeyId::new(ctx.db(), keys.key_name());
    let due =
        state(|s| !s.queues.is_queued(&id) && timers::supersede(s.upkeep.get(&id).copied(), at));
    if due {
        schedule_upkeep(ctx, id, at, object);
    }
}

fn schedule_upkeep(ctx: Ctx, id: KeyId, at: i64, object: Upkeep) {
    let key = id.clone();
    let t = timers::schedule(ctx, at, move |ctx| {
        state(|s| s.upkeep.remove(&key));
        if ctx.is_replica() || !ctx.select_db(key.db) {
            return;
        }
        let mut keys = RedisKeys::background(ctx, &key.key);
        if state(|s| s.queues.is_queued(&key)) {
            // Serving tidies first (and counts what follows as a grant after expiry).
            serve(&mut keys, &key);
            session_after_write(ctx, &keys);
            return;
        }
        if let Ok(tidy) = (object.tidy)(&keys) {
            if !tidy.writes.is_empty() && keys.write(&tidy).is_ok() {
                session_after_write(ctx, &keys);
            }
        }
        if let Some(next) = (object.wake_at)(&keys) {
            schedule_upkeep(ctx, key, next.saturating_add(1), object);
        }
    });
    state(|s| s.upkeep.insert(id, t));
}

/// End every wait on `id` with `err`.
fn fail_all(ctx: Ctx, id: &KeyId, err: CmdError) {
    let drained = state(|s| {
        let ws = s.queues.drain(id);
        s.forget_if_idle(id);
        ws
    });
    for w in drained {
        retire(id.db, &w);
        stats::ERRORS.incr();
        deliver(ctx, w.handle, Ended::Failed(err.clone()));
    }
}

/// The keys anyone waits on, in every database.
pub fn queued_ids() -> Vec<KeyId> {
    state(|s| s.queues.ids(None))
}

/// The keys anyone waits on, if there are at most `n` (`slotwatch` probes each of a few).
pub fn queued_ids_upto(n: usize) -> Option<Vec<KeyId>> {
    state(|s| (s.queues.key_count() <= n).then(|| s.queues.ids(None)))
}

/// End every wait on `id` with `err` (its slot left this node: `slotwatch`).
pub fn end_waits(ctx: Ctx, id: &KeyId, err: CmdError) {
    fail_all(ctx, id, err);
}

/// Look at `id`'s queue now, as after an event on its key: it is served, or its waits end if
/// the key is gone with its slot (`slotwatch`, when the slot starts migrating).
pub fn recheck(ctx: Ctx, id: &KeyId) {
    serve_background(ctx, id);
}

/// The server became a replica: every wait ends with the error Redis gives blocked clients
/// then, so clients queue again on the new master. Redis (and Valkey 8) already released the
/// clients it blocked for the module before this event; Valkey 9 no longer does for clients
/// blocked without keys, and session requests are the module's alone.
pub fn fail_all_waits(ctx: Ctx, err: CmdError) {
    for id in state(|s| s.queues.ids(None)) {
        fail_all(ctx, &id, err.clone());
    }
}

/// Undo a grant whose waiter is gone (a blocked client that disconnected before its reply, a
/// session that expired before acknowledging it), then serve the queue.
pub fn revoke(ctx: Ctx, id: &KeyId, req: &Req, reply: &Reply) {
    if ctx.is_replica() || !ctx.select_db(id.db) {
        return;
    }
    let mut keys = RedisKeys::background(ctx, &id.key);
    if let Some(undo) = req.undo(reply, &keys) {
        if keys.write(&undo).is_ok() {
            req.kind().counters().grants_revoked.incr();
        }
    }
    drop(keys);
    state(|s| s.watch(ctx, id, ctx.now_ms()));
}

// ---- delivery ------------------------------------------------------------------------------------

/// Tell a waiter how its wait ended.
fn deliver(ctx: Ctx, handle: Handle, ended: Ended) {
    match handle {
        Handle::Blocked(bc) => {
            let session = state(|s| s.watched.remove(&bc.id()));
            answer(bc, ended, session);
        }
        Handle::Session { session, request } => {
            let Some(hooks) = SESSION_HOOKS.get() else {
                return;
            };
            if let Some(bc) = unpark(handle) {
                if matches!(ended, Ended::Granted { .. }) {
                    // As to a blocked waiter that named the session.
                    (hooks.handed)(session, request);
                    answer(bc, ended, Some(session));
                    return;
                }
                wake(bc, QUEUED);
            }
            (hooks.sink)(ctx, session, request, ended);
        }
    }
}

/// Answer a parked client how its wait ended. A grant stays in flight until its reply is sent:
/// then the session it named (if any) watches the hold; a connection gone before gets it undone.
fn answer(bc: BlockedClient, ended: Ended, session: Option<u32>) {
    let reply = match ended {
        Ended::Granted { id, req, reply } => {
            let wake = reply.clone();
            let grant = InFlight {
                id,
                req,
                reply,
                session,
            };
            state(|s| s.in_flight.insert(bc.id(), grant));
            wake
        }
        Ended::TimedOut => Reply::Nil,
        Ended::Failed(e) => Reply::Error(e),
    };
    wake(bc, reply);
}

/// Unblock `bc` with `reply` (sent from `beforeSleep`, see [`on_woken`]).
fn wake(bc: BlockedClient, reply: Reply) {
    block::unblock(
        bc,
        Some(Wake {
            handle: bc.id(),
            reply,
        }),
    );
}

/// A parked client is answered (from `beforeSleep`) with what it was woken with.
pub fn on_woken(ctx: Ctx, wake: Option<&Wake>) {
    match wake {
        Some(w) => {
            let grant = state(|s| s.in_flight.remove(&w.handle));
            ctx.reply(&w.reply);
            // The grant reached its client: a session it named watches the hold from now.
            if let (Some(g), Some(SessionHooks { watch, .. })) = (grant, SESSION_HOOKS.get()) {
                if let Some(session) = g.session {
                    watch(ctx, session, g.id, g.req);
                }
            }
        }
        None => ctx.reply(&Reply::Nil),
    }
}

pub fn on_freed(wake: Wake) {
    state(|s| s.in_flight.remove(&wake.handle));
}

/// Why a parked client leaves its queue without a grant.
#[derive(Clone, Copy)]
enum Left {
    /// `CLIENT UNBLOCK` (the deadline has its own path: [`deadline`]).
    Unblocked,
    /// Its connection closed.
    Disconnected,
    /// The server became a replica and answered it `UNBLOCKED ...` itself (Redis, Valkey 8):
    /// an error reply, as when rlock ends the wait itself ([`fail_all_waits`], Valkey 9), so it
    /// counts in `rlock_errors` on every server, not as a disconnect.
    Demoted,
}

/// Take a parked client out of its queue and release its handle.
fn withdraw_blocked(ctx: Ctx, bc: BlockedClient, left: Left) -> bool {
    let Some(kind) = withdraw(ctx, Handle::Blocked(bc)) else {
        return false;
    };
    state(|s| s.watched.remove(&bc.id()));
    let c = kind.counters();
    match left {
        Left::Unblocked => c.waits_timed_out.incr(),
        Left::Disconnected => c.waiters_disconnected.incr(),
        Left::Demoted => stats::ERRORS.incr(),
    }
    block::unblock(bc, None);
    true
}

/// `CLIENT UNBLOCK`: leave the queue and reply nil, as BLPOP does. Returns false when the
/// client was not one of this file's waiters.
pub fn on_unblocked(ctx: Ctx, bc: BlockedClient) -> bool {
    if let_go(bc) {
        // A parked session request: its wait goes on in the session.
        ctx.reply(&QUEUED);
        return true;
    }
    if !withdraw_blocked(ctx, bc, Left::Unblocked) {
        return false;
    }
    ctx.reply(&Reply::Nil);
    true
}

/// The waiting connection closed: leave the queue at once; if the object was already granted
/// to it but the reply could not be delivered, give it back. Returns false when the client was
/// not one of this file's waiters.
pub fn on_disconnected(ctx: Ctx, bc: BlockedClient) -> bool {
    // A parked session request stays queued in its session (its client withdraws it, or its
    // outcome waits for the listener).
    if let_go(bc) {
        return true;
    }
    // Redis frees a connection right after announcing it (`State::closing`). A disconnect
    // callback for any other client comes from the server unblocking every blocked client as
    // it becomes a replica (`disconnectAllBlockedClients`, which answers them `UNBLOCKED`; the
    // role is not switched yet, so `is_replica` cannot tell), or, for a grant in flight, from
    // `CLIENT UNBLOCK` just after the grant.
    let closing = ctx.client_id() == state(|s| s.closing);
    let left = if closing {
        Left::Disconnected
    } else {
        Left::Demoted
    };
    if withdraw_blocked(ctx, bc, left) {
        return true;
    }
    let Some(grant) = state(|s| s.in_flight.remove(&bc.id())) else {
        return false;
    };
    if !closing && !ctx.is_replica() {
        // Not a closing connection: CLIENT UNBLOCK right after the grant, before its reply was
        // sent. Redis drops the module's reply in that case, so give the client its grant here
        // (this context's client is the waiting client).
        ctx.reply(&grant.reply);
        return true;
    }
    // The client is gone: undo its grant. Writing from this callback is not safe (we are
    // inside the client's teardown); a job on the next timer turn does it.
    timers::schedule(ctx, ctx.now_ms(), move |ctx| {
        revoke(ctx, &grant.id, &grant.req, &grant.reply)
    });
    true
}

// ---- events --------------------------------------------------------------------------------------

/// Something happened to `key` in `db` (DEL, expiry, eviction, a Redisson script, a type
/// change): if anyone waits for it, serve its queue as soon as writing is safe. Not from this
/// callback: a write here would reach replicas before the event's own (Redis 7.0), and the
/// script or command that raised it is still running. Where the server has post-execution-unit
/// jobs (Redis 7.2+, Valkey), a job serves it when the unit ends, before any other command runs,
/// and its writes join the unit's MULTI/EXEC after the unit's own: a freed object reaches the
/// head of its queue before anyone else can take it. On Redis 7.0 (or should the server refuse
/// the job) the next timer turn serves it. The timer is armed where jobs exist too, as a net for
/// an event raised outside any unit whose end runs the jobs; it then finds nothing to do.
/// `ours`: rlock's own code raised it (its writes, or a key it opened expiring): whoever runs
/// will serve the queue itself, and the state may be borrowed right now, so only the expiry is
/// noted, if possible.
pub fn key_touched(ctx: Ctx, db: i32, key: &[u8], expired: bool, ours: bool) {
    let first = STATE.with(|cell| {
        let Ok(mut s) = cell.try_borrow_mut() else {
            return false;
        };
        if s.queues.total() == 0 {
            return false;
        }
        let id = KeyId::new(db, key);
        let Some(q) = s.queues.get_mut(&id) else {
            return false;
        };
        q.expired |= expired;
        if q.is_empty() || ours {
            return false;
        }
        s.watch(ctx, &id, ctx.now_ms());
        let first = s.soon.is_empty();
        s.soon.insert(id);
        first
    });
    if first {
        serve_after_unit(ctx);
    }
}

/// Every queue of database `db` (or of all databases) may have changed (FLUSH*, SWAPDB): served
/// when the command ends, as in [`key_touched`].
pub fn db_touched(ctx: Ctx, db: Option<i32>) {
    let now = ctx.now_ms();
    let first = state(|s| {
        let first = s.soon.is_empty();
        for id in s.queues.ids(db) {
            s.watch(ctx, &id, now);
            s.soon.insert(id);
        }
        first && !s.soon.is_empty()
    });
    if first {
        serve_after_unit(ctx);
    }
}

/// Have the keys in `soon` served at the end of the current execution unit (one job serves
/// them all); where the server cannot, the timer jobs armed with them do it.
fn serve_after_unit(ctx: Ctx) {
    if !crate::ffi::boundary::after_unit(ctx, serve_soon) {
        state(|s| s.soon.clear());
    }
}

/// The job at the end of an execution unit: serve every queue an event touched in it.
fn serve_soon(ctx: Ctx) {
    let ids: Vec<KeyId> = state(|s| s.soon.drain().collect());
    for id in ids {
        serve_background(ctx, &id);
    }
}

/// A connection is being freed (see `State::closing`).
pub fn client_closing(id: u64) {
    state(|s| s.closing = id);
}
